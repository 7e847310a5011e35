#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 21's learning check of the off-policy correction (a measurement, not a ctest): on
`--task longtail` in multiplex mode with a rollout-only rank (mpirun -n 2, --rank-tags
"0=rollout;1=rollout,train"), the same seeds train once per arm:

  uncorrected  --old-logprobs measure                          (PPO ratio against the rollout-time log-probs;
                                                               the trainer's forward is taken for /steps only)
  corrected    --old-logprobs recompute --rollout-is token     (decoupled PPO + truncated importance weights)
  sync         --mode sync                                     (the on-policy reference: no stale token at all;
                                                               --no-sync leaves it out)

Both async arms pay for the same forward, so the trainer's time per step, and with it which
samples are consumed and how stale, does not differ by arm (`--uncorrected rollout` skips that
forward in the uncorrected arm, as the runs before 2026-12-03 did). `--uncorrected recompute` makes the
uncorrected arm decoupled PPO without the importance weight: the PPO ratio against the trainer's
recomputed pi_old, the rollout-time log-probs ignored (veRL's objective before rollout correction).

By default every run starts from one policy trained with `tagflow sft --task longtail` for
--sft-steps 100 steps (held-out mean reward ~0.18; from random weights the policy scores ~0.03
and GRPO's groups carry almost no signal), and trains 60 steps with TRAIN_ARGS below
(`--lr 2e-4`: at 1e-3 the on-policy sync run itself collapses, share/doc/bench.md). Arguments
after `--` replace TRAIN_ARGS.

It prints, per run and per arm (mean over the seeds): trained samples, the held-out greedy
score at step 0 and at the end, its gain per 1000 trained samples, the mean training reward of
the first and last thirds of the steps and its gain per 1000 trained samples, the PPO clip
fraction, the staleness, and the /steps importance ratios (mean weight used, largest ratio
before truncation; in the uncorrected arm the ratios it leaves uncorrected). Then the ratios
corrected / uncorrected of the gains per trained sample (paired by seed and over the arms' means).

    offpolicy_learning.py --tagflow BIN --workdir DIR [--seeds 4,5,6] [--steps 60] [--sft-steps 100]
                          [--uncorrected measure|rollout|recompute] [--no-sync] [--corrected-extra=OPTIONS]
                          [-- train args]

Exit 0 when the corrected arm's mean gains per trained sample (held-out score and training
reward) are each at least the uncorrected one's minus the noise (2 standard errors of the
paired differences), 1 otherwise, 2 on a failed run.
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "share", "python"))
import tagflow_run  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from testlib import ENV  # noqa: E402  (mpirun as root, no TAGFLOW_*)

ARMS = {
    "uncorrected": ["--old-logprobs", "measure"],  # --uncorrected
    "corrected": ["--old-logprobs", "recompute", "--rollout-is", "token"],
    "sync": [],  # --mode sync below
}
TRAIN_ARGS = ["--prompts-per-step", "8", "--group-size", "8", "--eval-prompts", "128", "--staleness", "2", "--lr",
              "2e-4"]


def with_options(base, extra):
    """`base` (option, value pairs) with `extra` appended; an option of `extra` that `base` has replaces it
    (tagflow refuses an option given twice)."""
    given = {x for x in extra if x.startswith("--")}
    out = []
    for opt, val in zip(base[::2], base[1::2]):
        if opt not in given:
            out += [opt, val]
    return out + extra


