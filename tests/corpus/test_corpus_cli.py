"""Bad command lines: layout strings, planner flags, traces and scheduler flags, simulate flags,
data prepare inputs, train and launch flags, serve and loadtest flags."""

from __future__ import annotations

import gzip

import pytest

from .conftest import DIR, case

PLAN = "plan --model llama3-8b --cluster wanka-10k --gpus 64"

LAYOUTS = [
    ("tp-zero", "tp=0", "tp"), ("tp-negative", "tp=-8", "tp"), ("tp-word", "tp=eight", "tp"),
    ("tp-float", "tp=2.5", "tp"), ("tp-nan", "tp=nan", "tp"), ("tp-inf", "tp=inf", "tp"),
    ("tp-huge", "tp=99999999999999999999", "tp"), ("unknown-key", "tq=8", "tq"), ("no-value", "tp", "layout"),
    ("empty-value", "tp=", "tp"), ("repeated-key", "tp=8,tp=4", "tp"), ("only-commas", ",,,", "layout"),
    ("equals-only", "=", "layout"), ("recompute-unknown", "recompute=sometimes", "recompute"),
    ("precision-unknown", "precision=fp64", "precision"), ("zero-stage-4", "zero=4", "zero"),
    ("sp-maybe", "sp=maybe", "sp"), ("gbs-zero", "gbs=0", "gbs"), ("mbs-negative", "mbs=-1", "mbs"),
    ("dp-contradicts-gpus", "tp=8,dp=7", "dp"), ("pp-above-gpus", "pp=128", "pp"),
    ("spaces-inside", "t p=8", "layout"),
]
LAYOUT_CASES = [case(f"layout-{cid}", PLAN.split() + ["--layout", text], field) for cid, text, field in LAYOUTS]

PLAN_FLAG_CASES = [case(f"plan-{cid}", argv, field) for cid, argv, field in [
    ("gpus-zero", "plan --model llama3-8b --gpus 0", "--gpus"),
    ("gpus-negative", "plan --model llama3-8b --gpus -8", "--gpus"),
    ("gpus-word", "plan --model llama3-8b --gpus many", "--gpus"),
    ("gpus-overflow", "plan --model llama3-8b --gpus 1e400", "--gpus"),
    ("gpus-above-cluster", "plan --model llama3-8b --cluster wanka-10k --gpus 10000000", "gpus"),
    ("tokens-negative", f"{PLAN} --tokens -1T", "--tokens"),
    ("tokens-word", f"{PLAN} --tokens lots", "--tokens"),
    ("tokens-nan", f"{PLAN} --tokens nan", "--tokens"),
    ("gbs-zero", f"{PLAN} --gbs 0", "--gbs"),
    ("seq-zero", f"{PLAN} --seq 0", "--seq"),
    ("seq-huge", f"{PLAN} --seq 99999999999999999999", "--seq"),
    ("top-zero", f"{PLAN} --top 0", "--top"),
    ("top-negative", f"{PLAN} --top -3", "--top"),
    ("attention-unknown", f"{PLAN} --attention sparse", "--attention"),
    ("pipeline-unknown", f"{PLAN} --pipeline zigzag", "--pipeline"),
    ("tp-overlap-above-one", f"{PLAN} --tp-overlap 2", "--tp-overlap"),
    ("tp-overlap-nan", f"{PLAN} --tp-overlap nan", "--tp-overlap"),
    ("algorithm-unknown", f"{PLAN} --algorithm carrier-pigeon", "--algorithm"),
    ("recompute-modules-unknown", f"{PLAN} --recompute-modules everything", "--recompute-modules"),
    ("zero3-unit-unknown", f"{PLAN} --zero3-unit page", "--zero3-unit"),
    ("model-unknown", "plan --model gpt-99 --gpus 64", "model"),
    ("cluster-unknown", "plan --model llama3-8b --cluster atlantis --gpus 64", "cluster"),
    ("unknown-flag", f"{PLAN} --turbo", "--turbo"),
    ("scale-gpus-zero", "plan scale --model llama3-8b --gpus 0,8", "--gpus"),
    ("scale-gpus-words", "plan scale --model llama3-8b --gpus a,b", "--gpus"),
    ("scale-gpus-empty", ["plan", "scale", "--model", "llama3-8b", "--gpus", ""], "--gpus"),
    ("scale-gbs-negative", "plan scale --model llama3-8b --gpus 64 --gbs -2", "--gbs"),
    ("validate-runs-missing", "plan validate --runs {d}/none.json", "--runs"),
    ("validate-runs-directory", "plan validate --runs {d}", "--runs"),
    ("validate-fail-above-negative", "plan validate --runs calibration --fail-above -1", "--fail-above"),
    ("validate-fail-above-nan", "plan validate --runs calibration --fail-above nan", "--fail-above"),
]] + [
    case("plan-validate-runs-malformed-json", "plan validate --runs {d}/r.json", "runs", r__json='[{"id": '),
    case("plan-validate-runs-not-a-list", "plan validate --runs {d}/r.json", "runs", r__json='{"id": 1}'),
    case("plan-validate-runs-list-of-numbers", "plan validate --runs {d}/r.json", "runs", r__json="[1, 2, 3]"),
    case("plan-validate-runs-binary", "plan validate --runs {d}/r.json", "runs", r__json=b"\xff\xfe\x00garbage"),
    case("plan-validate-runs-deep-json", "plan validate --runs {d}/r.json", "runs",
         r__json="[" * 100_000 + "]" * 100_000),
]

