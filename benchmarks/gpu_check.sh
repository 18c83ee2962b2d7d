#!/usr/bin/env bash
# One short check for a lent GPU (not runnable on the CPU-only dev machine).
#   bash benchmarks/gpu_check.sh            # ~3-5 min on one H100/H200
# 1. bf16 MFU of a 1B-class Llama (16 layers, hidden 2048, GQA 16/8 heads, seq 2048) on 1 GPU;
# 2. the same with fp8 (torchao float8 training + torch.compile) when the GPU is Hopper or newer;
# 3. host time per launched kernel (benchmarks/host_launch.py), kept as $OUT/host_launch.json.
# MFU uses the catalog's dense bf16 peak (wanka.hardware) and the planner's FLOPs per token.
set -euo pipefail
PY=${PY:-.venv/bin/python}
WANKA=${WANKA:-.venv/bin/wanka}
OUT=${OUT:-$(mktemp -d /tmp/wanka-gpu-XXXX)}
STEPS=${STEPS:-30}

cat > "$OUT/llama-1b.yaml" <<'YAML'
name: llama-1b
layers: 16
hidden: 2048
heads: 16
kv_heads: 8
ffn_hidden: 5632
vocab: 32000
seq_len: 2048
activation: swiglu
YAML

GPU_NAME=$($PY -c "import torch; print(torch.cuda.get_device_name(0))")
CATALOG=$($PY - "$GPU_NAME" <<'PYEOF'
import sys
name = sys.argv[1].lower()
for key in ("h200", "h100", "h800", "h20", "a100", "b200"):
    if key in name:
        print(key if key != "h100" else "h100-sxm"); break
else:
    print("unknown")
PYEOF
)
PEAK_BF16=$($PY -c "from wanka.hardware import gpu; print(gpu('$CATALOG').peak('bf16'))" 2>/dev/null || echo "")
if [ -z "$PEAK_BF16" ]; then echo "GPU '$GPU_NAME' not in the wanka catalog; set PEAK_BF16 by hand"; exit 1; fi
echo "GPU: $GPU_NAME -> catalog $CATALOG, dense bf16 peak $PEAK_BF16 TFLOP/s"

summary() {  # median tokens/s and MFU of steps 6.. from metrics.jsonl
  $PY - "$1/metrics.jsonl" "$2" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][5:]
print(f"{sys.argv[2]}: {statistics.median(r['tokens_per_s'] for r in rows):,.0f} tokens/s, "
      f"MFU {statistics.median(r['mfu'] for r in rows):.3f}, step {statistics.median(r['step_time_s'] for r in rows)*1e3:.0f} ms, "
      f"memory {max(r['memory_MB'] for r in rows)/1024:.1f} GiB, final loss {rows[-1]['loss']:.3f}")
PYEOF
}

$WANKA train --model "$OUT/llama-1b.yaml" --layout precision=bf16,gbs=8,mbs=4 --nproc 1 --steps "$STEPS" \
  --ckpt "$OUT/bf16" --ckpt-every 1000 --peak-tflops "$PEAK_BF16" --json > "$OUT/bf16.json"
summary "$OUT/bf16" "bf16"

CC=$($PY -c "import torch; print(torch.cuda.get_device_capability(0)[0])")
if [ "$CC" -ge 9 ]; then
  # fp8 MFU is reported against the bf16 peak (model FLOPs / bf16 peak), as is common practice.
  $WANKA train --model "$OUT/llama-1b.yaml" --layout precision=fp8,gbs=8,mbs=4 --nproc 1 --steps "$STEPS" \
    --ckpt "$OUT/fp8" --ckpt-every 1000 --peak-tflops "$PEAK_BF16" --compile --json > "$OUT/fp8.json"
  summary "$OUT/fp8" "fp8 (vs bf16 peak)"
else
  echo "fp8: skipped (compute capability $CC < 9)"
fi
# 3. host time per launched kernel of eager PyTorch on this GPU's host, per operator kind a dropless MoE
#    layer issues (benchmarks/host_launch.py; docs/plan.md "MoE, host time per launch"): the figure the
#    planner lacks to price eager, host-synchronised MoE layers. Kept as $OUT/host_launch.json.
OUT="$OUT" $PY benchmarks/host_launch.py --calls 2000
echo "runs under $OUT"
