#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# modes_e2e.sh — issue 6's end-to-end benchmark: the `longtail` task (heavy-tailed response
# lengths: p50 7, p99 99 tokens, see mpi_app/rollout/task_longtail.cpp), same seed, 2 ranks
# (one per core: rank 0 rollout-only, rank 1 rollout+train), the three scheduling modes one
# after the other, each for the same number of steps x samples per step (equal trained samples).
# Prints trained samples/s (and the ratio to sync), trained tokens/s, final reward, samples
# dropped as stale and every rank's idle fraction, then checks issue 6's goals:
#   multiplex >= 2.0x sync samples/s; rollout-only rank idle < 5%; final reward of multiplex
#   within noise of sync (|diff| <= 3 standard errors from the last 5 steps' rewards, at least 0.02).
# Not a ctest (timings; ~1-3 minutes). Usage: tests/bench/modes_e2e.sh [BUILD_DIR]
#   OUT=dir STEPS=40 PROMPTS=8 GROUP=8 SEED=1 EXTRA="--staleness 2 --stale weight"
# Exit 0 when every goal holds, 1 otherwise (2 on a failed run).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
bin=$build/mpi_app/tagflow
[ -x "$bin" ] || { echo "modes_e2e.sh: no $bin (build tagflow first)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-$build/bench-scratch/modes_e2e}
rm -rf "$out" && mkdir -p "$out"
# shellcheck disable=SC2086
/usr/bin/python3 "$here/../sched/measure_modes.py" --tagflow "$bin" --workdir "$out" --task longtail \
    --steps "${STEPS:-40}" --seed "${SEED:-1}" --json "$out/modes.json" -- \
    --prompts-per-step "${PROMPTS:-8}" --group-size "${GROUP:-8}" ${EXTRA:-} || exit 2
/usr/bin/python3 - "$out/modes.json" <<'PY'
import json, sys
rows = {r["mode"]: r for r in json.load(open(sys.argv[1]))}
s, m = rows["sync"], rows["multiplex"]
ratio = m["sps"] / s["sps"]
noise = max(0.02, 3 * (m["reward_se"] ** 2 + s["reward_se"] ** 2) ** 0.5)
goals = [(f"multiplex / sync samples/s = {ratio:.2f} (goal >= 2.0)", ratio >= 2.0),
         (f"rollout-only rank 0 idle {100 * m['idle'].get('0', 0):.1f}% in multiplex (goal < 5%)",
          m["idle"].get("0", 0) < 0.05),
         (f"final reward multiplex {m['reward']:.3f} vs sync {s['reward']:.3f} (within {noise:.3f})",
          abs(m["reward"] - s["reward"]) <= noise)]
for text, ok in goals:
    print(("met:     " if ok else "NOT MET: ") + text)
sys.exit(0 if all(ok for _, ok in goals) else 1)
PY
