"""How fast kernels run relative to the datasheet peak: the few global constants of the planner.

Every constant here is global (per GPU architecture, never per run) and stated with its basis.
Where the basis is a judgement rather than a measurement, it says so; docs/plan.md lists them.

GEMM_EFFICIENCY: sustained fraction of dense peak that large training GEMMs reach inside a
training step (clocks under power capping, cuBLAS heuristics on real shapes). Basis: Megatron
reports 52% of A100 peak end to end for 1T GPT with 12% pipeline bubble and exposed TP
communication (Narayanan et al. SC'21, Table 1), which bounds sustained A100 GEMM efficiency to
roughly 0.7-0.8; NVIDIA's Megatron-Core H100 runs reach 47-49% MFU (collectives.md section 5) with
bubbles and exposed communication, bounding H100 BF16 GEMMs to ~0.65-0.75. FP8 on H100 runs at a
lower fraction of its doubled peak (DGX Cloud recipes: FP8 MFU vs BF16-peak 1.45-1.6x, not 2x).
These are judgements from end-to-end anchors, not micro-benchmarks we ran: Ampere 0.72 centres
the SC'21/Korthikanti rows (tests/plan/test_plan_calibration.py); Hopper 0.62 puts Llama 3 405B at its
published layout on 16k H100 near its reported 38-43% MFU (perf_anchors.md, collectives.md s.5).
Blackwell 0.50 (16-bit) / 0.40 (FP8) put NVIDIA's Llama 3.1 405B runs on 128-512 GB200 (NeMo 25.04,
TP4 PP8 CP2 VP8; NVIDIA/dgxc-benchmarking llama3.1/README.md, rows in plan/published_runs/dgxc.json)
at their measured step time (read since session 10 with the userbuffers configuration and p2p overlap their
NeMo 2.0 script sets: +2.8..+4.5%); the GB200 rows of Nemotron-4 340B are the check (docs/plan.md). Before
those rows the Blackwell values copied Hopper's (0.62 / 0.50) and over-predicted GB200 by ~20%.

Shape penalty: a GEMM dimension d fills tensor-core tiles and SM waves less well when small; we
use d / (d + GEMM_HALF_DIM) per dimension (half speed at a 32-wide dimension, ~96% at 768). This
is a smooth stand-in for tile and wave quantization (CUTLASS efficient_gemm.md), an assumption.

KERNEL_OVERHEAD_S: see below (small models and thin per-GPU layers only).

ATTENTION_EFFICIENCY: FlashAttention-2 reaches 50-73% of A100 peak forward and less backward
(Dao 2023, arXiv:2307.08691, section 4.1); FlashAttention-3 ~75% of H100 BF16 peak forward
(Shah et al. 2024, arXiv:2407.08608). We use the fwd+bwd average. FLASH2_EFFICIENCY: the
FlashAttention-2 kernels on Hopper (what PyTorch's SDPA flash backend ran in 2024, e.g.
torchtitan), which "achieves only 35% utilization on the H100 GPU" (Shah et al. 2024, abstract;
its Fig. 5/6 give 0.339 forward (causal) and 0.326 backward at head dim 128 and 16K tokens);
elsewhere FA2 is the kernel the ATTENTION_EFFICIENCY figures describe.

ATTENTION_HALF_LEN: FlashAttention kernels run below their long-sequence rate on short blocks
(fixed per-tile prologue/epilogue, fewer tiles per SM): FlashAttention-2's own sweep (Dao 2023,
Fig. 4, head dim 128) is roughly 25% slower at 512 tokens than at 8K and within a few percent from
4K up. We use L / (L + 170) for a kernel over L keys -- a reading of that curve, not a measurement
of ours. It matters for context parallelism, whose ring steps each run a (s/cp) x (s/cp) block.

Calibration: a cluster profile written by `wanka plan calibrate` multiplies the GEMM, attention
and HBM constants (and the comm layer's link efficiencies) by fitted factors (GPU.efficiency_scale,
Cluster.network_efficiency_scale); docs/plan.md "Calibrate".

HBM_EFFICIENCY: memory-bound kernels (norms, activations, optimizer) reach ~80% of HBM peak
(STREAM-like copies on A100/H100 reach 80-90%; assumption at the low end for unfused kernels).
"""