def run(a, arm, seed, extra):
    out = os.path.join(a.workdir, f"{arm}_seed{seed}")
    shutil.rmtree(out, ignore_errors=True)
    model = ["--model", a.model] if a.model else []
    mode = "sync" if arm == "sync" else "multiplex"
    cmd = ["mpirun", "-n", "2", a.tagflow, "train", "--out", out, "--mode", mode, "--rank-tags",
           "0=rollout;1=rollout,train", "--task", "longtail", "--steps", str(a.steps), "--seed", str(seed),
           "--eval-every", "0", "--gemm-check", "false"] + model + ARMS[arm] + extra
    t0 = time.time()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"{arm} seed {seed}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        sys.exit(2)
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        st = f["steps"]
        n = len(st["step"][()])
        trained = int(np.sum(st["samples"][()]))
        ev = f["eval"]["score"][()]
        third = max(1, n // 3)
        w = f["consumed"]["weight"][()]
        r = dict(arm=arm, seed=seed, trained=trained, eval0=float(ev[0]), eval1=float(ev[-1]),
                 reward_last=float(np.mean(st["reward_mean"][-third:])),
                 reward_first=float(np.mean(st["reward_mean"][:third])),
                 clip=float(np.mean(st["clip_frac"][()])), stale=float(np.mean(st["staleness_mean"][()])),
                 dropped=int(np.sum(w == 0)), is_mean=float(np.mean(st["is_weight_mean"][()])),
                 is_max=float(np.max(st["is_weight_max"][()])),
                 is_max_med=float(np.median(st["is_weight_max"][()])), wall=time.time() - t0)
    r["gain"] = 1000.0 * (r["eval1"] - r["eval0"]) / max(1, trained)
    r["rgain"] = 1000.0 * (r["reward_last"] - r["reward_first"]) / max(1, trained)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--seeds", default="4,5,6")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--uncorrected", default="measure", choices=["measure", "rollout", "recompute"],
                    help="the uncorrected arm's --old-logprobs (measure: the same trainer cost as corrected; "
                         "recompute: decoupled PPO without the importance weight, the objective that ignores "
                         "the behaviour policy)")
    ap.add_argument("--sft-steps", type=int, default=100,
                    help="warm start: `tagflow sft --task longtail` for this many steps, then every run from it "
                         "(0 = random weights)")
    ap.add_argument("--no-sync", action="store_true", help="leave out the on-policy sync reference arm")
    ap.add_argument("--corrected-extra", default="",
                    help="more options for the corrected arm only, given with '=' since they start with "
                         "'--', e.g. --corrected-extra=--rollout-is-batch-normalize; one the arm already has "
                         "(--rollout-is, --old-logprobs) replaces the arm's value")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    ARMS["uncorrected"] = ["--old-logprobs", a.uncorrected]
    ARMS["corrected"] = with_options(ARMS["corrected"], shlex.split(a.corrected_extra))
    if a.no_sync:
        del ARMS["sync"]
    if not a.extra:
        a.extra = TRAIN_ARGS
    os.makedirs(a.workdir, exist_ok=True)
    a.model = None
    if a.sft_steps > 0:
        sft = os.path.join(a.workdir, "sft")
        shutil.rmtree(sft, ignore_errors=True)
        p = subprocess.run(["mpirun", "-n", "1", a.tagflow, "sft", "--task", "longtail", "--out", sft, "--steps",
                            str(a.sft_steps), "--seed", "1", "--eval-prompts", "256"],
                           env=ENV, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"sft: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
            sys.exit(2)
        print("sft: " + " | ".join(l for l in p.stdout.splitlines() if "eval" in l)[-400:], flush=True)
        a.model = os.path.join(sft, "model")
    seeds = [int(s) for s in a.seeds.split(",")]
    rows = []
    for seed in seeds:
        for arm in ARMS:
            rows.append(run(a, arm, seed, a.extra))
            r = rows[-1]
            print(f"  {arm:12s} seed {seed}: {r['wall']:.0f}s (load {os.getloadavg()[0]:.1f})", flush=True)
    start = f"from sft {a.sft_steps} steps" if a.model else "from random weights"
    print(f"longtail, multiplex (sync: the on-policy reference), 2 ranks '0=rollout;1=rollout,train', "
          f"{a.steps} steps, seeds {seeds}, {start}, extra {a.extra}, corrected {ARMS['corrected']}")
    print(f"{'arm':12s} {'seed':>4s} {'trained':>7s} {'eval0':>6s} {'eval':>6s} {'gain/1k':>8s} {'rew 1st3':>8s} "
          f"{'rew last3':>9s} {'rgain/1k':>8s} {'clip':>6s} {'stale':>6s} {'dropped':>7s} {'IS mean':>8s} "
          f"{'IS max':>9s} {'max med':>8s}")
    for r in rows:
        ism = f"{r['is_mean']:8.4f}" if r["is_mean"] >= 0 else f"{'-':>8s}"
        isx = f"{r['is_max']:9.3g}" if r["is_max"] >= 0 else f"{'-':>9s}"
        imd = f"{r['is_max_med']:8.3f}" if r["is_max_med"] >= 0 else f"{'-':>8s}"
        print(f"{r['arm']:12s} {r['seed']:4d} {r['trained']:7d} {r['eval0']:6.3f} {r['eval1']:6.3f} {r['gain']:8.4f} "
              f"{r['reward_first']:8.3f} {r['reward_last']:9.3f} {r['rgain']:8.4f} {r['clip']:6.3f} {r['stale']:6.2f} "
              f"{r['dropped']:7d} {ism} {isx} {imd}")
    by = {arm: [r for r in rows if r["arm"] == arm] for arm in ARMS}
    print("mean over seeds:")
    for arm, rs in by.items():
        m = {k: float(np.mean([r[k] for r in rs])) for k in ("trained", "eval1", "gain", "reward_last", "rgain", "clip")}
        print(f"  {arm:12s} trained {m['trained']:.0f}  eval {m['eval1']:.3f}  gain/1k {m['gain']:.4f}  "
              f"reward last third {m['reward_last']:.3f}  reward gain/1k {m['rgain']:.4f}  clip {m['clip']:.3f}")
    u, c = by["uncorrected"], by["corrected"]
    ok = True
    for key, name in (("gain", "held-out score gain per 1000 trained samples"),
                      ("rgain", "training reward gain per 1000 trained samples")):
        d = np.array([ci[key] - ui[key] for ci, ui in zip(c, u)])
        mu, mc = float(np.mean([r[key] for r in u])), float(np.mean([r[key] for r in c]))
        se = float(np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
        # A ratio means something only between two positive gains (no learning: printed as n/a).
        ratio = mc / mu if mu > 0 and mc > 0 else float("nan")
        paired = " ".join(f"{ci[key] / ui[key]:.2f}" if ui[key] > 0 and ci[key] > 0 else "n/a" for ci, ui in zip(c, u))
        print(f"{name}: corrected / uncorrected = {ratio:.2f} (paired by seed: {paired}); "
              f"difference {np.mean(d):+.4f} +- {se:.4f} (1 s.e.)")
        ok = ok and bool(np.mean(d) >= -2 * se)
    print(("met: " if ok else "NOT MET: ") + "the corrected objective learns at least as fast per trained sample "
          "(held-out score and training reward gains, each within 2 s.e. of the paired differences)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