REPLAY = "sched replay --cluster wanka-10k --gpus 64"
HEADER = "submit_s,duration_s,gpus\n"
TRACE_CASES = [case(f"trace-{cid}", f"{REPLAY} --trace {{d}}/{name}", field, **{name.replace(".", "__"): body})
               for cid, name, body, field in [
    ("header-only", "t.csv", HEADER, "t.csv"),
    ("empty-file", "t.csv", "", "t.csv"),
    ("binary", "t.csv", b"\xff\xfe\x00\x01garbage\n", "t.csv"),
    ("null-byte", "t.csv", HEADER + "0,10,8\x00\n", "t.csv"),
    ("missing-gpus-column", "t.csv", "submit_s,duration_s\n0,10\n", "gpus"),
    ("duration-negative", "t.csv", HEADER + "0,-10,8\n", "duration"),
    ("duration-nan", "t.csv", HEADER + "0,nan,8\n", "duration"),
    ("submit-inf", "t.csv", HEADER + "inf,10,8\n", "submit_s"),
    ("gpus-zero", "t.csv", HEADER + "0,10,0\n", "gpus"),
    ("gpus-word", "t.csv", HEADER + "0,10,eight\n", "gpus"),
    ("gpus-fraction", "t.csv", HEADER + "0,10,2.5\n", "gpus"),
    ("gpus-above-cluster", "t.csv", HEADER + "0,10,4096\n", "gpus"),
    ("priority-word", "t.csv", "submit_s,duration_s,gpus,priority\n0,10,8,high\n", "priority"),
    ("preemptible-maybe", "t.csv", "submit_s,duration_s,gpus,preemptible\n0,10,8,maybe\n", "preemptible"),
    ("topology-unknown", "t.csv", "submit_s,duration_s,gpus,topology\n0,10,8,galaxy\n", "topology"),
    ("min-gpus-above-gpus", "t.csv", "submit_s,duration_s,gpus,min_gpus\n0,10,8,16\n", "min_gpus"),
    ("short-row", "t.csv", HEADER + "0,10\n", "gpus"),
    ("damaged-gzip", "t.csv.gz", gzip.compress(((HEADER + "0,10,8\n") * 50).encode())[:40], "t.csv"),
]] + [
    case("trace-directory", f"{REPLAY} --trace {{d}}/tr.csv", "--trace", tr__csv=DIR),
    case("trace-unknown-name", f"{REPLAY} --trace alibaba2099", "--trace"),
]