from __future__ import annotations

from wanka.hardware import GPU

GEMM_EFFICIENCY = {  # (architecture, precision) -> fraction of that precision's dense peak
    ("ampere", "16bit"): 0.72,
    ("hopper", "16bit"): 0.62,
    ("hopper", "fp8"): 0.50,
    ("blackwell", "16bit"): 0.50,
    ("blackwell", "fp8"): 0.40,
    ("other", "16bit"): 0.65,  # judgement: accelerators without public large-GEMM figures
    ("other", "fp8"): 0.55,
}  # the Gaudi and AMD entries are set below by transfer_efficiency: an assumption with a stated basis
# Best-shape matmul rate over the datasheet peak (MAMF): stas00/ml-engineering compute/accelerator/README.md
# @744d01e18b79 'Maximum Achievable Matmul FLOPS comparison table' (BF16 and FP8 float8_e4m3fn tables): H100 SXM
# 794.5 of 989 (torch 2.7.0+cu126) and 1402.6 of 1979; A100 SXM 271.2 of 312. One table, one harness for every part.
MAMF_FRACTION = {("hopper", "16bit"): 794.5 / 989, ("hopper", "fp8"): 1402.6 / 1979, ("ampere", "16bit"): 271.2 / 312}


def transfer_efficiency(operator_fraction: float, arch_ref: str = "hopper", precision: str = "fp8") -> float:
    """In-step GEMM efficiency of a part that has a best-shape matmul figure but no training-step anchor:
    `operator_fraction` (its MAMF over the peak the catalog states) times the in-step over best-shape ratio
    of `arch_ref` at the same precision (GEMM_EFFICIENCY / MAMF_FRACTION). The planner's constants are
    in-step figures set end to end; this carries the gap between a best-shape matmul and a training step
    from a part that has both to one that has only the first -- an assumption (docs/plan.md
    'Non-NVIDIA accelerators'), not a measurement of the part in a step."""
    kind = "fp8" if precision == "fp8" else "16bit"
    return operator_fraction * GEMM_EFFICIENCY[(arch_ref, kind)] / MAMF_FRACTION[(arch_ref, kind)]


