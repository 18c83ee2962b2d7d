"""A scenario's `cluster` may be a full cluster spec, validated as the cluster layer validates a file."""

import json

import pytest
import yaml

from wanka.cli import main
from wanka.cluster import load_cluster
from wanka.errors import SpecError
from wanka.sim import compile_scenario, parse_scenario, simulate

PRESET_SPEC = load_cluster("wanka-10k").spec.model_dump(exclude_none=True)


def _scenario(cluster):
    return {"name": "inline", "cluster": cluster, "cluster_gpus": 1280,
            "jobs": [{"name": "j", "gpus": 1024, "layout": "tp=8,pp=2", "step_time_s": 5.0}],
            "failures": {"model": "llama3-h100", "scale": 10},
            "checkpoint": {"policy": "young", "mode": "async", "write_s": 60},
            "duration_days": 5, "runs": 3, "seed": 4}


def test_inline_spec_runs_like_the_preset():
    by_name = simulate(compile_scenario(parse_scenario(_scenario("wanka-10k"))))
    inline = simulate(compile_scenario(parse_scenario(_scenario(PRESET_SPEC))))
    assert inline["ettr"]["mean"] == pytest.approx(by_name["ettr"]["mean"], rel=1e-12)
    assert inline["cluster"] == by_name["cluster"]


@pytest.mark.parametrize(("change", "field"), [
    ({"gpus": 1001}, "cluster.gpus"),
    ({"gpu": "no-such-gpu"}, "cluster.gpu"),
    ({"scale_up": {"domain": 3, "bandwidth_GBps": 450}}, "cluster.scale_up.domain"),
    ({"bogus": 1}, "cluster.bogus"),
])
def test_bad_inline_cluster_names_the_field(change, field):
    with pytest.raises(SpecError) as err:
        parse_scenario(_scenario({**PRESET_SPEC, **change}))
    assert err.value.field.startswith(field)


def test_cli_bad_inline_cluster_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario({**PRESET_SPEC, "gpus_per_node": 0})))
    assert main(["simulate", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cluster.gpus_per_node" in err and "Traceback" not in err


def test_cli_runs_an_inline_cluster(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_scenario(PRESET_SPEC)))
    assert main(["simulate", str(path), "--runs", "2", "--json"]) == 0
    assert 0 < json.loads(capsys.readouterr().out)["ettr"]["mean"] <= 1
