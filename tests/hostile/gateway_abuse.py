#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile.gateway_abuse*: clients without the token try to stall the gateway (issue 24, point 1).

    gateway_abuse.py --server BUILD/tests/gateway/gateway_test_server --work DIR
    gateway_abuse.py --tagflow BUILD/mpi_app/tagflow --work DIR      (a running `tagflow train --gateway` job)

While a prober asks GET /health (with the token, a fresh connection each time) every 0.2 s,
abusive clients run one after another:
  auth      two pipelined requests without the token: one 401, then the connection is closed;
  flood     one connection sends 20 MB of pipelined authenticated `GET /health` requests and
            never reads: the gateway stops reading it (the sender blocks), its memory stays
            bounded, and the answers it did queue are well-formed;
  slowloris 600 connections (more than the 512 allowed) each send one header byte every 2 s,
            reconnecting when closed (up to 20 new connections per pass of its event loop);
  fds       the same under a descriptor limit (the gateway runs with RLIMIT_NOFILE 512): the
            connection limit is enforced at accept and the process keeps its descriptors.
Throughout: every probe answered 200 within --max-latency seconds (1 s), the gateway process
alive, its resident memory grown by less than --max-rss-mb. With --tagflow the job (2 ranks,
built-in task prompts beside the gateway) must also have trained throughout (>= 10 steps ended
during the abuse, from /steps) and, sent SIGUSR1 afterwards, checkpoint and exit 75 within a
minute. Exits non-zero on failure, printing one line per failed check. --rounds N repeats the
abuse N times against the same job (the soak, tests/hostile/abuse_soak.sh; not a ctest).
"""
import argparse
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import failures, soft_check as check  # noqa: E402  (records a failure and goes on)


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


class Target:
    def __init__(self, host, port, token, pids):
        self.host, self.port, self.token, self.pids = host, port, token, pids

    def rss(self):
        return sum(rss_mb(p) for p in self.pids)


def health_once(t, timeout=5.0):
    """One GET /health on a fresh connection; returns (status or None, seconds)."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection((t.host, t.port), timeout=timeout)
        s.sendall(f"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t.token}\r\n"
                  "Connection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None
        return status, time.monotonic() - t0
    except (OSError, ValueError, IndexError):
        return None, time.monotonic() - t0


class Prober(threading.Thread):
    def __init__(self, t):
        super().__init__(daemon=True)
        self.t, self.stop, self.results = t, threading.Event(), []

    def run(self):
        while not self.stop.is_set():
            self.results.append(health_once(self.t))
            self.stop.wait(0.2)

    def take(self):
        r, self.results = self.results, []
        return r


def judge(name, probes, max_latency):
    bad = [p for p in probes if p[0] != 200]
    worst = max((p[1] for p in probes), default=0.0)
    check(len(probes) >= 5, f"{name}: {len(probes)} probes of /health were made")
    check(not bad, f"{name}: every probe answered 200 ({len(bad)} of {len(probes)} were not: {bad[:3]})")
    check(worst <= max_latency, f"{name}: slowest probe {worst:.3f} s <= {max_latency} s")


def scenario_auth(t):
    s = socket.create_connection((t.host, t.port), timeout=5)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    s.close()
    check(data.count(b"HTTP/1.1 401") == 1 and data.endswith(b"}"),
          "auth: two pipelined requests without the token get one 401 and the connection closed "
          f"(got {data.count(b'HTTP/1.1 ')} answers)")


def scenario_flood(t, total_mb, seconds):
    req = f"GET /health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t.token}\r\n\r\n".encode()
    chunk = req * (65536 // len(req))
    s = socket.create_connection((t.host, t.port), timeout=5)
    s.settimeout(2.0)
    sent, blocked = 0, False
    t0 = time.monotonic()
    while sent < total_mb * (1 << 20) and time.monotonic() - t0 < seconds:
        try:
            sent += s.send(chunk)
        except socket.timeout:
            blocked = True  # the gateway stopped reading this connection: backpressure
            break
        except OSError as e:
            check(False, f"flood: sending failed after {sent} bytes: {e}")
            break
    check(blocked, f"flood: the gateway stopped reading a connection that does not read its answers "
                   f"(sent {sent / (1 << 20):.1f} MB before blocking)")
    # What it did answer is a clean stream of 200s.
    s.settimeout(2.0)
    got = b""
    try:
        while len(got) < 1 << 20:
            c = s.recv(65536)
            if not c:
                break
            got += c
    except socket.timeout:
        pass
    s.close()
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", got)  # a response cut by the 1 MB read is left out
    check(statuses and all(x == b"200" for x in statuses),
          f"flood: the queued answers are {len(statuses)} well-formed 200s "
          f"(others: {sorted(set(statuses) - {b'200'})})")


def scenario_trickle(t, conns, seconds, byte_every=2.0):
    """`conns` connections each sending one byte of a request line every `byte_every` s."""
    line = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096
    sel = selectors.DefaultSelector()
    state = {}  # sock -> bytes sent
    opened = closed_by_server = 0

    def open_one():
        nonlocal opened
        s = socket.socket(socket.AF_INET6 if ":" in t.host else socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect_ex((t.host, t.port))
        except OSError:
            s.close()
            return
        state[s] = 0
        sel.register(s, selectors.EVENT_READ)
        opened += 1

    for _ in range(conns):
        open_one()
    t0 = time.monotonic()
    next_byte = t0
    while time.monotonic() - t0 < seconds:
        now = time.monotonic()
        if now >= next_byte:
            for s in list(state):
                try:
                    s.send(line[state[s] % len(line):state[s] % len(line) + 1])
                    state[s] += 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    sel.unregister(s)
                    s.close()
                    del state[s]
                    closed_by_server += 1
            next_byte = now + byte_every
        for key, _ in sel.select(timeout=0.1):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                sel.unregister(s)
                s.close()
                del state[s]
                closed_by_server += 1
        for _ in range(min(conns - len(state), 20)):  # reconnect what the server closed, <= 20 per pass
            open_one()
    for s in list(state):
        sel.unregister(s)
        s.close()
    sel.close()
    return opened, closed_by_server


def run_scenarios(t, a, alive):
    prober = Prober(t)
    prober.start()
    rss0 = t.rss()
    time.sleep(1.0)
    judge("before abuse", prober.take(), a.max_latency)

    for rnd in range(a.rounds):  # --rounds > 1: the soak (the abuse again and again)
        t_round = time.monotonic()
        scenario_auth(t)
        scenario_flood(t, a.flood_mb, 20)
        judge("flood", prober.take(), a.max_latency)
        check(alive(), "flood: the gateway process is alive")

        opened, closed = scenario_trickle(t, 600, a.trickle_s)
        print(f"slowloris: {opened} connections opened, {closed} closed by the gateway", flush=True)
        check(closed > 0, "slowloris: the gateway closes connections that trickle a request")
        judge("slowloris", prober.take(), a.max_latency)
        check(alive(), "slowloris: the gateway process is alive")
        if a.rounds > 1:
            print(f"round {rnd + 1}/{a.rounds}: {time.monotonic() - t_round:.0f} s, resident size "
                  f"{t.rss() - rss0:+.0f} MB since the start", flush=True)

    grown = t.rss() - rss0
    check(grown < a.max_rss_mb, f"memory: resident size grew {grown:.0f} MB (< {a.max_rss_mb} MB)")
    prober.stop.set()
    prober.join()


def nofile(limit):
    def f():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return f


def wait_file(path, proc, seconds):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def with_test_server(a):
    out = os.path.join(a.work, "server")
    os.makedirs(out, exist_ok=True)
    p = subprocess.Popen([a.server, "--out", out, "--context", "128"], stdout=subprocess.PIPE, text=True,
                         preexec_fn=nofile(a.nofile))
    try:
        line = p.stdout.readline()
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        token = open(os.path.join(out, "gateway.token")).read().strip()
        t = Target("127.0.0.1", port, token, [p.pid])
        run_scenarios(t, a, lambda: p.poll() is None)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, "the test server stopped within 20 s of SIGTERM")


def with_train_job(a):
    out = os.path.join(a.work, "run")
    subprocess.run(["rm", "-rf", out])
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cmd = ["mpirun", "-n", "2", a.tagflow, "train", "--out", out, "--mode", "disaggregated",
           "--rank-tags", "0=rollout;1=rollout,train", "--gateway", "127.0.0.1:0", "--task", "reverse",
           "--digits", "3", "--max-new-tokens", "8", "--steps", str(a.steps), "--group-size", "2",
           "--train-threshold", "4", "--eval-every", "0", "--eval-prompts", "4", "--gemm-check", "false",
           "--max-batch", "8", "--threads", "1", "--seed", "5"]
    t0 = time.monotonic()
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=nofile(a.nofile))
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True)
    reader.start()
    try:
        ok = wait_file(os.path.join(out, "gateway.url"), job, 120)
        check(ok, "the job wrote gateway.url")
        if not ok:
            return
        url = open(os.path.join(out, "gateway.url")).read().strip()
        hostport = url.split("//", 1)[1].split("/", 1)[0]
        host, port = hostport.rsplit(":", 1)
        token = open(os.path.join(out, "gateway.token")).read().strip()
        pids = [int(x) for x in subprocess.run(["pgrep", "-f", f"tagflow train --out {out}"],
                                               capture_output=True, text=True).stdout.split()]
        pids = [p for p in pids if p != job.pid]
        t = Target(host.strip("[]"), int(port), token, pids)
        abuse_start = time.time()
        run_scenarios(t, a, lambda: job.poll() is None)
        abuse_end = time.time()
        # The job trained all along and still obeys its controls: SIGUSR1 (forwarded by mpirun)
        # checkpoints and ends it with exit 75 within a minute.
        job.send_signal(signal.SIGUSR1)
        try:
            rc = job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            rc = None
        reader.join(timeout=10)
        tail = "".join(lines[-15:])
        check(rc == 75, f"after the abuse, SIGUSR1 ends the job with exit 75 (exit {rc})\n{tail if rc != 75 else ''}")
        print(f"job: {time.monotonic() - t0:.1f} s in all, ended {time.time() - abuse_end:.1f} s after SIGUSR1",
              flush=True)
        import h5py  # only this mode reads the run file
        with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
            t0_unix = float(f.attrs["t0_unix"])
            ends = f["steps"]["t_end"][()] + t0_unix
        during = int(((ends > abuse_start) & (ends < abuse_end)).sum())
        check(during >= 10, f"the job kept training during the abuse: {during} steps ended in those "
                            f"{abuse_end - abuse_start:.0f} s")
    finally:
        if job.poll() is None:
            job.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--server", help="gateway_test_server binary")
    g.add_argument("--tagflow", help="tagflow binary: abuse a running `tagflow train --gateway` job")
    p.add_argument("--work", required=True)
    p.add_argument("--max-latency", type=float, default=1.0)
    p.add_argument("--max-rss-mb", type=float, default=200.0)
    p.add_argument("--flood-mb", type=float, default=20.0)
    p.add_argument("--trickle-s", type=float, default=25.0)
    p.add_argument("--nofile", type=int, default=512, help="RLIMIT_NOFILE of the gateway process")
    p.add_argument("--rounds", type=int, default=1, help="run the abuse this many times in a row (a soak: "
                   "tests/hostile/abuse_soak.sh)")
    p.add_argument("--steps", type=int, default=1000000, help="--steps of the train job (it must outlast the abuse; "
                   "SIGUSR1 ends it after)")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # this client holds 600+ sockets
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    if a.server:
        with_test_server(a)
    else:
        with_train_job(a)
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main()
