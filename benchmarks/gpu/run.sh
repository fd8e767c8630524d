#!/usr/bin/env bash
# Issue 27's GPU checks as one prepared script, for a session whose task is lent a GPU machine (the device tool).
#
#   here:  bash benchmarks/gpu/kit.sh                 # the wheels the H200 image lacks, into .gpu-kit/ (3 MiB)
#   there: run(command="bash benchmarks/gpu/run.sh", carry=[".gpu-kit"], timeout_s=540)
#
# What it runs, each step under its own timeout (about 6 minutes in all on an H200 by the sizes below; the
# device time of a task is 15 minutes, the machine's start included), every log and JSON into $OUT:
#   1. env.txt: the GPU, the driver, torch / transformers / transformer_lens versions;
#   2. bench_gpu.py: the Qwen2.5-0.5B-shaped model in bfloat16, K=64 x 128 tokens, HF generate vs the engine
#      (plain, no sharing, a capture hook live), tokens/s, peak memory, greedy vs HF; `ratio:` last;
#   3. gpu/syncs.py: host-device synchronisations per decoding step, and the lines that cause them;
#   4. bench_scale.py part 2 on that model: HF vs the engine over 4 arith prompts x K=64, EOS on (no vLLM: its
#      wheel alone is over the 64 MiB a call carries; no Ray: not in the image);
#   5. an audit of zoo:base on CUDA in float32 against the same audit on the machine's CPU: same tables?
# SMOKE=1 runs the same steps at toy sizes on a CPU (to check this script here, not a measurement).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
KIT=$(mktemp -d)
"$PY" -m pip install -q --no-index --no-deps --target "$KIT" .gpu-kit/*.whl || { echo "kit install failed"; exit 1; }
export PYTHONPATH="$PWD:$KIT"
if [ "${SMOKE:-0}" = 1 ]; then
  DEV=cpu; GPU_ARGS=(--tiny --device cpu --dtype float32 --k 8 --new 16 --rounds 1); SCALE=(--device cpu --dtype float32 --prompts 2 --k 8 --max-new-tokens 16 --rounds 1); N=8; K=4
else
  DEV=cuda; GPU_ARGS=(--rounds 3); SCALE=(--device cuda --dtype bfloat16 --prompts 4 --k 64 --max-new-tokens 128 --rounds 2); N=60; K=32
fi
step() { local name=$1 limit=$2; shift 2; echo "== $name (limit ${limit}s): $*"; timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"; echo "== $name rc=${PIPESTATUS[0]}"; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  "$PY" -c "import sys, torch, transformers, transformer_lens, reachlens; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'transformers', transformers.__version__, 'transformer_lens', getattr(transformer_lens, '__version__', '?'), 'reachlens', reachlens.__version__)"
  date -u +%FT%TZ; } 2>&1 | tee "$OUT/env.txt"

step bench_gpu 240 "$PY" benchmarks/bench_gpu.py "${GPU_ARGS[@]}" --keep "$KIT/qwen-shape" --json "$OUT/bench_gpu.json"
if [ "$DEV" = cuda ]; then
  step syncs 90 "$PY" benchmarks/gpu/syncs.py --model "$KIT/qwen-shape"
fi
step bench_scale 150 "$PY" benchmarks/bench_scale.py --model "$KIT/qwen-shape" "${SCALE[@]}" --skip-ray --skip-vllm \
    --json "$OUT/bench_scale.json"
for d in "$DEV" cpu; do
  step "audit_$d" 120 "$PY" -m reachlens audit zoo:base --task arith --n "$N" --k "$K" --device "$d" --out "$KIT/audit-$d"
done
step audit_tables 60 "$PY" - "$KIT/audit-$DEV" "$KIT/audit-cpu" <<'EOF'
import sys
import pandas as pd
a, b = sys.argv[1:3]
for name, text, grade in (("questions", "deployed_text", "realized"), ("samples", "text", "correct")):
    x, y = pd.read_parquet(f"{a}/{name}.parquet"), pd.read_parquet(f"{b}/{name}.parquet")
    print(f"{name}: {len(x)} rows; text equal on {(x[text] == y[text]).mean():.1%}; "
          f"grades equal on {(x[grade] == y[grade]).mean():.1%}")
EOF
echo "logs in $OUT"
