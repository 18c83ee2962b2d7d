"""A scenario's layout dp must agree with its job's GPUs; size sweeps re-derive dp."""

import pytest

from wanka.errors import SpecError
from wanka.sim import compile_scenario, load_scenario
from wanka.sim.scenario import parse_scenario
from wanka.sim.sweep import with_param


def _with_layout(layout: str):
    data = load_scenario("llama3-54d").model_dump(exclude_none=True)
    data["jobs"][0]["layout"] = layout
    return parse_scenario(data, "test")


def test_dp_that_contradicts_gpus_is_an_error():
    # dp=64 on a 16,384-GPU job (tp8 pp16 -> dp 128) contradicts the GPU count; neither value wins silently
    with pytest.raises(SpecError) as exc:
        compile_scenario(_with_layout("tp=8,pp=16,dp=64,gbs=2048"))
    assert exc.value.field == "jobs[0].layout"


def test_consistent_or_omitted_dp_compiles():
    for layout in ("tp=8,pp=16,dp=128,gbs=2048", "tp=8,pp=16,gbs=2048"):
        assert compile_scenario(_with_layout(layout)).speed.dp == 128


def test_size_sweep_drops_the_stated_dp():
    sc = load_scenario("llama3-54d")  # its layout states dp=128 for 16,384 GPUs
    swept = with_param(sc, "gpus", 2048)
    assert "dp=" not in swept.jobs[0].layout
    assert compile_scenario(swept).speed.dp == 16
