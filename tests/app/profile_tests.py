#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of on-demand profiling (issue 23 points 2 and 4) and of the clock offsets
measured again at checkpoints (point 3).

    profile_tests.py CASE --tagflow BIN --workdir DIR
CASE `midrun`: a long 2-rank sync run (clocks skewed on purpose: rank 1 +0.3 s, TAGFLOW_TEST_CLOCK_SKEW_S,
checkpoints every 4 steps, ended by SIGUSR1 after the profile); once it has done 2 steps `tagflow profile RUN --ranks 1 --steps 3` asks
rank 1 only. The command exits 0 and reports rank 1's trace; profiles/ holds rank 1's Chrome trace and
result record and nothing of rank 0; the trace is valid Trace Event JSON with LibTorch operator events
(aten::..., input shapes); the job goes on (exit 75 after SIGUSR1, a checkpoint). /ranks holds a row per rank per
checkpoint, each rank's offsets all the injected skew within 1 ms. `tagflow trace` merges the profile:
on rank 1's process, with the offset applied, every operator event lies inside the profiled steps'
/timeline spans of rank 1 (from the first span of step S to the first span after step T), and none is
on rank 0; a garbage file and another run's profile in profiles/ are skipped with a note each. The
same job without a profile, stopped after as many steps, has the same /steps figures (loss, reward,
kl, entropy, samples) and tokens bit for bit: profiling does not change what the run computes. The merged
trace keeps Perfetto's import rules (tests/common/perfetto_check.py: no event dropped).
CASE `main5`: issue 23's goal, a profile of 5 steps of the main job on both ranks in Perfetto with the
timeline. The README's main job shape (2 ranks, the default mode multiplex, both ranks rollout,train, rank
0 the coordinator) with the quick settings above; once it has done 2 steps `tagflow profile RUN --ranks
0,1 --steps 5` exits 0 and each rank delivers a 5-step trace (rank.R.step.S-T.json, T-S = 4) of LibTorch
operator events; the job goes on (SIGUSR1: exit 75). Each rank's file and `tagflow trace`'s merged trace
keep Perfetto's import rules (no event dropped: operators nest on their thread). In the merged trace each
rank's operators are on its own process, all of them inside its profiled steps' /timeline spans, each
one inside a single span of its rank (±1 µs; printed: how many per span kind), and every profiled step's
train span(s) on both ranks hold operators (both ranks train every step).
CASE `deliver`: a long 2-rank sync job. Garbage, foreign, newer, malformed and linked request files
planted as RUN/profile.request: every rank logs one line each and goes on (steps advance), nothing is
profiled; a request for ranks the job lacks is ignored silently. A rank whose trace cannot be written
(a directory in the way) answers "failed" while the other delivers: `tagflow profile --ranks 0,1` exits
1 naming rank 1 FAILED with the cause, the job goes on. Rank 1 stopped (SIGSTOP): `--timeout 5` names
it NOT DELIVERED (exit 1); after SIGCONT it answers. Ranks out of the job's range: exit 2, one line.
CASE `hostile`: bad usage and bad run directories for the command (missing, a file, no status.json,
garbage/foreign status records, a finished run, profiles/ a link, a directory the user cannot write):
exit 2, one line naming the problem, no request file written.
CASE `gateway`: the same through the gateway of a running `train --gateway` job (disaggregated, rank 0
serving, built-in prompts keep it training): POST /v1/profile {"ranks": [1], "steps": 2} answers 202
with an id; GET /v1/profile/ID reports rank 1 pending, then done with its trace, which is in profiles/
and valid. Without the token 401; GET /v1/profile and POST /v1/profile/ID 405; bodies that are not
a JSON object, ranks the job lacks, steps 0, an unknown field, "shapes" not a boolean: 400 with a
message naming the problem; an unknown id 404. The job goes on (SIGUSR1: exit 75).
Each case prints what it measured and exits non-zero on failure.
"""
import bisect
import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import (ENV, Failure, as_nobody, case_main, check, fresh_dir, http_json,  # noqa: E402
                     one_line_error, run_tagflow, stop_job)
from trace_tests import rank_pid  # noqa: E402
from perfetto_check import perfetto_file_problems  # noqa: E402

SKEW = {1: 0.30}


def start_job(a, out, steps, extra=(), env=None, mode="sync"):
    """A 2-rank `tagflow train` with quick settings; mode None: the default mode (multiplex)."""
    cmd = ["mpirun", "-n", "2", a.tagflow, "train", "--out", out] + (["--mode", mode] if mode else []) + [
           "--steps", str(steps), "--seed", "5", "--prompts-per-step", "4", "--group-size", "4", "--eval-every", "0",
           "--gemm-check", "false", "--heartbeat-timeout", "120"] + list(extra)
    log_path = os.path.join(a.workdir, os.path.basename(out) + ".log")
    log = open(log_path, "w")
    return subprocess.Popen(cmd, env=dict(ENV, **(env or {})), stdout=log, stderr=subprocess.STDOUT), log, log_path


def run_step(out):
    try:
        with open(os.path.join(out, "status.json")) as fh:
            return json.load(fh)["run"]["step"]
    except (OSError, ValueError, KeyError):
        return -1


def wait_step(out, n, job, timeout=90):
    t_end = time.time() + timeout
    while time.time() < t_end:
        if job.poll() is not None:
            raise Failure(f"the job ended (exit {job.returncode}) before step {n}")
        if run_step(out) >= n:
            return
        time.sleep(0.2)
    raise Failure(f"timed out waiting for step {n}")


def valid_chrome_trace(path):
    with open(path, encoding="utf-8") as fh:
        j = json.load(fh)
    ev = j["traceEvents"]
    check(isinstance(ev, list) and ev, f"{os.path.basename(path)}: a traceEvents list")
    xs = [e for e in ev if e.get("ph") == "X"]
    check(all(isinstance(e.get("name"), str) and isinstance(e.get("ts"), (int, float)) and
              isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0 and isinstance(e.get("pid"), int) and
              isinstance(e.get("tid"), int) for e in xs), "every X event has name, ts, dur >= 0, pid, tid")
    keys = list(j)
    check(keys.index("traceEvents") < keys.index("otherData"), "traceEvents before otherData (Perfetto)")
    return j


def perfetto_clean(path):
    """Perfetto's JSON importer would take every event of the file (tests/common/perfetto_check.py)."""
    problems = perfetto_file_problems(path)
    for p in problems[:20]:
        print("  perfetto:", p)
    if len(problems) > 20:
        print(f"  perfetto: ... and {len(problems) - 20} more")
    check(not problems,
          f"{os.path.basename(path)}: Perfetto's import rules hold for every event ({len(problems)} problems)")


