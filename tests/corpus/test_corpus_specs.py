"""Bad spec files: cluster, model and scenario specs, given to the commands that read them."""

from __future__ import annotations

import json

import pytest
import yaml

from .conftest import DIR, YAML_BOMB, case

CLUSTER = {"name": "c", "gpu": "h100-sxm", "gpus": 64, "gpus_per_node": 8, "scale_up": {"domain": 8},
           "scale_out": {"bandwidth_Gbps": 400, "topology": "rail-fat-tree", "tiers": 2}}
MODEL = {"name": "m", "layers": 4, "hidden": 1024, "heads": 8, "ffn_hidden": 4096, "vocab": 32000,
         "seq_len": 2048, "activation": "swiglu"}
SCENARIO = {"name": "s", "cluster": "wanka-10k", "duration_days": 1, "runs": 1, "seed": 1,
            "jobs": [{"name": "j", "gpus": 64, "step_time_s": 10}]}


def _with(base: dict, path: str, value) -> str:
    """YAML of `base` with the dotted `path` set to `value` (the sentinel DROP removes it)."""
    data = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is DROP:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return yaml.safe_dump(data)


DROP = object()
NAN, INF = float("nan"), float("inf")


def file_cases(prefix: str, argv: str, field: str) -> list:
    """Cases common to every spec file (`{f}` in argv): syntax, encoding, shape, bombs, paths."""

    def at(name: str) -> str:
        return argv.replace("{f}", "{d}/" + name)

    y, j = at("spec.yaml"), at("spec.json")
    return [
        case(f"{prefix}-missing-file", at("nope.yaml"), field),
        case(f"{prefix}-directory", at("dir.yaml"), field, dir__yaml=DIR),
        case(f"{prefix}-empty-file", y, field, spec__yaml=""),
        case(f"{prefix}-malformed-yaml", y, field, spec__yaml="name: [unclosed\ngpus: 8\n"),
        case(f"{prefix}-tab-indent", y, field, spec__yaml="name: x\n\tgpus: 8\n"),
        case(f"{prefix}-top-level-list", y, field, spec__yaml="- 1\n- 2\n"),
        case(f"{prefix}-top-level-scalar", y, field, spec__yaml="42\n"),
        case(f"{prefix}-binary", y, field, spec__yaml=b"\xff\xfe\x00\x01\x80garbage"),
        case(f"{prefix}-null-byte", y, field, spec__yaml="name: a\x00b\ngpus: 8\n"),
        case(f"{prefix}-yaml-bomb", y, field, spec__yaml=YAML_BOMB),
        case(f"{prefix}-yaml-deep-nesting", y, field, spec__yaml="a: " + "[" * 5000 + "]" * 5000 + "\n"),
        case(f"{prefix}-malformed-json", j, field, spec__json='{"name": "a",'),
        case(f"{prefix}-json-list", j, field, spec__json="[1, 2]"),
        case(f"{prefix}-json-deep-nesting", j, field, spec__json="[" * 100_000 + "]" * 100_000),
    ]


def field_cases(prefix: str, argv: str, base: dict, rows) -> list:
    """One case per (id, dotted path, bad value, field named) row, on an otherwise valid spec."""
    return [case(f"{prefix}-{cid}", argv.replace("{f}", "{d}/spec.yaml"), field, spec__yaml=_with(base, path, value))
            for cid, path, value, field in rows]


CLUSTER_ARGV = "cluster show {f}"
CLUSTER_CASES = file_cases("cluster", CLUSTER_ARGV, "cluster") + field_cases("cluster", CLUSTER_ARGV, CLUSTER, [
    ("unknown-key", "colour", "blue", "colour"),
    ("gpus-negative", "gpus", -64, "gpus"),
    ("gpus-zero", "gpus", 0, "gpus"),
    ("gpus-nan", "gpus", NAN, "gpus"),
    ("gpus-inf", "gpus", INF, "gpus"),
    ("gpus-huge", "gpus", 10**30, "gpus"),
    ("gpus-string", "gpus", "many", "gpus"),
    ("gpus-null", "gpus", None, "gpus"),
    ("gpus-fraction", "gpus", 64.5, "gpus"),
    ("gpus-missing", "gpus", DROP, "gpus"),
    ("gpus-not-whole-nodes", "gpus", 60, "gpus"),
    ("gpus-per-node-zero", "gpus_per_node", 0, "gpus_per_node"),
    ("gpus-per-node-list", "gpus_per_node", [8], "gpus_per_node"),
    ("gpu-unknown", "gpu", "h9000", "gpu"),
    ("gpu-inline-incomplete", "gpu", {"name": "x", "hbm_GB": 80}, "gpu"),
    ("gpu-inline-negative-peak", "gpu", {"name": "x", "peak_tflops": {"fp32": -1, "bf16": 1, "fp8": 1, "int8": 1},
                                         "hbm_GB": 80, "hbm_TBps": 3, "tdp_W": 700}, "peak_tflops"),
    ("scale-up-domain-zero", "scale_up.domain", 0, "scale_up.domain"),
    ("scale-up-domain-not-dividing", "scale_up.domain", 3, "domain"),
    ("scale-up-bandwidth-nan", "scale_up.bandwidth_GBps", NAN, "scale_up.bandwidth_GBps"),
    ("scale-out-bandwidth-negative", "scale_out.bandwidth_Gbps", -400, "scale_out.bandwidth_Gbps"),
    ("scale-out-bandwidth-inf", "scale_out.bandwidth_Gbps", INF, "scale_out.bandwidth_Gbps"),
    ("scale-out-topology-unknown", "scale_out.topology", "hypercube", "scale_out.topology"),
    ("scale-out-tiers-zero", "scale_out.tiers", 0, "scale_out.tiers"),
    ("scale-out-oversubscription-zero", "scale_out.oversubscription", 0, "scale_out.oversubscription"),
    ("scale-out-is-a-list", "scale_out", [400], "scale_out"),
    ("scale-out-unknown-key", "scale_out.speed", 9, "scale_out.speed"),
])