SCHED_FLAG_CASES = [case(f"sched-{cid}", argv, field) for cid, argv, field in [
    ("gpus-zero", "sched replay --trace synthetic --jobs 5 --gpus 0", "--gpus"),
    ("scale-zero", "sched replay --trace synthetic --jobs 5 --scale 0", "--scale"),
    ("scale-nan", "sched replay --trace synthetic --jobs 5 --scale nan", "--scale"),
    ("scale-inf", "sched replay --trace synthetic --jobs 5 --scale inf", "--scale"),
    ("limit-negative", "sched replay --trace synthetic --jobs 5 --limit -1", "--limit"),
    ("jobs-zero", "sched replay --trace synthetic --jobs 0", "--jobs"),
    ("load-zero", "sched replay --trace synthetic --jobs 5 --load 0", "--load"),
    ("load-nan", "sched replay --trace synthetic --jobs 5 --load nan", "--load"),
    ("quotas-malformed", "sched replay --trace synthetic --jobs 5 --quotas a=b=c", "--quotas"),
    ("quotas-negative", "sched replay --trace synthetic --jobs 5 --quotas a=-0.5", "--quotas"),
    ("spare-nodes-negative", "sched replay --trace synthetic --jobs 5 --spare-nodes -1", "spare_nodes"),
    ("spread-wait-nan", "sched replay --trace synthetic --jobs 5 --spread-wait nan", "spread_wait"),
    ("policy-unknown", "sched replay --trace synthetic --jobs 5 --policy lottery", "policy"),
    ("queue-unknown", "sched replay --trace synthetic --jobs 5 --queue lifo", "lifo"),
    ("cluster-unknown", "sched replay --trace synthetic --jobs 5 --cluster atlantis", "cluster"),
    ("compare-policies-unknown", "sched compare --trace synthetic --jobs 5 --policies fifo,lottery", "policy"),
    ("compare-policies-empty", ["sched", "compare", "--trace", "synthetic", "--jobs", "5", "--policies", ""], "--policies"),
    ("compare-report-in-missing-dir", "sched compare --trace synthetic --jobs 5 --report {d}/no/such/r.html", "--report"),
    ("bare-sched", "sched", "command"),
]]

SIM = "simulate llama3-54d"
SIM_FLAG_CASES = [case(f"simulate-{cid}", argv, field) for cid, argv, field in [
    ("runs-zero", f"{SIM} --runs 0", "--runs"),
    ("runs-negative", f"{SIM} --runs -5", "--runs"),
    ("runs-word", f"{SIM} --runs many", "--runs"),
    ("seed-negative", f"{SIM} --runs 1 --seed -1", "--seed"),
    ("scenario-unknown", "simulate atlantis-99d", "scenario"),
    ("report-is-a-directory", f"{SIM} --runs 1 --report {{d}}", "--report"),
    ("report-in-missing-dir", f"{SIM} --runs 1 --report {{d}}/no/such/twin.html", "--report"),
    ("sweep-param-unknown", "simulate sweep llama3-54d --param colour --values 1,2", "--param"),
    ("sweep-values-words", "simulate sweep llama3-54d --param checkpoint_interval --values a,b", "--values"),
    ("sweep-values-nan", "simulate sweep llama3-54d --param checkpoint_interval --values nan,60", "--values"),
    ("sweep-values-negative", "simulate sweep llama3-54d --param checkpoint_interval --values -60", "--values"),
    ("sweep-values-empty", ["simulate", "sweep", "llama3-54d", "--param", "checkpoint_interval", "--values", ""], "--values"),
    ("sweep-without-param", "simulate sweep llama3-54d --values 1,2", "--param"),
]]

DATA_CASES = [
    case("data-input-missing", "data prepare {d}/none.txt --out {d}/out", "data"),
    case("data-input-directory", "data prepare {d}/sub --out {d}/out", "data", sub=DIR),
    case("data-input-binary", "data prepare {d}/a.txt --out {d}/out", "a.txt", a__txt=b"\xff\xfe\x00\x01" * 64),
    case("data-input-empty", "data prepare {d}/a.txt --out {d}/out", "a.txt", a__txt=""),
    case("data-out-is-a-file", "data prepare {d}/a.txt --out {d}/f", "out", a__txt="hello world\n", f="x"),
    case("data-shard-tokens-zero", "data prepare {d}/a.txt --out {d}/out --shard-tokens 0", "shard_tokens",
         a__txt="hello world\n"),
    case("data-shard-tokens-word", "data prepare {d}/a.txt --out {d}/out --shard-tokens big", "--shard-tokens",
         a__txt="hello world\n"),
    case("data-bare", "data", "command"),
]

