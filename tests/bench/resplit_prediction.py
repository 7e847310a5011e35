#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""How well --rebalance-every predicts a step (a measurement, not a ctest): the run of
`Sched.resplit`'s measured move, 3 ranks all `rollout,train`, multiplex, `--rebalance-every 2`,
14 steps, with rank 2 slowed to a quarter of its speed (SIGSTOP 30 ms, SIGCONT 10 ms, over and
over) and without. At every decision the coordinator writes to /steps the seconds per step it
predicts for the group it chose (`predicted_s`); that group then trains the decision's step and
the next, and their measured cycle is the time from the end of the step before to the end of the
next (`t_end`). This prints predicted / measured for each decision, and per kind of run the median,
the range and the share within 25%, with the moves each run made.

    resplit_prediction.py --tagflow BIN --workdir DIR [--runs 3]

Exit 0 unless a run fails.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "share", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import tagflow_run  # noqa: E402
import testlib  # noqa: E402
from testlib import ENV  # noqa: E402

ALL3 = "0=rollout,train;1=rollout,train;2=rollout,train"


def run(a, out, slow):
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpirun", "-n", "3", a.tagflow, "train", "--out", out, "--eval-every", "0", "--gemm-check", "false",
           "--threads", "1", "--mode", "multiplex", "--rank-tags", ALL3, "--seed", "5", "--steps", "14",
           "--rebalance-every", "2"]
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with testlib.SlowedRank(p, 2) if slow else contextlib.nullcontext():
            text, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    if p.returncode != 0:
        print(f"{out}: exit {p.returncode}\n{text[-2000:]}")
        sys.exit(2)
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        st = f["steps"]
        t_end, pred = st["t_end"][()], st["predicted_s"][()]
    with open(os.path.join(out, "membership.json")) as fh:
        moves = [(c["step"], c["to"]) for c in json.load(fh)["changes"]]
    ratios = []
    for s in np.nonzero(pred > 0)[0]:
        if 1 <= s and s + 1 < len(t_end):
            ratios.append(float(pred[s] / ((t_end[s + 1] - t_end[s - 1]) / 2)))
    return ratios, moves


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    for slow in (True, False):
        name = "rank 2 slowed" if slow else "unslowed"
        all_r = []
        for i in range(a.runs):
            r, moves = run(a, os.path.join(a.workdir, f"{'slow' if slow else 'even'}{i}"), slow)
            all_r += r
            print(f"{name}, run {i}: moves {moves}; predicted / measured {' '.join(f'{x:.2f}' for x in r)}",
                  flush=True)
        x = np.array(all_r)
        print(f"{name}: {len(x)} decisions, predicted / measured median {np.median(x):.2f}, range "
              f"{x.min():.2f}-{x.max():.2f}, {np.mean(np.abs(x - 1) <= 0.25):.0%} within 25%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