# --- Intel Gaudi -------------------------------------------------------------------------------------------
# MAMF on Gaudi (the same table @744d01e18b79, PT_HPU_LAZY_MODE=1): Gaudi 2 BF16 418.7 TFLOPS (96.9% of 432,
# shape 14336x15360x2048, torch 2.6.0+hpu_1.21.2) and FP8 826.5 (95.5% of 865, 6144x11264x5120); Gaudi 3 BF16
# 1243.0 and FP8 1289.5 ('Theory' 1677: the shipping part's MME at 1,600 MHz, catalog.yaml gaudi3). The
# fraction is taken of the catalog peak, which the GEMM time multiplies (Gaudi 3: of 1,835, so the clock
# caveat is inside the measured figure). Earlier, without an FP8 MAMF: Lee et al. 2025 (arXiv:2503.09975,
# abstract) FP8 GEMM operators 'frequently exceeding 90% MFU' on Gaudi 2 (inference shapes), transferred the
# same way: 0.635 (a range 0.63-0.83 over the NVIDIA parts' ratios); the table's own FP8 figure replaces it.
# --- AMD CDNA 3 / CDNA 4 -----------------------------------------------------------------------------------
# Per part: a part's sustained GEMM clock is set by its board power (AMD measures MI300X at 750 W sustaining
# 1,207 MHz and MI325X, the same compute at 1,000 W, 1,447 MHz in BF16 MAF runs; both peak at 2,100 MHz), so
# these figures are per part, not per architecture. Best-shape TFLOPS: MI300X / MI325X from AMD's MAF table
# (rocm.blogs.amd.com/software-tools-optimization/measuring-max-achievable-flops-part2, Table 1, hipBLASLt
# db8e93b4fd6, Feb 2025); MI355X BF16 from the MAMF table above (1565.0, torch 2.8.0+rocm7.0.2; that row's
# 'Theory 2300' disagrees with the page's own MI355X TFLOPS table, 2500: the fraction is taken of the catalog
# peak). No CDNA 4 FP8 best-shape figure is published (Dec 2026 search: AMD blogs, ROCm docs, the MAMF table's
# empty FP8 AMD rows). Assumption: FP8 reaches the same fraction of BF16's as on CDNA 3 -- in AMD's table
# (FP8 / 2,614.9) / (BF16 / 1,307.4) = 0.899 (MI300X) and 0.901 (MI325X); their mean is used.
# MI350X: no figure at all; same silicon as MI355X at 2.2 vs 2.4 GHz and 1,000 vs 1,400 W. It takes
# MI355X's fractions (of its own, clock-scaled peak): its sustained clock under 1,000 W is not published,
# so the power cap's extra loss (CDNA 3 above: 20% clock for 750 vs 1,000 W) is not priced.
# --- AMD CDNA 2 (one MI250X GCD) -----------------------------------------------------------------------------
# The MAMF table's MI250X row as first published, measured on one GCD (stas00/ml-engineering
# compute/accelerator/README.md @37d41a743bf4, 'AMD MI250X | 147.0 | 191.5 | 76.7% | 1024x14080x19968 | ROCm-6.2 /
# 1 GCD'; the correction to per-GCD was ml-engineering issue #76, whose reporter peaked at 127 on his system --
# a spread the transfer does not carry). Later revisions of the table dropped the row; the figure is not replaced.
# --- NVIDIA GH200 ------------------------------------------------------------------------------------------
# Hopper silicon like the H100, but a module of up to 900 W (Grace CPU included) against the H100 SXM's 700 W:
# the MAMF table @744d01e18b79 measures it at 828.6 BF16 (83.8% of 989) and 1535.0 FP8 (77.6% of 1979) against
# the H100 SXM's 794.5 and 1402.6, both 'NVIDIA GH200 SXM ... 900W 141GiB HBM3e version'. So the GH200 takes
# its own transferred constant from the Hopper one (its attention and every other rate stay Hopper's). The
# 96 GB HBM3 part has no row of its own: it takes the 141 GB part's fractions (same GPU; a module configured
# below 900 W would clock lower, which is not priced).
OPERATOR_TFLOPS = {  # (part, precision kind) -> best-shape matmul TFLOPS, sources above
    ("gaudi2", "16bit"): 418.7, ("gaudi2", "fp8"): 826.5, ("gaudi3", "16bit"): 1243.0, ("gaudi3", "fp8"): 1289.5,
    ("mi300x", "16bit"): 708.0, ("mi300x", "fp8"): 1273.0, ("mi325x", "16bit"): 843.0, ("mi325x", "fp8"): 1519.0,
    ("mi355x", "16bit"): 1565.0, ("mi250x-gcd", "16bit"): 147.0,
    ("gh200-141gb", "16bit"): 828.6, ("gh200-141gb", "fp8"): 1535.0,
}
SAME_FRACTIONS_AS = {"mi350x": "mi355x", "gh200": "gh200-141gb"}


def _operator_fractions() -> dict[tuple[str, str], float]:
    """Each part's best-shape matmul over the catalog peak it is priced against (the GEMM time multiplies
    that peak; Gaudi 3: of 1,835, so its 1,600 MHz clock caveat is inside the measured figure)."""
    from wanka.hardware.catalog import gpu as catalog_gpu

    peak = {"16bit": "bf16", "fp8": "fp8"}
    frac = {(part, kind): tf / catalog_gpu(part).peak(peak[kind]) for (part, kind), tf in OPERATOR_TFLOPS.items()}
    cdna3 = [frac[(p, "fp8")] / frac[(p, "16bit")] for p in ("mi300x", "mi325x")]
    frac[("mi355x", "fp8")] = frac[("mi355x", "16bit")] * sum(cdna3) / len(cdna3)
    return frac


