# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the Python end-to-end test scripts (tests/*/*.py): the mpirun environment, the two
kinds of check, a JSON request to the gateway, stderr without mpirun's banners, the checkpoint
manifest's step, the ranks of an mpirun (and one of them slowed), and the command line of the app-level scripts
(CASE --tagflow BIN --workdir DIR). A script puts this folder on its path relative to itself:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))

It holds no test and runs nothing on import; what a test checks stays in the test's own file.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

# mpirun as root, ranks oversubscribed, and no TAGFLOW_* from the caller's environment (a test
# states every option it means).
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
for _k in list(ENV):
    if _k.startswith("TAGFLOW_"):
        del ENV[_k]
# The same with one tokenizer thread (the Rust tokenizers of a text run on a loaded 2-core machine).
ENV_ONE_THREAD = dict(ENV, RAYON_NUM_THREADS="1")


# ---------------------------------------------------------------- checks
class Failure(Exception):
    pass


def check(cond, msg):
    """Stops the case at the first failure (raises Failure); prints "ok: msg" otherwise."""
    if not cond:
        raise Failure(msg)
    print("ok:", msg, flush=True)


failures = []  # soft_check's failures; a script exits non-zero when it is not empty


def soft_check(cond, msg):
    """Records a failure and goes on, so one run lists every check that fails; returns cond."""
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


# ---------------------------------------------------------------- processes and their output
def err_lines(text):
    """Non-empty stderr lines, without the exit-status banners mpirun itself prints between lines of
    dashes."""
    out, banner = [], False
    for l in text.splitlines():
        if re.fullmatch(r"-{20,}", l.strip()):
            banner = not banner
            continue
        if l.strip() and not banner:
            out.append(l)
    return out


def rank_pids(mpirun_pid):
    """pid of each rank (OMPI_COMM_WORLD_RANK) started by this mpirun (its direct children)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open(f"/proc/{pid}/stat").read()
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z" or int(fields[1]) != mpirun_pid:
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(kv.split(b"=")[1])] = int(pid)
    return out


class SlowedRank:
    """While the `with` block runs, one rank of a running mpirun is slowed to a fraction of its speed:
    SIGSTOP for stop_s, SIGCONT for cont_s, over and over (from a thread, once the rank exists); it
    is left running when the block ends."""

    def __init__(self, popen, rank, stop_s=0.03, cont_s=0.01):
        self.p, self.rank, self.stop_s, self.cont_s = popen, rank, stop_s, cont_s
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        pid = None
        while pid is None and not self.done.is_set() and self.p.poll() is None:
            pid = rank_pids(self.p.pid).get(self.rank)
            time.sleep(0.02)
        while pid is not None and not self.done.is_set():
            try:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(self.stop_s)
                os.kill(pid, signal.SIGCONT)
                time.sleep(self.cont_s)
            except ProcessLookupError:
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        return False


def kill_ranks(mpirun_pid):
    """SIGKILLs every rank of that mpirun (a rank already gone is no error); returns {rank: pid}."""
    pids = rank_pids(mpirun_pid)
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def manifest_step(out):
    """The step of the run directory's last committed checkpoint, None without one."""
    try:
        with open(os.path.join(out, "checkpoint", "manifest.txt")) as f:
            for line in f:
                if line.startswith("step "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def http_json(port, method, path, body=None, token=None):
    """One request to 127.0.0.1:port; body: bytes/str as they are, anything else JSON-encoded. Returns
    (status, the JSON answer or {} when the answer is not JSON)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + token
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body).encode()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, {}


def post_stream(host, port, token, body):
    """A streaming completion request (`body`: the JSON dict) sent on a raw socket, which is
    returned unread, so a test can close it mid-stream."""
    raw = json.dumps(body).encode()
    s = socket.create_connection((host, port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(raw)).encode() +
              b"\r\n\r\n" + raw)
    return s


def read_first_chunk(s):
    """What `s` sent up to and including its first SSE data chunk (less if it closed first)."""
    got = b""
    while b"data: {" not in got:
        b = s.recv(4096)
        if not b:
            break
        got += b
    return got


# ---------------------------------------------------------------- the app-level scripts
def fresh_dir(a, name):
    """An empty a.workdir/name (what a previous run left there removed)."""
    d = os.path.join(a.workdir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def run_tagflow(a, args, env=None, np_=None, timeout=120, **kw):
    """`tagflow ARGS` (under `mpirun -n np_` when given) in ENV plus env; the result has .wall (s)."""
    cmd = ([] if np_ is None else ["mpirun", "-n", str(np_)]) + [a.tagflow] + args
    t0 = time.time()
    p = subprocess.run(cmd, env=dict(ENV, **(env or {})), capture_output=True, text=True, timeout=timeout, **kw)
    p.wall = time.time() - t0
    return p


def stop_job(p):
    """Ends a job started with Popen that still runs: SIGTERM, SIGKILL 60 s later."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def one_line_error(p, needle, what):
    """Exit 2, one stderr line naming `needle`, nothing on stdout."""
    lines = p.stderr.strip().splitlines()
    check(p.returncode == 2 and len(lines) == 1 and needle in lines[0] and not p.stdout.strip(),
          f"{what}: exit 2, one line naming it ({lines})")


def as_nobody():
    """preexec_fn: run the child as user nobody when the test runs as root."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setgroups([])
        os.setuid(65534)


def case_main(name, cases):
    """The command line of an app-level script, `SCRIPT CASE --tagflow BIN --workdir DIR`: runs
    cases[CASE](a) in DIR/name_CASE, prints PASS or the Failure; returns the exit status."""
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(cases))
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.workdir = os.path.join(a.workdir, f"{name}_{a.case}")
    os.makedirs(a.workdir, exist_ok=True)
    t0 = time.time()
    try:
        cases[a.case](a)
    except Failure as e:
        print(f"FAIL ({a.case}):", e)
        return 1
    print(f"PASS {name} {a.case} ({time.time() - t0:.1f} s)")
    return 0
