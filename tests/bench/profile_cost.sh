#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# profile_cost.sh: what on-demand profiling costs a real run while no profile is asked for (issue 23:
# within the timeline's 0.05% of a step). Runs timeline_cost.sh's workload once (multiplex, 2 ranks
# "0=rollout;1=rollout,train", longtail, 8 x 8 samples per step, STEPS 20), reads from the run file the
# mean step time and an upper bound of the per-span checks per step (spans + tokens + 1), then runs profile_bench with them. The
# baseline (the step) comes from the same run. A benchmark, not a ctest. Usage:
#   tests/bench/profile_cost.sh BUILD_DIR [WORKDIR]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: profile_cost.sh BUILD_DIR [WORKDIR]}
WORK=${2:-$BUILD/profile-cost}
STEPS=${STEPS:-20} SEED=${SEED:-1} MODE=${MODE:-multiplex}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for b in "$BUILD/mpi_app/tagflow" "$BUILD/tests/bench/profile_bench"; do
  [ -x "$b" ] || { echo "profile_cost.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$WORK"
out=$WORK/$MODE
rm -rf "$out"
mpirun -n 2 "$BUILD/mpi_app/tagflow" train --out "$out" --mode "$MODE" --rank-tags "0=rollout;1=rollout,train" \
  --task longtail --steps "$STEPS" --seed "$SEED" --eval-every 0 --gemm-check false --prompts-per-step 8 \
  --group-size 8 --response-lengths lognormal:32:10 --max-new-tokens 320 > "$out.log" 2>&1 ||
  { echo "profile_cost.sh: the run failed (see $out.log)" >&2; exit 1; }
read -r step_s spans < <(/usr/bin/python3 - "$out/tagflow.h5" "$HERE/../../share/python" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import tagflow_run
with tagflow_run.open_run(sys.argv[1]) as f:
    st, tl = f["steps"], f["timeline"]
    n = len(st["step"])
    wall = float(st["t_end"][-1] - st["t_start"][0])
    tokens = float(st["tokens"][()].sum()) / n  # prompt + response: an upper bound of engine steps
    # note_step runs at every span and, in the async modes, at every scheduler state change (at most
    # one per engine step): spans of all ranks + tokens + 1 bounds the checks of the busiest rank
    print(wall / n, len(tl["rank"]) / n + tokens + 1)
PY
)
echo "$MODE run: $STEPS steps, $(printf '%.1f' "$(echo "$step_s * 1000" | bc -l)") ms per step, <= ${spans%.*} checks per step"
"$BUILD/tests/bench/profile_bench" --step-s "$step_s" --spans-per-step "$spans"