TRAIN = "train --model tiny --steps 2 --ckpt {d}/ck"
TRAIN_CASES = [case(f"train-{cid}", argv, field, **files) for cid, argv, field, files in [
    ("model-unknown", "train --model gpt-99 --ckpt {d}/ck", "model", {}),
    ("layout-unknown-key", f"{TRAIN} --layout tq=2", "tq", {}),
    ("layout-tp-not-dividing-heads", f"{TRAIN} --layout tp=3 --nproc 3", "tp", {}),
    ("layout-world-mismatch", f"{TRAIN} --layout dp=2 --nproc 3", "layout", {}),
    ("nproc-zero", f"{TRAIN} --nproc 0", "nproc", {}),
    ("steps-zero", "train --model tiny --steps 0 --ckpt {d}/ck", "steps", {}),
    ("steps-negative", "train --model tiny --steps -5 --ckpt {d}/ck", "steps", {}),
    ("seed-word", f"{TRAIN} --seed abc", "--seed", {}),
    ("inject-unknown", f"{TRAIN} --inject explode@step=1", "inject", {}),
    ("inject-no-step", f"{TRAIN} --inject kill@rank=0", "inject", {}),
    ("inject-rank-beyond-world", f"{TRAIN} --inject kill@step=1,rank=5", "inject", {}),
    ("max-restarts-negative", f"{TRAIN} --max-restarts -1", "max-restarts", {}),
    ("ckpt-every-zero", f"{TRAIN} --ckpt-every 0", "ckpt-every", {}),
    ("keep-zero", f"{TRAIN} --keep 0", "keep", {}),
    ("seq-len-zero", f"{TRAIN} --seq-len 0", "seq-len", {}),
    ("lr-negative", f"{TRAIN} --lr -0.1", "lr", {}),
    ("lr-nan", f"{TRAIN} --lr nan", "lr", {}),
    ("lr-inf", f"{TRAIN} --lr inf", "lr", {}),
    ("pp-schedule-unknown", f"{TRAIN} --pp-schedule zigzag", "--pp-schedule", {}),
    ("prometheus-port-out-of-range", f"{TRAIN} --prometheus-port 70000", "prometheus-port", {}),
    ("peak-tflops-zero", f"{TRAIN} --peak-tflops 0", "peak-tflops", {}),
    ("collective-timeout-zero", f"{TRAIN} --collective-timeout 0", "collective-timeout", {}),
    ("data-missing", f"{TRAIN} --data {{d}}/nodata", "data", {}),
    ("data-is-a-file", f"{TRAIN} --data {{d}}/f", "data", {"f": "x"}),
    ("ckpt-is-a-file", "train --model tiny --steps 2 --ckpt {d}/f", "ckpt", {"f": "x"}),
]]

LAUNCH = "launch slurm --model llama3-8b --layout tp=8 --nodes 4"
LAUNCH_CASES = [case(f"launch-{cid}", argv, field) for cid, argv, field in [
    ("target-unknown", "launch pbs --model llama3-8b --layout tp=8 --nodes 4", "target"),
    ("nodes-zero", "launch slurm --model llama3-8b --layout tp=8 --nodes 0", "nodes"),
    ("nodes-negative", "launch slurm --model llama3-8b --layout tp=8 --nodes -4", "nodes"),
    ("gpus-per-node-zero", f"{LAUNCH} --gpus-per-node 0", "gpus"),
    ("layout-too-big", "launch slurm --model llama3-8b --layout tp=8,pp=64 --nodes 4", "layout"),
    ("layout-bad", "launch slurm --model llama3-8b --layout tp=x --nodes 4", "tp"),
    ("model-unknown", "launch slurm --model gpt-99 --layout tp=8 --nodes 4", "model"),
    ("steps-zero", f"{LAUNCH} --steps 0", "steps"),
    ("name-with-newline", ["launch", "slurm", "--model", "llama3-8b", "--layout", "tp=8", "--nodes", "4",
                           "--name", "a\nb"], "name"),
    ("partition-with-space", ["launch", "slurm", "--model", "llama3-8b", "--layout", "tp=8", "--nodes", "4",
                              "--partition", "a b"], "partition"),
    ("image-with-quote", ["launch", "k8s", "--model", "llama3-8b", "--layout", "tp=8", "--nodes", "4",
                          "--image", "img'; rm -rf /"], "image"),
    ("pvc-with-space", ["launch", "k8s", "--model", "llama3-8b", "--layout", "tp=8", "--nodes", "4",
                        "--pvc", "a b"], "pvc"),
    ("topology-with-space", ["launch", "k8s", "--model", "llama3-8b", "--layout", "tp=8", "--nodes", "4",
                             "--topology", "a b: c"], "topology"),
    ("out-is-a-directory", f"{LAUNCH} --out {{d}}", "out"),
]]

