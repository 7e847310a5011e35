#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of checkpoints and resume of `tagflow train` (share/doc/checkpoints.md).

    ckpt_tests.py CASE --tagflow BIN --workdir DIR
CASE kill_<seed>: an uninterrupted reference run, then the same run SIGKILLed (every rank) at a
  random moment drawn from the seed, resumed with the same command line (auto-resume), and
  checked with h5py: every sample id of the dataset order exactly once in /samples and in
  /consumed, every prompt group 0..K-1 exactly once with its G samples, steps/versions
  monotonic, a /resumes row, and the same per-sample rewards and per-step reward curve as the
  uninterrupted run (sync mode is deterministic per sample id).
CASE signal: SIGTERM to one rank -> checkpoint, the contract line, exit 75; resumed, then SIGUSR1
  to mpirun (forwarded to the ranks) -> exit 75 again; then SIGINT and SIGHUP to one rank, each the
  same; resumed to the end; same checks.
CASE akill_<mode>_<seed> (mode disaggregated or multiplex): SIGKILL of every rank at a random
  moment after the checkpoint at step 3 (--ckpt-every 3), whose pool of untrained samples must be
  non-empty; resumed; async exactly-once checks (counts and identities, no reward comparison:
  async runs depend on timing): no id twice in /samples or /consumed, consumed ids in /samples,
  each generator's prompt order complete up to what the final STOP discarded, steps/versions
  monotonic, one /resumes row. Seed 2 also: the checkpoint resumed with --mode sync -> exit 2.
CASE akill_resplit: multiplex with a train group that changes (--rebalance-every, changes forced by
  TAGFLOW_TEST_TRAIN_GROUPS): SIGKILL of every rank after a checkpoint written while one multi-tag
  rank was out of the group; resumed (the whole group again, then a rank leaves and joins); the same
  exactly-once checks, and every rank ends bit-identical to the coordinator.
CASE asignal: multiplex; SIGTERM to the rollout-only rank -> checkpoint, contract line, exit 75;
  resumed, SIGUSR1 to mpirun -> 75; another --rank-tags split -> exit 2, file untouched; resumed
  to the end; same checks.
CASE errors: bad resumes exit 2 with one line naming the option: --resume without a checkpoint,
  another seed, another model size, --no-resume without --overwrite, --resume --overwrite, a
  sync checkpoint resumed in an async mode, a checkpoint past --steps.
CASE corrupt: a truncated weights file, a flipped byte in the optimizer state, another format
  version, a truncated manifest (exit 2, one line naming the file); then the intact checkpoint
  extends the finished run with a larger --steps and --no-resume --overwrite starts afresh.
Each case prints what it measured and exits non-zero on failure.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "app"))
from app_tests import ENV, Failure, check, rank_pids  # noqa: E402  (mpirun env, check() prints ok:)
import tagflow_run  # noqa: E402  (share/python, put on sys.path by app_tests)

STEPS, P, G, EVERY = 8, 4, 4, 3
RUN = ["--prompts-per-step", str(P), "--group-size", str(G), "--eval-every", "2",
       "--eval-prompts", "8", "--gemm-check", "false"]
CONTRACT = re.compile(r"tagflow: checkpoint at step (\d+) after (SIGTERM|SIGUSR1|SIGINT|SIGHUP); exiting for requeue")


def fresh(a, name):
    d = os.path.join(a.workdir, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def train(a, out, extra=(), timeout=120, every=EVERY, steps=STEPS, mode=("--mode", "sync")):
    """The sync cases' run (mode=() for none: the default picks it); an --mode in extra wins."""
    mode = [] if "--mode" in extra else list(mode)
    cmd = (["mpirun", "-n", "2", a.tagflow, "train", "--out", out] + RUN + mode +
           ["--ckpt-every", str(every), "--steps", str(steps)] + list(extra))
    t0 = time.time()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    p.wall = time.time() - t0
    return p


def start(a, out, log_name, every=EVERY, steps=STEPS, extra=()):
    cmd = (["mpirun", "-n", "2", a.tagflow, "train", "--out", out] + RUN + ["--mode", "sync", "--ckpt-every", str(every),
                                                                          "--steps", str(steps)] + list(extra))
    log = open(os.path.join(a.workdir, log_name), "w")
    return subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=log, text=True)


def manifest_step(out):
    with open(os.path.join(out, "checkpoint", "manifest.txt")) as f:
        for line in f:
            if line.startswith("step "):
                return int(line.split()[1])
    return None


def read_run(out):
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        bad = tagflow_run.check_invariants(f)
        s = f["samples"]
        d = {
            "bad": bad,
            "ids": s["id"][()], "group": s["group"][()], "reward": s["reward"][()],
            "cons_id": f["consumed"]["id"][()], "cons_step": f["consumed"]["step"][()],
            "step": f["steps"]["step"][()], "version": f["steps"]["policy_version"][()],
            "reward_mean": f["steps"]["reward_mean"][()], "lr": f["steps"]["lr"][()],
            "t_start": f["steps"]["t_start"][()], "t_end": f["steps"]["t_end"][()],
            "eval_step": f["eval"]["step"][()], "sync_version": f["syncs"]["version"][()],
            "resumes": [(int(r), float(t), int(n)) for r, t, n in zip(f["resumes"]["from_step"][()], f["resumes"]["t"][()],
                                                                  f["resumes"]["rows_discarded"][()])],
        }
    return d


