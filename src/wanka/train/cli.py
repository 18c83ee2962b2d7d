"""`wanka train`, `wanka export`, `wanka data prepare`, `wanka launch slurm|k8s`."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from rich.console import Console

from wanka.cli import json_flag, needs_subcommand
from wanka.errors import SpecError
from wanka.output import fmt


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train a model locally under torchrun (elastic, fault tolerant)")
    t.add_argument("--model", default="tiny", help="model preset or spec file (default tiny)")
    t.add_argument("--data", help="prepared shards dir (default: the shipped corpus, prepared on first use)")
    t.add_argument("--layout", default="", help="layout string, e.g. dp=2,tp=2 (dp derived from --nproc)")
    t.add_argument("--nproc", type=int, default=1, help="worker processes (ranks)")
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--ckpt", default="runs/train", help="checkpoint + metrics directory")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--inject", action="append", default=[], help="fault injection KIND@step=N[,rank=R] (repeatable)")
    t.add_argument("--max-restarts", type=int, default=3, help="torchrun elastic restarts")
    t.add_argument("--ckpt-every", type=int, default=5)
    t.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    t.add_argument("--async-ckpt", action="store_true", help="dcp.async_save (commit when the write finishes)")
    t.add_argument("--seq-len", type=int, help="override the model's seq_len")
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--pp-schedule", choices=["gpipe", "1f1b", "interleaved"])
    t.add_argument("--compile", action="store_true", help="torch.compile each block")
    t.add_argument("--tensorboard", action="store_true", help="also write TensorBoard logs to CKPT/tb")
    t.add_argument("--prometheus-port", type=int, help="serve metrics for Prometheus on this port (rank 0)")
    t.add_argument("--peak-tflops", type=float, help="per-rank peak for MFU (default: measured fp32 matmul rate)")
    t.add_argument("--moe-capacity-factor", type=float, help="MoE: capacity factor (default: dropless)")
    t.add_argument("--moe-bias-rate", type=float, default=0.0,
                   help="MoE: aux-loss-free bias balancing speed gamma (DeepSeek-V3 used 0.001; default 0 = off)")
    t.add_argument("--moe-redundant-experts", type=int,
                   help="MoE with ep > 1: re-place experts with EPLB at each checkpoint, with this many extra replicas")
    t.add_argument("--grad-compression", help="zero=0: DDP gradient hook none | bf16 | powersgd; "
                   "zero>=1: FSDP2 reduce-scatter dtype none (fp32) | bf16")
    t.add_argument("--powersgd-rank", type=int, default=1, help="PowerSGD matrix approximation rank (default 1)")
    t.add_argument("--init", help="hf:DIR - start from a Hugging Face Llama/Mixtral/Qwen2-MoE directory")
    t.add_argument("--collective-timeout", type=float, default=120.0, help="seconds before a stuck collective fails")
    json_flag(t)
    t.set_defaults(func=cmd_train)

    e = sub.add_parser("export", help="checkpoint -> safetensors + config.json + tokenizer.json for serving")
    e.add_argument("--ckpt", required=True, help="a run's checkpoint dir (newest valid step) or one step_N dir")
    e.add_argument("--out", required=True)
    e.add_argument("--format", default="wanka", help="wanka (for `wanka serve`) or hf (Hugging Face Llama/Mixtral/Qwen2-MoE)")
    json_flag(e)
    e.set_defaults(func=cmd_export)

    d = sub.add_parser("data", help="training data")
    dsub = d.add_subparsers(dest="data_command", metavar="{prepare,tokenizer}")
    prep = dsub.add_parser("prepare", help="text/JSONL/Parquet -> cleaned, deduplicated, tokenised indexed shards")
    prep.add_argument("inputs", nargs="*", help="files or directories, PATH@WEIGHT for a mixture weight "
                      "(default: the shipped corpus)")
    prep.add_argument("--out", required=True)
    prep.add_argument("--tokenizer", help="tokenizer.json (byte or BPE; default: the byte tokenizer)")
    prep.add_argument("--workers", type=int, default=1, help="tokenising worker processes (0: in this process)")
    prep.add_argument("--shard-tokens", type=int, default=1 << 20, help="tokens per shard (documents never split)")
    prep.add_argument("--min-chars", type=int, default=16)
    prep.add_argument("--max-chars", type=int, default=1 << 20)
    prep.add_argument("--min-word-letters", type=float, default=0.5, help="share of words containing a letter")
    prep.add_argument("--no-near-dedup", action="store_true", help="exact dedup only (no MinHash)")
    json_flag(prep)
    prep.set_defaults(func=cmd_prepare)
    tk = dsub.add_parser("tokenizer", help="train a byte-level BPE tokenizer (tokenizers library)")
    tksub = tk.add_subparsers(dest="tokenizer_command", metavar="{train}")
    tt = tksub.add_parser("train", help="learn a BPE vocabulary from text/JSONL/Parquet")
    tt.add_argument("--input", nargs="+", required=True, help="files or directories")
    tt.add_argument("--vocab", type=int, required=True, help="vocabulary size (256 bytes + <s> + </s> + merges)")
    tt.add_argument("--out", required=True, help="directory for tokenizer.json")
    json_flag(tt)
    tt.set_defaults(func=cmd_tokenizer_train)
    tk.set_defaults(func=needs_subcommand("train", "wanka data tokenizer train --input texts/ --vocab 8000 --out tok/"))
    d.set_defaults(func=needs_subcommand("prepare", "wanka data prepare texts/*.txt --out data/"))

    la = sub.add_parser("launch", help="write a multi-node job file (sbatch script or JobSet manifest)")
    la.add_argument("target", choices=["slurm", "k8s"])
    la.add_argument("--layout", required=True)
    la.add_argument("--nodes", type=int, required=True)
    la.add_argument("--gpus-per-node", type=int, default=8)
    la.add_argument("--model", default="tiny")
    la.add_argument("--name", default="wanka-train")
    la.add_argument("--steps", type=int, default=1000)
    la.add_argument("--data-dir", default="/shared/data/corpus", help="prepared shards on the shared filesystem")
    la.add_argument("--ckpt-dir", default="/shared/ckpt", help="checkpoint root on the shared filesystem")
    la.add_argument("--switches", help="slurm: max leaf switches, N or N@HH:MM:SS max wait")
    la.add_argument("--segment", type=int, help="slurm: topology/block segment size in nodes")
    la.add_argument("--partition")
    la.add_argument("--image", default="wanka:latest", help="k8s: container image")
    la.add_argument("--topology", help="k8s: node label for Kueue topology-aware scheduling")
    la.add_argument("--queue", help="k8s: Kueue LocalQueue name")
    la.add_argument("--pvc", help="k8s: PersistentVolumeClaim to mount at /shared (data and checkpoints)")
    la.add_argument("--out", help="write the file here instead of stdout")
    json_flag(la)
    la.set_defaults(func=cmd_launch)


def cmd_train(args):
    from wanka.data.prepare import default_data
    from wanka.data.shards import TokenShards
    from wanka.train.checkpoint import check_ckpt_dir
    from wanka.train.config import TrainConfig
    from wanka.train.parallel_dims import ParallelDims, check_moe_options
    from wanka.train.grad_compression import check_compression
    from wanka.train.runner import run_local
    from wanka.workload.spec import load_model

    if args.nproc < 1:
        raise SpecError("nproc", "an integer >= 1", args.nproc)
    if args.max_restarts < 0:
        raise SpecError("max-restarts", "an integer >= 0", args.max_restarts)
    cfg = TrainConfig(model=args.model, data=args.data, layout=args.layout, steps=args.steps, seed=args.seed,
                      ckpt=str(Path(args.ckpt).resolve()), ckpt_every=args.ckpt_every, keep=args.keep,
                      async_ckpt=args.async_ckpt, seq_len=args.seq_len, lr=args.lr, min_lr=min(3e-4, args.lr),
                      pp_schedule=args.pp_schedule, compile=args.compile, tensorboard=args.tensorboard,
                      prometheus_port=args.prometheus_port, collective_timeout_s=args.collective_timeout, peak_tflops=args.peak_tflops,
                      inject=args.inject, moe_capacity_factor=args.moe_capacity_factor, moe_bias_rate=args.moe_bias_rate,
                      moe_redundant_experts=args.moe_redundant_experts, grad_compression=args.grad_compression,
                      powersgd_rank=args.powersgd_rank, init=args.init)
    for inj in cfg.injections:
        if inj.rank is not None and inj.rank >= args.nproc:
            raise SpecError("inject", f"rank < --nproc ({args.nproc})", str(inj))
    spec = load_model(args.model, **({"seq_len": args.seq_len} if args.seq_len else {}))
    dims = ParallelDims.from_layout(args.layout, args.nproc, spec)  # exit 2 here, not inside torchrun
    check_moe_options(cfg, spec, dims)
    check_compression(cfg, dims)
    if dims.pp > 1 or args.pp_schedule:
        from wanka.train.parallelize import check_pp_schedule

        check_pp_schedule(args.pp_schedule, dims.layout)
    check_ckpt_dir(Path(cfg.ckpt), spec)
    data = Path(args.data) if args.data else default_data()
    shards = TokenShards(data)
    shards.verify_checksums()
    if shards.tokenizer.vocab_size > spec.vocab:
        raise SpecError("model.vocab", f">= the tokenizer's vocab ({shards.tokenizer.vocab_size})", spec.vocab)
    if args.init:
        from wanka.train.hf_init import parse_init, read_hf_dir

        read_hf_dir(parse_init(args.init), spec)  # exit 2 with one line here, not in every worker
    _keep_tokenizer(data / shards.meta["tokenizer"], Path(cfg.ckpt))
    result = run_local(cfg, data, args.nproc, args.max_restarts, progress=not args.json and sys.stderr.isatty())

    def render(console: Console) -> None:
        console.print(f"trained {result['steps']} steps on {args.nproc} process(es), layout {result['layout']}: "
                      f"final loss {fmt(result['final_loss'])}, restarts {result['restarts']}")
        console.print(f"params_sha256 {result['params_sha256']}")
        console.print(f"checkpoints + metrics: {result['ckpt']}")

    return result, render


def _keep_tokenizer(tokenizer_file: Path, ckpt: Path) -> None:
    """Copy the data's tokenizer.json into the checkpoint root: `wanka export` ships it."""
    import shutil

    try:
        ckpt.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tokenizer_file, ckpt / "tokenizer.json.tmp")
        (ckpt / "tokenizer.json.tmp").replace(ckpt / "tokenizer.json")
    except OSError as exc:
        raise SpecError("ckpt", "a writable directory", f"{ckpt} ({exc.strerror})") from None