NUL_CASES = [case(f"nul-in-{cid}", argv.replace("NUL", "\x00").split(" "), "command line") for cid, argv in [
    ("cluster-path", "cluster show aNULb.yaml"),
    ("runs-path", "plan validate --runs aNULb.json"),
    ("trace-path", "sched replay --trace aNULb.csv --jobs 5"),
    ("ckpt-path", "export --ckpt aNULb --out {d}/exp"),
    ("train-ckpt-path", "train --model tiny --ckpt aNULb"),
    ("data-input-path", "data prepare aNULb.txt --out {d}/out"),
    ("scenario-path", "simulate aNULb.yaml"),
    ("layout", "plan --model llama3-8b --gpus 64 --layout tp=8NUL"),
]]

SERVE = "serve --model {d}/exp"
SERVE_CASES = [case(f"serve-{cid}", argv, field) for cid, argv, field in [
    ("model-missing", SERVE, "model"),
    ("port-out-of-range", f"{SERVE} --port 70000", "port"),
    ("max-batch-zero", f"{SERVE} --max-batch 0", "max"),
    ("block-size-zero", f"{SERVE} --block-size 0", "block"),
    ("kv-blocks-zero", f"{SERVE} --kv-blocks 0", "kv"),
    ("quantize-unknown", f"{SERVE} --quantize int4", "--quantize"),
    ("loadtest-concurrency-zero", "loadtest --url http://127.0.0.1:9 --concurrency 0", "--concurrency"),
    ("loadtest-requests-zero", "loadtest --url http://127.0.0.1:9 --requests 0", "requests"),
    ("loadtest-url-not-http", "loadtest --url ftp://x --requests 1", "url"),
    ("export-ckpt-missing", "export --ckpt {d}/none --out {d}/exp", "ckpt"),
    ("export-ckpt-is-a-file", "export --ckpt {d}/f --out {d}/exp", "ckpt"),
    ("export-ckpt-empty-dir", "export --ckpt {d}/e --out {d}/exp", "ckpt"),
    ("bare-wanka-cluster", "cluster", "command"),
    ("cluster-show-unknown", "cluster show atlantis", "cluster"),
]]
SERVE_FILES = {"f": "x", "e": DIR}

ALL = (LAYOUT_CASES + PLAN_FLAG_CASES + TRACE_CASES + SCHED_FLAG_CASES + SIM_FLAG_CASES + DATA_CASES
       + TRAIN_CASES + LAUNCH_CASES + NUL_CASES)


@pytest.mark.parametrize("c", [c.param() for c in ALL])
def test_bad_command_line_is_refused(c, refused):
    refused(c)


@pytest.fixture
def no_server(monkeypatch):
    """A serve case that passed validation would start a server and block; fail it instead."""
    import wanka.serve.server as server

    def refuse(*a, **k):
        raise AssertionError("bad input reached make_server")

    monkeypatch.setattr(server, "make_server", refuse)


@pytest.mark.parametrize("c", [c.param() for c in SERVE_CASES])
def test_bad_serve_export_or_loadtest_line_is_refused(c, refused, no_server):
    refused(c.__class__(c.id, c.argv, c.field, {**SERVE_FILES, **c.files}))
