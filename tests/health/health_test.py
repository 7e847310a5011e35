#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A lost rank ends the job: real `tagflow train` runs under mpirun, one rank SIGKILLed or
SIGSTOPped mid-run (after a few flushed steps).

    health_test.py CASE --tagflow BIN --workdir DIR      CASE: kill_np2 stop_np2 kill_np3 stop_np3
    health_test.py CASE --probe BIN --workdir DIR        CASE: probe_kill_np2 ... probe_stop_np3
The probe cases run watchdog_probe_mpi (the watchdog around an MPI_Allreduce loop, no LibTorch)
instead of `tagflow train`: the same launcher-level checks in seconds, without the run file.

The *_rs_* cases train with `--mode sync --shard gradients` (every rank in the train group) and the
victim stops itself on entering its 6th gradient reduce-scatter
(TAGFLOW_TEST_SIGNAL_IN_REDUCE_SCATTER), so the others are waiting inside the collective when it
goes: the job must end the same way.

Checks: mpirun exits non-zero within 60 s of the signal (a stopped rank is found by the heartbeat
watchdog, --heartbeat-timeout 5 here); stderr names the lost rank (the watchdog's
"tagflow: rank R (host H) stopped answering" or mpirun's own "process rank R ... signal 9");
no rank process is left behind; the run file opens with h5py, holds the steps flushed before
the signal, and its flushed part is consistent. Prints the measured time from signal to job end.
"""
import argparse
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "app"))
# mpirun environment without TAGFLOW_*, check() prints ok:, rank_pids() finds mpirun's ranks
from app_tests import ENV, Failure, check, rank_pids  # noqa: E402
import tagflow_run  # noqa: E402  (share/python, put on sys.path by app_tests)

FAST = ["--steps", "100000", "--prompts-per-step", "4", "--group-size", "4", "--eval-every", "0",
        "--eval-prompts", "8", "--gemm-check", "false", "--max-batch", "16", "--threads", "1",
        "--heartbeat-timeout", "5"]
END_LIMIT_S = 60


def alive(pid):
    try:
        st = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return st[st.rindex(")") + 2] not in "ZX"


def run_case(a, sig, np_, probe=False, in_rs=False):
    sig_name = "kill" if sig == signal.SIGKILL else "stop"
    name = f"{'probe_' if probe else ''}{sig_name}{'_rs' if in_rs else ''}_np{np_}"
    out = os.path.join(a.workdir, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(a.workdir, exist_ok=True)
    err_path = os.path.join(a.workdir, name + ".stderr")
    err = open(err_path, "w")
    if probe:
        os.makedirs(out)
        cmd = ["mpirun", "-n", str(np_), a.probe, "--out", os.path.join(out, ".heartbeat"), "--timeout", "5"]
        progress = r"tick (\d+) "
    else:
        cmd = ["mpirun", "-n", str(np_), a.tagflow, "train", "--out", out] + FAST
        progress = r"step\s+(\d+)/"
    victim = np_ - 1
    env = dict(ENV)
    if in_rs:
        cmd += ["--mode", "sync", "--shard", "gradients"]
        env["TAGFLOW_TEST_SIGNAL_IN_REDUCE_SCATTER"] = f"{victim}:6:{sig_name}"
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in p.stdout] + [lines.put(None)], daemon=True).start()
    pids = {}
    try:
        steps_seen, raised, deadline = 0, False, time.time() + 150
        while not (raised if in_rs else steps_seen >= 3) and time.time() < deadline:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            m = re.match(progress, line)
            if m:
                steps_seen = int(m.group(1))
                if not pids:  # every rank is past its start-up by the first step
                    pids = rank_pids(p.pid)
            raised = raised or line.startswith(f"tagflow test: rank {victim} raises SIG")
        if in_rs:
            check(raised, f"{name}: rank {victim} signalled itself in a reduce-scatter, at step {steps_seen + 1}")
        else:
            check(steps_seen >= 3, f"{name}: run reached step {steps_seen} before the signal")
            pids = rank_pids(p.pid)
        check(sorted(pids) == list(range(np_)), f"{name}: found the pid of every rank: {pids}")
        t_sig = time.time()
        if not in_rs:
            os.kill(pids[victim], sig)
        try:
            rc = p.wait(timeout=END_LIMIT_S)
        except subprocess.TimeoutExpired:
            raise Failure(f"{name}: mpirun still running {END_LIMIT_S} s after {sig.name} of rank {victim}")
        dt = time.time() - t_sig
        print(f"measured: {name}: {sig.name} of rank {victim} -> mpirun exited {rc} after {dt:.1f} s", flush=True)
        check(rc != 0, f"{name}: mpirun exits non-zero ({rc})")
        time.sleep(0.5)
        left = [pid for pid in pids.values() if alive(pid)]
        check(not left, f"{name}: no rank process left running: {left}")
    finally:
        for pid in pids.values():  # never leave a stopped or running rank behind
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if p.poll() is None:
            p.kill()
            p.wait()
        err.close()
    text = open(err_path).read()
    if sig == signal.SIGSTOP:
        pat = rf"tagflow: rank {victim} \(host [^)]+\) stopped answering: no heartbeat for \d+ s; aborting the job"
    else:
        pat = rf"(tagflow: rank {victim} \(host|process rank {victim} with PID \d+ on node \S+ exited on signal 9)"
    m = re.search(pat, text)
    if not m:
        sys.stdout.write(text[-3000:])
    check(m is not None, f"{name}: stderr names the lost rank: {m.group(0) if m else pat}")
    if probe:
        return
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        n = len(f["steps"]["step"])
        check(n >= steps_seen - 1, f"{name}: run file opens in h5py with {n} flushed steps (saw {steps_seen})")
        bad = tagflow_run.check_invariants(f)
        check(not bad, f"{name}: its flushed part is consistent: {bad}")


CASES = {
    "kill_np2": (signal.SIGKILL, 2),
    "stop_np2": (signal.SIGSTOP, 2),
    "kill_np3": (signal.SIGKILL, 3),
    "stop_np3": (signal.SIGSTOP, 3),
}
CASES.update({"probe_" + k: v for k, v in list(CASES.items())})
CASES.update({"kill_rs_np3": (signal.SIGKILL, 3), "stop_rs_np3": (signal.SIGSTOP, 3)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--tagflow")
    ap.add_argument("--probe")
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    probe = a.case.startswith("probe_")
    if not (a.probe if probe else a.tagflow):
        ap.error(f"{a.case} needs {'--probe' if probe else '--tagflow'}")
    try:
        run_case(a, *CASES[a.case], probe=probe, in_rs="_rs_" in a.case)
    except Failure as e:
        print("FAIL:", e, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
