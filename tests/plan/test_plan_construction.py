"""Layout and planner Options built from Python are checked on construction, as the CLI checks
them: one SpecError naming the field (issue 11)."""

import math

import pytest

from wanka.errors import SpecError
from wanka.layout import Layout
from wanka.plan.exposure import Options
from wanka.resolved_layout import ResolvedLayout

BAD_LAYOUTS = [
    ({"tp": 0}, "layout.tp"), ({"tp": -2}, "layout.tp"), ({"tp": 2.0}, "layout.tp"), ({"tp": "8"}, "layout.tp"),
    ({"tp": True}, "layout.tp"), ({"pp": 0}, "layout.pp"), ({"cp": 0}, "layout.cp"), ({"ep": 0}, "layout.ep"),
    ({"vpp": 0}, "layout.vpp"), ({"mbs": 0}, "layout.mbs"), ({"mbs": math.nan}, "layout.mbs"),
    ({"dp": 0}, "layout.dp"), ({"dp": 1.5}, "layout.dp"), ({"gbs": 0}, "layout.gbs"), ({"gbs": math.inf}, "layout.gbs"),
    ({"etp": 0}, "layout.etp"), ({"dp_shard": -1}, "layout.dp_shard"), ({"zero": 7}, "layout.zero"),
    ({"zero": -1}, "layout.zero"), ({"zero": 1.0}, "layout.zero"), ({"zero": None}, "layout.zero"),
    ({"recompute": "sometimes"}, "layout.recompute"), ({"recompute": None}, "layout.recompute"),
    ({"precision": "int4"}, "layout.precision"), ({"sp": "yes"}, "layout.sp"), ({"sp": 1}, "layout.sp"),
    ({"vpp": 2, "pp": 1}, "layout.vpp"),
]


@pytest.mark.parametrize("kwargs,field", BAD_LAYOUTS, ids=[f"{k}" for k, _ in BAD_LAYOUTS])
def test_invalid_layout_raises_one_line_naming_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        Layout(**kwargs)
    assert err.value.field == field
    assert "\n" not in str(err.value) and str(err.value).startswith(field + ": expected")


def test_parse_names_the_field_as_the_caller_knows_it():
    with pytest.raises(SpecError) as err:
        Layout.parse("tp=0", field="--layout")
    assert err.value.field == "--layout.tp"


BAD_RESOLVED = [
    ({"dp": 4, "gbs": 6}, "layout.gbs"),  # not a multiple of dp*mbs
    ({"dp": 4, "gbs": 8, "ep": 3}, "layout.ep"),  # ep must divide dp*cp
    ({"tp": 4, "dp": 4, "gbs": 8, "ep": 2, "etp": 3}, "layout.etp"),  # etp must divide tp
    ({"dp": 4, "gbs": 8, "dp_shard": 3, "zero": 3}, "layout.dp_shard"),
    ({"pp": 4, "vpp": 2, "dp": 2, "gbs": 12}, "layout.vpp"),  # 6 micro-batches, not a multiple of pp
    ({"gbs": 8}, "layout.dp"),
]


@pytest.mark.parametrize("kwargs,field", BAD_RESOLVED)
def test_invalid_resolved_layout_raises_naming_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        ResolvedLayout(**kwargs)
    assert err.value.field == field


BAD_OPTIONS = [
    ({"tp_overlap": 3.0}, "options.tp_overlap"), ({"tp_overlap": -0.1}, "options.tp_overlap"),
    ({"tp_overlap": math.nan}, "options.tp_overlap"), ({"tp_overlap": "half"}, "options.tp_overlap"),
    ({"ep_overlap": 1.5}, "options.ep_overlap"), ({"ep_overlap": math.inf}, "options.ep_overlap"),
    ({"comm_sm_fraction": 1.0}, "options.comm_sm_fraction"), ({"comm_sm_fraction": math.nan}, "options.comm_sm_fraction"),
    ({"attention": "flsh"}, "options.attention"), ({"algorithm": "butterfly"}, "options.algorithm"),
    ({"pipeline": "gpipe"}, "options.pipeline"), ({"zero3_unit": "block"}, "options.zero3_unit"),
    ({"recompute_modules": ("core_attn", "mlp_fused")}, "options.recompute_modules"),
    ({"recompute_modules": ()}, "options.recompute_modules"), ({"recompute_modules": "core_attn"}, "options.recompute_modules"),
    ({"grad_bytes": 3}, "options.grad_bytes"), ({"grad_bytes": 4.0}, "options.grad_bytes"),
    ({"dp_overlap": "no"}, "options.dp_overlap"), ({"fp8_activation_cache": 0}, "options.fp8_activation_cache"),
    ({"zero3_grad_overlap": None}, "options.zero3_grad_overlap"),
    ({"zero3_reuse_distance": -1.0}, "options.zero3_reuse_distance"), ({"zero3_reuse_distance": None}, "options.zero3_reuse_distance"),
    ({"zero3_max_live_params": 0.0}, "options.zero3_max_live_params"), ({"zero3_max_live_params": math.inf}, "options.zero3_max_live_params"),
    ({"megatron_unfused_ce": "yes"}, "options.megatron_unfused_ce"),
    ({"eager": "yes"}, "options.eager"), ({"fp8_scaling": "delayed"}, "options.fp8_scaling"),
    ({"profile": "titan"}, "options.profile"), ({"pp_blocking_p2p": 1}, "options.pp_blocking_p2p"),
    ({"moe_fused_expert_mlp": 3}, "options.moe_fused_expert_mlp"), ({"pp_layout": "Et|xyz"}, "options.pp_layout"),
    ({"pp_layout": 4}, "options.pp_layout"), ({"mtp_layers": -1}, "options.mtp_layers"),
    ({"mtp_layers": 1.0}, "options.mtp_layers"), ({"moe_router_groups": (4, 8)}, "options.moe_router_groups"),
    ({"moe_flex_backend": "nccl"}, "options.moe_flex_backend"),
]


def test_every_options_field_has_a_rule():
    """A field added without a rule would be accepted unchecked from Python (options_check.RULES)."""
    from dataclasses import fields

    from wanka.plan.options_check import RULES

    assert [f.name for f in fields(Options) if f.name not in RULES] == []


@pytest.mark.parametrize("kwargs,field", BAD_OPTIONS, ids=[f"{k}" for k, _ in BAD_OPTIONS])
def test_invalid_options_raise_one_line_naming_the_field(kwargs, field):
    with pytest.raises(SpecError) as err:
        Options(**kwargs)
    assert err.value.field == field and "\n" not in str(err.value)


def test_valid_constructions_pass():
    Layout(tp=8, pp=4, vpp=2, zero=3, recompute="full", precision="fp8", sp=False, dp_shard=8)
    Options(tp_overlap=1, ep_overlap=0.5, comm_sm_fraction=20 / 132, grad_bytes=2, pipeline="dualpipe",
            recompute_modules=("core_attn", "moe_act"), algorithm="flat-ring", zero3_unit="weight",
            eager=True, fp8_scaling="torchao-tensorwise", profile="torchtitan")
    Options(pp_layout="Et*4|(t*4|)*14tmL", mtp_layers=1, moe_fused_expert_mlp=True, moe_router_groups=(8, 4),
            moe_flex_backend="hybridep")


def test_cli_rejects_a_bad_tp_overlap_with_exit_2(run_cli):
    code, _, err = run_cli("plan", "--model", "llama3-8b", "--cluster", "wanka-10k", "--gpus", "64", "--layout", "tp=8",
                           "--tp-overlap", "3")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "tp-overlap" in err