OPERATOR_FRACTION = _operator_fractions()
for _key, _fraction in OPERATOR_FRACTION.items():
    GEMM_EFFICIENCY[_key] = round(transfer_efficiency(_fraction, "hopper", _key[1]), 3)
ATTENTION_EFFICIENCY = {"ampere": 0.45, "hopper": 0.55, "blackwell": 0.55, "other": 0.4}
# FlashAttention-2 on H100 SXM5, head dim 128, BF16, 16K tokens (Shah et al. 2024, FA3 paper Fig. 5
# and 6): causal forward 335 TFLOP/s = 0.339 of 989.4; backward 322 = 0.326 (the paper's backward
# figure is without the causal mask: a stand-in for the causal one). FLOPs as the FA benchmarks
# count them (backward = 2.5x forward), so the backward takes 2.5 x 0.339 / 0.326 forwards.
FLASH2_EFFICIENCY = {"hopper": 0.339}
FLASH2_BACKWARD_EFFICIENCY = {"hopper": 0.326}
HBM_EFFICIENCY = 0.8
ATTENTION_HALF_LEN = 170
GEMM_HALF_DIM = 32
# Fixed GPU-side cost per kernel (launch gap, ramp-up and tail of dependent kernels), seconds, and
# kernels per transformer layer forward in a fused Megatron-style implementation (2 norms, QKV,
# RoPE, attention, output projection, 2 bias-dropout-adds, 2 MLP GEMMs, activation, TP collectives);
# backward issues about twice as many. 3 us is a judgement from typical CUDA launch-to-launch gaps
# without CUDA graphs; it matters only for small per-GPU layers.
KERNEL_OVERHEAD_S = 3e-6
KERNELS_PER_LAYER_FWD = 14


# gemm_key() maps a SAME_FRACTIONS_AS part to the part it borrows from, so the table's parts suffice
TRANSFERRED_PARTS = frozenset(part for part, _ in OPERATOR_TFLOPS)


def transferred(g: GPU) -> bool:
    """Whether the part's GEMM constant is carried over by transfer_efficiency (an assumption: Gaudi,
    AMD Instinct, GH200) rather than set from its own training-step runs."""
    return gemm_key(g) in TRANSFERRED_PARTS


def _operator_part(g: GPU) -> str | None:
    """The part whose best-shape matmul figures `g` is priced from (OPERATOR_TFLOPS: its own, or the part
    SAME_FRACTIONS_AS names), or None."""
    name = g.name.lower()
    part = SAME_FRACTIONS_AS.get(name, name)
    return part if (part, "16bit") in OPERATOR_TFLOPS else None


def gemm_key(g: GPU) -> str:
    """The GEMM_EFFICIENCY key of a part: its operator part where it has one, else its architecture. A
    GH200 is 'hopper' for everything else (attention, FlashAttention-2) but its GEMMs run at its own
    measured rate."""
    return _operator_part(g) or architecture(g)


def calibrated(efficiency: float, scale: float) -> float:
    """A constant times the cluster profile's fitted multiplier (`wanka plan calibrate`; 1.0 for
    catalog GPUs). Not capped at 1: a profile may state a peak below what the machine reaches
    (a CPU's measured matmul rate), and the fit must be able to say so."""
    return efficiency * scale


def architecture(g: GPU) -> str:
    name = g.name.lower()
    if name.startswith("a100") or name.startswith("a800") or name.startswith("a10"):
        return "ampere"
    if name.startswith(("h100", "h800", "h200", "h20", "gh200")):
        return "hopper"
    if name.startswith(("b200", "gb200", "b100", "b300", "gb300")):
        return "blackwell"
    if name.startswith(("gaudi2", "gaudi3")):
        return name[:6]
    return _operator_part(g) or "other"


