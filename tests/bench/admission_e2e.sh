#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# admission_e2e.sh — issue 20's admission figure: the README's main job with a rollout-only rank
# (`mpirun -n 2 tagflow train --rank-tags "0=rollout;1=rollout,train"`, default multiplex, default
# task and model) for STEPS steps, once with `--admission off` and once with the default
# `--admission staleness`, same seed, one after the other. Prints for each: samples finished, dropped
# as stale (and the fraction of finished), trained, trained samples/s (trained samples over the
# time from the first step's start to the last step's end, /steps) and the rollout-only rank's idle
# fraction; then the ratios staleness/off. Not a ctest (timings).
# Usage: tests/bench/admission_e2e.sh [BUILD_DIR]    OUT=dir STEPS=40 SEED=1 EXTRA="--staleness 1"
# Exit 0 when the admission run drops < 1% of its finished samples, 1 otherwise (2 on a failed run).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/common.sh"
bench_init admission_e2e "${1:-build}"
for adm in off staleness; do
  echo "== --admission $adm (load $(cut -d' ' -f1 /proc/loadavg))"
  # shellcheck disable=SC2086
  mpirun -n 2 "$bin" train --out "$out/$adm" --rank-tags "0=rollout;1=rollout,train" --steps "${STEPS:-40}" \
      --seed "${SEED:-1}" --admission "$adm" ${EXTRA:-} > "$out/$adm.log" 2>&1 || { tail -20 "$out/$adm.log"; exit 2; }
  tail -2 "$out/$adm.log"
done
PYTHONPATH="$here/../../share/python" /usr/bin/python3 - "$out" <<'PY'
import sys
import numpy as np
import tagflow_run
out = sys.argv[1]
res = {}
for adm in ("off", "staleness"):
    with tagflow_run.open_run(f"{out}/{adm}/tagflow.h5") as f:
        st, cw = f["steps"], f["consumed"]["weight"][()]
        fin = len(f["samples"]["id"][()])
        drop, trained = int(np.sum(cw == 0)), int(np.sum(cw > 0))
        t0, t1 = float(st["t_start"][0]), float(st["t_end"][-1])
        tl = f["timeline"]
        kind = np.array(tagflow_run._decode(tl["kind"]), dtype=str)
        r, a, b = tl["rank"][()], np.maximum(tl["t_start"][()], t0), np.minimum(tl["t_end"][()], t1)
        idle0 = float(np.sum(np.clip(b - a, 0, None)[(r == 0) & (kind == "idle")])) / (t1 - t0)
        res[adm] = dict(fin=fin, drop=drop, trained=trained, sps=trained / (t1 - t0), idle0=idle0)
print(f"\n{'admission':>10s} {'finished':>9s} {'dropped':>8s} {'drop %':>7s} {'trained':>8s} {'trained/s':>10s} "
      f"{'rank0 idle':>10s}")
for adm, x in res.items():
    print(f"{adm:>10s} {x['fin']:9d} {x['drop']:8d} {100 * x['drop'] / max(1, x['fin']):6.1f}% {x['trained']:8d} "
          f"{x['sps']:10.2f} {100 * x['idle0']:9.1f}%")
s, o = res["staleness"], res["off"]
print(f"staleness/off: trained samples/s {s['sps'] / o['sps']:.2f}x, samples generated {s['fin'] / o['fin']:.2f}x")
sys.exit(0 if s["drop"] < 0.01 * max(1, s["fin"]) else 1)
PY
