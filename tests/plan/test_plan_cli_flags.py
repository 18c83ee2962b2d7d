"""`wanka plan` flag errors name the flag and say what to fix (never argparse's generic messages, never a field the user did not type)."""

import pytest

from wanka.cli import main
from wanka.plan.cli import parse_tokens
from wanka.errors import SpecError


def _err(argv, run_cli) -> str:
    rc, _, err = run_cli(*argv)
    assert rc == 2
    err = err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("flag,value", [("--gpus", "0"), ("--gpus", "abc"), ("--top", "-1"), ("--seq", "0"),
                                        ("--gbs", "1.5")])
def test_integer_flags_say_what_is_expected(flag, value, run_cli):
    # the flag's own parser raises SpecError, whose message argparse must not replace
    err = _err(["plan", "--model", "llama3-8b", flag, value], run_cli)
    assert flag in err and "expected a positive integer" in err and "conv" not in err


def test_scale_integer_flag(run_cli):
    err = _err(["plan", "scale", "--model", "tiny", "--gpus", "8", "--seq", "0"], run_cli)
    assert "--seq" in err and "expected a positive integer" in err


@pytest.mark.parametrize("text", ["1e400", "1e390T"])
def test_tokens_overflowing_to_infinity_are_rejected(text):
    # float('1e400') is inf, which would print as 'inf days'
    with pytest.raises(SpecError) as exc:
        parse_tokens(text)
    assert exc.value.field == "--tokens"


def test_tokens_still_parse():
    assert parse_tokens("15T") == 15e12 and parse_tokens("2.5e3M") == 2.5e9


def test_gpus_not_whole_nodes_names_the_flag(run_cli):
    # the error names --gpus, the flag the user typed, not the preset's internal field
    err = _err(["plan", "--model", "llama3-8b", "--gpus", "12"], run_cli)
    assert "--gpus" in err and "12" in err


def test_two_different_batches_are_an_error(run_cli, capsys):
    # a batch given twice with two values is ambiguous; equal values are accepted
    err = _err(["plan", "--model", "llama3-8b", "--gpus", "64", "--layout", "tp=8,gbs=128", "--gbs", "256"], run_cli)
    assert "--gbs" in err and "128" in err
    assert main(["plan", "--model", "llama3-8b", "--gpus", "64", "--layout", "tp=8,gbs=128", "--gbs", "128",
                 "--json"]) == 0
    capsys.readouterr()


def test_search_failure_names_what_to_change():
    # when the user gave no batch, the message must not blame one
    from wanka.cluster import load_cluster
    from wanka.plan import search
    from wanka.workload import load_model
    with pytest.raises(SpecError) as exc:  # 1 x 10M-token sequence: no layout of 32 layers splits it on 10k GPUs
        search(load_model("llama3-8b"), load_cluster("wanka-10k"), seq=10_000_000)
    assert exc.value.field == "seq"
    with pytest.raises(SpecError) as exc:  # 405B on one node: nothing fits
        search(load_model("llama3-405b"), load_cluster("wanka-10k", gpus=8))
    assert exc.value.field == "gpus"
    with pytest.raises(SpecError) as exc:  # a given batch no layout divides still names gbs
        search(load_model("llama3-8b"), load_cluster("wanka-10k"), gbs=7)
    assert exc.value.field == "gbs"


def test_moe_overlap_flags_name_megatron_s_rules(run_cli):
    # --delay-wgrad-compute needs the overlap; the overlap refuses full recompute (TransformerConfig.__post_init__)
    err = _err(["plan", "--model", "deepseek-v3", "--delay-wgrad-compute"], run_cli)
    assert err.startswith("wanka: error: --delay-wgrad-compute") and "--overlap-moe-expert-parallel-comm" in err
    err = _err(["plan", "--model", "deepseek-v3", "--gpus", "1024", "--overlap-moe-expert-parallel-comm",
                "--layout", "tp=1,pp=8,ep=64,mbs=1,gbs=8192,recompute=full"], run_cli)
    assert "--overlap-moe-expert-parallel-comm" in err and "recompute=full" in err


def test_moe_overlap_flags_reach_the_options():
    import argparse

    from wanka.plan.cli import _framework_flags, _options

    p = argparse.ArgumentParser()
    _framework_flags(p)
    p.add_argument("--recompute-modules")
    p.add_argument("--pipeline", default="1f1b")
    args = p.parse_args(["--moe-flex-dispatcher-backend", "hybridep", "--overlap-moe-expert-parallel-comm",
                         "--delay-wgrad-compute"])
    opts = _options(args)
    assert (opts.moe_flex_backend, opts.moe_a2a_overlap, opts.moe_delay_wgrad) == ("hybridep", True, True)
    assert not _options(p.parse_args([])).moe_a2a_overlap


def test_moe_dispatcher_sms_flag(run_cli):
    import argparse

    from wanka.plan.cli import _framework_flags, _options

    p = argparse.ArgumentParser()
    _framework_flags(p)
    p.add_argument("--recompute-modules")
    p.add_argument("--pipeline", default="1f1b")
    opts = _options(p.parse_args(["--moe-flex-dispatcher-backend", "hybridep", "--moe-dispatcher-sms", "16"]))
    assert (opts.moe_flex_backend, opts.moe_dispatcher_sms) == ("hybridep", 16)
    assert _options(p.parse_args([])).moe_dispatcher_sms is None
    # NCCL's all-to-all has no such knob; an SM count must be a positive whole number
    err = _err(["plan", "--model", "deepseek-v3", "--moe-dispatcher-sms", "16"], run_cli)
    assert err.startswith("wanka: error: --moe-dispatcher-sms") and "--moe-flex-dispatcher-backend" in err
    for bad in ("0", "abc"):
        err = _err(["plan", "--model", "deepseek-v3", "--moe-flex-dispatcher-backend", "deepep", "--moe-dispatcher-sms",
                    bad], run_cli)
        assert "--moe-dispatcher-sms" in err and "expected a positive integer" in err
    err = _err(["plan", "--model", "deepseek-v3", "--moe-flex-dispatcher-backend", "deepep", "--moe-dispatcher-sms",
                "4096"], run_cli)
    assert err.startswith("wanka: error: --moe-dispatcher-sms") and "1-1024" in err
