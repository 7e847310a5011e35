#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# timeline_cost.sh: what recording the timeline costs a real run (issue 6 point 3: under 1% of
# step time). For each mode (MODES, default sync disaggregated multiplex) it runs modes_e2e.sh's
# workload (longtail, 2 ranks "0=rollout;1=rollout,train", 8 x 8 samples per step, STEPS 20,
# --response-lengths lognormal:32:10 --max-new-tokens 320), reads the run file for the spans
# recorded per step (all ranks) and the mean step time, then times exactly that many spans per
# iteration with timeline_bench (profile::Span on every rank + the collective append to /timeline
# of a real run file) and prints the cost as a share of the step. The baseline (the step time)
# comes from the same run. A benchmark, not a ctest. Usage:
#   tests/bench/timeline_cost.sh BUILD_DIR [WORKDIR]
set -euo pipefail
source "$(dirname "$0")/cost_workload.sh"
BUILD=${1:?usage: timeline_cost.sh BUILD_DIR [WORKDIR]}
WORK=${2:-$BUILD/timeline-cost}
MODES=${MODES:-sync disaggregated multiplex}
cost_setup timeline_cost.sh "$BUILD" timeline_bench
mkdir -p "$WORK"
printf '%-14s %8s %10s %12s %14s %10s\n' mode steps "step ms" "spans/step" "timeline us" "share"
worst=0
for mode in $MODES; do
  out=$WORK/$mode
  cost_run "$mode" "$out"
  read -r steps step_s spans _ < <(cost_figures "$out/tagflow.h5")
  mpirun -n 2 "$BUILD/tests/bench/timeline_bench" -b $((spans * 32)) -e $((spans * 32)) -n 20 -w 2 -c 1 \
    -d "$WORK" -J "$WORK/$mode.json" > "$WORK/$mode.bench.txt" 2>&1 ||
    { echo "timeline_cost.sh: timeline_bench failed (see $WORK/$mode.bench.txt)" >&2; exit 1; }
  # this mode's share of a step (for the verdict) and its table row
  IFS=$'\t' read -r share row < <(/usr/bin/python3 - "$WORK/$mode.json" "$mode" "$steps" "$step_s" "$spans" <<'PY'
import json, sys
path, mode, steps, step_s, spans = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
us = json.load(open(path))["results"][0]["time_us"]
share = us * 1e-6 / step_s
print(f"{share}\t{mode:<14s} {steps:8d} {step_s * 1e3:10.1f} {spans:12d} {us:14.1f} {share * 100:9.3f}%")
PY
)
  echo "$row"
  worst=$(/usr/bin/python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))" "$worst" "$share")
done
/usr/bin/python3 -c "import sys; w = float(sys.argv[1]); print(f'timeline recording: at most {w * 100:.3f}% of a step '
  f'(goal < 1%):', 'met' if w < 0.01 else 'NOT met')" "$worst"
