#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# soak.sh: the soak benchmark of issue 7 (share/doc/failures.md, "Soak"). A benchmark, not a
# ctest: it runs `tagflow train` for DURATION seconds in one run directory while, every
# KILL_EVERY seconds (drawn uniformly from [0.5, 1.5] x KILL_EVERY with SEED), it either
#   kill  SIGKILLs one random rank (mpirun/srun, or the heartbeat watchdog, end the job),
#   stop  SIGSTOPs one random rank (the heartbeat watchdog ends the job, exit 69),
#   usr1  sends SIGUSR1 to every rank (checkpoint at the next step boundary, exit 75),
# then starts the same command again in the same --out (auto-resume from OUT/checkpoint), until
# the time is up; the last incarnation always ends with usr1. With GATEWAY=1 (async modes only)
# share/examples/gateway_agent.py runs against every incarnation (/v1/completions with the
# job's token from OUT/gateway.token, /v1/rewards per session), i.e. continuous gateway load.
# Finally it verifies the run file with h5py:
#   - the schema invariants (share/python/tagflow_run.py check_invariants);
#   - no sample id twice in /samples; every /consumed id once and present in /samples;
#   - dataset prompt groups (task != gateway) never over-full (never more than --group-size
#     samples: a duplicate) and without gaps: in sync mode groups 0..K-1 each complete; in the
#     async modes every group below the highest trained one present (groups in flight at the
#     very end may be partial: counted as "in flight", not as lost);
#   - /steps step and policy_version strictly increasing; /resumes one row per restart, their
#     from_step non-decreasing; every usr1 incarnation exited 75, every kill/stop one non-zero,
#     none hung (HANG_S), no rank process left behind;
# prints the counts (restarts by cause, samples, consumed, steps, gateway sessions/requests,
# duplicates=0, lost=0) and exits 1 on any violation (2 on bad usage).
#
# Environment (defaults):
#   TAGFLOW=build/mpi_app/tagflow  DURATION=1800  KILL_EVERY=60  SEED=1  MODE=multiplex
#   GATEWAY=1 (forced to 0 in MODE=sync)  NP=3  OUT=/tmp/tagflow-soak-$SEED (deleted first)
#   CAUSES=kill,stop,usr1  CKPT_EVERY=3  HEARTBEAT=5  HANG_S=120  FIRST_CKPT_S=120
#   RANK_TAGS (async default: "0=rollout,train;1..NP-1=rollout"; sync: none)
#   LAUNCH="mpirun -n $NP" (e.g. LAUNCH="srun --mpi=pmix -K1" inside an allocation of the
#     loopback Slurm cluster: ranks are found by their environment, so any launcher works)
#   TRAIN_ARGS (extra `tagflow train` options, appended; default a small, fast run)
# Runs as root need OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (set here if root).
#
# Examples:
#   MODE=sync GATEWAY=0 DURATION=120 KILL_EVERY=20 tests/bench/soak.sh   # the restart logic alone
#   DURATION=1800 tests/bench/soak.sh                                     # 30 min, multiplex + gateway
# Does not judge training quality (the reward curve is printed, not checked).
# Gateway runs checkpoint like the others (share/doc/gateway.md, "Checkpoints, requeue and
# restarts"): rewarded gateway samples survive a restart, sessions in flight do not (the agent
# redoes them against the new incarnation's gateway.url / gateway.token).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export SOAK_ROOT=$ROOT
if [[ $(id -u) == 0 ]]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
# tagflow reads TAGFLOW_<NAME> variables as options: none may leak in from the caller
for v in $(compgen -e | grep '^TAGFLOW_' || true); do unset "$v"; done
exec /usr/bin/python3 - "$@" <<'EOF'
import atexit
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.environ["SOAK_ROOT"]
sys.path.insert(0, os.path.join(ROOT, "share", "python"))


def env(name, default):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


