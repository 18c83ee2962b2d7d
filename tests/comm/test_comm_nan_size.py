"""A NaN or infinite message size is bad input, not an infinite time (NaN compares False to every bound)."""

import math

import pytest

from wanka.cluster import load_cluster
from wanka.comm import collective_time, group_for_stride
from wanka.errors import SpecError


@pytest.mark.parametrize("nbytes", [math.nan, math.inf, -1.0])
def test_non_finite_or_negative_size_is_a_spec_error(nbytes):
    c = load_cluster("wanka-10k", gpus=64)
    with pytest.raises(SpecError) as exc:  # NaN passes any `nbytes < 0` test
        collective_time(c, "all_reduce", nbytes, group_for_stride(c, 8, 1))
    assert exc.value.field == "nbytes"


def test_zero_bytes_is_still_allowed():
    c = load_cluster("wanka-10k", gpus=64)
    assert collective_time(c, "all_reduce", 0.0, group_for_stride(c, 8, 1)) >= 0.0
