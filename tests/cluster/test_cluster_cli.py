import json

import pytest
import yaml

GOOD = {"name": "t", "gpu": "h100-sxm", "gpus": 64, "gpus_per_node": 8}

# (change to a good spec, field the one-line error must name)
BAD = [
    ({"gpus": -5}, "gpus"),
    ({"gpus": "many"}, "gpus"),
    ({"gpus": 60}, "gpus"),  # not a multiple of gpus_per_node
    ({"gpu": "h9000"}, "gpu"),
    ({"gpu": {"name": "x", "hbm_GB": 80}}, "gpu.peak_tflops"),
    ({"gpu": {"name": "x", "hbm_GB": 80, "peak_tflops": {"bf16": -1}}}, "gpu.peak_tflops.bf16"),
    ({"gpus_per_node": 0}, "gpus_per_node"),
    ({"scale_up": {"domain": 12}}, "scale_up.domain"),
    ({"scale_out": {"topology": "torus"}}, "scale_out.topology"),
    ({"scale_out": {"oversubscription": 0.5}}, "scale_out.oversubscription"),
    ({"scale_out": {"switch_radix": 63}}, "scale_out.switch_radix"),
    ({"scale_out": {"tiers": 4}}, "scale_out.tiers"),
    ({"scale_out": {"tiers": 1, "switch_radix": 16}}, "scale_out.tiers"),
    ({"scale_out": {"topology": "explicit"}}, "scale_out.tree_csv"),
    ({"scale_out": {"nic": "cx9"}}, "scale_out.nic"),
    ({"gpu": 5}, "gpu"),
    ({"campuses": {"count": 2}}, "campuses.link_bandwidth_Tbps"),
    ({"campuses": {"count": 3, "link_bandwidth_Tbps": 10}}, "campuses.count"),
    ({"power": {"pue": 0.9}}, "power.pue"),
    ({"bandwidth": 5}, "bandwidth"),  # unknown key
    ({"name": None}, "name"),
]


def _write(tmp_path, spec, suffix=".yaml"):
    path = tmp_path / f"spec{suffix}"
    path.write_text(yaml.safe_dump(spec) if suffix == ".yaml" else json.dumps(spec))
    return str(path)


def test_good_spec_file_shows(tmp_path, run_json):
    out = run_json("cluster", "show", _write(tmp_path, GOOD, ".json"))
    for key in ("name", "gpus", "nodes", "gpus_per_node", "peak_pflops", "bisection_TBps", "switches", "power_MW"):
        assert key in out
    assert out["nodes"] == 8 and out["peak_pflops"]["bf16"] == pytest.approx(64 * 989.4 / 1000)


@pytest.mark.parametrize("change,field", BAD, ids=[f for _, f in BAD])
def test_bad_spec_exits_2_with_one_line_naming_the_field(tmp_path, run_cli, change, field):
    spec = {**GOOD, **change}
    spec = {k: v for k, v in spec.items() if v is not None}
    code, out, err = run_cli("cluster", "show", _write(tmp_path, spec), "--json")
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"{field}:" in lines[0].split("expected")[0]
    assert f"{field}.str" not in lines[0] and f"{field}.int" not in lines[0]  # no pydantic union tags


def test_missing_field_and_bad_files(tmp_path, run_cli):
    spec = dict(GOOD)
    del spec["gpus"]
    code, _, err = run_cli("cluster", "show", _write(tmp_path, spec))
    assert code == 2 and "gpus:" in err and "required" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    code, _, err = run_cli("cluster", "show", str(broken))
    assert code == 2 and "valid YAML" in err and len(err.strip().splitlines()) == 1
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\x01\xff\xfe")
    code, _, err = run_cli("cluster", "show", str(binary))
    assert code == 2 and "UTF-8" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("cluster", "show", "no-such-preset")
    assert code == 2 and "cluster: expected a preset name" in err
    code, _, err = run_cli("cluster", "show", str(tmp_path / "missing.yaml"))
    assert code == 2 and "cluster:" in err


def test_list_and_show_json(run_json):
    listed = run_json("cluster", "list")["clusters"]
    assert len(listed) >= 12 and {"name", "gpus", "gpu"} <= set(listed[0])
    shown = run_json("cluster", "show", "xai-100k")
    assert shown["gpus"] == 100000 and shown["nodes"] == 12500 and shown["switches"] > 0


def test_human_output_and_version(run_cli):
    code, out, _ = run_cli("cluster", "show", "wanka-10k")
    assert code == 0 and "wanka-10k" in out and "bisection" in out
    code, out, _ = run_cli("--version")
    assert code == 0 and out.startswith("wanka ")
    code, _, err = run_cli("cluster", "show", "--bogus-flag")
    assert code == 2 and len(err.strip().splitlines()) == 1
