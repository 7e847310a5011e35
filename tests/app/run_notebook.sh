#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Executes share/notebooks/run_overview.ipynb headless against a short real run and checks that
# its three figures were produced (PNG outputs in the executed notebook and the saved files).
set -euo pipefail
tagflow=$1 workdir=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$workdir" && mkdir -p "$workdir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -n 2 "$tagflow" train --out "$workdir/run" --steps 6 --prompts-per-step 4 --group-size 4 \
    --eval-every 3 --eval-prompts 16 --gemm-check false > "$workdir/train.log"
cp "$root/share/notebooks/run_overview.ipynb" "$workdir/"
cd "$workdir"
TAGFLOW_RUN="$workdir/run" PYDEVD_DISABLE_FILE_VALIDATION=1 \
    /usr/bin/jupyter nbconvert --to notebook --execute run_overview.ipynb --output executed.ipynb
/usr/bin/python3 - <<'PY'
import json, os, sys
nb = json.load(open("executed.ipynb"))
pngs = sum(1 for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
           if "image/png" in o.get("data", {}))
errors = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
files = [p for p in ("reward_per_step.png", "response_lengths.png", "ranks_timeline.png") if os.path.getsize(p) > 1000]
# The sample text table: the reverse task's renderings (prompts ^ddddd=) beside their rewards.
import re
html = [o["data"]["text/html"] for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])
        if "text/html" in o.get("data", {}) and "response_text" in "".join(o["data"]["text/html"])]
texts = "".join("".join(h) for h in html)
rows = re.findall(r"<td>\^\d{5}=</td>", texts) if "reward" in texts else []
print(f"executed notebook: {pngs} PNG outputs, {len(errors)} errors, figures saved: {files}, "
      f"sample text table rows: {len(rows)}")
sys.exit(0 if pngs >= 3 and not errors and len(files) == 3 and len(rows) >= 8 else 1)
PY