PLAN_CLUSTER_ARGV = "plan --model llama3-8b --cluster {f} --gpus 64 --layout tp=8"
PLAN_CLUSTER_CASES = field_cases("plan-cluster", PLAN_CLUSTER_ARGV, CLUSTER, [
    ("gpus-negative", "gpus", -64, "gpus"),
    ("gpu-unknown", "gpu", "h9000", "gpu"),
    ("unknown-key", "nodes", 8, "nodes"),
]) + [case("plan-cluster-yaml-bomb", PLAN_CLUSTER_ARGV.replace("{f}", "{d}/spec.yaml"), "cluster",
           spec__yaml=YAML_BOMB)]

MODEL_ARGV = "plan --model {f} --cluster wanka-10k --gpus 64 --layout tp=8"
MODEL_CASES = file_cases("model", MODEL_ARGV, "model") + field_cases("model", MODEL_ARGV, MODEL, [
    ("unknown-key", "depth", 4, "depth"),
    ("layers-zero", "layers", 0, "layers"),
    ("layers-negative", "layers", -4, "layers"),
    ("layers-nan", "layers", NAN, "layers"),
    ("layers-string", "layers", "four", "layers"),
    ("layers-bool", "layers", True, "layers"),
    ("hidden-missing", "hidden", DROP, "hidden"),
    ("hidden-huge", "hidden", 10**40, "hidden"),
    ("hidden-inf", "hidden", INF, "hidden"),
    ("heads-zero", "heads", 0, "heads"),
    ("heads-not-dividing-hidden", "heads", 7, "heads"),
    ("kv-heads-above-heads", "kv_heads", 16, "kv_heads"),
    ("kv-heads-not-dividing", "kv_heads", 3, "kv_heads"),
    ("ffn-negative", "ffn_hidden", -1, "ffn_hidden"),
    ("vocab-zero", "vocab", 0, "vocab"),
    ("seq-len-negative", "seq_len", -2048, "seq_len"),
    ("activation-unknown", "activation", "relu6", "activation"),
    ("moe-top-k-above-experts", "moe", {"experts": 4, "top_k": 8, "ffn_hidden": 1024}, "top_k"),
    ("moe-experts-zero", "moe", {"experts": 0, "top_k": 1, "ffn_hidden": 1024}, "moe.experts"),
    ("moe-unknown-key", "moe", {"experts": 8, "top_k": 2, "ffn_hidden": 1024, "gate": "x"}, "moe.gate"),
    ("moe-is-a-string", "moe", "yes", "moe"),
])

SCENARIO_ARGV = "simulate {f} --runs 1"
SCENARIO_CASES = file_cases("scenario", SCENARIO_ARGV, "scenario") + field_cases("scenario", SCENARIO_ARGV, SCENARIO, [
    ("unknown-key", "weather", "rain", "weather"),
    ("jobs-empty", "jobs", [], "jobs"),
    ("jobs-not-a-list", "jobs", {"gpus": 64}, "jobs"),
    ("job-gpus-negative", "jobs.0.gpus", -64, "jobs[0].gpus"),
    ("job-gpus-above-cluster", "jobs.0.gpus", 10**7, "gpus"),
    ("job-step-time-nan", "jobs.0.step_time_s", NAN, "jobs[0].step_time_s"),
    ("job-model-unknown", "jobs.0.model", "gpt-99", "model"),
    ("job-layout-bad", "jobs.0", {"name": "j", "gpus": 64, "model": "llama3-8b", "layout": "tp=banana"}, "layout"),
    ("job-unknown-key", "jobs.0.colour", "red", "jobs[0].colour"),
    ("duration-zero", "duration_days", 0, "duration_days"),
    ("duration-nan", "duration_days", NAN, "duration_days"),
    ("duration-inf", "duration_days", INF, "duration_days"),
    ("runs-zero", "runs", 0, "runs"),
    ("seed-string", "seed", "abc", "seed"),
    ("cluster-unknown", "cluster", "nowhere-1k", "cluster"),
    ("checkpoint-policy-unknown", "checkpoint", {"policy": "sometimes"}, "checkpoint.policy"),
    ("checkpoint-fixed-no-interval", "checkpoint", {"policy": "fixed", "write_s": 5}, "checkpoint.interval_s"),
    ("checkpoint-write-negative", "checkpoint", {"write_s": -5}, "checkpoint.write_s"),
    ("failures-model-unknown", "failures", {"model": "gremlins"}, "failures"),
    ("recovery-kind-unknown", "recovery", {"kind": "pray"}, "recovery.kind"),
    ("planned-negative", "planned", {"per_day": -1}, "planned.per_day"),
])

SCENARIO_CASES.append(case("scenario-json-nul-in-cluster-name", "simulate {d}/s.json --runs 1", "cluster",
                           s__json=json.dumps({**SCENARIO, "cluster": "x\u0000.yaml"})))

ALL = CLUSTER_CASES + PLAN_CLUSTER_CASES + MODEL_CASES + SCENARIO_CASES


@pytest.mark.parametrize("c", [c.param() for c in ALL])
def test_bad_spec_is_refused(c, refused):
    refused(c)
