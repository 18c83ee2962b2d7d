"""Host time per launched kernel of eager PyTorch on this machine's host (docs/plan.md "MoE, host time
per launch": the quantity the planner lacks to price eager, host-synchronised MoE layers).

    python benchmarks/host_launch.py [--calls 2000] [--experts 16] [--json]

For each operator kind a dropless MoE layer issues -- a tiny elementwise op, the router (GEMM, softmax,
top-k), the token permutation (index_select / index_add), a GEMM, a grouped GEMM over the local experts
(torch._grouped_mm where the build has it, else one torch.mm per expert) and one autograd backward of a
small SwiGLU MLP -- it issues `--calls` calls back to back without synchronising and reports:
  host_us_per_call    CPU wall time per call (the host's issue time while the device keeps up);
  launches_per_call   kernels launched per call (torch.profiler's cudaLaunchKernel / cuLaunchKernel
                      runtime events; CUDA only);
  host_us_per_launch  their ratio: what one kernel costs the host, per operator kind;
  device_us_per_call  device time per call (CUDA events): below host_us_per_call the op is host-bound
                      at this size, which the tiny shapes are chosen to be.
On a CPU-only machine the device is the host, so the host time includes the computation and there are
no launches: the figures say nothing about a GPU host (printed, marked "cpu"). The figures belong to the
host that ran them (CPU model, clock, Python, torch): benchmarks/gpu_check.sh runs this on a lent GPU and
keeps the JSON; nothing here is a default of the planner.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch
import torch.nn.functional as F

LAUNCH_EVENTS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def _ops(dev: torch.device, experts: int) -> tuple[dict, str]:
    """Each operator kind as a zero-argument callable on tensors made once (bf16 on CUDA, fp32 on CPU), and
    what runs the grouped GEMM."""
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape, grad=False):
        return torch.randn(*shape, generator=g).to(dev, dt).requires_grad_(grad)

    tokens, hidden, ffn = 256, 256, 128
    x, small = rand(tokens, hidden), rand(64)
    w_router, w = rand(hidden, 64), rand(hidden, hidden)
    idx = torch.randperm(tokens, generator=g).to(dev)
    per_expert = tokens // experts
    w_exp = rand(experts, hidden, ffn)
    offs = torch.arange(per_expert, tokens + 1, per_expert, device=dev, dtype=torch.int32)
    grouped = getattr(torch, "_grouped_mm", None) if dev.type == "cuda" else None
    if grouped is not None:
        try:  # needs a Hopper-or-newer GPU and bf16; else the per-expert loop below
            grouped(x, w_exp, offs=offs)
        except (RuntimeError, TypeError, ValueError):
            grouped = None
    mlp = [rand(hidden, 2 * ffn, grad=True), rand(ffn, hidden, grad=True)]
    xin = rand(tokens, hidden)

    def router():
        return torch.topk(F.softmax(x @ w_router, dim=-1, dtype=torch.float32), 8, dim=-1)

    def permute():
        y = x.index_select(0, idx)
        return torch.zeros_like(x).index_add_(0, idx, y)

    def grouped_gemm():
        if grouped is not None:
            return grouped(x, w_exp, offs=offs)
        return [x[e * per_expert:(e + 1) * per_expert] @ w_exp[e] for e in range(experts)]

    def mlp_backward():
        gate, up = (xin @ mlp[0]).chunk(2, dim=-1)
        (F.silu(gate) * up @ mlp[1]).sum().backward()

    ops = {"elementwise_add": lambda: small + small, "router": router, "permute": permute,
           "gemm": lambda: x @ w, "grouped_gemm": grouped_gemm, "swiglu_mlp_fwd_bwd": mlp_backward}
    return ops, ("torch._grouped_mm" if grouped is not None else f"{experts} x torch.mm")


def _launches(fn, dev: torch.device, calls: int) -> float | None:
    if dev.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    n = sum(e.count for e in prof.key_averages() if e.key in LAUNCH_EVENTS)
    return n / calls


def measure(name: str, fn, dev: torch.device, calls: int) -> dict:
    for _ in range(20):  # warm-up: allocator, cuBLAS handles and heuristics, autotuned kernels
        fn()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls
    device = None
    if dev.type == "cuda":
        sync()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        sync()
        device = start.elapsed_time(end) * 1e3 / calls  # ms -> us; the device was never starved here
    launches = _launches(fn, dev, min(calls, 200))
    row = {"op": name, "host_us_per_call": round(host * 1e6, 2), "launches_per_call": launches,
           "host_us_per_launch": round(host * 1e6 / launches, 2) if launches else None,
           "device_us_per_call": None if device is None else round(device, 2)}
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--experts", type=int, default=16, help="groups of the grouped GEMM (local experts)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.experts < 1:
        ap.error("--calls and --experts must be at least 1")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ops, grouped_impl = _ops(dev, args.experts)
    rows = [measure(name, fn, dev, args.calls) for name, fn in ops.items()]
    result = {"device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
              "host": platform.processor() or platform.machine(), "python": platform.python_version(),
              "torch": torch.__version__, "calls": args.calls, "grouped_gemm": grouped_impl, "ops": rows}
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "host_launch.json"), "w") as f:
            json.dump(result, f, indent=1)
    if args.json:
        print(json.dumps(result))
        return 0
    note = "" if dev.type == "cuda" else "  (cpu: the host does the computation; no launches)"
    print(f"host launch cost on {result['device']} / {result['host']}, torch {result['torch']}{note}")
    print(f"{'op':<22}{'host us/call':>14}{'launches':>10}{'host us/launch':>16}{'device us/call':>16}")
    for r in rows:
        def show(v):
            return "-" if v is None else f"{v:g}"
        print(f"{r['op']:<22}{r['host_us_per_call']:>14g}{show(r['launches_per_call']):>10}"
              f"{show(r['host_us_per_launch']):>16}{show(r['device_us_per_call']):>16}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
