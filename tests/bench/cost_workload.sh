# SPDX-License-Identifier: Apache-2.0
# cost_workload.sh: the real run whose step timeline_cost.sh, status_cost.sh and profile_cost.sh measure
# their cost against; sourced by them, not run by itself. The workload is modes_e2e.sh's: longtail, 2 ranks
# "0=rollout;1=rollout,train", 8 x 8 samples per step, --response-lengths lognormal:32:10
# --max-new-tokens 320, STEPS steps (default 20) with seed SEED (default 1). Defines
#   cost_setup NAME BUILD BENCH  mpirun as root; exits 2 naming the binary when tagflow or BENCH is not built
#   cost_run MODE OUT            the run in MODE into OUT (log OUT.log); exits 1 naming the log when it fails
#   cost_figures RUN.h5          prints "steps step_s spans checks": the steps, the mean step time (first to
#                                last step), the spans per step of all ranks (rounded, at least 1), and an
#                                upper bound of a rank's per-span checks per step (spans + tokens + 1: every
#                                engine step makes at least one token of a prompt or a response)
# It does not time anything itself.
: "${STEPS:=20}" "${SEED:=1}"
COST_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

cost_setup() {
  COST_NAME=$1 COST_BUILD=$2
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  local b
  for b in "$COST_BUILD/mpi_app/tagflow" "$COST_BUILD/tests/bench/$3"; do
    [ -x "$b" ] || { echo "$COST_NAME: $b missing (cmake --build $COST_BUILD)" >&2; exit 2; }
  done
}

cost_run() {
  local mode=$1 out=$2
  rm -rf "$out"
  mpirun -n 2 "$COST_BUILD/mpi_app/tagflow" train --out "$out" --mode "$mode" --rank-tags "0=rollout;1=rollout,train" \
    --task longtail --steps "$STEPS" --seed "$SEED" --eval-every 0 --gemm-check false --prompts-per-step 8 \
    --group-size 8 --response-lengths lognormal:32:10 --max-new-tokens 320 > "$out.log" 2>&1 ||
    { echo "$COST_NAME: the $mode run failed (see $out.log)" >&2; exit 1; }
}

cost_figures() {
  /usr/bin/python3 - "$1" "$COST_HERE/../../share/python" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import tagflow_run
with tagflow_run.open_run(sys.argv[1]) as f:
    st, tl = f["steps"], f["timeline"]
    n = len(st["step"])
    wall = float(st["t_end"][-1] - st["t_start"][0])
    tokens = float(st["tokens"][()].sum()) / n  # prompt + response: an upper bound of engine steps
    print(n, wall / n, max(1, round(len(tl["rank"]) / n)), len(tl["rank"]) / n + tokens + 1)
PY
}
