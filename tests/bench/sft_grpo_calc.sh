#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sft_grpo_calc.sh — does GRPO after an SFT warm start improve the multi-turn `calc` task (issue 5
# point 5)? Not a ctest (about 3 minutes on 2 cores; measured: 0.332 -> 0.656 held-out accuracy):
#   1. `tagflow sft --task calc` for SFT_STEPS steps on tool-using demonstrations (tool output
#      masked out of the loss): a policy that sometimes calls the tool and copies its result;
#   2. `tagflow train --task calc --model SFT/model` (GRPO, sync mode, multi-turn sessions);
#   3. prints held-out greedy accuracy (sessions with the tool, reward 1 = exact final answer)
#      before GRPO (train's step-0 evaluation of the same checkpoint, in the same run) and after.
# Usage: tests/bench/sft_grpo_calc.sh [BUILD_DIR]        (default ./build)
#   OUT=dir  SFT_STEPS=100  STEPS=30  LR=1e-4  TEMPERATURE=0.7  PROMPTS=16  GROUP=8  SEED=1  NP=1  MODE=sync
# Exit 0 when GRPO gains, 1 when it does not (2 on a failed run).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
bench_init sft_grpo_calc "${1:-build}"
np=${NP:-1}

echo "## SFT: tagflow sft --task calc --steps ${SFT_STEPS:-100}"
mpirun -n "$np" "$bin" sft --task calc --out "$out/sft" --steps "${SFT_STEPS:-100}" --threads 1 \
    --eval-prompts 256 | tee "$out/sft.log" | grep -E "eval|checkpoint" || { echo "SFT failed" >&2; exit 2; }

echo "## GRPO: tagflow train --task calc --model $out/sft/model"
args=(train --task calc --model "$out/sft/model" --lr "${LR:-1e-4}" --temperature "${TEMPERATURE:-0.7}"
      --prompts-per-step "${PROMPTS:-16}" --group-size "${GROUP:-8}" --steps "${STEPS:-30}"
      --mode "${MODE:-sync}" --eval-every 10 --eval-prompts 256 --seed "${SEED:-1}" --threads 1 --out "$out/grpo")
[ "$np" = 1 ] && args+=(--tags rollout,train)
mpirun -n "$np" "$bin" "${args[@]}" > "$out/grpo.log" || { tail -5 "$out/grpo.log" >&2; exit 2; }
grep -E "eval|summary" "$out/grpo.log"

line=$(grep "^summary:" "$out/grpo.log")
before=$(sed -E 's/.*held-out greedy eval ([0-9.]+) -> ([0-9.]+).*/\1/' <<< "$line")
after=$(sed -E 's/.*held-out greedy eval ([0-9.]+) -> ([0-9.]+).*/\2/' <<< "$line")
python3 - "$before" "$after" <<'PY'
import sys
b, a = float(sys.argv[1]), float(sys.argv[2])
print(f"## calc held-out greedy accuracy: after SFT {b:.3f} -> after GRPO {a:.3f}: {100 * (a - b):+.1f} points "
      f"(ratio {a / b if b > 0 else float('inf'):.2f}x)")
sys.exit(0 if a > b else 1)
PY
