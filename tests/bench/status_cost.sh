#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# status_cost.sh: what the live status record costs a real run (issue 23: under 0.05% of a step).
# Runs timeline_cost.sh's workload once (multiplex, 2 ranks "0=rollout;1=rollout,train", longtail,
# 8 x 8 samples per step, STEPS 20), reads from the run file the mean step time and an upper bound
# of the board updates per step (spans + generated tokens, every engine step samples at least one
# token, + 1), then runs status_bench with them: the main thread's share and the status thread's
# CPU per step. The baseline (the step) comes from the same run. A benchmark, not a ctest. Usage:
#   tests/bench/status_cost.sh BUILD_DIR [WORKDIR]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: status_cost.sh BUILD_DIR [WORKDIR]}
WORK=${2:-$BUILD/status-cost}
STEPS=${STEPS:-20} SEED=${SEED:-1} MODE=${MODE:-multiplex}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for b in "$BUILD/mpi_app/tagflow" "$BUILD/tests/bench/status_bench"; do
  [ -x "$b" ] || { echo "status_cost.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$WORK"
out=$WORK/$MODE
rm -rf "$out"
mpirun -n 2 "$BUILD/mpi_app/tagflow" train --out "$out" --mode "$MODE" --rank-tags "0=rollout;1=rollout,train" \
  --task longtail --steps "$STEPS" --seed "$SEED" --eval-every 0 --gemm-check false --prompts-per-step 8 \
  --group-size 8 --response-lengths lognormal:32:10 --max-new-tokens 320 > "$out.log" 2>&1 ||
  { echo "status_cost.sh: the run failed (see $out.log)" >&2; exit 1; }
read -r step_s updates < <(/usr/bin/python3 - "$out/tagflow.h5" "$HERE/../../share/python" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import tagflow_run
with tagflow_run.open_run(sys.argv[1]) as f:
    st, tl = f["steps"], f["timeline"]
    n = len(st["step"])
    wall = float(st["t_end"][-1] - st["t_start"][0])
    tokens = float(st["tokens"][()].sum()) / n  # prompt + response: an upper bound of engine steps
    print(wall / n, len(tl["rank"]) / n + tokens + 1)
PY
)
echo "$MODE run: $STEPS steps, $(printf '%.1f' "$(echo "$step_s * 1000" | bc -l)") ms per step, <= ${updates%.*} board updates per step"
"$BUILD/tests/bench/status_bench" --ranks 2 --step-s "$step_s" --updates-per-step "$updates"