def cmd_export(args):
    from wanka.train.export import export

    result = export(Path(args.ckpt), Path(args.out), args.format)

    def render(console: Console) -> None:
        console.print(f"exported step {result['step']} ({result['tensors']} tensors, format {result['format']}) "
                      f"from {result['checkpoint']} to {result['out']}")

    return result, render


def cmd_prepare(args):
    from wanka.data.clean import CleanConfig
    from wanka.data.corpus import write_corpus
    from wanka.data.pipeline import prepare

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SpecError("out", "a directory path", str(out))
    try:
        inputs = [Path(p) for p in args.inputs] or write_corpus(out / "text")
    except OSError as exc:
        raise SpecError("out", "a writable directory", f"{out} ({exc.strerror})") from None
    clean = CleanConfig(args.min_chars, args.max_chars, args.min_word_letters, not args.no_near_dedup)
    meta = prepare(inputs, out, args.shard_tokens, args.tokenizer, args.workers, clean)
    payload = {"out": str(out), "tokens": meta["tokens"], "documents": meta["documents"], "shards": len(meta["shards"]),
               "sources": meta["sources"], "seconds": meta["seconds"]}

    def render(console: Console) -> None:
        console.print(f"{meta['tokens']:,} tokens, {meta['documents']:,} documents in {len(meta['shards'])} shard(s) -> {out}")
        for s in meta["sources"]:
            dropped = {k: v for k, v in s.items() if k not in ("path", "weight", "documents", "kept", "tokens")}
            console.print(f"  {s['path']} (weight {s['weight']}): {s.get('documents', 0):,} read, {s.get('kept', 0):,} kept, "
                          f"dropped {dropped or 'none'}")

    return payload, render


