#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Measurement (not a ctest): sync vs disaggregated vs multiplex on one task, same seed, same
number of training steps (each step trains prompts-per-step x group-size samples), by default 2
ranks "0=rollout;1=rollout,train" (--rank-tags: one entry per rank, as many ranks as entries;
disaggregated is left out where no rank only rolls out). Prints trained samples/s, final reward (mean of the last 3 steps),
samples dropped as stale, and rank 0's idle and generating fractions of the run, the busiest
trainer's training share ("trainer") and the whole machine's busy share of its CPUs ("cpu",
from /proc/stat: other load counts too),
with samples/s relative to the first mode (sync), trained tokens/s, the tokens the trainer
computes per trained sample (each step's batch padded to its longest sample) and every rank's
idle fraction (all over the span of the training steps). tests/bench/modes_e2e.sh runs it with issue 6's setting.

    measure_modes.py --tagflow BIN --workdir DIR [--task longtail] [--steps 20] [--rank-tags T] [-- extra args]
"""
import argparse
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "share", "python"))
import tagflow_run  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def sample_cpu(out, stop, every=0.05):
    """Appends (unix time, busy jiffies, all jiffies) of the whole machine (/proc/stat) until `stop`."""
    while True:
        with open("/proc/stat") as fp:
            v = [int(x) for x in fp.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
        out.append((time.time(), sum(v[:8]) - idle, sum(v[:8])))
        if stop.wait(every):
            return


def cpu_busy(samples, t_from, t_to):
    """The machine's busy share of its CPU time between two unix times (nan: too few samples)."""
    inside = [x for x in samples if t_from <= x[0] <= t_to]
    if len(inside) < 2 or inside[-1][2] == inside[0][2]:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][2] - inside[0][2])


def measure(a, mode, extra):
    out = os.path.join(a.workdir, f"measure_{mode}")
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpirun", "-n", str(len(a.rank_tags.split(";"))), a.tagflow, "train", "--out", out, "--mode", mode,
           "--rank-tags", a.rank_tags, "--task", a.task, "--steps", str(a.steps), "--seed", str(a.seed),
           "--eval-every", "0", "--gemm-check", "false"] + extra
    t0 = time.time()
    cpu, stop = [], threading.Event()
    sampler = threading.Thread(target=sample_cpu, args=(cpu, stop))
    sampler.start()
    try:
        p = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    finally:
        stop.set()
        sampler.join()
    if p.returncode != 0:
        sys.exit(f"{mode}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    wall = time.time() - t0
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        st = f["steps"]
        t_first, t_last = float(st["t_start"][0]), float(st["t_end"][-1])
        trained = int(np.sum(st["samples"][()]))
        reward = float(np.mean(st["reward_mean"][-3:]))
        last = st["reward_mean"][-5:]  # the noise of that: standard error over the last 5 steps
        reward_se = float(np.std(last, ddof=1) / np.sqrt(len(last))) if len(last) > 1 else 0.0
        w = f["consumed"]["weight"][()]
        tl = f["timeline"]
        rank, kind = tl["rank"][()], np.array(tagflow_run._decode(tl["kind"]), dtype=str)
        a0, a1 = np.maximum(tl["t_start"][()], t_first), np.minimum(tl["t_end"][()], t_last)
        dur = np.clip(a1 - a0, 0, None)
        span = t_last - t_first
        idle = {int(r): float(np.sum(dur[(rank == r) & (kind == "idle")]) / span) for r in np.unique(rank)}
        idle0 = idle.get(0, 0.0)
        gen0 = float(np.sum(dur[(rank == 0) & (kind == "rollout")]) / span)
        # The busiest trainer's training share: a mode whose trainers train as fast and do
        # nothing else runs at most 1 / (this share of a sync run) times that sync run.
        train = max(float(np.sum(dur[(rank == r) & (kind == "train")])) for r in np.unique(rank)) / span
        t0_unix = float(f.attrs["t0_unix"])
        busy = cpu_busy(cpu, t0_unix + t_first, t0_unix + t_last)
        # trained tokens: the response tokens (loss_mask 1) of the samples trained with weight > 0
        ids = f["consumed"]["id"][()][w > 0]
        off = f["samples"]["token_offsets"][()]
        resp = np.add.reduceat(f["samples"]["loss_mask"][()].astype(np.int64), off[:-1]) if len(off) > 1 else np.zeros(0)
        by_id = dict(zip(f["samples"]["id"][()].tolist(), resp.tolist()))
        tokens = int(sum(by_id.get(int(i), 0) for i in ids))
        # What the trainer computes: it pads each step's batch to its longest sample (prompt +
        # response), so padded tokens per trained sample = sum over steps of n x longest / n.
        total = dict(zip(f["samples"]["id"][()].tolist(), np.diff(off).tolist()))
        steps_of = f["consumed"]["step"][()][w > 0]
        padded = 0
        for s in np.unique(steps_of):
            lens = [total.get(int(i), 0) for i in ids[steps_of == s]]
            padded += len(lens) * max(lens)
        ev = f["eval"]["score"][()]
        finished = int(len(f["samples"]["id"]))  # every sample generated, trained or not
    return dict(mode=mode, trained=trained, sps=trained / span, tps=tokens / span, reward=reward, reward_se=reward_se,
                pad=padded / max(1, len(ids)), dropped=int(np.sum(w == 0)), idle0=idle0, idle=idle, gen0=gen0,
                train=train, cpu=busy,
                eval=float(ev[-1]) if len(ev) else float("nan"), wall=wall, span=span, finished=finished)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--task", default="longtail")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rank-tags", default="0=rollout;1=rollout,train", help="one entry per rank")
    ap.add_argument("--modes", default="sync,disaggregated,multiplex", help="first one is the baseline")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    modes = a.modes.split(",")
    if all("train" in e for e in a.rank_tags.split(";")) and "disaggregated" in modes:
        modes.remove("disaggregated")  # it needs a rank that only rolls out
        print("disaggregated left out: every rank of --rank-tags trains")
    rows = [measure(a, m, a.extra) for m in modes]
    base = rows[0]
    n = len(a.rank_tags.split(";"))
    print(f"task {a.task}, {a.steps} steps, seed {a.seed}, {n} ranks '{a.rank_tags}', extra {a.extra}")
    print(f"{'mode':14s} {'trained':>8s} {'samples/s':>10s} {'vs ' + base['mode'][:5]:>8s} {'tokens/s':>9s} "
          f"{'padded/sample':>13s} {'reward(last3)':>14s} {'eval':>6s} {'dropped':>8s} {'idle per rank':>16s} {'rank0 gen':>9s} "
          f"{'trainer':>7s} {'cpu':>5s} {'run s':>7s}")
    for r in rows:
        idle = " ".join(f"{100 * v:.1f}%" for _, v in sorted(r["idle"].items()))
        print(f"{r['mode']:14s} {r['trained']:8d} {r['sps']:10.1f} {r['sps'] / base['sps']:8.2f} {r['tps']:9.0f} "
              f"{r['pad']:13.1f} {r['reward']:14.3f} {r['eval']:6.3f} {r['dropped']:8d} {idle:>16s} {100 * r['gen0']:8.1f}% "
              f"{100 * r['train']:6.1f}% {100 * r['cpu']:4.0f}% {r['span']:7.1f}")
    if a.json:
        import json
        with open(a.json, "w") as fp:
            json.dump(rows, fp, indent=1)


if __name__ == "__main__":
    main()
