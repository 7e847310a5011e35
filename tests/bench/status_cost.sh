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
source "$(dirname "$0")/cost_workload.sh"
BUILD=${1:?usage: status_cost.sh BUILD_DIR [WORKDIR]}
WORK=${2:-$BUILD/status-cost}
MODE=${MODE:-multiplex}
cost_setup status_cost.sh "$BUILD" status_bench
mkdir -p "$WORK"
out=$WORK/$MODE
cost_run "$MODE" "$out"
read -r _ step_s _ updates < <(cost_figures "$out/tagflow.h5")
echo "$MODE run: $STEPS steps, $(printf '%.1f' "$(echo "$step_s * 1000" | bc -l)") ms per step, <= ${updates%.*} board updates per step"
"$BUILD/tests/bench/status_bench" --ranks 2 --step-s "$step_s" --updates-per-step "$updates"
