#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the longtail task briefly in the three scheduling modes (2 ranks, one rollout-only), then
# executes share/notebooks/scheduling.ipynb headless against them and checks that it compared
# all three modes and drew its three figures (Gantt chart, idle per step, staleness histogram).
set -euo pipefail
tagflow=$1 workdir=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$workdir" && mkdir -p "$workdir/runs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for mode in sync disaggregated multiplex; do
    mpirun -n 2 "$tagflow" train --out "$workdir/runs/$mode" --mode "$mode" --task longtail \
        --rank-tags "0=rollout;1=rollout,train" --steps 6 --prompts-per-step 4 --group-size 4 \
        --eval-every 3 --eval-prompts 16 --gemm-check false > "$workdir/$mode.log"
done
cp "$root/share/notebooks/scheduling.ipynb" "$workdir/"
cd "$workdir"
TAGFLOW_RUNS="$workdir/runs" TAGFLOW_SHARE="$root/share/python" PYDEVD_DISABLE_FILE_VALIDATION=1 \
    /usr/bin/jupyter nbconvert --to notebook --execute scheduling.ipynb --output executed.ipynb
/usr/bin/python3 - <<'PY'
import json, os, sys
nb = json.load(open("executed.ipynb"))
outs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
pngs = sum(1 for o in outs if "image/png" in o.get("data", {}))
errors = [f"{o['ename']}: {o['evalue']}" for o in outs if o.get("output_type") == "error"]
text = "\n".join("".join(o.get("data", {}).get("text/plain", "")) for o in outs)
modes = [m for m in ("sync", "disaggregated", "multiplex") if m in text]
files = [p for p in ("gantt.png", "idle_per_step.png", "staleness.png") if os.path.exists(p) and os.path.getsize(p) > 1000]
print(f"executed notebook: {pngs} PNG outputs, errors {errors}, modes compared {modes}, figures saved {files}")
ok = pngs >= 3 and not errors and len(modes) == 3 and "vs_sync" in text and len(files) == 3
sys.exit(0 if ok else 1)
PY