def check_exactly_once(d, what, steps=STEPS):
    check(not d["bad"], f"{what}: run file invariants hold {d['bad']}")
    K = steps * P
    ids = np.sort(d["ids"])
    check(np.array_equal(ids, np.arange(K * G)), f"{what}: /samples holds every sample id 0..{K * G - 1} exactly once "
          f"({len(d['ids'])} rows, {len(np.unique(d['ids']))} unique)")
    groups, counts = np.unique(d["group"], return_counts=True)
    check(np.array_equal(groups, np.arange(K)) and np.all(counts == G),
          f"{what}: prompt groups are exactly the dataset order 0..{K - 1}, each with its {G} samples")
    cons = np.sort(d["cons_id"])
    check(np.array_equal(cons, np.arange(K * G)), f"{what}: /consumed trains every sample exactly once")
    check(np.all(d["cons_step"] == d["cons_id"] // (P * G)), f"{what}: each sample trained in its own step")
    check(np.array_equal(d["step"], np.arange(steps)), f"{what}: /steps is 0..{steps - 1} in order: {d['step']}")
    check(np.array_equal(d["version"], np.arange(1, steps + 1)), f"{what}: policy versions 1..{steps} monotonic")
    check(np.all(np.diff(d["eval_step"]) > 0), f"{what}: /eval steps strictly increasing {d['eval_step']}")
    check(np.all(np.diff(d["sync_version"]) > 0), f"{what}: /syncs versions strictly increasing {d['sync_version']}")


def same_curve(d, ref, what):
    order, rorder = np.argsort(d["ids"]), np.argsort(ref["ids"])
    diff = np.abs(d["reward"][order] - ref["reward"][rorder])
    check(np.all(diff <= 1e-6), f"{what}: every sample's reward equals the uninterrupted run's (max diff {diff.max():.3g})")
    dm = np.abs(d["reward_mean"] - ref["reward_mean"]).max()
    check(dm <= 1e-6, f"{what}: the reward curve continues as without the kill (max diff {dm:.3g}): "
          f"{np.round(d['reward_mean'], 3).tolist()}")


# ---------------------------------------------------------------- kill at a random moment
def kill_every_rank(proc):
    """SIGKILLs every rank of the mpirun `proc`; returns {rank: pid} and mpirun's stdout once it
    has ended (a Failure if it still runs 60 s later)."""
    pids = rank_pids(proc.pid)
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        stdout, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise Failure("mpirun still running 60 s after its ranks were killed")
    return pids, stdout


# A learning-rate warm-up and cosine decay: a function of the step, so the resumed run continues it.
LR = ["--lr", "0.001", "--lr-warmup-steps", "3", "--lr-schedule", "cosine", "--min-lr-ratio", "0.1"]


def case_kill(a, seed):
    rng = random.Random(seed)
    ref_out = fresh(a, f"ref_{seed}")
    p = train(a, ref_out, LR)
    check(p.returncode == 0, f"reference run exits 0 ({p.wall:.1f}s)" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    ref = read_run(ref_out)
    check_exactly_once(ref, "reference")
    check(manifest_step(ref_out) == STEPS, f"reference run ends with a checkpoint at step {STEPS}")
    # Training (step 0 to the last step's end) follows the step-0 checkpoint closely; the kill lands
    # at a random moment of it (start-up is excluded: it is most of a short run's wall time).
    train_span = float(ref["t_end"][-1] - ref["t_start"][0])

    out = fresh(a, f"kill_{seed}")
    proc = start(a, out, f"kill_{seed}.log", extra=LR)
    t_start = time.time()
    # The step-0 checkpoint exists early; the kill lands at a random moment after it.
    while not os.path.exists(os.path.join(out, "checkpoint", "manifest.txt")):
        if proc.poll() is not None or time.time() - t_start > 60:
            raise Failure("no step-0 checkpoint appeared")
        time.sleep(0.05)
    delay = rng.uniform(0.15, 0.95) * train_span
    time.sleep(delay)
    pids, stdout = kill_every_rank(proc)
    steps_seen = len(re.findall(r"^step\s+\d+/\d+ reward", stdout, re.M))
    print(f"seed {seed}: SIGKILL of ranks {sorted(pids)} {delay:.2f}s after the step-0 checkpoint "
          f"of {train_span:.2f}s of training (rc {proc.returncode}, {steps_seen} steps printed, checkpoint at step "
          f"{manifest_step(out)})")
    check(proc.returncode != 0 or steps_seen == STEPS, "mpirun reports the killed job (or it had finished)")

    p = train(a, out, LR)  # the same command line: resumes by itself
    check(p.returncode == 0, f"resumed run exits 0 ({p.wall:.1f}s)" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    m = re.search(r"tagflow: resuming .* \(step (\d+)\); (\d+) rows written after it discarded", p.stdout)
    check(m is not None, "resumed run says where it resumed from")
    d = read_run(out)
    check(len(d["resumes"]) == 1 and d["resumes"][0][0] == int(m.group(1)) and d["resumes"][0][2] == int(m.group(2)),
          f"one /resumes row matching the message: {d['resumes']}")
    check(d["resumes"][0][0] % EVERY == 0 or d["resumes"][0][0] == STEPS,
          f"resumed from a --ckpt-every {EVERY} boundary (step {d['resumes'][0][0]})")
    check_exactly_once(d, f"seed {seed}")
    same_curve(d, ref, f"seed {seed}")
    want = [0.001 * (k + 1) / 3 if k < 3 else 0.001 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * (k - 3) / (STEPS - 3))))
            for k in range(STEPS)]
    check(np.allclose(d["lr"], want, rtol=0, atol=1e-15) and np.array_equal(d["lr"], ref["lr"]),
          f"seed {seed}: /steps lr continues the warm-up and cosine through the resume: {np.round(d['lr'], 6).tolist()}")


# ---------------------------------------------------------------- SIGTERM / SIGUSR1 -> 75
def wait_for_checkpoint(proc, out, n):
    """Waits until OUT/checkpoint is at step >= n (ranks' stdout reaches us only at exit: buffered)."""
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        try:
            step = manifest_step(out)
        except OSError:
            step = None
        if step is not None and step >= n:
            return step
        time.sleep(0.05)
    raise Failure(f"run did not reach a checkpoint at step {n} (rc {proc.poll()})")


def interrupt(a, out, name, sig, to_mpirun, at_step, steps):
    proc = start(a, out, f"{name}.log", every=1, steps=steps)
    lines = []
    seen = wait_for_checkpoint(proc, out, at_step)
    if to_mpirun:
        proc.send_signal(sig)
        whom = "mpirun"
    else:
        pids = rank_pids(proc.pid)
        os.kill(pids[1], sig)
        whom = "rank 1 only"
    try:
        rest, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise Failure(f"{name}: still running 90 s after {signal.Signals(sig).name}")
    text = "".join(lines) + rest
    m = CONTRACT.search(text)
    check(proc.returncode == 75, f"{name}: {signal.Signals(sig).name} to {whom} at step {seen}: exit code 75 "
          f"(got {proc.returncode})")
    check(m is not None and m.group(2) == signal.Signals(sig).name, f"{name}: prints the contract line: {m and m.group(0)}")
    step = int(m.group(1))
    check(step >= seen and manifest_step(out) == step, f"{name}: checkpoint at step {step} on disk (signal seen after step {seen})")
    with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
        check(len(f["steps"]["step"]) == step, f"{name}: run file flushed with {step} steps")
    return step


def case_signal(a):
    out = fresh(a, "signal")
    # Long enough that a signal never lands in the last step (then the run just ends, exit 0),
    # however fast the steps are on a quiet machine.
    steps = 40
    s1 = interrupt(a, out, "sigterm", signal.SIGTERM, False, 2, steps)
    s2 = interrupt(a, out, "sigusr1", signal.SIGUSR1, True, s1 + 2, steps)
    check(s2 > s1, f"the second run went on from step {s1} to {s2}")
    # Ctrl-C or a closed terminal reaching a rank: the same checkpoint and exit 75, not a kill.
    s3 = interrupt(a, out, "sigint", signal.SIGINT, False, s2 + 2, steps)
    s4 = interrupt(a, out, "sighup", signal.SIGHUP, False, s3 + 2, steps)
    check(s4 > s3 > s2, f"the SIGINT and SIGHUP runs went on: {s2} -> {s3} -> {s4}")
    p = train(a, out, steps=steps)
    check(p.returncode == 0, f"final resume exits 0 ({p.wall:.1f}s)" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    d = read_run(out)
    check([r[0] for r in d["resumes"]] == [s1, s2, s3, s4], f"/resumes rows from steps {s1}, {s2}, {s3}, {s4}: {d['resumes']}")
    check(all(r[2] == 0 for r in d["resumes"]), "nothing to discard after a signal checkpoint")
    # OUT/resumes.log: the append-only restart log, one line per resuming start, written before
    # the run file is touched (a /resumes row can be cut back; these lines cannot).
    log = open(os.path.join(out, "resumes.log")).read().splitlines() if os.path.exists(os.path.join(out, "resumes.log")) else []
    froms = [int(re.search(r"from_step=(\d+)", ln).group(1)) for ln in log if "from_step=" in ln]
    check(froms == [s1, s2, s3, s4] and len(log) == 4, f"resumes.log has one line per resume, steps {s1}..{s4}: {log}")
    check_exactly_once(d, "signal", steps)


# ---------------------------------------------------------------- bad resumes
def expect_error(a, out, extra, needle, what, steps=2):
    p = train(a, out, extra, timeout=60, steps=steps)
    errs = [l for l in p.stderr.splitlines() if "error" in l]
    check(p.returncode == 2, f"[{what}] exit code 2 (got {p.returncode}) in {p.wall:.1f}s"
          + ("" if p.returncode == 2 else p.stdout[-1500:] + p.stderr[-1500:]))
    needles = needle if isinstance(needle, tuple) else (needle,)
    check(any(all(n in l for n in needles) for l in errs), f"[{what}] error names {needles}: {errs}")
    check(len(errs) <= 2, f"[{what}] one error line (per rank at most): {len(errs)}")


def two_step_run(a, name):
    out = fresh(a, name)
    p = train(a, out, [], steps=2)
    check(p.returncode == 0, f"a 2-step run exits 0 ({p.wall:.1f}s)" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    check(manifest_step(out) == 2, "checkpoint at step 2")
    return out


def case_errors(a):
    out = two_step_run(a, "errors")
    base = []
    empty = fresh(a, "errors_empty")
    expect_error(a, empty, base + ["--resume"], "no checkpoint", "--resume without a checkpoint")
    check(not os.path.exists(os.path.join(empty, "tagflow.h5")), "no run file created by a failed --resume")
    expect_error(a, out, base + ["--seed", "5"], "written with --seed 1", "another seed")
    expect_error(a, out, base + ["--d-model", "32"], "has shape", "another model size")
    expect_error(a, out, base + ["--no-resume"], "already exists", "--no-resume without --overwrite")
    expect_error(a, out, base + ["--resume", "--overwrite"], "choose one", "--resume --overwrite")
    expect_error(a, out, [], "past --steps 1", "checkpoint past --steps", steps=1)
    expect_error(a, out, base + ["--mode", "disaggregated", "--rank-tags", "0=train;1=rollout"],
                 ("written with --mode sync", "--mode disaggregated"), "a sync checkpoint resumed in an async mode")
    # Without --mode a resumed run takes its checkpoint's mode (the default, multiplex, would be refused).
    p = train(a, out, [], steps=3, mode=())
    check(p.returncode == 0 and "no --mode given: mode sync: the checkpoint this run resumes was written in it"
          in p.stdout and "2 ranks, mode sync, run file" in p.stdout,
          f"a sync checkpoint resumed without --mode runs in sync (exit {p.returncode})"
          + ("" if p.returncode == 0 else p.stdout[-1500:] + p.stderr[-1500:]))
    check(manifest_step(out) == 3, "it resumed at step 2 and checkpointed step 3")



def case_short_file(a):
    # A kill that lands inside the run file's flush, after HDF5 wrote the superblock but before
    # the file was extended to the length it records, leaves the file shorter than its superblock
    # says, and HDF5 refuses to open it ("truncated file"). Seen after SIGKILL in
    # Gateway.ckpt_kill. Made here by cutting the last byte of a finished run's file: the resume
    # must extend it, say so on one line, and continue with every invariant holding.
    out = two_step_run(a, "short_file")
    h5 = os.path.join(out, "tagflow.h5")
    size = os.path.getsize(h5)
    os.truncate(h5, size - 1)
    p = train(a, out, [], steps=4)
    msg = [l for l in p.stderr.splitlines() if "its superblock records" in l]
    check(p.returncode == 0, f"the resume of a file 1 byte short of its superblock exits 0 (exit {p.returncode})"
          + ("" if p.returncode == 0 else p.stdout[-1500:] + p.stderr[-1500:]))
    check(len(msg) == 1 and h5 in msg[0] and f"{size - 1} bytes" in msg[0] and f"records {size}" in msg[0],
          f"one warning line names the file and both lengths: {msg}")
    d = read_run(out)
    check_exactly_once(d, "short_file", steps=4)
    check([r[0] for r in d["resumes"]] == [2], f"one /resumes row, from step 2 ({d['resumes']})")


def case_corrupt(a):
    out = two_step_run(a, "corrupt")
    base = []
    ck = os.path.join(out, "checkpoint")

    def damaged(name, mutate, needle, what):
        path = os.path.join(ck, name)
        keep = open(path, "rb").read()
        open(path, "wb").write(mutate(keep))
        try:
            expect_error(a, out, base, needle, what)
        finally:
            open(path, "wb").write(keep)

    damaged("policy/model.safetensors", lambda b: b[: len(b) // 2],
            ("policy/model.safetensors", "(truncated)"), "truncated weights")
    damaged("actor_state.pt", lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:], ("actor_state.pt: corrupt", "CRC-32"),
            "one flipped byte in the optimizer state")
    damaged("manifest.txt", lambda b: b.replace(b"tagflow-checkpoint 1", b"tagflow-checkpoint 2"),
            ("manifest.txt", "format version 2"),
            "another format version")
    damaged("manifest.txt", lambda b: b[: len(b) - 20], "manifest.txt", "truncated manifest")
    # The untouched checkpoint still resumes; a larger --steps extends the finished run.
    p = train(a, out, [], steps=3)
    check(p.returncode == 0 and "resuming" in p.stdout, f"--steps 3 extends the 2-step run ({p.wall:.1f}s)"
          + ("" if p.returncode == 0 else p.stderr[-2000:]))
    with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
        check(f["steps"]["step"][()].tolist() == [0, 1, 2], "steps 0, 1, 2 after the extension")
        check(len(f["resumes"]["from_step"]) == 1, "one /resumes row")
    p = train(a, out, base + ["--no-resume", "--overwrite"], steps=2)
    check(p.returncode == 0 and "resuming" not in p.stdout, "--no-resume --overwrite starts afresh")
    with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
        check(len(f["steps"]["step"]) == 2 and len(f["resumes"]["from_step"]) == 0, "a fresh file: 2 steps, no /resumes")
    check(manifest_step(out) == 2, "and a fresh checkpoint")


# ---------------------------------------------------------------- async modes
# Async runs depend on timing (which rank finishes what first), so these compare counts and
# identities, not rewards. Generator i of n (the rollout ranks of the mode, ascending) takes the
# prompt groups i, i+n, i+2n, ... in order; sample id = group * G + k.
ASYNC = {
    "multiplex": (["--mode", "multiplex", "--rank-tags", "0=rollout;1=rollout,train"], [0, 1]),
    "disaggregated": (["--mode", "disaggregated", "--rank-tags", "0=train;1=rollout"], [1]),
}
A_P, A_G = 2, 4
A_MAX_BATCH = 16
A_RUN = ["--prompts-per-step", str(A_P), "--group-size", str(A_G), "--eval-every", "0", "--eval-prompts", "8",
         "--gemm-check", "false", "--max-batch", str(A_MAX_BATCH), "--threads", "1"]


def a_cmd(a, out, mode, steps, every, extra=()):
    return (["mpirun", "-n", "2", a.tagflow, "train", "--out", out] + A_RUN + ASYNC[mode][0] +
            ["--steps", str(steps), "--ckpt-every", str(every)] + list(extra))


def a_train(a, out, mode, steps, every, timeout=120, extra=()):
    t0 = time.time()
    p = subprocess.run(a_cmd(a, out, mode, steps, every, extra), env=ENV, capture_output=True, text=True,
                       timeout=timeout)
    p.wall = time.time() - t0
    return p


def manifest(out):
    m = {}
    with open(os.path.join(out, "checkpoint", "manifest.txt")) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition(" ")
            m[k] = v
    return m


def discarded(stdout):
    m = re.search(r"(\d+) unfinished generations discarded", stdout)
    return int(m.group(1)) if m else None


def check_async_once(d, what, steps, gens, discarded_at_end):
    """Exactly-once for an async run: ids unique, trained once, prompt groups in each generator's order."""
    check(not d["bad"], f"{what}: run file invariants hold {d['bad']}")
    ids, groups = d["ids"], d["group"]
    check(len(np.unique(ids)) == len(ids), f"{what}: no sample id twice in /samples ({len(ids)} rows)")
    check(np.all(groups == ids // A_G), f"{what}: every sample's group is its id // G")
    cons = d["cons_id"]
    check(len(np.unique(cons)) == len(cons), f"{what}: no sample id twice in /consumed ({len(cons)} rows)")
    check(np.all(np.isin(cons, ids)), f"{what}: every consumed id is a row of /samples")
    n = len(gens)
    missing = 0
    window = A_MAX_BATCH // A_G + 1  # groups a generator can hold in flight (its engine's slots)
    for i, r in enumerate(gens):
        mine = np.unique(groups[groups % n == i])
        check(np.all(d["rank"][groups % n == i] == r), f"{what}: groups = {i} mod {n} all generated by rank {r}")
        if len(mine) == 0:
            continue
        # Every group of this generator up to its last one is complete, except those still being
        # generated when the run ended (the end's STOP discards unfinished generations): the
        # last `window` groups of its order at most. A gap further back is a skipped prompt.
        order = list(range(i, int(mine.max()) + 1, n))
        have = set(ids[groups % n == i].tolist())
        gaps = [g for g in order if any(g * A_G + k not in have for k in range(A_G))]
        missing += sum(1 for g in order for k in range(A_G) if g * A_G + k not in have)
        check(all(g in order[-window:] for g in gaps),
              f"{what}: no prompt skipped by generator rank {r}: incomplete groups {gaps[:10]} all among its last "
              f"{window} of {len(order)} (in flight at the end)")
    print(f"{what}: {missing} sample ids of unfinished groups at the end; the run reported {discarded_at_end} "
          f"unfinished generations discarded")
    check(np.array_equal(d["step"], np.arange(steps)), f"{what}: /steps is 0..{steps - 1} in order: {d['step']}")
    check(np.array_equal(d["version"], np.arange(1, steps + 1)), f"{what}: policy versions 1..{steps} monotonic")
    check(np.all(np.diff(d["sync_version"]) > 0), f"{what}: /syncs versions strictly increasing {d['sync_version']}")
    trained_steps = np.unique(d["cons_step"])
    check(np.all(np.diff(d["cons_step"]) >= 0) and trained_steps.max() < steps, f"{what}: /consumed steps monotonic")


def read_async(out):
    d = read_run(out)
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        d["rank"] = f["samples"]["rank"][()]
    return d


def case_akill(a, mode, seed):
    """SIGKILL of every rank at a random moment after the first periodic checkpoint, resume, exactly-once.
    Seed 1 runs with --admission off, so the rollout side runs ahead and the checkpoint's pool holds
    untrained samples (their restore is checked); seed 2 with the default --admission staleness
    (generation bounded: the pool at a checkpoint is often empty; the grants restart at the cursors)."""
    rng = random.Random(seed)
    steps, every = 20, 3  # long enough that the kill always lands before the end
    extra = ["--admission", "off"] if seed == 1 else []
    out = fresh(a, f"akill_{mode}_{seed}")
    proc = subprocess.Popen(a_cmd(a, out, mode, steps, every, extra), env=ENV, stdout=subprocess.PIPE,
                            stderr=open(os.path.join(a.workdir, f"akill_{mode}_{seed}.log"), "w"), text=True)
    t0 = time.time()
    while True:  # the kill lands after the checkpoint at step 3, at a random moment of the next steps
        try:
            at = manifest_step(out)
        except OSError:
            at = None
        if at is not None and at >= every:
            break
        if proc.poll() is not None or time.time() - t0 > 90:
            raise Failure(f"no checkpoint at step {every} appeared (rc {proc.poll()})")
        time.sleep(0.02)
    # A random moment in the next 0.6 s, cut short once the checkpoint at step 3 x every is there
    # (a quiet machine runs 20 steps in well under a second): the kill lands before the end.
    t_kill = time.time() + rng.uniform(0.0, 0.6)
    t_ck = time.time()
    while time.time() < t_kill:
        try:
            if (manifest_step(out) or 0) >= 3 * every:
                break
        except OSError:
            pass
        time.sleep(0.005)
    delay = time.time() - t_ck
    pids, stdout = kill_every_rank(proc)
    m = manifest(out)
    pool = int(m["sched.pool_samples"])
    print(f"{mode} seed {seed}: SIGKILL of ranks {sorted(pids)} {delay:.2f}s after the step-{every} checkpoint "
          f"(rc {proc.returncode}); checkpoint at step {m['step']}: {pool} untrained samples pooled "
          f"({m['sched.pool_partial_groups']} partial groups), {len(m['sched.received'].split(','))} ids received "
          f"ahead of the cursors {m['sched.lo']}")
    check(proc.returncode != 0, "mpirun reports the killed job")
    check(int(m["step"]) % every == 0 and int(m["step"]) < steps, f"a periodic checkpoint (step {m['step']})")
    if extra:
        check(pool > 0, f"the checkpoint's pool holds untrained samples ({pool})")

    p = a_train(a, out, mode, steps, every, extra=extra)  # the same command line: resumes by itself
    check(p.returncode == 0, f"resumed run exits 0 ({p.wall:.1f}s)" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    r = re.search(r"tagflow: resuming .* \(step (\d+)\); (\d+) rows written after it discarded", p.stdout)
    check(r is not None and int(r.group(1)) == int(m["step"]), "resumed run says it resumed from that checkpoint")
    check(f"{pool} untrained samples in the pool" in p.stdout, "the coordinator restored the pool")
    d = read_async(out)
    check(len(d["resumes"]) == 1 and d["resumes"][0][0] == int(m["step"]) and d["resumes"][0][2] == int(r.group(2)),
          f"one /resumes row matching the message: {d['resumes']}")
    dis = discarded(p.stdout)
    check(dis is not None, "the resumed run reports its discarded generations")
    check_async_once(d, f"{mode} seed {seed}", steps, ASYNC[mode][1], dis)
    check(manifest_step(out) == steps, f"the run ends with a checkpoint at step {steps}")
    again = re.search(r"(\d+) samples generated again after the resume", p.stdout)
    print(f"generated again after the resume and dropped (recorded before the checkpoint): {again.group(1) if again else 0}")
    if seed == 2:  # an async checkpoint resumed in another mode: one line naming the option
        expect_error(a, out, ["--mode", "sync"], (f"written with --mode {mode}", "--mode sync"),
                     f"a {mode} checkpoint resumed with --mode sync", steps=steps)


RESPLIT_TAGS = "0=rollout,train;1=rollout,train;2=rollout,train"
RESPLIT_GROUPS = "2=0;4=0,2;8=0,1;10=0,1,2"  # step=train group (TAGFLOW_TEST_TRAIN_GROUPS)


def case_akill_resplit(a):
    """multiplex whose train group changes (--rebalance-every; the changes forced at steps 2, 4, 8 and 10
    by TAGFLOW_TEST_TRAIN_GROUPS, so they come whatever the machine measures): every rank SIGKILLed
    right after the checkpoint at step 6, while the group is {0,2} and rank 1 a weight receiver. The
    same command resumes (the whole group {0,1,2} again, all of it loading the actor state; rank 2
    leaves at step 8 and joins again at step 10, receiving that state) and the run is exactly-once;
    every rank ends with the coordinator's weights bit for bit (--sync-delta pushes)."""
    steps, every = 12, 3
    out = fresh(a, "akill_resplit")
    env = dict(ENV, TAGFLOW_TEST_TRAIN_GROUPS=RESPLIT_GROUPS)
    cmd = (["mpirun", "-x", "TAGFLOW_TEST_TRAIN_GROUPS", "-n", "3", a.tagflow, "train", "--out", out] + A_RUN +
           ["--mode", "multiplex", "--rank-tags", RESPLIT_TAGS, "--rebalance-every", "1000", "--sync-delta",
            "--steps", str(steps), "--ckpt-every", str(every)])
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=open(os.path.join(a.workdir, "akill_resplit.log"), "w"), text=True)
    t0 = time.time()
    while True:
        try:
            at = manifest_step(out)
        except OSError:
            at = None
        if at is not None and at >= 2 * every:
            break
        if proc.poll() is not None or time.time() - t0 > 90:
            raise Failure(f"no checkpoint at step {2 * every} appeared (rc {proc.poll()})")
        time.sleep(0.005)
    pids, stdout = kill_every_rank(proc)
    m = manifest(out)
    print(f"resplit: SIGKILL of ranks {sorted(pids)} after the checkpoint at step {m['step']} (train group "
          f"{m['sched.train_group']}, eligible {m['sched.members']}; rc {proc.returncode})")
    check(int(m["step"]) in (6, 9) and m["sched.members"] == "0,1,2",
          f"the checkpoint (step {m['step']}) records the eligible ranks 0,1,2 and its group {m['sched.train_group']}")
    check(m["sched.train_group"] == ("0,2" if int(m["step"]) == 6 else "0,1"),
          "the checkpoint was written while the forced group trained")
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    wall = time.time() - t0
    check(p.returncode == 0, f"resumed run exits 0 ({wall:.1f}s)" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    check(f"resumed from checkpoint at step {m['step']}" in p.stdout, "the resumed run starts at the checkpoint")
    for line in p.stdout.splitlines():
        if "train group" in line:
            print(line)
    check("train group {0,1,2} -> {0,1} (TAGFLOW_TEST_TRAIN_GROUPS)" in p.stdout or int(m["step"]) > 8,
          "rank 2 leaves the train group at step 8 after the resume")
    joined = re.search(r"step +10: train group \{0,1,2\} formed in [0-9.]+ s \(1 joining rank, (\d+) bytes", p.stdout)
    check(joined is not None and int(joined.group(1)) > 0, "rank 2 joins again at step 10 with the actor's state")
    same = re.search(r"ranks \{([0-9,]+)\} \(weight receivers and the train group\) hold version (\d+) "
                     r"bit-identical", p.stdout)
    check(same is not None and same.group(1) == "1,2" and int(same.group(2)) == steps,
          f"ranks 1 and 2 end with version {steps} bit-identical to the coordinator's: {same and same.group(0)}")
    d = read_async(out)
    check_async_once(d, "resplit", steps, [0, 1, 2], discarded(p.stdout))
    with open(os.path.join(out, "membership.json")) as f:
        mb = json.load(f)
    moves = [(c["step"], c["to"]) for c in mb["changes"]]
    check(mb["eligible"] == [0, 1, 2] and moves[-2:] == [(8, [0, 1]), (10, [0, 1, 2])],
          f"membership.json: eligible {mb['eligible']}, the resumed run's changes {moves}")
    # Each rank saw itself in every group it was told to train with, as the coordinator announced it.
    for r, log in mb["seen"].items():
        check(all(int(r) in g for _, g in log), f"rank {r} trained only in groups that held it")


def case_asignal(a):
    """multiplex: SIGTERM to the rollout-only rank -> checkpoint, exit 75; resume; SIGUSR1 to mpirun -> 75; resume."""
    mode, steps = "multiplex", 60
    out = fresh(a, "asignal")
    seen = []
    for name, sig, to_mpirun in (("asigterm", signal.SIGTERM, False), ("asigusr1", signal.SIGUSR1, True)):
        proc = subprocess.Popen(a_cmd(a, out, mode, steps, 1), env=ENV, stdout=subprocess.PIPE,
                                stderr=open(os.path.join(a.workdir, f"{name}.log"), "w"), text=True)
        at = wait_for_checkpoint(proc, out, (seen[-1] if seen else 0) + 2)
        if to_mpirun:
            proc.send_signal(sig)
            whom = "mpirun"
        else:
            os.kill(rank_pids(proc.pid)[0], sig)
            whom = "rank 0 only (not the coordinator)"
        try:
            text, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise Failure(f"{name}: still running 90 s after {signal.Signals(sig).name}")
        m = CONTRACT.search(text)
        check(proc.returncode == 75, f"{name}: {signal.Signals(sig).name} to {whom} after step {at}: exit code 75 "
              f"(got {proc.returncode})")
        check(m is not None and m.group(2) == signal.Signals(sig).name, f"{name}: prints the contract line: {m and m.group(0)}")
        step = int(m.group(1))
        check(step >= at and manifest_step(out) == step, f"{name}: checkpoint at step {step} on disk")
        with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
            check(len(f["steps"]["step"]) == step, f"{name}: run file flushed with {step} steps")
        seen.append(step)
    end = seen[-1] + 2
    # Another split of the ranks (the coordinator moves to rank 0): one line, exit 2, and the run
    # file untouched (no /resumes row: checked below).
    cmd = a_cmd(a, out, mode, end, 1)
    cmd[cmd.index("0=rollout;1=rollout,train")] = "0=rollout,train;1=rollout"
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=60)
    errs = [l for l in p.stderr.splitlines() if "error" in l]
    check(p.returncode == 2 and len(errs) == 1 and "written with generating ranks {0,1} and train group {1}" in errs[0],
          f"another --rank-tags split: exit 2 (got {p.returncode}), one line: {errs}")
    p = a_train(a, out, mode, end, 1)
    check(p.returncode == 0, f"final resume to step {end} exits 0 ({p.wall:.1f}s)" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    d = read_async(out)
    check([r[0] for r in d["resumes"]] == seen, f"/resumes rows from steps {seen}: {d['resumes']}")
    check(all(r[2] == 0 for r in d["resumes"]), "nothing to discard after a signal checkpoint")
    check_async_once(d, "signal", end, ASYNC[mode][1], discarded(p.stdout))


# ---------------------------------------------------------------- full disk
# An error after the first collective aborts the job (Open MPI's MPI_ABORT banner): expected.
NOISE = re.compile(r"HDF5-DIAG|HDF5 error stack:|#\d{3} |terminate called|c10::Error|Exception raised from|"
                   r"Segmentation|core dumped|Traceback")


def case_full_disk(a, kind="blocks"):
    """The disk fills up after the checkpoint at step 2 (a 48 MiB tmpfs of 400 inodes, filled by
    the test): kind "blocks" fills its bytes (the run file's next write fails first), "ckpt" all but
    1 MiB (the next checkpoint runs out in the middle of writing its weights), "inodes" its inodes
    (the run file still grows; the next checkpoint cannot create its files). The run stops
    with a short error naming the path and "No space left on device" (no abort, no HDF5 or c10
    stack on the terminal), no checkpoint.tmp-* is left, the step-2 checkpoint is intact; with
    space again the same command resumes and the run is exactly-once."""
    mnt = os.path.join(a.workdir, "tmpfs")
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["umount", mnt], capture_output=True)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m,nr_inodes=400,mode=0755", "tmpfs", mnt],
                       capture_output=True, text=True)
    if m.returncode != 0:
        raise Failure(f"this test mounts a tmpfs and needs root (CI runs as root): {m.stderr.strip()}")
    try:
        out = os.path.join(mnt, "run")
        steps = 200  # long enough that a fast machine cannot finish before the filler fills the disk
        proc = start(a, out, "full_disk.log", every=2, steps=steps)
        at = wait_for_checkpoint(proc, out, 2)
        filler = os.path.join(mnt, "filler")
        if kind in ("blocks", "ckpt"):
            # blocks: every byte the tmpfs has left; ckpt: all but 1 MiB, room for the run file's
            # next steps but not for the next checkpoint (~2 MiB), which runs out inside a write.
            keep = 0 if kind == "blocks" else 1 << 20
            fs = os.statvfs(mnt)
            budget = fs.f_bavail * fs.f_frsize - keep
            # unbuffered: a buffered file would raise ENOSPC again when closed, with bytes unwritten
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            block = b"\0" * (1 << 16)
            try:
                while budget > 0:
                    budget -= os.write(fd, block[:min(len(block), budget)])
            except OSError:
                pass
            finally:
                os.close(fd)
        else:
            os.makedirs(filler)
            try:
                for i in range(100000):  # take every inode left
                    open(os.path.join(filler, str(i)), "w").close()
            except OSError:
                pass
        try:
            rest, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise Failure("full disk: the run still runs 120 s after the disk filled up")
        err = open(os.path.join(a.workdir, "full_disk.log")).read()
        text = rest + err
        check(proc.returncode not in (0, 75) and proc.returncode < 128 and proc.returncode != 134,
              f"full disk: the run stops with an error exit, not a signal or abort (exit {proc.returncode})")
        nospace = [l for l in text.splitlines() if "No space left on device" in l]
        check(nospace and any(mnt in l for l in nospace),
              f"full disk: an error line names the path and 'No space left on device': {nospace[:2]}")
        noise = [l for l in text.splitlines() if NOISE.search(l)]
        check(not noise, f"full disk: no stack dump or abort on the terminal: {noise[:3]}")
        ckpt_dir = os.path.join(out, "checkpoint")
        left = [n for n in os.listdir(out) + os.listdir(ckpt_dir) if ".tmp" in n]
        check(not left, f"full disk: no partial checkpoint left behind: {left}")
        step = manifest_step(out)
        check(step is not None and step >= at, f"full disk: the last good checkpoint (step {step}) is intact")
        shutil.rmtree(filler) if kind == "inodes" else os.remove(filler)
        p = train(a, out, steps=steps, every=2)
        check(p.returncode == 0, f"full disk: with space again the same command resumes and ends (exit {p.returncode})"
              + ("" if p.returncode == 0 else p.stderr[-2000:]))
        d = read_run(out)
        check_exactly_once(d, "full disk", steps)
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.workdir = os.path.join(a.workdir, "ckpt_" + a.case)
    os.makedirs(a.workdir, exist_ok=True)
    try:
        if a.case.startswith("kill_"):
            case_kill(a, int(a.case.split("_")[1]))
        elif a.case.startswith("full_disk_"):  # full_disk_blocks, full_disk_inodes, full_disk_ckpt
            case_full_disk(a, a.case.split("_")[2])
        elif a.case.startswith("akill_") and a.case != "akill_resplit":  # akill_<mode>_<seed>
            _, mode, seed = a.case.split("_")
            case_akill(a, mode, int(seed))
        else:
            globals()["case_" + a.case](a)
    except Failure as e:
        print("FAIL:", e)
        return 1
    print("PASS", a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