def usage(msg):
    print(f"soak.sh: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    TAGFLOW = os.path.abspath(env("TAGFLOW", os.path.join(ROOT, "build", "mpi_app", "tagflow")))
    DURATION = float(env("DURATION", "1800"))
    KILL_EVERY = float(env("KILL_EVERY", "60"))
    SEED = int(env("SEED", "1"))
    MODE = env("MODE", "multiplex")
    GATEWAY = int(env("GATEWAY", "1")) and MODE != "sync"
    NP = int(env("NP", "3"))
    OUT = os.path.abspath(env("OUT", f"/tmp/tagflow-soak-{SEED}"))
    CAUSES = [c for c in env("CAUSES", "kill,stop,usr1").split(",") if c]
    CKPT_EVERY = int(env("CKPT_EVERY", "3"))
    HEARTBEAT = int(env("HEARTBEAT", "5"))
    HANG_S = float(env("HANG_S", "120"))
    FIRST_CKPT_S = float(env("FIRST_CKPT_S", "120"))
    LAUNCH = env("LAUNCH", f"mpirun -n {NP}").split()
    TRAIN_ARGS = env("TRAIN_ARGS", "").split()
except ValueError as e:
    usage(f"bad number in the environment: {e}")
if MODE not in ("sync", "disaggregated", "multiplex"):
    usage(f"MODE={MODE}: sync, disaggregated or multiplex")
if not CAUSES or any(c not in ("kill", "stop", "usr1") for c in CAUSES):
    usage(f"CAUSES={','.join(CAUSES)}: a list of kill, stop, usr1")
if DURATION <= 0 or KILL_EVERY <= 0 or NP < 2:
    usage("DURATION and KILL_EVERY must be positive, NP at least 2")
if not os.access(TAGFLOW, os.X_OK):
    usage(f"TAGFLOW={TAGFLOW}: not an executable (build it, or set TAGFLOW)")
RANK_TAGS = env("RANK_TAGS", "" if MODE == "sync" else
                "0=rollout,train;" + ";".join(f"{r}=rollout" for r in range(1, NP)))
P, G = 4, 4
for i, a in enumerate(TRAIN_ARGS[:-1]):
    if a == "--prompts-per-step":
        P = int(TRAIN_ARGS[i + 1])
    if a == "--group-size":
        G = int(TRAIN_ARGS[i + 1])

rng = random.Random(SEED)
shutil.rmtree(OUT, ignore_errors=True)
LOGS = OUT + ".soak"
shutil.rmtree(LOGS, ignore_errors=True)
os.makedirs(LOGS)
EXE = os.path.realpath(TAGFLOW)
MARK = f"{os.getpid()}-{SEED}-{int(time.time())}"

cmd_base = LAUNCH + [TAGFLOW, "train", "--out", OUT, "--mode", MODE, "--steps", "100000000",
                     "--ckpt-every", str(CKPT_EVERY), "--heartbeat-timeout", str(HEARTBEAT),
                     "--prompts-per-step", str(P), "--group-size", str(G), "--eval-every", "0",
                     "--eval-prompts", "8", "--gemm-check", "false", "--threads", "1", "--max-batch", "16"]
if RANK_TAGS:
    cmd_base += ["--rank-tags", RANK_TAGS]
if GATEWAY:
    cmd_base += ["--gateway", "127.0.0.1:0", "--max-new-tokens", "8"]
cmd_base += TRAIN_ARGS
violations = []


def violation(msg):
    print(f"VIOLATION: {msg}", flush=True)
    violations.append(msg)


def rank_pids(mark):
    """{rank: pid} of the tagflow processes of this incarnation (found by SOAK_MARK)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.path.realpath(f"/proc/{d}/exe") != EXE:
                continue
            with open(f"/proc/{d}/environ", "rb") as fh:
                e = dict(kv.split(b"=", 1) for kv in fh.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if e.get(b"SOAK_MARK") != mark.encode():
            continue
        r = e.get(b"PMIX_RANK") or e.get(b"OMPI_COMM_WORLD_RANK") or e.get(b"SLURM_PROCID")
        if r is not None:
            found[int(r)] = int(d)
    return found


def catches_usr1(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGUSR1 - 1)))
    except OSError:
        pass
    return False


def manifest_step():
    try:
        with open(os.path.join(OUT, "checkpoint", "manifest.txt")) as fh:
            for line in fh:
                if line.startswith("step "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


children = []  # what is left running at exit (an error) is killed


@atexit.register
def _cleanup():
    for c in children:
        if c.poll() is None:
            try:
                os.killpg(c.pid, signal.SIGKILL)
            except OSError:
                c.kill()


def start_agent(inc):
    if not GATEWAY:
        return None
    log = open(os.path.join(LOGS, f"agent.{inc}.log"), "w")
    return subprocess.Popen([sys.executable, os.path.join(ROOT, "share", "examples", "gateway_agent.py"), "--out", OUT,
                             "--sessions", "100000000", "--group", str(G), "--concurrency", "2", "--seed", str(SEED + inc),
                             "--prefix", f"soak{inc}", "--wait", "300"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def agent_counts(inc):
    try:
        text = open(os.path.join(LOGS, f"agent.{inc}.log")).read()
    except OSError:
        return 0, 0
    m = re.search(r"gateway_agent: (\d+) sessions, (\d+) requests", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


t_begin = time.time()
deadline = t_begin + DURATION
incarnations = []  # dicts: cause, rc, wall, ...
inc = 0
while True:
    for f in ("gateway.url", "gateway.token"):  # the agent must wait for this incarnation's
        try:
            os.remove(os.path.join(OUT, f))
        except OSError:
            pass
    log_path = os.path.join(LOGS, f"run.{inc}.log")
    mark = f"{MARK}-{inc}"
    t0 = time.time()
    proc = subprocess.Popen(cmd_base, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                            env=dict(os.environ, SOAK_MARK=mark), start_new_session=True)
    agent = start_agent(inc)
    children[:] = [c for c in (proc, agent) if c is not None]
    ckpt_at_start = manifest_step()
    # The first incarnation runs until its first checkpoint (so that every restart resumes).
    if inc == 0:
        while manifest_step() is None and proc.poll() is None and time.time() - t0 < FIRST_CKPT_S:
            time.sleep(0.2)
        if manifest_step() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            print(open(log_path, errors="replace").read()[-1500:])
            usage(f"the first run wrote no checkpoint in {time.time() - t0:.0f} s (rc {proc.poll()}); see {log_path}")
    wait = rng.uniform(0.5, 1.5) * KILL_EVERY
    last = time.time() + wait >= deadline
    cause = "usr1" if last else rng.choice(CAUSES)
    t_act = min(time.time() + wait, deadline)
    while time.time() < t_act and proc.poll() is None:
        time.sleep(0.1)
    # Act only once every rank catches SIGUSR1 (set up to checkpoint): before that a signal
    # would hit a process still starting, which is not what this benchmark measures.
    t_ready = time.time()
    while proc.poll() is None and time.time() - t_ready < HANG_S:
        pids = rank_pids(mark)
        if len(pids) == NP and all(catches_usr1(p) for p in pids.values()):
            break
        time.sleep(0.1)
    if proc.poll() == 2:  # a usage error: nothing to soak
        errs = [l for l in open(log_path, errors="replace").read().splitlines() if "error" in l]
        usage(f"run {inc}: tagflow refused to start (exit 2): {errs[0] if errs else '?'}")
    if proc.poll() is not None:
        violation(f"incarnation {inc} ended by itself with exit {proc.returncode} before the {cause} "
                  f"(see {log_path})")
        incarnations.append({"cause": "self", "rc": proc.returncode, "wall": time.time() - t0, "end_s": 0})
        break
    pids = rank_pids(mark)
    if len(pids) != NP:
        violation(f"incarnation {inc}: found {len(pids)} of {NP} rank processes ({pids})")
    victim = rng.choice(sorted(pids)) if pids else None
    t_sig = time.time()
    try:
        if cause == "usr1":
            for pid in pids.values():
                os.kill(pid, signal.SIGUSR1)
        elif victim is not None:
            os.kill(pids[victim], signal.SIGKILL if cause == "kill" else signal.SIGSTOP)
    except ProcessLookupError:
        pass
    try:
        rc = proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        violation(f"incarnation {inc}: still running {HANG_S:.0f} s after {cause} (a hang)")
        os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait()
    end_s = time.time() - t_sig
    time.sleep(0.5)
    left = rank_pids(mark)
    if left:
        violation(f"incarnation {inc}: rank processes left after the job ended: {left}")
        for pid in left.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if agent is not None:
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    text = open(log_path, errors="replace").read()
    if inc > 0 and "resuming" not in text:
        violation(f"incarnation {inc} did not resume (no 'resuming' line in {log_path})")
    if cause == "usr1" and rc != 75:
        violation(f"incarnation {inc}: exit {rc} after SIGUSR1, expected 75 (see {log_path})")
    if cause != "usr1" and rc in (0, 75):
        violation(f"incarnation {inc}: exit {rc} after {cause} of rank {victim}, expected a failure")
    sessions, requests = agent_counts(inc)
    m = re.findall(r"resuming .* \(step (\d+)\)", text)
    incarnations.append({"cause": cause, "rank": victim, "rc": rc, "wall": time.time() - t0, "end_s": end_s,
                         "from_step": int(m[-1]) if m else None, "ckpt_before": ckpt_at_start,
                         "ckpt_after": manifest_step(), "sessions": sessions, "requests": requests})
    i = incarnations[-1]
    print(f"[{time.time() - t_begin:7.1f}s] run {inc}: {cause}" + (f" rank {victim}" if cause != "usr1" else "") +
          f" -> exit {rc} after {end_s:.1f}s; checkpoint step {i['ckpt_before']} -> {i['ckpt_after']}"
          + (f"; gateway {sessions} sessions, {requests} requests" if GATEWAY else ""), flush=True)
    inc += 1
    if cause == "usr1" and last:
        break

# ---------------------------------------------------------------- verification
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import tagflow_run  # noqa: E402

restarts = len(incarnations) - 1
by_cause = {c: sum(1 for i in incarnations[:-1] if i["cause"] == c) for c in ("kill", "stop", "usr1")}
with h5py.File(os.path.join(OUT, "tagflow.h5"), "r") as f:
    bad = tagflow_run.check_invariants(f)
    for b in bad:
        violation(f"run file invariant: {b}")
    s = f["samples"]
    ids, groups = s["id"][()], s["group"][()]
    task = np.array([t.decode() if isinstance(t, bytes) else str(t) for t in s["task"][()]])
    cons = f["consumed"]["id"][()]
    step, version = f["steps"]["step"][()], f["steps"]["policy_version"][()]
    reward = f["steps"]["reward_mean"][()]
    resumes = f["resumes"]["from_step"][()]
dup_samples = len(ids) - len(np.unique(ids))
dup_consumed = len(cons) - len(np.unique(cons))
lost = int(np.sum(~np.isin(cons, ids)))
if dup_samples:
    violation(f"{dup_samples} sample ids more than once in /samples")
if dup_consumed:
    violation(f"{dup_consumed} sample ids consumed more than once")
if lost:
    violation(f"{lost} consumed ids not in /samples")
ds = task != "gateway"
g_ids, g_counts = np.unique(groups[ds], return_counts=True)
over = int(np.sum(g_counts > G))
if over:
    violation(f"{over} dataset prompt groups hold more than {G} samples (duplicated prompts)")
cons_groups = np.unique(groups[np.isin(ids, cons) & ds])
top = int(cons_groups.max()) if len(cons_groups) else -1
if MODE == "sync":
    want = np.arange(int(g_ids.max()) + 1 if len(g_ids) else 0)
    gaps = np.setdiff1d(want, g_ids)
    partial = int(np.sum(g_counts < G))
    in_flight = 0
else:
    # The async modes give generator i (of n, manifest sched.gens) the groups i, i+n, i+2n, ...
    # and checkpoint each one's front lo[i] (sched.lo): every group of generator i below
    # lo[i]*n+i is finished (all G samples in /samples); the ones above are in flight. Generators
    # advance at their own pace (a multiplex rank that trains stops generating), so the groups
    # of one residue class are contiguous, not all groups below the highest one.
    man = {}
    with open(os.path.join(OUT, "checkpoint", "manifest.txt")) as fh:
        for line in fh:
            kv = line.rstrip("\n").split(" ", 1)
            if len(kv) == 2:
                man[kv[0]] = kv[1]
    if "sched.lo" in man:
        lo = [int(x) for x in man["sched.lo"].split(",")]
        n = len(lo)
        fronts = {i: lo[i] * n + i for i in range(n)}
    else:  # no per-generator fronts: the dataset cursor alone
        n, fronts = 1, {0: int(man.get("next_group", "0"))}
    cnt = dict(zip(g_ids.tolist(), g_counts.tolist()))
    gaps, partial = [], 0
    for i, front in fronts.items():
        for g in range(i, front, n):
            c = cnt.get(g, 0)
            gaps += [g] if c == 0 else []
            partial += 0 < c < G
    gaps = np.array(gaps, dtype=np.int64)
    in_flight = sum(1 for g in cnt if g >= fronts[g % n])
    if int(man.get("rows.samples", len(ids))) != len(ids):
        violation(f"/samples has {len(ids)} rows, the final checkpoint recorded {man.get('rows.samples')}")
if len(gaps):
    violation(f"{len(gaps)} dataset prompt groups missing (skipped): {gaps[:20].tolist()}")
    lost += len(gaps)
if partial:
    violation(f"{partial} dataset prompt groups with fewer than {G} samples")
if len(step) and np.any(np.diff(step) <= 0):
    violation(f"/steps not strictly increasing: {step.tolist()[:50]}")
if len(version) and np.any(np.diff(version) <= 0):
    violation(f"policy versions not strictly increasing: {version.tolist()[:50]}")
if len(resumes) != restarts:
    violation(f"{len(resumes)} /resumes rows for {restarts} restarts")
if len(resumes) and np.any(np.diff(resumes) < 0):
    violation(f"/resumes from_step decreasing: {resumes.tolist()}")
want_from = [i["ckpt_before"] for i in incarnations[1:]]
if [int(r) for r in resumes] != [w for w in want_from if w is not None][:len(resumes)]:
    violation(f"/resumes from_step {resumes.tolist()} != the checkpoint each restart found {want_from}")

gw_rows = int(np.sum(~ds))
sessions = sum(i.get("sessions", 0) for i in incarnations)
requests = sum(i.get("requests", 0) for i in incarnations)
ends = {c: [round(i["end_s"], 1) for i in incarnations if i["cause"] == c] for c in ("kill", "stop", "usr1")}
print(f"soak: mode {MODE}, {NP} ranks, seed {SEED}, {time.time() - t_begin:.0f} s, {len(incarnations)} runs")
print(f"  restarts {restarts}: kill {by_cause['kill']}, stop {by_cause['stop']}, usr1 {by_cause['usr1']} "
      f"(+ the final usr1)")
print(f"  job end after the signal (s): " + ", ".join(f"{c} {v}" for c, v in ends.items() if v))
print(f"  steps {len(step)} (last {int(step[-1]) if len(step) else -1}), samples {len(ids)} "
      f"(dataset {int(np.sum(ds))} in {len(g_ids)} groups, gateway {gw_rows}), consumed {len(cons)}, "
      f"groups in flight at the end {in_flight}")
if GATEWAY:
    print(f"  gateway (agent side): {sessions} sessions, {requests} requests; {gw_rows} gateway samples in the run file")
if len(reward):
    q = max(1, len(reward) // 4)
    print(f"  reward mean: first quarter {float(np.mean(reward[:q])):.3f}, last quarter {float(np.mean(reward[-q:])):.3f}")
print(f"  duplicates={dup_samples + dup_consumed + over} lost={lost}")
print(f"  logs: {LOGS}")
if violations:
    print(f"soak: FAIL, {len(violations)} violation(s)")
    sys.exit(1)
print("soak: PASS")
EOF
