#!/usr/bin/env bash
# The real RL and SFT descendants of SmolLM2-135M-Instruct (issue 54, item 3): GRPO, then SFT on gold worked
# solutions, each a LoRA adapter, one after the other (one long computation at a time), niced, logs in $LOGS.
#
#     nohup bash experiments/real/train.sh > /work/real-train/train.log 2>&1 &
#
# Started again with the same settings, each run resumes from its newest checkpoint in $WORK/<run>/trainer (a
# finished run is skipped), so a session that is stopped loses at most --save-every steps. TASK is the task the
# pilot chose (experiments/real/pilot.py, notes/real-checkpoints.md): arith_small, one + or - of operands up to 20.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
TASK=${TASK:-arith_small}
WORK=${WORK:-/work/real-train/$TASK}
LOGS=${LOGS:-$WORK/logs}
mkdir -p "$WORK" "$LOGS"
nice -n 10 "$PY" experiments/real/grpo_lora.py --base real:smollm2-135m-instruct --task "$TASK" \
    --work "$WORK/grpo" --out "$WORK/grpo/adapter" --steps 100 --seed 0 >> "$LOGS/grpo.log" 2>&1
nice -n 10 "$PY" experiments/real/sft_lora.py --base real:smollm2-135m-instruct --task "$TASK" \
    --work "$WORK/sft" --out "$WORK/sft/adapter" --steps 150 --seed 0 >> "$LOGS/sft.log" 2>&1
