#!/usr/bin/env bash
# The GPU checks of issues 27, 41 and 59 as one prepared script, for a session whose task is lent a GPU machine (the
# device tool).
#
#   here:  PY=/work/main/.venv/bin/python bash benchmarks/gpu/kit.sh   # the wheels the GPU image lacks, into .gpu-kit/
#   there: run(command="bash benchmarks/gpu/run.sh", carry=[".gpu-kit"], timeout_s=540)
#
# The whole script ends within BUDGET seconds (470 by default: under 8 minutes, the kit's install included; 3600
# with SMOKE=1): each step runs under its own limit, cut to what is left of the budget, and a step with under 15 s
# left is skipped (named in the log). What comes back from $OUT: env.txt, steps.log (every step's output, in order)
# and one JSON per benchmark. The steps, in order of what they are for:
#   1. env.txt: the GPU, the driver, torch / transformers / transformer_lens / nnsight versions, the date;
#   2. the GPU test suite (tests/gpu: CUDA = CPU greedy on every family, sampled runs equal, arms = HF hooks,
#      bfloat16 tolerance, at most one sync per decoding step);
#   3. bench_gpu.py at the Qwen2.5-0.5B shape in bfloat16, K=64 x 128 tokens: 1 prompt, 4 prompts, 16 prompts; HF
#      generate vs the engine (plain, no sharing, a capture hook live), tokens/s and peak memory per method;
#   4. gpu/syncs.py: host-device synchronisations per decoding step, and the lines that cause them;
#   5. bench_peers.py --shape qwen2.5-0.5b on CUDA (the sweep and the capture: reachlens, TransformerLens' bridge,
#      HF hooks, nnsight where the kit carries it);
#   6. bench_gpu.py at the Qwen2.5-1.5B shape (28 layers, d=1,536): 1 prompt and 4 prompts.
# SMOKE=1 runs the same steps at toy sizes on a CPU, each step's limit ten times the GPU's (to check this script
# here, not a measurement): SMOKE=1 PY=/work/main/.venv/bin/python OUT=/tmp/smoke bash benchmarks/gpu/run.sh
# (with a kit built for this machine's Python: kit.sh 3.11; rebuild it with 3.12 before the GPU call). There the
# GPU suite skips (no CUDA) and syncs.py is left out (it counts on CUDA only).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PY:-python3}
BUDGET=${BUDGET:-$([ "${SMOKE:-0}" = 1 ] && echo 3600 || echo 470)}
STRETCH=$([ "${SMOKE:-0}" = 1 ] && echo 10 || echo 1)  # a shared 2-core CPU takes far longer than a GPU per step
KIT=$(mktemp -d)
if ls .gpu-kit/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$KIT" .gpu-kit/*.whl \
    || { echo "kit install failed"; exit 1; }
fi
export PYTHONPATH="$PWD:$KIT"
if [ "${SMOKE:-0}" = 1 ]; then
  DEV=cpu; GPU_ARGS=(--tiny --device cpu --dtype float32 --k 4 --new 8 --rounds 1); BIG=(--tiny)
  PEERS=(--device cpu --dtype float32 --n 2 --max-new-tokens 4 --k 4 --capture-tokens 4 --rounds 0)
  PROMPTS=(1 4)
else
  DEV=cuda; GPU_ARGS=(--rounds 2); BIG=(--shape 1.5b)
  PEERS=(--device cuda --dtype bfloat16 --n 4 --max-new-tokens 8 --k 64 --capture-tokens 8 --rounds 0)
  PROMPTS=(1 4 16)
fi
step() {  # step NAME LIMIT COMMAND...: run under min(LIMIT, what is left of the budget), output into $OUT/steps.log
  local name=$1 limit=$(($2 * STRETCH)); shift 2
  local left=$((BUDGET - SECONDS))
  if [ "$left" -lt 15 ]; then echo "== $name skipped: ${left}s left of the ${BUDGET}s budget" | tee -a "$OUT/steps.log"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s, ${SECONDS}s gone): $*" | tee -a "$OUT/steps.log"
  timeout "$limit" "$@" 2>&1 | tee -a "$OUT/steps.log"
  echo "== $name rc=${PIPESTATUS[0]} at ${SECONDS}s" | tee -a "$OUT/steps.log"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  "$PY" -c "import sys, torch, transformers, transformer_lens, reachlens; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'transformers', transformers.__version__, 'transformer_lens', getattr(transformer_lens, '__version__', '?'), 'reachlens', reachlens.__version__)"
  "$PY" -c "import nnsight; print('nnsight', nnsight.__version__)" 2>&1 | tail -1
  date -u +%FT%TZ; } 2>&1 | tee "$OUT/env.txt"

step gpu_suite 100 "$PY" -m pytest -q -p no:cacheprovider tests/gpu -o addopts="" -rs
for p in "${PROMPTS[@]}"; do
  keep=$([ "$p" = "${PROMPTS[0]}" ] && echo "--keep $KIT/qwen-shape" || echo "--model $KIT/qwen-shape")
  step "bench_gpu_${p}p" 70 "$PY" benchmarks/bench_gpu.py "${GPU_ARGS[@]}" --prompts "$p" $keep \
      --json "$OUT/bench_gpu_${p}p.json"
done
if [ "$DEV" = cuda ]; then
  step syncs 30 "$PY" benchmarks/gpu/syncs.py --model "$KIT/qwen-shape"
fi
step bench_peers 90 "$PY" benchmarks/bench_peers.py --model "$KIT/qwen-shape" "${PEERS[@]}" --json "$OUT/bench_peers.json"
for p in 1 4; do
  step "bench_gpu_big_${p}p" 70 "$PY" benchmarks/bench_gpu.py "${GPU_ARGS[@]}" "${BIG[@]}" --prompts "$p" \
      --json "$OUT/bench_gpu_big_${p}p.json"
done
echo "logs in $OUT (${SECONDS}s in all)"
