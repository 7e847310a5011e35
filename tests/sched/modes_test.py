#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The three scheduling modes end to end: short real `tagflow train` runs under mpirun.

    modes_test.py CASE --tagflow BIN --workdir DIR
CASE: stale_weight (--stale weight at 3 ranks), two_ranks (sync, disaggregated and multiplex at 2 ranks give valid run files and keep
every rank to its tags), multiplex4 (4 ranks with mixed tags over many role switches: no sample
trained twice or lost, no overlap, monotone steps and versions, every member saw the same train
group at every switch), bad_usage (tags a mode cannot run with, bad option values), fresh_weights
(the rollout-only rank generates with the weights it was sent, in every mode), critic_ranks
(PPO with the critic on ranks tagged critic in the async modes, checkpointed and resumed),
fixed_lengths (--response-lengths lognormal:M:R: every sample, in every mode, is exactly the
length sched_policy::lognormal_length draws for its id, as `tagflow sim --lengths lognormal` draws it),
admission (--admission staleness vs off with a rollout-only rank much faster than training: at most half
off's fraction of finished samples dropped as stale, under 25%; every step still trains in full),
member_grants (multiplex beside a rollout-only rank: the coordinator's own groups are not dropped as stale),
late_wait (--late-wait at 3 ranks, one rollout-only, long-tailed lengths: steps wait for late groups,
which then train instead of going stale),
offpolicy (--old-logprobs recompute with --rollout-is token in multiplex with a rollout-only rank:
sane /steps is_weight_mean/is_weight_max/rs_rejected; a tiny --rollout-rs band rejects; measure
fills the columns but keeps rollout's loss; bad values).
sync_delta (--sync-delta in the async modes: every rollout-only rank ends bit-identical to the coordinator,
as with dense sends, also across a resume; /syncs says what moved; with nothing changed nothing moves),
resume_mode (--resume-mode/--resume-window/--resume-min-tokens: recompute recomputes KV caches of
generations in flight, keep none; bad values).
resplit (--rebalance-every: the train group changes between steps; ranks train exactly in the groups
announced, joiners get the actor state, every rank ends bit-identical; the measured choice runs).
Each case prints what it checked and exits non-zero on failure.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "share", "python"))
import tagflow_run  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "common"))
import testlib  # noqa: E402  (rank_pids, SlowedRank)

sys.path.insert(0, os.path.join(HERE, "..", "app"))
from app_tests import ENV, Failure, check  # noqa: E402  (mpirun as root, no TAGFLOW_*; check() prints ok:)
# Plumbing, not learning: a tiny batch, few eval prompts, no GEMM check.
FAST = ["--prompts-per-step", "2", "--group-size", "4", "--eval-every", "0", "--eval-prompts", "8",
        "--gemm-check", "false", "--max-batch", "16", "--threads", "1"]
TWO = "0=rollout;1=rollout,train"


def train(a, name, np_, args, timeout=120):
    out = os.path.join(a.workdir, name)
    shutil.rmtree(out, ignore_errors=True)
    fast = [x for k in range(0, len(FAST), 2) if FAST[k] not in args for x in FAST[k:k + 2]]  # args override
    cmd = ["mpirun", "-n", str(np_), a.tagflow, "train", "--out", out] + fast + args
    t0 = time.time()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    wall = time.time() - t0
    return out, p, wall


def train_checked(a, name, np_, args, what, tail=2500):
    """train(), its stdout's tail (and stderr on failure) printed, exit 0 checked as `what`."""
    out, p, wall = train(a, name, np_, args)
    sys.stdout.write(p.stdout[-tail:])
    if p.returncode != 0:
        sys.stdout.write(p.stderr[-3000:])
    check(p.returncode == 0, f"{what}: {np_}-rank run exits 0 ({wall:.1f}s)")
    return out, p, wall


def train_ok(a, name, np_, args):
    return train_checked(a, name, np_, args, name)[0]


def spans(f):
    tl = f["timeline"]
    kind = np.array(tagflow_run._decode(tl["kind"]), dtype=str)
    return tl["rank"][()], kind, tl["t_start"][()], tl["t_end"][()], tl["step"][()]


def common_checks(f, name, train_ranks, nsteps, staleness=1):
    bad = tagflow_run.check_invariants(f)
    check(not bad, f"{name}: schema v1 invariants hold {bad}")
    st = f["steps"]
    steps, vers = st["step"][()], st["policy_version"][()]
    check(len(steps) == nsteps and np.all(np.diff(steps) > 0) and np.all(np.diff(vers) > 0),
          f"{name}: {nsteps} steps, step and policy_version strictly increasing")
    check(np.all(st["t_start"][1:] >= st["t_end"][:-1] - 1e-6), f"{name}: steps do not overlap in time")
    rank, kind, t0, t1, _ = spans(f)
    for r in np.unique(rank):
        if r not in train_ranks:
            check(not np.any((rank == r) & (kind == "train")), f"{name}: rank {r} (no train tag) has no train span")
        sel = np.argsort(t0[rank == r], kind="stable")
        a0, a1 = t0[rank == r][sel], t1[rank == r][sel]
        check(np.all(a0[1:] >= a1[:-1] - 1e-9), f"{name}: rank {r}'s {len(a0)} spans do not overlap")
    ids = f["samples"]["id"][()]
    cons = f["consumed"]
    cid, cstep, cw = cons["id"][()], cons["step"][()], cons["weight"][()]
    check(len(np.unique(cid)) == len(cid), f"{name}: every consumed id appears once ({len(cid)} rows)")
    check(np.all(np.isin(cid, ids)), f"{name}: every consumed id is in /samples")
    # Staleness (drop mode): trained samples are at most `staleness` versions behind the trained
    # version (= the step); dropped ones (weight 0) are more.
    vmin = dict(zip(ids.tolist(), f["samples"]["version_min"][()].tolist()))
    age = np.array([s - vmin[i] for i, s in zip(cid.tolist(), cstep.tolist())])
    check(np.all(age[cw > 0] <= staleness) and np.all(age[cw == 0] > staleness),
          f"{name}: trained samples at most {staleness} version(s) old, dropped ones older "
          f"({int(np.sum(cw == 0))} dropped)")
    trained = cw > 0
    per_step = np.bincount(cstep[trained], minlength=nsteps)
    check(np.array_equal(per_step, st["samples"][()]), f"{name}: /steps samples = trained /consumed rows per step")
    drop_step = np.bincount(cstep[cw == 0], minlength=nsteps)
    weighted_step = np.bincount(cstep[(cw > 0) & (cw < 1)], minlength=nsteps)
    check(np.array_equal(drop_step, st["stale_dropped"][()]) and np.array_equal(weighted_step, st["stale_weighted"][()]),
          f"{name}: /steps stale_dropped {st['stale_dropped'][()].tolist()} and stale_weighted "
          f"{st['stale_weighted'][()].tolist()} = /consumed rows of weight 0 and of weight in (0, 1) per step")
    vmax = f["samples"]["version_max"][()]
    check(vmax.max() <= nsteps, f"{name}: no token from a version that was never trained")
    return rank, kind, t0, t1