def compute_dtype(g: GPU, precision: str) -> str:
    """The catalog dtype whose peak the GEMMs run at."""
    if precision == "fp8":
        return "fp8"
    if precision == "fp32":
        return "tf32"
    return precision if getattr(g.peak_tflops, precision, None) else "bf16"


def gemm_peak_flops(g: GPU, precision: str) -> float:
    """Sustained FLOP/s of large GEMMs at this precision."""
    kind = "fp8" if precision == "fp8" else "16bit"
    eff = GEMM_EFFICIENCY.get((gemm_key(g), kind), GEMM_EFFICIENCY[("other", kind)])
    return g.peak(compute_dtype(g, precision)) * 1e12 * calibrated(eff, g.efficiency_scale.gemm)


def attention_flops(g: GPU, kernel: str = "flash") -> float:
    """Sustained FLOP/s of fused (Flash) attention; it runs in 16-bit even in FP8 training.
    `kernel`: "flash" (the architecture's best: FA3/cuDNN on Hopper) or "flash2" (FlashAttention-2)."""
    arch = architecture(g)
    best = ATTENTION_EFFICIENCY.get(arch, ATTENTION_EFFICIENCY["other"])
    eff = FLASH2_EFFICIENCY.get(arch, best) if kernel == "flash2" else best
    return g.peak("bf16") * 1e12 * calibrated(eff, g.efficiency_scale.attention)


# Head-dimension dependence of the fused kernels' rate: FlashAttention-3 paper (Shah et al. 2024,
# arXiv:2407.08608) Fig. 5, H100 SXM5 BF16 forward, non-causal, 16K tokens: cuDNN 413 TFLOP/s at head
# dim 64 vs 595 at 128; FlashAttention-2 324 vs 370. The planner's rates are head-dim-128 figures, so a
# 64-wide head runs at that ratio; linear in between, 1 from 128 up (the 256 figures are not applied).
# The forward ratio stands in for the backward, and Hopper's for other architectures (assumptions).
ATTENTION_HEAD_DIM_64_RATIO = {"flash": 413 / 595, "flash2": 324 / 370}


def attention_head_dim_factor(head_dim: float, kernel: str = "flash") -> float:
    """Rate at `head_dim` over the rate at 128 (ATTENTION_HEAD_DIM_64_RATIO)."""
    r64 = ATTENTION_HEAD_DIM_64_RATIO.get(kernel, ATTENTION_HEAD_DIM_64_RATIO["flash"])
    if head_dim >= 128:
        return 1.0
    if head_dim <= 64:
        return r64
    return r64 + (1.0 - r64) * (head_dim - 64) / 64


def attention_backward_over_forward(g: GPU, kernel: str = "flash") -> float:
    """Backward time over forward time of fused attention: 2.5 (FlashAttention-2 recomputes QK^T:
    5 GEMMs vs 2; Dao 2023 s.3.1.2) at the forward's rate, slower where the backward kernel runs
    at a lower fraction of peak (FLASH2_BACKWARD_EFFICIENCY)."""
    arch = architecture(g)
    if kernel == "flash2" and arch in FLASH2_BACKWARD_EFFICIENCY:
        return 2.5 * FLASH2_EFFICIENCY[arch] / FLASH2_BACKWARD_EFFICIENCY[arch]
    return 2.5


def attention_length_factor(keys_per_kernel: float) -> float:
    return keys_per_kernel / (keys_per_kernel + ATTENTION_HALF_LEN)


def hbm_Bps(g: GPU) -> float:
    if g.hbm_TBps is None:
        return 1.5e12 * g.efficiency_scale.hbm  # judgement for accelerators with no public HBM figure (HBM2e class)
    return g.hbm_TBps * 1e12 * calibrated(HBM_EFFICIENCY, g.efficiency_scale.hbm)


def shape_factor(*dims: float) -> float:
    out = 1.0
    for d in dims:
        out *= d / (d + GEMM_HALF_DIM)
    return out
