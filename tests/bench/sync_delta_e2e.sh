#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# sync_delta_e2e.sh — issue 20 point 4's figures: the README's main job with a rollout-only rank
# (`mpirun -n 2 tagflow train --rank-tags "0=rollout;1=rollout,train"`, default multiplex, default
# task and model) for STEPS steps, same seed, one run after the other: dense weight sends, then
# `--sync-delta`, then `--resume-mode recompute` (and RECOMPUTE_EXTRA, e.g. "--resume-window 8").
# Prints per run: bytes sent per update to the rollout-only rank (/syncs, versions >= 1; mean and
# range) against dense_bytes, the cached tokens recomputed (the run's last lines), trained samples/s
# (/steps: trained samples over first step start .. last step end), and the ratios against the dense
# keep run. Not a ctest (timings). Usage: tests/bench/sync_delta_e2e.sh [BUILD_DIR]
#   OUT=dir STEPS=20 SEED=1 EXTRA="" RECOMPUTE_EXTRA=""
# Exit 0 when every run ended with its rollout-only rank bit-identical to the coordinator, else 1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
bench_init sync_delta_e2e "${1:-build}"
declare -A args=([dense]="" [delta]="--sync-delta" [recompute]="--resume-mode recompute ${RECOMPUTE_EXTRA:-}")
for run in dense delta recompute; do
  echo "== $run: ${args[$run]} (load $(cut -d' ' -f1 /proc/loadavg))"
  # shellcheck disable=SC2086
  mpirun -n 2 "$bin" train --out "$out/$run" --rank-tags "0=rollout;1=rollout,train" --steps "${STEPS:-20}" \
      --seed "${SEED:-1}" ${args[$run]} ${EXTRA:-} > "$out/$run.log" 2>&1 || { tail -20 "$out/$run.log"; exit 2; }
  tail -3 "$out/$run.log"
done
PYTHONPATH="$here/../../share/python" /usr/bin/python3 - "$out" <<'PY'
import re
import sys
import numpy as np
import tagflow_run
out = sys.argv[1]
ok = True
res = {}
for run in ("dense", "delta", "recompute"):
    log = open(f"{out}/{run}.log").read()
    ok &= "bit-identical to the coordinator's" in log
    m = re.search(r"(\d+) cached tokens of (\d+) sequences in flight recomputed over (\d+)", log)
    with tagflow_run.open_run(f"{out}/{run}/tagflow.h5") as f:
        sy = f["syncs"]
        ver, by, dense = sy["version"][()], sy["bytes"][()], sy["dense_bytes"][()]
        st, cw = f["steps"], f["consumed"]["weight"][()]
        t0, t1 = float(st["t_start"][0]), float(st["t_end"][-1])
        sel = ver >= 1
        res[run] = dict(mean=float(by[sel].mean()), lo=int(by[sel].min()), hi=int(by[sel].max()), dense=int(dense[0]),
                        tok=int(m.group(1)), seqs=int(m.group(2)), upd=int(m.group(3)),
                        sps=int(np.sum(cw > 0)) / (t1 - t0))
print(f"\n{'run':>10s} {'B/update (mean)':>16s} {'min..max':>21s} {'dense B':>10s} {'sent':>7s} {'recomputed':>11s} "
      f"{'seqs':>6s} {'trained/s':>10s}")
for run, x in res.items():
    print(f"{run:>10s} {x['mean']:16.0f} {x['lo']:>10d}..{x['hi']:<10d} {x['dense']:10d} "
          f"{x['mean'] / x['dense']:7.3f} {x['tok']:11d} {x['seqs']:6d} {x['sps']:10.2f}")
d = res["dense"]
print(f"delta/dense: bytes per update {res['delta']['mean'] / d['mean']:.3f}x, trained samples/s "
      f"{res['delta']['sps'] / d['sps']:.2f}x; recompute/keep (dense sends): trained samples/s "
      f"{res['recompute']['sps'] / d['sps']:.2f}x")
sys.exit(0 if ok else 1)
PY