def case_two_ranks(a):
    for mode in ("sync", "disaggregated", "multiplex"):
        # --admission off: the last check (the rollout-only rank never waits long, e.g. for weights)
        # is about unbounded generation; admission's waits are Sched.admission's.
        out = train_ok(a, f"two_{mode}", 2, ["--mode", mode, "--rank-tags", TWO, "--steps", "3", "--seed", "5",
                                            "--admission", "off"])
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            rank, kind, t0, t1 = common_checks(f, mode, {1}, 3)
            check(tagflow_run.config(f)["mode"] == mode, f"{mode}: mode recorded in the config attribute")
            gen = set(f["samples"]["rank"][()].tolist())
            st = f["steps"]
            first, last = st["t_start"][0], st["t_end"][-1]
            if mode == "disaggregated":
                check(gen == {0}, f"disaggregated: only the rollout rank generates training samples ({gen})")
                inside = (rank == 1) & (kind == "rollout") & (t1 > first) & (t0 < last)
                check(not np.any(inside), "disaggregated: rank 1 never rolls out during the run (only trains)")
                check(np.any((rank == 1) & (kind == "train")), "disaggregated: rank 1 trains")
            elif mode == "multiplex":
                # (the coordinator trains whenever the pool holds enough, so with a fast
                # rollout-only rank its own samples may all finish after the last step)
                check(0 in gen and gen <= {0, 1}, f"multiplex: samples from the generating ranks ({gen})")
                check(np.any((rank == 1) & (kind == "train")) and np.any((rank == 1) & (kind == "rollout")),
                      "multiplex: rank 1 both rolls out and trains")
            if mode != "sync":
                syncs = f["syncs"]["version"][()].tolist()
                check(syncs[0] == 0 and syncs == sorted(syncs) and len(syncs) >= 2,
                      f"{mode}: weight syncs to the rollout rank in version order {syncs}")
                check(not np.any((rank == 0) & (kind == "idle") & (t1 - t0 > 0.5)),
                      f"{mode}: the rollout-only rank never waits long")


def case_admission(a):
    """--admission staleness against off, with the README's tags: the rollout-only rank generates far
    faster than the coordinator trains. With admission it waits (idle) instead of generating samples
    that go stale, while off drops many; both train every step in full, and the rollout-only rank still
    generates its share. The bound is a count: a group the rollout-only rank generates while the fast
    coordinator trains two steps still goes stale, so on a loaded machine this 12-step run has dropped
    up to 14% (0% on a quiet one; bench.md's 40-step figure: 0.0%). Asserted: at most half off's
    drop fraction and under 25%."""
    n = 12
    base = ["--rank-tags", TWO, "--steps", str(n), "--seed", "5", "--staleness", "1"]
    got = {}
    for adm in ("off", "staleness"):
        out, p, wall = train_checked(a, f"admission_{adm}", 2, base + ["--admission", adm], f"--admission {adm}",
                                     1200)
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            rank, kind, t0, t1 = common_checks(f, f"admission {adm}", {1}, n)
            finished = len(f["samples"]["id"][()])
            cw = f["consumed"]["weight"][()]
            cid = f["consumed"]["id"][()]
            st = f["steps"]
            dropped = int(np.sum(cw == 0))
            trained = int(np.sum(cw > 0))
            check(int(np.sum(st["stale_dropped"][()])) == dropped,
                  f"--admission {adm}: /steps stale_dropped sums to the dropped /consumed rows ({dropped})")
            thr = 8  # FAST: 2 prompts x 4 samples
            check(np.all(st["samples"][()] >= thr), f"--admission {adm}: every step trains >= {thr} samples "
                  f"({st['samples'][()].tolist()})")
            srank = dict(zip(f["samples"]["id"][()].tolist(), f["samples"]["rank"][()].tolist()))
            from0 = sum(1 for i, w in zip(cid.tolist(), cw.tolist()) if w > 0 and srank[i] == 0)
            idle0 = float(np.sum((t1 - t0)[(rank == 0) & (kind == "idle")]))
            got[adm] = (finished, dropped, trained, from0, wall, idle0)
            print(f"--admission {adm}: {finished} finished, {dropped} dropped as stale "
                  f"({100.0 * dropped / max(1, finished):.1f}%), {trained} trained ({from0} from the rollout-only "
                  f"rank), rank 0 idle {idle0:.1f}s, wall {wall:.1f}s")
    fo, do, to, _, wo, _ = got["off"]
    fs, ds, ts, f0, ws, i0 = got["staleness"]
    check(do >= 0.2 * fo, f"--admission off: the fast rollout-only rank's surplus goes stale ({do} of {fo} "
          "finished samples dropped, >= 20%)")
    check(ds * fo <= 0.5 * do * fs and ds <= 0.25 * fs, f"--admission staleness: at most half off's drop fraction "
          f"and under 25% ({ds} of {fs} = {100.0 * ds / max(1, fs):.1f}%, off {100.0 * do / max(1, fo):.1f}%)")
    check(fs < fo, f"--admission staleness: fewer samples generated for the same steps ({fs} < {fo})")
    check(f0 >= ts // 3, f"--admission staleness: the rollout-only rank still generates a share of what trains "
          f"({f0} of {ts})")
    check(i0 > 0, "--admission staleness: the rollout-only rank's waits are idle spans in /timeline")
    print(f"wall time staleness/off: {ws / max(1e-9, wo):.2f} (not asserted)")


def case_late_wait(a):
    """--late-wait with three ranks, one rollout-only (`0=rollout;1=rollout,train;2=rollout,train`),
    `longtail` with long-tailed fixed lengths: with two trainers a step comes often, so a group held
    back by one long response outlives the one version --staleness 1 allows, and without waiting
    8.6-13.5% of the finished samples were dropped (bench.md, three seeds). With --late-wait 0.5 the
    step waits for such a group (at most its share of the batch of a cycle) and trains it: 0-3% were
    dropped in bench.md's runs, 3.4-4.6% in this one on a quiet machine. Asserted: the waits are
    reported, every step trains in full, at most half the drops of --late-wait 0 (when that run
    dropped at least two groups) and under 7% of the finished samples."""
    n = 20
    tags = "0=rollout;1=rollout,train;2=rollout,train"
    base = ["--rank-tags", tags, "--task", "longtail", "--steps", str(n), "--seed", "1", "--staleness", "1",
            "--prompts-per-step", "8", "--group-size", "8", "--max-batch", "64",
            "--response-lengths", "lognormal:32:10", "--max-new-tokens", "320"]
    got = {}
    for lw in ("0", "0.5"):
        out, p, _ = train_checked(a, f"late_wait_{lw}", 3, base + ["--late-wait", lw], f"--late-wait {lw}", 900)
        waited = re.search(r"multiplex: (\d+) steps? waited ([0-9.]+) s in all for late groups", p.stdout)
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            common_checks(f, f"late_wait {lw}", {1, 2}, n)
            finished = len(f["samples"]["id"][()])
            cw = f["consumed"]["weight"][()]
            dropped = int(np.sum(cw == 0))
            st = f["steps"]
            check(np.all(st["samples"][()] >= 64), f"--late-wait {lw}: every step trains >= 64 samples")
        got[lw] = (finished, dropped, waited)
        print(f"--late-wait {lw}: {finished} finished, {dropped} dropped as stale "
              f"({100.0 * dropped / max(1, finished):.1f}%), waits: {waited.group(0) if waited else 'none'}")
    f0, d0, w0 = got["0"]
    f1, d1, w1 = got["0.5"]
    check(w0 is None, "--late-wait 0: no step waits")
    if d0 >= 16:
        check(w1 is not None and int(w1.group(1)) > 0, "--late-wait 0.5: the steps that waited are reported")
        check(2 * d1 <= d0, f"--late-wait 0.5: at most half the drops of --late-wait 0 ({d1} against {d0})")
    else:
        print(f"--late-wait 0 dropped {d0} (< 16): the comparison is not made on this run")
    check(d1 <= 0.07 * f1, f"--late-wait 0.5: under 7% of finished samples dropped ({d1} of {f1})")