def ops_within_steps(spans, ops, S, T, who, note=""):
    """Checks that the operator events `ops` lie within the profiled steps S..T of the rank's timeline
    `spans` (merged trace events): from its first span of step S to its first span of a later step,
    within 1 ms (the profiler's clock is read in whole µs). Returns the last operator's end."""
    lo = min(e["ts"] for e in spans if e["args"]["step"] == S)
    after = [e["ts"] for e in spans if e["args"]["step"] > T]
    hi = min(after) if after else max(e["ts"] + e["dur"] for e in spans)
    first = min(e["ts"] for e in ops)
    last = max(e["ts"] + e["dur"] for e in ops)
    print(f"{who} steps {S}-{T}: spans {lo / 1e3:.3f}..{hi / 1e3:.3f} ms; operators {first / 1e3:.3f}.."
          f"{last / 1e3:.3f} ms{note}")
    check(first >= lo - 1000.0 and last <= hi + 1000.0,
          f"{who}: every operator event lies inside the profiled steps' /timeline spans")
    return last


def stop_at_step(out, job, step, before=None):
    """Once the job `(proc, log, log_path)` has done `step` steps (then `before()`, if given), SIGUSR1:
    it checkpoints at the next step and exits 75. Returns before()'s result."""
    proc, log, log_path = job
    try:
        wait_step(out, step, proc, timeout=180)
        got = before() if before else None
        check(proc.poll() is None, "the job still runs")
        proc.send_signal(signal.SIGUSR1)
        rc = proc.wait(timeout=180)
    finally:
        stop_job(proc)
        log.close()
    check(rc == 75, f"the job goes on until SIGUSR1 stops it (exit 75: {rc}; {log_path})")
    return got


