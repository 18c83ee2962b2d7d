"""Group (blast-radius) causes: per-switch rates, resolution on a placement, and llama3-h100-topo."""

import numpy as np
import pytest

from wanka.errors import SpecError
from wanka.reliability import build_failure_model, load_failure_model
from wanka.reliability.failures import resolve_groups


def test_topo_model_keeps_llama3_total():
    base, topo = load_failure_model("llama3-h100"), load_failure_model("llama3-h100-topo")
    names = [c.name for c in topo.causes]
    assert names[:len(base.causes)] == [c.name for c in base.causes] and names[-1] == "tor_switch"
    # 16,384 GPUs in 1,024 racks of 16 under one ToR: 0.94 ToR crashes + 34.06 others = 35 in 54 d
    groups = {"leaf": np.arange(2048) // 2}
    resolved, blast = resolve_groups(topo, groups, np.arange(2048))
    per_54d = resolved.rates_per_hour(16384, 8) * 54 * 24
    assert per_54d[-1] == pytest.approx(1024 * 1.7e-5 * 54, rel=1e-9)
    assert per_54d.sum() == pytest.approx(419, rel=1e-6)
    assert blast[-1].shape == (1024, 2) and (blast[-1][:, 0] == 2).all()


def test_resolution_counts_touched_groups_and_replicas():
    model = build_failure_model({"causes": [{"name": "tor", "unit": "leaf", "rate_per_switch_day": 0.24,
                                             "recovery": "node_swap", "scope": "node"}]})
    groups = {"leaf": np.arange(100) // 32}  # 32-node leaf groups
    resolved, blast = resolve_groups(model, groups, np.arange(40), {"leaf": 8.0}, replica_nodes=4)
    # 40 nodes touch 2 groups (32 + 8 nodes) x 8 rail switches at 0.01 per switch-hour
    assert resolved.rate_per_hour(320, 8) == pytest.approx(2 * 8 * 0.01)
    assert blast[0].tolist() == [[32, 8], [8, 2]]


def test_per_switch_rate_needs_a_group_unit():
    with pytest.raises(SpecError, match=r"causes\[0\]\.rate_per_switch_day"):
        build_failure_model({"causes": [{"name": "x", "unit": "node", "rate_per_switch_day": 1.0,
                                         "recovery": "node_swap", "scope": "node"}]})