def case_member_grants(a):
    """Multiplex beside a rollout-only rank (the README's tags, `longtail`, the policy's lengths): the
    coordinator also generates, but its generation pauses for every step, so a group it started while
    rank 0 kept the trainer busy advanced only between steps and was dropped as stale (before
    sched_policy::grant_caps, this run: 176 and 184 of the coordinator's ~700 finished samples in two
    tries). Now its allowance of groups grows only while it waits idle for samples and halves on
    drops. Asserted: at most 10% of the coordinator's finished samples dropped (or it generated
    none), every step trains in full."""
    n = 20
    out = train_ok(a, "member_grants", 2, ["--mode", "multiplex", "--rank-tags", TWO, "--task", "longtail",
                                           "--steps", str(n), "--seed", "5", "--staleness", "1",
                                           "--prompts-per-step", "8", "--group-size", "8", "--max-batch", "64"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        common_checks(f, "member_grants", {1}, n)
        srank = dict(zip(f["samples"]["id"][()].tolist(), f["samples"]["rank"][()].tolist()))
        c = f["consumed"]
        cid, cw = c["id"][()].tolist(), c["weight"][()].tolist()
        st = f["steps"]
        samples = st["samples"][()]
    mine = sum(1 for r in srank.values() if r == 1)
    dropped = {r: sum(1 for i, w in zip(cid, cw) if w == 0 and srank[i] == r) for r in (0, 1)}
    print(f"coordinator finished {mine} samples, dropped {dropped[1]}; rank 0 finished "
          f"{len(srank) - mine}, dropped {dropped[0]}")
    check(dropped[1] <= 0.1 * mine, f"the coordinator's own samples: {dropped[1]} of {mine} dropped as stale (<= 10%)")
    check(np.all(samples == samples[0]), f"every step trains in full ({samples.tolist()})")


def case_multiplex4(a):
    tags = "0=rollout;1=rollout,train;2=rollout,train;3=rollout"
    n = 12
    out = train_ok(a, "mp4", 4, ["--mode", "multiplex", "--rank-tags", tags, "--steps", str(n), "--seed", "3"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        rank, kind, t0, t1 = common_checks(f, "mp4", {1, 2}, n)
        _, _, _, _, step = spans(f)
        nsamples = len(f["samples"]["id"])
        ncons = len(f["consumed"]["id"])
        check(nsamples >= ncons, f"mp4: {nsamples} finished samples, {ncons} consumed or dropped, "
                                 f"{nsamples - ncons} left over at the end")
        for r in (1, 2):
            tr = np.unique(step[(rank == r) & (kind == "train")])
            check(len(tr) == n, f"mp4: rank {r} trained in all {n} epochs")
        gen = set(f["samples"]["rank"][()].tolist())
        # The members (1, 2) generate only within an allowance that grows while the coordinator waits
        # idle (sched_policy::grant_caps): beside two rollout-only ranks they may never generate.
        check({0, 3} <= gen and gen <= {0, 1, 2, 3}, f"mp4: samples from the generating ranks ({gen})")
        for r in (0, 3):
            check(np.any((rank == r) & (kind == "weight_sync")), f"mp4: rollout-only rank {r} received new weights")
    with open(os.path.join(out, "membership.json")) as fh:
        m = json.load(fh)
    seen = {int(r): {e: tuple(mem) for e, mem in log} for r, log in m["seen"].items()}
    check(set(r for r, log in seen.items() if log) == {1, 2}, "mp4: only ranks 1 and 2 were ever in a train group")
    check(len(seen[1]) == n and seen[1] == seen[2],
          f"mp4: ranks 1 and 2 saw the same {n} epochs with the same members ({n} role switches)")
    check(all(mem == (1, 2) for mem in seen[1].values()), "mp4: every epoch's group is {1, 2}")


def case_stale_weight(a):
    # --stale weight: stale samples are trained with weight (eta+1)/(age+1), dropped below 0.25.
    # --admission off: admission would keep the two rollout-only ranks from producing stale samples.
    out = train_ok(a, "weight", 3, ["--mode", "multiplex", "--rank-tags", "0=rollout;1=rollout,train;2=rollout",
                                    "--steps", "6", "--seed", "2", "--stale", "weight", "--staleness", "0",
                                    "--admission", "off"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        bad = tagflow_run.check_invariants(f)
        check(not bad, f"weight: schema v1 invariants hold {bad}")
        ids = f["samples"]["id"][()]
        vmin = dict(zip(ids.tolist(), f["samples"]["version_min"][()].tolist()))
        c = f["consumed"]
        cid, cstep, w = c["id"][()], c["step"][()], c["weight"][()]
        age = np.array([s - vmin[i] for i, s in zip(cid.tolist(), cstep.tolist())])
        want = 1.0 / (age + 1)
        want[want < 0.25] = 0
        check(np.allclose(w, want, atol=1e-6), f"weight: /consumed weight = 1/(age+1) at eta 0 ({int(np.sum((w > 0) & (w < 1)))} "
                                               f"weighted, {int(np.sum(w == 0))} dropped)")
        check(np.any((w > 0) & (w < 1)), "weight: some stale samples were trained with a weight below 1")
        st = f["steps"]
        check(np.all(st["staleness_max"][()] <= 3), f"weight: staleness_max stays bounded {st['staleness_max'][()]}")
        sw = st["stale_weighted"][()]
        check(np.array_equal(sw, np.bincount(cstep[(w > 0) & (w < 1)], minlength=len(sw))) and sw.sum() > 0,
              f"weight: /steps stale_weighted {sw.tolist()} counts the weighted /consumed rows per step")


def case_train_priority(a):
    # --train-priority: rank 2 at priority 0 never leaves rollout although tagged train; the
    # others form every epoch's group. Rank 0 (the coordinator) always trains.
    n = 3
    out = train_ok(a, "prio", 3, ["--mode", "multiplex", "--rank-tags", "0=rollout,train;1=rollout,train;2=rollout,train",
                                  "--train-priority", "rollout,train=3;2=0", "--steps", str(n), "--seed", "4"])
    with open(os.path.join(out, "membership.json")) as fh:
        m = json.load(fh)
    seen = {int(r): {e: tuple(mem) for e, mem in log} for r, log in m["seen"].items()}
    check(not seen.get(2), f"prio: rank 2 (priority 0) was never in a train group ({seen.get(2)})")
    check(len(seen[0]) == n and all(mem == (0, 1) for mem in seen[0].values()) and seen[0] == seen[1],
          f"prio: ranks 0 and 1 trained together in all {n} epochs ({seen[0]})")
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        rank, kind, _, _, _ = spans(f)
        check(not np.any((rank == 2) & (kind == "train")), "prio: no train span on rank 2")
        check(2 in set(f["samples"]["rank"][()].tolist()), "prio: rank 2 generated samples")
        cfg = tagflow_run.config(f)
        check(cfg.get("train-priority", cfg.get("train_priority")) == "rollout,train=3;2=0",
              f"prio: the option is in the config attribute")


def case_bad_usage(a):
    for args, needle in [
        (["--mode", "disaggregated", "--rank-tags", "0=rollout,train;1=rollout,train"], "only rolls out"),
        (["--mode", "multiplex", "--rank-tags", "0=rollout,train;1=train", "--min-rollout-frac", "0.5"],
         "--min-rollout-frac"),
        (["--stale", "bogus"], "--stale"),
        (["--admission", "always"], "--admission"),
        (["--min-rollout-frac", "2"], "--min-rollout-frac"),
        (["--staleness", "-1"], "--staleness"),
        (["--mode", "multiplex", "--rank-tags", "0=rollout,train;1=rollout", "--train-priority", "0=0"], "coordinator"),
        (["--mode", "multiplex", "--train-priority", "rollout=2"], "--train-priority"),
        (["--mode", "sync", "--train-priority", "rollout,train=2"], "--train-priority"),
    ]:
        _, p, _ = train(a, "bad", 2, args + ["--steps", "1"], timeout=60)
        check(p.returncode == 2 and needle in p.stderr,
              f"{' '.join(args)}: exit 2 naming {needle} (rc {p.returncode}: {p.stderr.strip()[-200:]})")
    # An error on one rank after the first collective (the run file is open on every rank) aborts
    # the whole job at once: here the gateway's port is taken, which only its rank finds out.
    # (It used to hang: MPI_Finalize ran HDF5's close callbacks, a barrier, before MPI_Abort.)
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        _, p, wall = train(a, "bad", 2, ["--mode", "multiplex", "--rank-tags", TWO, "--steps", "2",
                                         "--gateway", f"127.0.0.1:{port}"], timeout=60)
    check(p.returncode != 0 and "Address already in use" in p.stderr and "fatal" in p.stderr and wall < 30,
          f"a rank-local error after the first collective aborts the job in {wall:.1f}s "
          f"(rc {p.returncode}: {p.stderr.strip()[:160]})")


ALL3 = "0=rollout,train;1=rollout,train;2=rollout,train"
TWO_RT = "0=rollout,train;1=rollout,train"


def ranges(ranks):
    """/steps/train_group's text of a rank list: sorted ranges, "0-2,5"."""
    out, rs = [], sorted(ranks)
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def case_resplit(a):
    """--rebalance-every (issue 20 point 2): the train group changes between steps. With the changes forced
    (TAGFLOW_TEST_TRAIN_GROUPS; the measured choice is tested in Serial.sched.TrainGroupChoice.*): a rank
    trains exactly at the steps whose announced group holds it (its train spans), every member saw each
    group as announced, joining ranks get the actor state (with ppo the critic's too, and the adaptive
    KL coefficient), leaving ones receive the weights (dense and --sync-delta) and every rank ends
    bit-identical to the coordinator; the run file passes the common
    checks, and its /steps rows record every step's group, the forced decisions and what each join cost,
    which `tagflow trace` shows (step args, one instant event per change). With the measured choice (2 ranks,
    `longtail`): the run completes, /steps records each decision with both predictions, and its moves are
    membership.json's. Bad uses exit 2 naming the option; a malformed test variable fails naming it."""
    for args, needle in [(["--mode", "disaggregated", "--rank-tags", TWO], "--rebalance-every"),
                         (["--mode", "multiplex", "--shard", "optimizer"], "--rebalance-every"),
                         (["--mode", "multiplex", "--algo", "ppo", "--rank-tags",
                           "0=rollout,train;1=rollout,train,critic"], "--rebalance-every"),
                         (["--mode", "multiplex", "--rebalance-every", "-1"], "--rebalance-every")]:
        extra = [] if "--rebalance-every" in args else ["--rebalance-every", "2"]
        _, p, _ = train(a, "resplit_bad", 2, args + extra + ["--steps", "1"], timeout=60)
        check(p.returncode == 2 and needle in p.stderr,
              f"{' '.join(args + extra)}: exit 2 naming {needle} (rc {p.returncode}: {p.stderr.strip()[-200:]})")
    env_saved = dict(ENV)
    try:  # the test-only variable: a malformed one ends the run with one line naming it
        for spec, needle in (("2=0,x", "bad number 'x'"), ("2=0,99999999999", "bad number"), ("2=1", "coordinator")):
            ENV["TAGFLOW_TEST_TRAIN_GROUPS"] = spec
            _, p, _ = train(a, "resplit_badspec", 2, ["--mode", "multiplex", "--rank-tags", TWO_RT, "--steps", "3",
                                                      "--rebalance-every", "1000"], timeout=60)
            check(p.returncode != 0 and "TAGFLOW_TEST_TRAIN_GROUPS" in p.stderr and needle in p.stderr,
                  f"TAGFLOW_TEST_TRAIN_GROUPS={spec}: fails naming it ({needle}) (rc {p.returncode}: "
                  f"{p.stderr.strip()[-300:]})")
    finally:
        ENV.clear()
        ENV.update(env_saved)
    n = 10
    groups = {2: [0], 4: [0, 2], 6: [0, 1, 2], 8: [0, 1]}
    spec = ";".join(f"{k}={','.join(map(str, v))}" for k, v in groups.items())
    env_saved = dict(ENV)
    ENV["TAGFLOW_TEST_TRAIN_GROUPS"] = spec
    try:
        for name, extra in (("resplit_dense", []), ("resplit_delta", ["--sync-delta"]),
                            ("resplit_ppo", ["--algo", "ppo", "--kl-coef", "0.01", "--kl-in", "reward", "--kl-ctrl", "adaptive"])):
            delta = "--sync-delta" in extra
            out, p, wall = train(a, name, 3, ["--mode", "multiplex", "--rank-tags", ALL3, "--seed", "5", "--steps",
                                              str(n), "--rebalance-every", "1000"] + extra)
            sys.stdout.write(p.stdout[-1500:])
            check(p.returncode == 0, f"{name}: 3-rank run exits 0 ({wall:.1f}s) {p.stderr[-1500:]}")
            mode = "mpi_isend_delta" if delta else "mpi_isend"
            same = re.search(r"ranks \{([0-9,]+)\} \(weight receivers and the train group\) hold version (\d+) "
                             r"bit-identical to the coordinator's \(weights hash [0-9a-f]+, (\S+)\)", p.stdout)
            check(same is not None and same.group(1) == "1,2" and int(same.group(2)) == n and same.group(3) == mode,
                  f"{name}: ranks 1 and 2 end with version {n} bit-identical ({same and same.group(0)})")
            if "ppo" in extra:
                check("members hold the coordinator's critic bit for bit" in p.stdout,
                      f"{name}: the members' critics equal the coordinator's (each join received it)")
            with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
                rank, kind, t0, t1 = common_checks(f, name, {0, 1, 2}, n)
                step = spans(f)[4]
                st = tagflow_run.table(f, "steps").sort_values("step")
            group_at = {}
            g = [0, 1, 2]
            for s_ in range(n):
                g = groups.get(s_, g)
                group_at[s_] = g
            # The run file's record of the groups and decisions (issue 20 point 3).
            text_at = [ranges(group_at[s_]) for s_ in range(n)]
            check(st["train_group"].tolist() == text_at and st["train_members"].tolist() == [len(group_at[s_])
                                                                                            for s_ in range(n)],
                  f"{name}: /steps train_group {st['train_group'].tolist()} is each step's group {text_at}")
            check(st["regroup"].tolist() == ["forced" if s_ in groups else "none" for s_ in range(n)]
                  and (st["predicted_s"] == -1).all(), f"{name}: /steps regroup {st['regroup'].tolist()}")
            joined = [s_ for s_ in range(1, n) if set(group_at[s_]) - set(group_at[s_ - 1])]
            rb = st["resplit_bytes"].tolist()
            check(all((rb[s_] > 0) == (s_ in joined) for s_ in range(n)),
                  f"{name}: /steps resplit_bytes {rb} > 0 exactly at the joins {joined}")
            rs = st["resplit_s"].tolist()
            check(all(x >= 0 for x in rs) and all(rs[s_] == 0 for s_ in range(1, n) if s_ not in groups),
                  f"{name}: /steps resplit_s {rs}: 0 where the group stayed")
            if name == "resplit_dense":
                trace = os.path.join(out, "trace.json")
                p = subprocess.run([a.tagflow, "trace", os.path.join(out, "tagflow.h5"), "-o", trace], env=ENV,
                                   capture_output=True, text=True, timeout=60)
                check(p.returncode == 0 and "train group changes (--rebalance-every): 4" in p.stdout,
                      f"trace: exit 0, 4 changes ({p.stdout.strip()[-300:]} {p.stderr.strip()[-300:]})")
                with open(trace) as f:
                    ev = json.load(f)["traceEvents"]
                marks = [(e["args"]["step"], e["name"]) for e in ev if e.get("cat") == "resplit" and e["ph"] == "i"]
                want = [(s_, f"train group {text_at[s_ - 1]} -> {text_at[s_]}") for s_ in sorted(groups)]
                check(marks == want, f"trace: the instant events of the changes {marks}")
                args = {e["args"]["step"]: e["args"] for e in ev if e.get("cat") == "step" and e["ph"] == "X"}
                check(all(args[s_]["train_group"] == text_at[s_] for s_ in range(n))
                      and args[4]["regroup"] == "forced" and args[4]["resplit_bytes"] > 0,
                      f"trace: each step's args carry its group and decision ({args.get(4)})")
            for r in (1, 2):
                trained = sorted(set(step[(rank == r) & (kind == "train")].tolist()))
                want = [s_ for s_ in range(n) if r in group_at[s_]]
                check(trained == want, f"{name}: rank {r} has train spans at steps {trained}, the steps whose group "
                      f"holds it {want}")
            with open(os.path.join(out, "membership.json")) as f:
                mb = json.load(f)
            moves = [(c["step"], c["to"]) for c in mb["changes"]]
            check(moves == sorted(groups.items()), f"{name}: membership.json changes {moves}")
            joins = [c["state_bytes"] for c in mb["changes"] if len(c["to"]) > len(c["from"])]
            check(all(b > 0 for b in joins) and len(joins) == 2,
                  f"{name}: each join handed over the actor state ({joins} bytes)")
            for r, log in mb["seen"].items():
                check(all(m == group_at[e] for e, m in log), f"{name}: rank {r} saw every group as announced")
    finally:
        ENV.clear()
        ENV.update(env_saved)
    # A measured move: rank 2 of 3 slowed to a quarter of its speed (SIGSTOP 30 ms, SIGCONT 10 ms, over
    # and over). Its training share holds every step back, so at the first decision it leaves the
    # group; it keeps its measured speed, so it is not asked back (no flapping), and it ends
    # bit-identical as a receiver. (Unslowed, the same run kept the whole group in 14 of 15 runs,
    # 2026-12-04, tests/bench/resplit_prediction.py and by hand.)
    out = os.path.join(a.workdir, "resplit_slow")
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["mpirun", "-n", "3", a.tagflow, "train", "--out", out, "--eval-every", "0", "--gemm-check", "false",
           "--threads", "1", "--mode", "multiplex", "--rank-tags", ALL3, "--seed", "5", "--steps", "14",
           "--rebalance-every", "2"]
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with testlib.SlowedRank(p, 2):
            text, _ = p.communicate(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
    sys.stdout.write("\n".join(l for l in text.splitlines() if "train group" in l or "bit-identical" in l) + "\n")
    check(p.returncode == 0, f"slowed rank: the run exits 0 {text[-1500:] if p.returncode else ''}")
    with open(os.path.join(out, "membership.json")) as f:
        changes = json.load(f)["changes"]
    first = changes[0] if changes else {}
    check(len(changes) == 1 and 2 not in first["to"] and {0, 1} <= set(first["to"]),
          f"slowed rank: rank 2 leaves the group once, not asked back "
          f"({[(c['step'], c['from'], c['to']) for c in changes]})")
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        st = tagflow_run.table(f, "steps").sort_values("step")
        rank, kind, step = spans(f)[0], spans(f)[1], spans(f)[4]
    row = st[st["step"] == first["step"]].iloc[0]
    check(row["regroup"] == "moved" and row["predicted_s"] < 0.9 * row["predicted_current_s"]
          and row["train_group"] == ranges(first["to"]),
          f"slowed rank: /steps records the move ({row['regroup']}, {row['predicted_s']:.3f} s predicted against "
          f"{row['predicted_current_s']:.3f}, group {row['train_group']})")
    late = sorted(set(step[(rank == 2) & (kind == "train") & (step >= first["step"])].tolist()))
    check(late == [], f"slowed rank: rank 2 trains no step from {first['step']} on ({late})")
    same = re.search(r"ranks \{([0-9,]+)\} \(weight receivers and the train group\) hold version 14 bit-identical",
                     text)
    check(same is not None and same.group(1) == "1,2", "slowed rank: ranks 1 and 2 end bit-identical")
    # The measured choice: 2 ranks, longtail, decisions every 2 steps.
    out = train_ok(a, "resplit_measured", 2, ["--mode", "multiplex", "--rank-tags", "0=rollout,train;1=rollout,train",
                                              "--task", "longtail", "--seed", "5", "--steps", "8",
                                              "--rebalance-every", "2", "--prompts-per-step", "4"])
    with open(os.path.join(out, "membership.json")) as f:
        mb = json.load(f)
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        st = tagflow_run.table(f, "steps").sort_values("step")
    decided = st[st["regroup"] != "none"]
    check(len(decided) >= 1 and set(decided["regroup"]) <= {"kept", "moved"}
          and (decided["predicted_s"] > 0).all() and (decided["predicted_current_s"] > 0).all()
          and (st[st["regroup"] == "none"]["predicted_s"] == -1).all(),
          f"measured: /steps records each decision with both predictions "
          f"({decided[['step', 'regroup', 'predicted_s', 'predicted_current_s']].values.tolist()})")
    moved = decided[decided["regroup"] == "moved"]["step"].tolist()
    check(moved == [c["step"] for c in mb["changes"]], f"measured: /steps moves {moved} are membership.json's")
    # Step 0 (warming up) is not measured, so the first decision comes after steps 1 and 2.
    check(decided["step"].tolist()[:3] == [3, 5, 7],
          f"measured: decisions at steps 3, 5, 7, step 0 not measured ({decided['step'].tolist()})")
    seen0 = [m for _, m in mb["seen"]["0"]]
    check(len(seen0) == 8 and all(0 in m for m in seen0), f"measured: the coordinator trained all 8 steps {seen0}")
    print(f"measured: changes {[(c['step'], c['to']) for c in mb['changes']]} (what the machine measured; not asserted)")


def case_fresh_weights(a):
    # A rank that only rolls out generates with the weights it was sent: with --staleness 0 every
    # trained sample came from the version being trained, so the trainer's log-probabilities of
    # its tokens equal the rollout's (logprob_diff_mean ~ 0). Weights written into raw memory by
    # MPI used to leave the decoder's version-counter snapshot stale: the rollout-only rank
    # generated with the initial weights forever (diff 0.04-0.14 from step 1 on, in every mode).
    for mode in ("sync", "disaggregated", "multiplex"):
        out = train_ok(a, f"fresh_{mode}", 2, ["--mode", mode, "--rank-tags", TWO, "--steps", "4", "--seed", "3",
                                               "--staleness", "0"])
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            d = f["steps"]["logprob_diff_mean"][()]
            s = f["samples"]
            ids, rank, vmin = s["id"][()], s["rank"][()], s["version_min"][()]
            c = f["consumed"]
            trained = c["id"][()][c["weight"][()] > 0]
            sel = np.isin(ids, trained) & (rank == 0) & (vmin >= 1)
        check(np.all(np.abs(d) < 1e-4), f"{mode}: trainer and rollout log-probabilities agree at every step "
                                        f"(|logprob_diff_mean| max {np.abs(d).max():.2e})")
        check(int(sel.sum()) > 0, f"{mode}: {int(sel.sum())} trained samples from the rollout-only rank 0 at versions >= 1 "
                                  f"(generated with received weights)")


def case_offpolicy(a):
    # Off-policy correction in an async mode (issue 21 point 5): with a rollout-only rank the trained
    # samples include tokens of older policy versions; the trainer recomputes pi_old and weights each
    # token by min(pi_old / pi_rollout, C). /steps records the weights and the rejections.
    base = ["--mode", "multiplex", "--rank-tags", TWO, "--steps", "5", "--seed", "4", "--lr", "0.005",
            "--old-logprobs", "recompute", "--rollout-is", "token"]
    out = train_ok(a, "offpolicy_tis", 2, base)
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        common_checks(f, "offpolicy_tis", [1], 5)
        st = f["steps"]
        mean, mx, rej = st["is_weight_mean"][()], st["is_weight_max"][()], st["rs_rejected"][()]
        stale = st["staleness_max"][()]
        tis_clip = st["clip_frac"][()]
    check(np.all(np.isfinite(mean)) and np.all(mean > 0) and np.all(mean <= 2.0 + 1e-6),
          f"is_weight_mean finite, in (0, C = 2] at every step: {np.round(mean, 4).tolist()}")
    check(np.all(np.isfinite(mx)) and np.all(mx >= mean - 1e-6) and np.all(mx > 0),
          f"is_weight_max (before truncation) finite and >= the mean: {np.round(mx, 4).tolist()}")
    check(np.all(rej == 0), f"no --rollout-rs: rs_rejected 0 at every step: {rej.tolist()}")
    print(f"staleness_max per step {stale.tolist()}")
    # A band too narrow for any real policy change, even one rounding apart: something is rejected.
    out = train_ok(a, "offpolicy_rs", 2, base + ["--rollout-rs", "geometric", "--rollout-rs-threshold", "1.0000001",
                                                 "--rollout-rs-threshold-lower", "0.9999999"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        common_checks(f, "offpolicy_rs", [1], 5)
        rej, n = f["steps"]["rs_rejected"][()], f["steps"]["samples"][()]
        mean = f["steps"]["is_weight_mean"][()]
        rtok, tok = f["steps"]["rs_rejected_tokens"][()], f["steps"]["tokens"][()]
    check(np.all(rej >= 0) and np.all(rej <= n) and rej.sum() > 0,
          f"a tiny --rollout-rs band rejects sequences: {rej.tolist()} of {n.tolist()}")
    # /steps tokens: every prompt and response token of the step's samples.
    check(np.all(rtok >= rej) and np.all(rtok <= tok) and np.all((rtok > 0) == (rej > 0)),
          f"rs_rejected_tokens counts the rejected sequences' tokens: {rtok.tolist()} of {tok.tolist()}")
    check(np.all(np.isfinite(mean)) and np.all(mean > 0), f"is_weight_mean finite and > 0: {np.round(mean, 4).tolist()}")
    # Token-level rejection: single tokens leave the loss, no sequence as a whole.
    out = train_ok(a, "offpolicy_rs_token", 2, base + ["--rollout-rs", "token", "--rollout-rs-threshold", "1.0000001",
                                                       "--rollout-rs-threshold-lower", "0.9999999"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        common_checks(f, "offpolicy_rs_token", [1], 5)
        st = f["steps"]
        rej, rtok, tok = st["rs_rejected"][()], st["rs_rejected_tokens"][()], st["tokens"][()]
    check(np.all(rej == 0) and rtok.sum() > 0 and np.all(rtok <= tok),
          f"--rollout-rs token: tokens rejected ({rtok.tolist()} of {tok.tolist()}), no whole sequence ({rej.tolist()})")
    # Sequence weights, divided by the group's mean weight (--rollout-is-batch-normalize): /steps keeps
    # the mean before the division.
    out = train_ok(a, "offpolicy_seq_norm", 2, [x if x != "token" else "sequence" for x in base] +
                   ["--rollout-is-batch-normalize"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        common_checks(f, "offpolicy_seq_norm", [1], 5)
        mean = f["steps"]["is_weight_mean"][()]
    check(np.all(np.isfinite(mean)) and np.all(mean > 0) and np.all(mean <= 2.0 + 1e-6),
          f"--rollout-is sequence --rollout-is-batch-normalize: is_weight_mean in (0, 2]: {np.round(mean, 4).tolist()}")
    # --old-logprobs rollout: nothing is recomputed, so nothing is measured (-1).
    out = train_ok(a, "offpolicy_off", 2, ["--mode", "multiplex", "--rank-tags", TWO, "--steps", "2",
                                           "--old-logprobs", "rollout"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        st = f["steps"]
        cols = [st[c][()] for c in ("is_weight_mean", "is_weight_max", "rs_rejected", "rs_rejected_tokens")]
    check(all(np.all(c == -1) for c in cols), "--old-logprobs rollout: the four columns are -1 (not measured)")
    # --old-logprobs measure: recompute's forward fills the columns (as --rollout-is off would), but
    # the loss keeps pi_old = pi_rollout. With one update per batch, recompute's PPO ratio is exactly
    # 1 (the clip never acts); measure's is pi_theta / pi_rollout, which the clip does cut.
    out = train_ok(a, "offpolicy_measure", 2, base[:-4] + ["--old-logprobs", "measure"])
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        common_checks(f, "offpolicy_measure", [1], 5)
        st = f["steps"]
        mean, mx, rej, rtok = (st[c][()] for c in ("is_weight_mean", "is_weight_max", "rs_rejected",
                                                    "rs_rejected_tokens"))
        clip = st["clip_frac"][()]
    check(np.all(np.isfinite(mean)) and np.all(mean > 0) and np.all(mean <= 2.0 + 1e-6) and np.all(mx >= mean - 1e-6),
          f"--old-logprobs measure: weights measured, mean {np.round(mean, 4).tolist()}, max {np.round(mx, 4).tolist()}")
    check(np.all(rej == 0) and np.all(rtok == 0), "--old-logprobs measure: nothing rejected")
    check(np.all(tis_clip == 0), f"recompute, one update per batch: clip_frac 0 at every step ({tis_clip.tolist()})")
    check(np.any(clip > 0), f"measure: the ratio is against pi_rollout, the clip acts ({np.round(clip, 4).tolist()})")
    # Bad usage: one line naming the option, exit 2.
    for args, needle in [(["--rollout-is", "token", "--old-logprobs", "rollout"], "--old-logprobs recompute"),
                         (["--rollout-is", "tokens"], "--rollout-is"),
                         (["--old-logprobs", "fresh"], "--old-logprobs"),
                         (["--rollout-rs", "sequence", "--rollout-rs-threshold", "0.5"], "empty"),
                         (["--rollout-rs", "tokens"], "--rollout-rs"),
                         (["--rollout-token-veto-threshold", "2"], "--rollout-token-veto-threshold"),
                         (["--rollout-token-veto-threshold", "1e-4", "--old-logprobs", "rollout"],
                          "--old-logprobs recompute"),
                         (["--rollout-rs", "token", "--old-logprobs", "measure"], "--old-logprobs recompute"),
                         (["--rollout-is-cap", "3", "--rollout-is-threshold", "4"], "--rollout-is-cap"),
                         (["--rollout-is-threshold", "0"], "--rollout-is-threshold"),
                         (["--rollout-is-batch-normalize"], "--rollout-is-batch-normalize")]:
        _, p, _ = train(a, "bad", 2, args + ["--steps", "1"], timeout=60)
        lines = [l for l in p.stderr.splitlines() if l.startswith("tagflow: error")]
        check(p.returncode == 2 and needle in p.stderr and len(set(lines)) == 1,
              f"{' '.join(args)}: exit 2, one line naming {needle} (rc {p.returncode}: {p.stderr.strip()[-200:]})")


def case_critic_ranks(a):
    # PPO with the critic on ranks tagged critic, in the async modes: those ranks join every
    # training step (the critic update) and nothing else their tags forbid; the checkpoint holds
    # the critic's state, sent by its rank, and a resumed run goes on from it.
    import hashlib
    runs = [("multiplex", "0=rollout;1=rollout,train;2=critic", 3, {1, 2}),
            ("disaggregated", "0=rollout,critic;1=train", 2, {0, 1})]
    for mode, tags, np_, works in runs:
        name = f"critic_{mode}"
        args = ["--mode", mode, "--algo", "ppo", "--rank-tags", tags, "--seed", "2", "--ckpt-every", "2"]
        out = train_ok(a, name, np_, args + ["--steps", "4"])
        critic = [int(t.split("=")[0]) for t in tags.split(";") if "critic" in t.split("=")[1]][0]
        with open(os.path.join(out, "membership.json")) as fh:
            m = json.load(fh)
        check(m["critic"] == [critic], f"{name}: membership.json names the critic rank {m['critic']}")
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            rank, kind, _, _ = common_checks(f, name, works, 4)
            span_step = spans(f)[4]
            trained = sorted(set(span_step[(rank == critic) & (kind == "train")].tolist()))
            check(trained == [0, 1, 2, 3], f"{name}: the critic rank {critic} has train spans at steps {trained} (all 4)")
            gen = set(f["samples"]["rank"][()].tolist())
            if "rollout" not in tags.split(";")[critic]:
                check(critic not in gen and not np.any((rank == critic) & (kind == "rollout")),
                      f"{name}: the critic-only rank never rolls out ({gen})")
            else:
                check(critic in gen, f"{name}: the rollout,critic rank also generates ({gen})")
        ck = os.path.join(out, "checkpoint")
        with open(os.path.join(ck, "manifest.txt")) as fh:
            man = fh.read()
        check("critic_state.pt" in man, f"{name}: the checkpoint lists critic_state.pt")
        h4 = hashlib.sha256(open(os.path.join(ck, "critic_state.pt"), "rb").read()).hexdigest()
        # The same command with more steps resumes at step 4 and checkpoints the critic again.
        cmd = ["mpirun", "-n", str(np_), a.tagflow, "train", "--out", out] + FAST + args + ["--steps", "6"]
        p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0 and "resumed from checkpoint at step 4" in p.stdout,
              f"{name}: resumes from the step-4 checkpoint (rc {p.returncode}) {p.stderr[-1500:]}")
        h6 = hashlib.sha256(open(os.path.join(ck, "critic_state.pt"), "rb").read()).hexdigest()
        check(h6 != h4, f"{name}: the critic state moved between steps 4 and 6 ({h4[:12]} -> {h6[:12]})")
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            common_checks(f, name + " resumed", works, 6)


M64 = (1 << 64) - 1


def mix64(x):
    """sched/sched_policy.cpp's mix64 (splitmix64's finaliser) in Python."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def lognormal_length(median, ratio, cap, seed, sid):
    """sched_policy::lognormal_length: the length --response-lengths lognormal:MEDIAN:RATIO forces."""
    import math
    h = mix64(mix64(seed ^ 0x51A7) ^ (sid & M64))
    unit = lambda v: ((v >> 11) + 0.5) / 9007199254740992.0
    z = math.sqrt(-2.0 * math.log(unit(h))) * math.cos(6.283185307179586 * unit(mix64(h ^ 0xB0C5)))
    return int(max(1.0, min(cap, round(median * math.exp(math.log(ratio) / 2.3263478740408408 * z)))))


def case_fixed_lengths(a):
    lengths = {}
    for mode in ("sync", "multiplex"):
        out = train_ok(a, f"fixed_{mode}", 2, ["--mode", mode, "--rank-tags", TWO, "--steps", "3", "--seed", "7",
                                                "--task", "longtail", "--response-lengths", "lognormal:6:8",
                                                "--max-new-tokens", "20"])
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            common_checks(f, mode, {1}, 3)
            ids = f["samples"]["id"][()]
            n = tagflow_run.response_lengths(f)
            want = np.array([lognormal_length(6, 8, 20, 7, int(i)) for i in ids])
            check(len(ids) > 0 and np.array_equal(n, want),
                  f"{mode}: all {len(ids)} responses have their drawn lengths (first {n[:8].tolist()}, "
                  f"max {n.max()} <= 20, {int(np.sum(n != want))} differ)")
            fin = set(tagflow_run._decode(f["samples"]["finish_reason"]).tolist())
            check(fin == {"length"}, f"{mode}: every response ends by length, EOS does not stop it ({fin})")
            check(int(np.sum(n == 20)) >= 1 and int(np.sum(n < 6)) >= 1, f"{mode}: a long tail (capped) and short ones")
            lengths[mode] = dict(zip(ids.tolist(), n.tolist()))
    both = set(lengths["sync"]) & set(lengths["multiplex"])
    check(both and all(lengths["sync"][i] == lengths["multiplex"][i] for i in both),
          f"the same sample id has the same length in both modes ({len(both)} ids)")
    for args, needle in [(["--response-lengths", "lognormal:6"], "--response-lengths"),
                         (["--response-lengths", "uniform"], "--response-lengths"),
                         (["--response-lengths", "lognormal:6:0.5"], "P99RATIO"),
                         (["--response-lengths", "lognormal:6:8", "--task", "calc"], "multi-turn")]:
        _, p, _ = train(a, "bad", 2, args + ["--steps", "1"], timeout=60)
        check(p.returncode == 2 and needle in p.stderr,
              f"{' '.join(args)}: exit 2 naming {needle} (rc {p.returncode}: {p.stderr.strip()[-200:]})")


SAME = re.compile(r"rollout-only ranks \{([\d,]+)\} hold version (\d+) bit-identical to the coordinator's "
                  r"\(weights hash ([0-9a-f]+), (\S+)\)")
RECOMP = re.compile(r"--resume-mode (\w+): (\d+) cached tokens of (\d+) sequences in flight recomputed over (\d+) "
                    r"engine weight updates")


def identical(name, p, ranks, version, mode):
    m = SAME.search(p.stdout)
    check(m is not None and m.group(1) == ranks and int(m.group(2)) == version and m.group(4) == mode,
          f"{name}: rollout-only ranks {{{ranks}}} end holding version {version} bit-identical to the coordinator's "
          f"({m.group(0) if m else 'no such line'})")
    return m.group(3)


def sync_rows(f):
    sy = f["syncs"]
    return (sy["version"][()], sy["bytes"][()], sy["dense_bytes"][()],
            np.array(tagflow_run._decode(sy["mode"]), dtype=str))


def case_sync_delta(a):
    """--sync-delta in the async modes (issue 20 point 4): the coordinator's point-to-point sends carry only
    what each rollout-only rank lacks. Each rollout-only rank takes in the last version at STOP and reports a
    hash of its weights; the run checks it against the coordinator's (bit for bit, else exit 1). Asserted:
    dense and delta end bit-identical, in multiplex and disaggregated (two receivers), and after a resume
    (the receivers hold the checkpoint's version, the next push is a delta from it); /syncs names the mode and
    bytes <= dense_bytes; with --lr 0 (nothing changes) every push after version 0 moves 0 bytes."""
    n = 4
    base = ["--mode", "multiplex", "--rank-tags", TWO, "--seed", "5"]
    hashes = {}
    for delta in (False, True):
        name = "delta" if delta else "dense"
        extra = ["--sync-delta"] if delta else []
        out, p, wall = train(a, f"sd_{name}", 2, base + extra + ["--steps", str(n), "--ckpt-every", "2"])
        sys.stdout.write(p.stdout[-1500:])
        check(p.returncode == 0, f"multiplex {name}: exits 0 ({wall:.1f}s) {p.stderr[-1500:]}")
        mode = "mpi_isend_delta" if delta else "mpi_isend"
        hashes[name] = identical(f"multiplex {name}", p, "0", n, mode)
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            common_checks(f, f"multiplex {name}", {1}, n)
            ver, by, dense, modes = sync_rows(f)
        check(ver.tolist() == list(range(n + 1)) and modes[0] == "mpi_bcast" and np.all(modes[1:] == mode),
              f"multiplex {name}: /syncs versions {ver.tolist()}, version 0 broadcast, then {mode} ({modes.tolist()})")
        check(np.all(by <= dense) and (delta or np.array_equal(by, dense)),
              f"multiplex {name}: bytes {by.tolist()} <= dense_bytes {dense[0]}" + ("" if delta else " (equal)"))
        print(f"multiplex {name}: fraction sent per version {np.round(by / dense, 4).tolist()}")
        if delta:
            # The same command with more steps resumes at step 4: the receivers hold version 4 from the
            # checkpoint, and the pushes go on as deltas from it.
            cmd = ["mpirun", "-n", "2", a.tagflow, "train", "--out", out] + FAST + base + extra + \
                  ["--steps", str(n + 2), "--ckpt-every", "2"]
            p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
            check(p.returncode == 0 and f"resumed from checkpoint at step {n}" in p.stdout,
                  f"multiplex delta: resumes from the step-{n} checkpoint (rc {p.returncode}) {p.stderr[-1500:]}")
            identical("multiplex delta, resumed", p, "0", n + 2, mode)
            with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
                ver, by, dense, modes = sync_rows(f)
            check(ver.tolist()[-2:] == [n + 1, n + 2] and np.all(modes[-2:] == mode) and np.all(by <= dense),
                  f"multiplex delta, resumed: /syncs goes on with versions {ver.tolist()[-2:]} ({by.tolist()[-2:]} B)")
    print(f"final weights hash at the same seed: dense {hashes['dense']}, delta {hashes['delta']} (async runs need "
          "not train identically; not asserted)")
    # Nothing changes (--lr 0): a delta push moves nothing; still bit-identical.
    out, p, wall = train(a, "sd_lr0", 2, base + ["--sync-delta", "--steps", "3", "--lr", "0"])
    check(p.returncode == 0, f"--lr 0 delta: exits 0 ({wall:.1f}s) {p.stderr[-1500:]}")
    identical("--lr 0 delta", p, "0", 3, "mpi_isend_delta")
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        ver, by, dense, modes = sync_rows(f)
    check(by[0] == dense[0] and np.all(by[1:] == 0),
          f"--lr 0 delta: version 0 in full, then 0 bytes per push ({by.tolist()})")
    # Disaggregated, two rollout-only ranks.
    out, p, wall = train(a, "sd_disagg", 3, ["--mode", "disaggregated", "--rank-tags", "0=rollout;1=train;2=rollout",
                                             "--seed", "5", "--steps", "3", "--sync-delta"])
    sys.stdout.write(p.stdout[-800:])
    check(p.returncode == 0, f"disaggregated delta: exits 0 ({wall:.1f}s) {p.stderr[-1500:]}")
    identical("disaggregated delta", p, "0,2", 3, "mpi_isend_delta")
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        common_checks(f, "disaggregated delta", {1}, 3)


def case_resume_mode(a):
    """--resume-mode recompute (issue 20 point 4): the KV caches of generations in flight when new weights
    arrive are recomputed, at most --resume-window tokens per sequence; keep recomputes nothing; a
    --resume-min-tokens above every length recomputes nothing. The counts come from every generating rank's
    engine (the coordinator's end-of-run line). Bad values: one line, exit 2."""
    for args, needle in [(["--resume-mode", "bogus"], "--resume-mode"),
                         (["--resume-window", "-1"], "--resume-window"),
                         (["--resume-min-tokens", "-3"], "--resume-min-tokens"),
                         (["--resume-window", "4"], "needs --resume-mode recompute"),
                         (["--mode", "sync", "--resume-mode", "recompute"], "--resume-mode")]:
        _, p, _ = train(a, "bad", 2, args + ["--steps", "1"], timeout=60)
        lines = [l for l in p.stderr.splitlines() if l.startswith("tagflow: error")]
        check(p.returncode == 2 and needle in p.stderr and len(set(lines)) == 1,
              f"{' '.join(args)}: exit 2, one line naming {needle} (rc {p.returncode}: {p.stderr.strip()[-200:]})")
    n = 4
    base = ["--mode", "multiplex", "--rank-tags", TWO, "--seed", "6", "--steps", str(n), "--admission", "off"]
    window = 3
    got = {}
    for name, extra in [("keep", []),
                        ("recompute", ["--resume-mode", "recompute", "--resume-window", str(window)]),
                        ("none long enough", ["--resume-mode", "recompute", "--resume-min-tokens", "100000"])]:
        out, p, wall = train(a, "resume_" + name.split()[0], 2, base + extra)
        check(p.returncode == 0, f"{name}: exits 0 ({wall:.1f}s) {p.stderr[-1500:]}")
        m = RECOMP.search(p.stdout)
        check(m is not None, f"{name}: the run reports what it recomputed ({m.group(0) if m else p.stdout[-600:]})")
        tok, seqs, upd = int(m.group(2)), int(m.group(3)), int(m.group(4))
        got[name] = (tok, seqs, upd)
        with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
            common_checks(f, name, {1}, n)
            vmin, vmax = f["samples"]["version_min"][()], f["samples"]["version_max"][()]
        print(f"{name}: {tok} tokens of {seqs} sequences recomputed over {upd} updates; "
              f"{int(np.sum(vmax > vmin))} samples span a weight update")
    check(got["keep"][:2] == (0, 0), f"keep: nothing recomputed {got['keep']}")
    tok, seqs, upd = got["recompute"]
    check(seqs > 0 and 0 < tok <= window * seqs,
          f"recompute, window {window}: {tok} tokens of {seqs} sequences recomputed (0 < tokens <= {window} x sequences)")
    check(got["none long enough"][:2] == (0, 0), f"--resume-min-tokens 100000: nothing recomputed "
          f"{got['none long enough']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    try:
        globals()["case_" + a.case](a)
    except Failure as e:
        print("FAIL:", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