def profile_then_stop(a, out, job, ranks, steps, timeout=60):
    """After the job's step 2, `tagflow profile OUT --ranks RANKS --steps STEPS` must exit 0; then the
    job is stopped (stop_at_step). Returns the profile command's result."""
    def profile():
        p = run_tagflow(a, ["profile", out, "--ranks", ranks, "--steps", str(steps), "--timeout", str(timeout)],
                        timeout=timeout + 80)
        sys.stdout.write(p.stdout + p.stderr)
        check(p.returncode == 0, f"tagflow profile --ranks {ranks} --steps {steps} exits 0 ({p.wall:.1f} s)")
        return p
    return stop_at_step(out, job, 2, profile)


# ---------------------------------------------------------------- case: a profile requested mid-run
def case_midrun(a):
    out = fresh_dir(a, "midrun")
    spec = ",".join(f"{r}:{s}" for r, s in SKEW.items())
    job = start_job(a, out, 2000, ["--ckpt-every", "4"], env={"TAGFLOW_TEST_CLOCK_SKEW_S": spec})
    p = profile_then_stop(a, out, job, "1", 3)
    prof = os.path.join(out, "profiles")
    files = sorted(os.listdir(prof))
    print("profiles/:", files)
    traces = [f for f in files if f.startswith("rank.")]
    check(len(traces) == 1 and traces[0].startswith("rank.1.step."), "one trace, rank 1's only")
    records = [f for f in files if not f.startswith("rank.")]
    check(len(records) == 1 and records[0].endswith(".rank.1.json"), "one result record, rank 1's")
    rec = json.load(open(os.path.join(prof, records[0])))
    check(rec["status"] == "done" and rec["trace"] == traces[0] and rec["last_step"] - rec["first_step"] == 2,
          f"the record says done, steps {rec['first_step']}-{rec['last_step']} (3 steps)")
    S, T = rec["first_step"], rec["last_step"]
    check(f"rank 1: steps {S}-{T}" in p.stdout, "the command reports rank 1's steps")
    j = valid_chrome_trace(os.path.join(prof, traces[0]))
    ops = [e for e in j["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    names = {e["name"] for e in ops}
    print(f"rank 1 profile: {len(ops)} operator events, {len(names)} operators, e.g. {sorted(names)[:6]}")
    check(len(ops) >= 50 and any(n.startswith("aten::") for n in names), "LibTorch operator events (aten::...)")
    check(any(e["args"].get("Input Dims") for e in ops), "input shapes recorded")
    check(j["otherData"]["rank"] == 1 and j["otherData"]["first_step"] == S, "otherData names rank and steps")

    h5 = os.path.join(out, "tagflow.h5")
    with h5py.File(h5, "r") as f:
        g = f["ranks"]
        rows = [(int(r), float(o), float(e)) for r, o, e in zip(g["rank"][()], g["clock_offset"][()],
                                                               g["clock_error"][()])]
        nsteps = len(f["steps"]["step"])
    check(nsteps > T, f"/steps has every step up to the profiled ones ({nsteps} rows)")
    per = {r: [o for rr, o, _ in rows if rr == r] for r in (0, 1)}
    truth = -SKEW[1]
    print(f"/ranks: {len(rows)} rows; rank 1 offsets {[round(o, 6) for o in per[1]]}")
    # start + every 4th step + the SIGUSR1 checkpoint
    check(len(per[0]) == len(per[1]) >= 2 + (nsteps - 1) // 4,
          f"the offsets were measured again at each checkpoint (a row per rank each: {len(per[1])})")
    check(all(abs(o - truth) < 1e-3 for o in per[1]) and all(o == 0 for o in per[0]),
          "every measurement of rank 1 is the injected -0.3 s within 1 ms; rank 0 is the reference")

    # Files in profiles/ that are not this run's profiles are skipped with a note each.
    open(os.path.join(prof, "rank.0.step.0-0.json"), "wb").write(b"\x00garbage")
    other = dict(j, otherData=dict(j["otherData"], t0_unix=j["otherData"]["t0_unix"] + 100))
    json.dump(other, open(os.path.join(prof, "rank.1.step.900-901.json"), "w"))
    trace = os.path.join(a.workdir, "midrun.trace.json")
    p = run_tagflow(a, ["trace", h5, "-o", trace])
    sys.stdout.write(p.stdout)
    check(p.returncode == 0 and "1 LibTorch profile(s)" in p.stdout, f"tagflow trace merges the profile ({p.stderr})")
    notes = [l for l in p.stdout.splitlines() if l.startswith("note: skipped")]
    check(len(notes) == 2 and "not JSON" in notes[0] and "another run" in notes[1],
          f"a garbage file and another run's profile are skipped, one note each ({notes})")
    tr = valid_chrome_trace(trace)
    perfetto_clean(trace)
    ev = tr["traceEvents"]
    spans = [e for e in ev if e.get("cat") == "timeline" and e["pid"] == 2]
    merged = [e for e in ev if e.get("cat") == "cpu_op"]
    check(len(merged) == len(ops) and all(e["pid"] == 2 for e in merged), "all operator events on rank 1's process")
    ops_within_steps(spans, merged, S, T, "rank 1", f" (merged, offset {1e3 * truth:+.1f} ms applied)")
    # The LibTorch work of a step is its update (rollout runs tagflow's own decode kernels): each
    # profiled step's train span holds operators, on the merged clock.
    for k in range(S, T + 1):
        tr_k = [(e["ts"], e["ts"] + e["dur"]) for e in spans if e["args"]["step"] == k and e["name"] == "train"]
        inside = sum(1 for e in merged if any(t0 <= e["ts"] + 0.5 * e["dur"] <= t1 for t0, t1 in tr_k))
        check(tr_k and inside >= 10, f"step {k}: {inside} operator events inside its train span(s)")

    # Profiling does not change what the run computes: the same job (sync mode, same seed) without a
    # profile gives the same /steps figures and tokens, bit for bit, over the profiled run's steps.
    ref = fresh_dir(a, "midrun_ref")
    stop_at_step(ref, start_job(a, ref, 2000, ["--ckpt-every", "4"], env={"TAGFLOW_TEST_CLOCK_SKEW_S": spec}), nsteps)
    cols = ("loss", "reward_mean", "kl", "entropy", "samples")
    with h5py.File(h5, "r") as f, h5py.File(os.path.join(ref, "tagflow.h5"), "r") as g:
        check(len(g["steps"]["step"]) >= nsteps, f"the unprofiled run reached step {nsteps}")
        same = all(np.array_equal(f["steps"][c][:nsteps], g["steps"][c][:nsteps], equal_nan=True) for c in cols)
        n_tok = int(f["samples"]["token_offsets"][()][-1]) if len(f["samples"]["token_offsets"]) else 0
        toks = np.array_equal(f["samples"]["tokens"][:n_tok], g["samples"]["tokens"][:n_tok])
    print(f"steps 0-{nsteps - 1} ({', '.join(cols)}) and the first {n_tok} tokens compared with an unprofiled run")
    check(same and toks, "the profiled run's figures and tokens equal the unprofiled run's, bit for bit")


# ---------------------------------------------------------------- case: 5 steps of the main job on both ranks
def case_main5(a):
    out = fresh_dir(a, "main5")
    job = start_job(a, out, 2000, mode=None)  # the README's main job: default mode, 2 ranks
    p = profile_then_stop(a, out, job, "0,1", 5, timeout=120)
    mode = json.load(open(os.path.join(out, "status.json"))).get("mode")
    check(mode == "multiplex", f"the job ran in the default mode, multiplex ({mode})")
    prof = os.path.join(out, "profiles")
    files = sorted(os.listdir(prof))
    print("profiles/:", files)
    steps, ops = {}, {}
    for r in (0, 1):
        traces = [f for f in files if f.startswith(f"rank.{r}.step.")]
        check(len(traces) == 1, f"one trace of rank {r}")
        S, T = (int(x) for x in traces[0][len(f"rank.{r}.step."):-len(".json")].split("-"))
        check(T - S == 4 and f"rank {r}: steps {S}-{T}" in p.stdout, f"rank {r} delivered steps {S}-{T} (5 steps)")
        steps[r] = (S, T)
        path = os.path.join(prof, traces[0])
        j = valid_chrome_trace(path)
        perfetto_clean(path)
        ops[r] = [e for e in j["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        names = {e["name"] for e in ops[r]}
        print(f"rank {r} profile: steps {S}-{T}, {len(ops[r])} operator events, {len(names)} operators")
        check(len(ops[r]) >= 50 and any(n.startswith("aten::") for n in names), f"rank {r}: LibTorch operator events")
        check(j["otherData"]["rank"] == r and j["otherData"]["first_step"] == S, f"rank {r}: otherData names it")
        print(f"rank {r}: {j['otherData'].get('ends_shortened', 'no count of')} operator ends shortened to "
              "their parent's (whole-µs times)")

    trace = os.path.join(a.workdir, "main5.trace.json")
    p = run_tagflow(a, ["trace", os.path.join(out, "tagflow.h5"), "-o", trace])
    sys.stdout.write(p.stdout)
    check(p.returncode == 0 and "2 LibTorch profile(s)" in p.stdout,
          f"tagflow trace merges both profiles ({p.stderr})")
    tr = valid_chrome_trace(trace)
    perfetto_clean(trace)
    ev = tr["traceEvents"]
    for r in (0, 1):
        S, T = steps[r]
        pid = r + 1
        spans = [e for e in ev if e.get("cat") == "timeline" and e["pid"] == pid]
        merged = [e for e in ev if e.get("cat") == "cpu_op" and e["pid"] == pid]
        check(spans, f"rank {r}: timeline spans on its process (pid {pid})")
        check(len(merged) == len(ops[r]),
              f"rank {r}: all {len(ops[r])} operator events on its process ({len(merged)})")
        last = ops_within_steps(spans, merged, S, T, f"rank {r}")
        # Each operator lies inside one /timeline span of its rank (its midpoint and its ends within the
        # span's, ±1 µs: the profiler's times are whole µs, and a step boundary leaves a few µs between
        # two spans): the profile and the spans agree on the clock, operator by operator.
        spans.sort(key=lambda e: e["ts"])
        starts = [e["ts"] for e in spans]
        kinds, astray = {}, []
        for o in merged:
            mid = o["ts"] + 0.5 * o["dur"]
            k = bisect.bisect_right(starts, mid + 1) - 1
            hit = next((s for s in spans[max(0, k - 3):k + 1][::-1] if s["ts"] - 1 <= mid <= s["ts"] + s["dur"] + 1),
                       None)
            if hit is None or o["ts"] < hit["ts"] - 1 or o["ts"] + o["dur"] > hit["ts"] + hit["dur"] + 1:
                astray.append(o)
            else:
                kinds[hit["name"]] = kinds.get(hit["name"], 0) + 1
        print(f"rank {r}: operator events by the span holding them: {sorted(kinds.items(), key=lambda x: -x[1])}")
        check(not astray, f"rank {r}: every operator event lies inside one of its spans ({len(astray)} do not"
              f"{', e.g. ' + repr(astray[0]) if astray else ''})")
        # Both ranks are in the train group (tags rollout,train): each profiled step's train span on the
        # rank holds LibTorch operators (generation runs tagflow's own decode kernels, not LibTorch's).
        for k in range(S, T + 1):
            tr_k = [(e["ts"], e["ts"] + e["dur"]) for e in spans if e["args"]["step"] == k and e["name"] == "train"]
            inside = sum(1 for e in merged if any(t0 <= e["ts"] + 0.5 * e["dur"] <= t1 for t0, t1 in tr_k))
            check(tr_k and inside >= 10, f"rank {r} step {k}: {inside} operator events inside its train span(s)")
        # The profile is written at the boundary to step T+1, between two spans (a gap in the rank's
        # timeline), not booked to the span that held the last operator (commands.md).
        holder = max((e for e in spans if e["ts"] <= last), key=lambda e: e["ts"])
        tail = holder["ts"] + holder["dur"] - last
        later = [e["ts"] for e in spans if e["ts"] >= holder["ts"] + holder["dur"] - 1]
        gap = (min(later) - (holder["ts"] + holder["dur"])) if later else 0.0
        print(f"rank {r}: the span holding the last operator ({holder['name']}, step {holder['args']['step']}) "
              f"goes on {tail / 1e3:.1f} ms after it; then a gap of {gap / 1e3:.1f} ms (the trace written)")
        check(gap >= 50e3 and tail < gap, f"rank {r}: the profile's write is a gap between spans, not in a span")


# ---------------------------------------------------------------- case: bad requests, a rank that does not deliver
def case_deliver(a):
    out = fresh_dir(a, "deliver")
    job, log, log_path = start_job(a, out, 3000)
    req = os.path.join(out, "profile.request")
    try:
        wait_step(out, 1, job)
        good = {"format": "tagflow-profile-request", "version": 1, "id": "x1", "ranks": [0, 1], "steps": 1}
        planted = [("garbage", b"\x00\xff{not json"),
                   ("foreign", json.dumps({"format": "something-else", "version": 1}).encode()),
                   ("newer", json.dumps(dict(good, version=7, id="x2")).encode()),
                   ("badsteps", json.dumps(dict(good, steps=0, id="x3")).encode()),
                   ("badid", json.dumps(dict(good, id="../../etc")).encode()),
                   ("range", json.dumps(dict(good, ranks=[5], id="x4")).encode())]
        for name, data in planted:
            s0 = run_step(out)
            tmp = req + ".tmp"
            open(tmp, "wb").write(data)
            os.replace(tmp, req)
            wait_step(out, s0 + 2, job)
        target = os.path.join(a.workdir, "victim.json")
        open(target, "w").write(json.dumps(dict(good, id="viaLink")))
        os.remove(req)
        os.symlink(target, req)
        s0 = run_step(out)
        wait_step(out, s0 + 2, job)
        os.remove(req)
        logtxt = open(log_path, errors="replace").read()
        bad_lines = [l for l in logtxt.splitlines() if "profile:" in l and "ignored" in l]
        for l in bad_lines:
            print("  log:", l.strip())
        check(job.poll() is None, "the job goes on after every planted request")
        check(not os.path.exists(os.path.join(out, "profiles")), "nothing profiled for them")
        # garbage, foreign, newer, badsteps, badid, link: one line on each rank; range: not for us, silent
        check(len(bad_lines) == 2 * 6, f"one log line per bad file and rank ({len(bad_lines)} lines)")
        check(not any("x4" in l for l in bad_lines), "a request for other ranks is not an error")

        # A rank whose trace cannot be written (a directory where its file goes: a disk error of a
        # kind root cannot bypass) answers "failed"; the other rank delivers; training goes on.
        prof = os.path.join(out, "profiles")
        os.makedirs(prof)
        s0 = run_step(out)
        for k in range(max(0, s0 - 2), s0 + 400):
            os.makedirs(os.path.join(prof, f"rank.1.step.{k}-{k}.json"), exist_ok=True)
        p = run_tagflow(a, ["profile", out, "--ranks", "0,1", "--steps", "1", "--timeout", "60"])
        sys.stdout.write(p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        check(p.returncode == 1, f"a rank failed: exit 1 ({p.returncode})")
        check(any(l.startswith("rank 0: steps ") for l in lines), "rank 0 delivered its trace")
        check(any(l.startswith("rank 1: FAILED: ") and "Is a directory" in l for l in lines),
              "rank 1 is named FAILED, with the cause")
        check(job.poll() is None, "the job goes on after the failed profile")
        # Rank 1 stopped (and so, in sync mode, rank 0 waiting for it): the command names the
        # ranks that did not answer within --timeout.
        pid1 = rank_pid(out, 1)
        check(pid1 is not None, "found rank 1's process")
        os.kill(pid1, signal.SIGSTOP)
        try:
            p = run_tagflow(a, ["profile", out, "--ranks", "1", "--steps", "1", "--timeout", "5"])
        finally:
            os.kill(pid1, signal.SIGCONT)
        sys.stdout.write(p.stdout + p.stderr)
        lines = p.stdout.splitlines()
        check(p.returncode == 1 and any(l.startswith("rank 1: NOT DELIVERED") for l in lines),
              f"rank 1 stopped: named NOT DELIVERED, exit 1 ({p.returncode})")
        rid = p.stdout.split("(request ")[1].split(")")[0]
        t_end = time.time() + 60
        while time.time() < t_end and not os.path.exists(os.path.join(prof, f"{rid}.rank.1.json")):
            time.sleep(0.2)
        check(os.path.exists(os.path.join(prof, f"{rid}.rank.1.json")), "after SIGCONT rank 1 answers the request")
        check(job.poll() is None, "the job runs on")
        for rng, needle in [("2", "rank 2 is out of range"), ("0-7", "rank 7 is out of range")]:
            p = run_tagflow(a, ["profile", out, "--ranks", rng, "--steps", "1"])
            lines = p.stderr.strip().splitlines()
            check(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
                  f"--ranks {rng} on a 2-rank job: exit 2, one line ({lines})")
    finally:
        stop_job(job)
        log.close()


# ---------------------------------------------------------------- case: hostile input for the command
def case_hostile(a):
    d = fresh_dir(a, "hostile")
    os.chmod(a.workdir, 0o755)
    os.chmod(d, 0o755)
    running = {"format": "tagflow-status", "version": 1, "mode": "sync", "updated_unix": time.time(), "refresh_s": 1,
               "stale_after_s": 5, "coordinator": 0, "world_size": 2,
               "run": {"step": 1, "steps": 20, "samples_per_s": 1, "staleness_mean": 0, "stale_dropped": 0,
                       "eta_s": 5, "done": False},
               "ranks": [{"rank": r, "host": "h", "tags": "train", "role": "train", "age_s": 0, "stale": False}
                         for r in (0, 1)]}

    def run_dir(name, record):
        rd = os.path.join(d, name)
        os.makedirs(rd)
        if record is not None:
            data = record if isinstance(record, bytes) else json.dumps(record).encode()
            open(os.path.join(rd, "status.json"), "wb").write(data)
        return rd

    ok = run_dir("ok", running)
    for args, needle in [([], "missing RUN_DIR"), ([ok], "missing --ranks"), ([ok, "--ranks", "0"], "missing --steps"),
                         ([ok, "--bogus"], "--bogus"), ([ok, ok, "--ranks", "0", "--steps", "1"], "one run directory"),
                         ([ok, "--ranks", "0", "--steps", "0"], "--steps 0"),
                         ([ok, "--ranks", "0", "--steps", "1001"], "--steps 1001"),
                         ([ok, "--ranks", "0", "--steps", "x"], "--steps"),
                         ([ok, "--ranks", "", "--steps", "1"], "--ranks is empty"),
                         ([ok, "--ranks", "a", "--steps", "1"], "--ranks a"),
                         ([ok, "--ranks", "1-0", "--steps", "1"], "is empty"),
                         ([ok, "--ranks", "-1", "--steps", "1"], "--ranks -1"),
                         ([ok, "--ranks", "2", "--steps", "1"], "rank 2 is out of range"),
                         ([ok, "--ranks", "99999999999", "--steps", "1"], "not a non-negative integer"),
                         ([ok, "--ranks", "0", "--steps", "1", "--timeout", "-3"], "--timeout -3")]:
        one_line_error(run_tagflow(a, ["profile"] + args), needle, f"profile {' '.join(args)}")
    check(not os.path.exists(os.path.join(ok, "profile.request")), "no request written for bad usage")
    one_line_error(run_tagflow(a, ["profile", d + "/nope", "--ranks", "0", "--steps", "1"]), "no such run directory",
                   "a missing run directory")
    f = os.path.join(d, "file")
    open(f, "w").close()
    one_line_error(run_tagflow(a, ["profile", f, "--ranks", "0", "--steps", "1"]), "not a directory",
                   "a file as run directory")
    for name, rec, needle in [("empty", None, "no status record"),
                              ("garbage", b"\x00\xffnope", "not a tagflow status record"),
                              ("foreign", {"format": "other", "version": 1}, "not a tagflow status record"),
                              ("noworld", {k: v for k, v in running.items() if k != "world_size"}, "world_size"),
                              ("done", dict(running, run=dict(running["run"], done=True)), "the run has finished")]:
        rd = run_dir(name, rec)
        one_line_error(run_tagflow(a, ["profile", rd, "--ranks", "0", "--steps", "1"]), needle, f"status.json {name}")
        check(not os.path.exists(os.path.join(rd, "profile.request")), f"{name}: no request written")
    rd = run_dir("linkprof", running)
    os.symlink("/tmp", os.path.join(rd, "profiles"))
    one_line_error(run_tagflow(a, ["profile", rd, "--ranks", "0", "--steps", "1"]), "not a directory",
                   "profiles/ a symbolic link")
    rd = run_dir("noperm", running)
    os.chmod(rd, 0o555)
    p = run_tagflow(a, ["profile", rd, "--ranks", "0", "--steps", "1", "--no-wait"], preexec_fn=as_nobody)
    one_line_error(p, "cannot write the request", "a run directory the user cannot write")
    check(sorted(os.listdir(rd)) == ["status.json"], "nothing written there")
    # control: the same directory writable, --no-wait writes the request and exits 0
    p = run_tagflow(a, ["profile", ok, "--ranks", "all", "--steps", "2", "--no-wait"])
    req = json.load(open(os.path.join(ok, "profile.request")))
    check(p.returncode == 0 and req["ranks"] == [0, 1] and req["steps"] == 2 and
          req["format"] == "tagflow-profile-request", f"control: a good request is written (exit {p.returncode})")


# ---------------------------------------------------------------- case: the gateway's /v1/profile
def case_gateway(a):
    out = fresh_dir(a, "gateway")
    cmd = ["mpirun", "-n", "2", a.tagflow, "train", "--out", out, "--mode", "disaggregated", "--rank-tags",
           "0=rollout;1=rollout,train", "--gateway", "127.0.0.1:0", "--task", "reverse", "--digits", "3",
           "--max-new-tokens", "8", "--steps", "2000", "--group-size", "2", "--train-threshold", "4",
           "--eval-every", "0", "--gemm-check", "false", "--max-batch", "8", "--threads", "1", "--seed", "5",
           "--heartbeat-timeout", "120"]
    log_path = os.path.join(a.workdir, "gateway.log")
    log = open(log_path, "w")
    job = subprocess.Popen(cmd, env=ENV, stdout=log, stderr=subprocess.STDOUT)
    rc = None
    try:
        wait_step(out, 2, job)
        url = open(os.path.join(out, "gateway.url")).read().strip()
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        token = open(os.path.join(out, "gateway.token")).read().strip()
        s, j = http_json(port, "POST", "/v1/profile", {"ranks": [1], "steps": 2})
        check(s == 401, f"POST /v1/profile without the token -> 401 ({s})")
        bad = [(b"[1, 2]", "JSON object"), (b"{not json", "JSON object"),
               ({"ranks": [5], "steps": 2}, "rank 5 is out of range"), ({"ranks": "1", "steps": 0}, "not in [1,"),
               ({"ranks": [1], "steps": 2, "when": "now"}, "Unknown field 'when'"),
               ({"ranks": [1], "steps": 2, "shapes": "yes"}, '"shapes" must be true or false'),
               ({"ranks": [-1], "steps": 2}, '"ranks" must be'), ({"steps": 2}, '"ranks" must be'),
               ({"ranks": "all", "steps": "2"}, '"steps" must be an integer')]
        for body, words in bad:
            s, j = http_json(port, "POST", "/v1/profile", body, token)
            msg = j.get("error", {}).get("message", "")
            check(s == 400 and words in msg and "\n" not in msg, f"POST /v1/profile {body!r} -> 400 naming it ({s}: {msg})")
        check(not os.path.exists(os.path.join(out, "profile.request")), "no request file written by a bad body")
        s, _ = http_json(port, "GET", "/v1/profile", token=token)
        check(s == 405, f"GET /v1/profile -> 405 ({s})")
        s, _ = http_json(port, "GET", "/v1/profile/p0000", token=token)
        check(s == 404, f"GET /v1/profile/<an id nobody asked for> -> 404 ({s})")
        s, j = http_json(port, "POST", "/v1/profile", {"ranks": [1], "steps": 2, "shapes": False}, token)
        check(s == 202 and j.get("ranks") == [1] and j.get("steps") == 2 and j.get("status_url") == "/v1/profile/" +
              j.get("id", "?"), f"POST /v1/profile -> 202 with an id ({s}: {j})")
        s2, _ = http_json(port, "POST", "/v1/profile/" + j.get("id", "x"), {}, token)
        check(s2 == 405, f"POST /v1/profile/ID -> 405 ({s2})")
        st, t_end = {}, time.time() + 90
        while time.time() < t_end:
            s, st = http_json(port, "GET", j["status_url"], token=token)
            if s != 200 or st.get("done"):
                break
            time.sleep(0.3)
        r1 = (st.get("ranks") or [{}])[0]
        check(s == 200 and st.get("done") and r1.get("rank") == 1 and r1.get("status") == "done" and
              r1.get("last_step", 0) - r1.get("first_step", 0) == 1, f"GET /v1/profile/ID: rank 1 done, 2 steps ({st})")
        trace = os.path.join(out, r1.get("trace", "none"))
        check(os.path.isfile(trace), f"its trace is in the run directory ({r1.get('trace')})")
        if os.path.isfile(trace):
            valid_chrome_trace(trace)
        check(job.poll() is None, "the job still runs after the profile")
        job.send_signal(signal.SIGUSR1)
        rc = job.wait(timeout=120)
    finally:
        stop_job(job)
        log.close()
    check(rc == 75, f"the job goes on until SIGUSR1 stops it (exit 75: {rc}; {log_path})")


if __name__ == "__main__":
    sys.exit(case_main("profile", {"midrun": case_midrun, "main5": case_main5, "deliver": case_deliver,
                                   "hostile": case_hostile, "gateway": case_gateway}))
