#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sft_grpo_addition.sh — the issue-4 learning benchmark "addition after an SFT warm start gains at
# least 20 points of exact-match accuracy under GRPO". Not a ctest (about 5 minutes on 2 cores):
#   1. `tagflow sft --task addition` for SFT_STEPS steps: a policy that sometimes succeeds
#      (about 15% held-out greedy exact match after 200 steps with the defaults below);
#   2. `tagflow train --task addition --model SFT/model` (GRPO) from it;
#   3. prints the held-out greedy exact match before and after GRPO (the baseline is the same
#      checkpoint, measured in the same run by train's step-0 evaluation) and the gain.
# Usage: tests/bench/sft_grpo_addition.sh [BUILD_DIR]        (default ./build)
#   OUT=dir  SFT_STEPS=200  STEPS=150  LR=1e-4  TEMPERATURE=0.5  PROMPTS=32  GROUP=16  SEED=1  NP=1  MODE=sync
#   (not TEMP: Open MPI reads TEMP as its temporary directory)
# Exit 0 when the gain is >= 20 points, 1 otherwise (2 on a failed run).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
bench_init sft_grpo_addition "${1:-build}"
np=${NP:-1}

echo "## SFT: tagflow sft --task addition --steps ${SFT_STEPS:-200}"
mpirun -n "$np" "$bin" sft --task addition --out "$out/sft" --steps "${SFT_STEPS:-200}" --threads 1 \
    --eval-prompts 256 | tee "$out/sft.log" | grep -E "eval|checkpoint" || { echo "SFT failed" >&2; exit 2; }

echo "## GRPO: tagflow train --task addition --model $out/sft/model"
args=(train --task addition --model "$out/sft/model" --lr "${LR:-1e-4}" --temperature "${TEMPERATURE:-0.5}"
      --prompts-per-step "${PROMPTS:-32}" --group-size "${GROUP:-16}" --steps "${STEPS:-150}"
      --mode "${MODE:-sync}" --eval-every 20 --eval-prompts 256 --seed "${SEED:-1}" --out "$out/grpo")
[ "$np" = 1 ] && args+=(--tags rollout,train)
mpirun -n "$np" "$bin" "${args[@]}" > "$out/grpo.log" || { tail -5 "$out/grpo.log" >&2; exit 2; }
grep -E "eval|summary" "$out/grpo.log"

# The summary line: "held-out greedy eval A -> B (best C; ...)".
line=$(grep "^summary:" "$out/grpo.log")
before=$(sed -E 's/.*held-out greedy eval ([0-9.]+) -> ([0-9.]+).*/\1/' <<< "$line")
after=$(sed -E 's/.*held-out greedy eval ([0-9.]+) -> ([0-9.]+).*/\2/' <<< "$line")
python3 - "$before" "$after" <<'EOF'
import sys
b, a = float(sys.argv[1]), float(sys.argv[2])
gain = 100 * (a - b)
print(f"## addition exact match: after SFT {b:.3f} -> after GRPO {a:.3f}: {gain:+.1f} points "
      f"(ratio {a / b if b > 0 else float('inf'):.2f}x; goal +20)")
sys.exit(0 if gain >= 20 else 1)
EOF