def cmd_tokenizer_train(args):
    from itertools import chain

    from wanka.data.bpe import train_bpe
    from wanka.data.clean import normalize
    from wanka.data.sources import documents, parse_source

    sources = [parse_source(p) for p in args.input]
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SpecError("out", "a directory path", str(out))
    tok = train_bpe((normalize(t) for t in chain.from_iterable(documents(s) for s in sources)), args.vocab)
    try:
        out.mkdir(parents=True, exist_ok=True)
        tok.save(out / "tokenizer.json.tmp")
        (out / "tokenizer.json.tmp").replace(out / "tokenizer.json")
    except OSError as exc:
        raise SpecError("out", "a writable directory", f"{out} ({exc.strerror})") from None
    payload = {"out": str(out / "tokenizer.json"), "vocab_size": tok.vocab_size, "bos_id": tok.bos_id, "eos_id": tok.eos_id}

    def render(console: Console) -> None:
        console.print(f"BPE tokenizer with {tok.vocab_size:,} ids -> {out / 'tokenizer.json'}")

    return payload, render


def cmd_launch(args):
    from wanka.train.launch import check_launch, jobset_manifest, slurm_script
    from wanka.train.parallel_dims import ParallelDims
    from wanka.workload.spec import load_model

    spec = load_model(args.model)
    check_launch(args.nodes, args.gpus_per_node,
                 lambda gpus: ParallelDims.from_layout(args.layout, gpus, spec, cuda=True),  # the job runs on GPUs
                 args.name, args.switches, args.segment, partition=args.partition, image=args.image,
                 topology=args.topology, queue=args.queue, pvc=args.pvc)
    if args.steps < 1:
        raise SpecError("steps", "an integer >= 1", args.steps)
    q = shlex.quote
    train_args = (f"--model {q(args.model)} --layout {q(args.layout)} --steps {args.steps} "
                  f"--data {q(args.data_dir)} --ckpt {q(args.ckpt_dir + '/' + args.name)}")
    if args.target == "slurm":
        text = slurm_script(args.name, args.nodes, args.gpus_per_node, train_args, args.switches, args.segment, args.partition)
    else:
        text = jobset_manifest(args.name, args.nodes, args.gpus_per_node, train_args, args.image, args.topology, args.queue,
                               args.pvc)
    if args.out:
        try:
            Path(args.out).write_text(text)
        except OSError as exc:
            raise SpecError("out", "a writable file path", f"{args.out} ({exc.strerror})") from None
    payload = {"target": args.target, "nodes": args.nodes, "gpus": args.nodes * args.gpus_per_node,
               "layout": args.layout, "path": args.out, "text": None if args.out else text}

    def render(console: Console) -> None:
        if args.out:
            console.print(f"wrote {args.target} job for {args.nodes} nodes to {args.out}")
        else:
            console.print(text, markup=False, highlight=False, end="", soft_wrap=True)

    return payload, render
