#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# profile_cost.sh: what on-demand profiling costs a real run while no profile is asked for (issue 23:
# within the timeline's 0.05% of a step). Runs timeline_cost.sh's workload once (multiplex, 2 ranks
# "0=rollout;1=rollout,train", longtail, 8 x 8 samples per step, STEPS 20), reads from the run file the
# mean step time and an upper bound of the per-span checks per step (spans + tokens + 1), then runs profile_bench with them. The
# baseline (the step) comes from the same run. A benchmark, not a ctest. Usage:
#   tests/bench/profile_cost.sh BUILD_DIR [WORKDIR]
set -euo pipefail
source "$(dirname "$0")/cost_workload.sh"
BUILD=${1:?usage: profile_cost.sh BUILD_DIR [WORKDIR]}
WORK=${2:-$BUILD/profile-cost}
MODE=${MODE:-multiplex}
cost_setup profile_cost.sh "$BUILD" profile_bench
mkdir -p "$WORK"
out=$WORK/$MODE
cost_run "$MODE" "$out"
# note_step runs at every span and, in the async modes, at every scheduler state change (at most one per engine
# step): spans of all ranks + tokens + 1 bounds the checks of the busiest rank
read -r _ step_s _ spans < <(cost_figures "$out/tagflow.h5")
echo "$MODE run: $STEPS steps, $(printf '%.1f' "$(echo "$step_s * 1000" | bc -l)") ms per step, <= ${spans%.*} checks per step"
"$BUILD/tests/bench/profile_bench" --step-s "$step_s" --spans-per-step "$spans"
