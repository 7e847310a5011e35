#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Gateway.train: `tagflow train --gateway` end to end with the example agent.

    test_gateway_train.py --tagflow BIN --work DIR [--ranks 2|3]

Runs `mpirun -n 2 tagflow train --mode disaggregated --gateway 127.0.0.1:PORT --gateway-only`
(3 ranks: two rollout-only ranks, so requests are routed to another rank and their tokens
relayed back) and, against it, share/examples/gateway_agent.py (two-turn sessions, groups of 2,
some streamed). Checks: the token file is mode 0600; a request without or with a wrong token
gets 401; a malformed request gets a 4xx and the gateway keeps serving; the job ends by itself
after --steps steps; in the run file every gateway sample is a row of /samples (task "gateway")
whose reward is one the agent reported, whose tokens rebuilt from /tree equal its flat tokens,
whose loss_mask is 0 exactly where the model did not generate (the question tokens of both
turns: masked inside the session too) and whose versions/logprobs agree with it; /consumed
names gateway samples in every training step; every sample's /samples text is the byte-level
decode (special tokens kept) of its ids (task rows: the reverse task's rendering); and the schema
invariants hold.

--mode multiplex (3 ranks, "0=rollout;1=rollout;2=rollout,train"): the same, plus rank 2 is
preempted into every training step and leaves it again while gateway requests finish during its
training spans; and, before the agent, a lifecycle phase: two long streams (one per rollout-only
rank) closed after their first token are cancelled inside the engines (/health "cancelled" +2,
nothing pending, no /tree row for them); 4 two-turn sessions raise /health "sessions" by 4 and
their rewards bring it back; a second reward for a closed session gets 404; at the end the
recorder's summary shows sessions closed and replica trees dropped.

--ckpt usr1|kill (checkpoints, share/doc/checkpoints.md): a 2-rank disaggregated --gateway-only
run on port 0 (with --mode multiplex: 3 ranks as below) with --ckpt-every 2 and a client loop (groups of 2 one-turn sessions, then their
rewards; any failure -> re-read gateway.url then gateway.token and redo the whole group under new
session names). usr1: SIGUSR1 to mpirun after step 3 -> exit 75 with the contract line; kill:
SIGKILL of every rank after the step-2 checkpoint; kill-mixed: the same without --gateway-only
(built-in task prompts generated beside the gateway's: their groups are complete, each id once). Then the same command line again (it resumes,
with a fresh token and port); the client reconnects and the run ends at --steps. Checks: every
/samples id once, /consumed ids once and in /samples, every gateway sample rebuilt from /tree
equals its row (tree_node below the /tree rows), every reward one the client had accepted,
/steps 0..S-1 with versions 1..S, one /resumes row, the schema invariants.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "share", "python"))
import tagflow_run  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "common"))
# ENV: mpirun as root, no TAGFLOW_*; check() records a failure in `failures` and goes on.
from testlib import ENV, failures, http_json, post_stream, read_first_chunk, soft_check as check  # noqa: E402,F401

AGENT = os.path.join(ROOT, "share", "examples", "gateway_agent.py")
GW_BASE = 1 << 60
STEPS = 3


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def open_stream(port, token, session, max_tokens):
    """A streaming completion on a raw socket; returns the socket once the first SSE chunk came."""
    s = post_stream("127.0.0.1", port, token, {"model": "tagflow-policy", "prompt": [10, 1, 2, 3, 11],
                                               "max_tokens": max_tokens, "temperature": 1.0, "stream": True,
                                               "session": session})
    return s, read_first_chunk(s)


def wait_health(port, token, cond, timeout=15):
    t0 = time.time()
    while True:
        _, j = http_json(port, "GET", "/health", token=token)
        if cond(j) or time.time() - t0 > timeout:
            return j
        time.sleep(0.05)


IDLE_S = 4  # --gateway-session-idle of the multiplex run (the lifecycle phase waits it out)


def lifecycle(port, token, context):
    """Cancel and session lifetime, before the agent runs (multiplex job, 2 rollout-only ranks)."""
    h0 = wait_health(port, token, lambda j: True)
    before = probe(port, token, "probe-v0")
    # Two long streams (new sessions: one per rollout-only rank, so one is cancelled on the
    # gateway rank and one on the other rank), each closed right after its first token.
    socks = [open_stream(port, token, f"cancel-{k}", context - 5) for k in range(2)]
    check(all(b"data: {" in g for _, g in socks), "two long streams started")
    for s, _ in socks:
        s.close()
    h = wait_health(port, token, lambda j: j.get("cancelled", 0) >= h0.get("cancelled", 0) + 2 and j["pending"] == 0)
    check(h.get("cancelled", 0) - h0.get("cancelled", 0) == 2 and h["pending"] == 0,
          f"closing two streams mid-generation cancels both inside the engines, nothing pending ({h0} -> {h})")
    # Sessions: 4 two-turn sessions (like the agent's), then their rewards (2 groups): the router
    # forgets them.
    base = h["sessions"]
    q = [10, 4, 5, 6, 11]
    for k in range(4):
        inp = list(q)
        for turn in range(2):
            st, j = http_json(port, "POST", "/v1/completions", json.dumps(
                {"model": "tagflow-policy", "prompt": inp, "max_tokens": 4, "temperature": 1.0,
                 "stop_token_ids": [12], "session": f"life-{k}"}), token)
            check(st == 200, f"lifecycle session {k} turn {turn} -> 200 ({st})")
            inp = inp + (j.get("tagflow", {}).get("token_ids", []) if st == 200 else []) + q
    h = wait_health(port, token, lambda j: True)
    check(h["sessions"] == base + 4, f"/health counts 4 more live sessions ({base} -> {h['sessions']})")
    for k in range(4):
        st, _ = http_json(port, "POST", "/v1/rewards", json.dumps({"session": f"life-{k}", "reward": 0.25 * k,
                                                                  "group": f"life-g{k // 2}"}), token)
        check(st == 200, f"reward for life-{k} accepted ({st})")
    h = wait_health(port, token, lambda j: j["sessions"] == base)
    check(h["sessions"] == base, f"after their rewards the sessions are forgotten ({h['sessions']} live, want {base})")
    st, _ = http_json(port, "POST", "/v1/rewards", json.dumps({"session": "life-0", "reward": 1}), token)
    check(st == 404, f"a second reward for a closed session -> 404 ({st})")
    # A session that never gets a reward is forgotten after --gateway-session-idle (IDLE_S here).
    st, _ = http_json(port, "POST", "/v1/completions", json.dumps(
        {"model": "tagflow-policy", "prompt": q, "max_tokens": 2, "session": "idle-0"}), token)
    t_idle = time.time()
    h = wait_health(port, token, lambda j: True)
    check(st == 200 and h["sessions"] == base + 1, f"an unrewarded session is kept ({h['sessions']} live)")
    # (the two cancelled streams' sessions, older and also unrewarded, go the same way)
    h = wait_health(port, token, lambda j: j["sessions"] == 0, timeout=IDLE_S + 10)
    waited = time.time() - t_idle
    check(h["sessions"] == 0 and IDLE_S - 1 <= waited <= IDLE_S + 5,
          f"... and forgotten after --gateway-session-idle {IDLE_S} s (all gone after {waited:.1f} s)")
    st, _ = http_json(port, "POST", "/v1/rewards", json.dumps({"session": "idle-0", "reward": 1}), token)
    check(st == 404, f"a reward for the forgotten idle session -> 404 ({st})")
    # Their 4 samples are the first training step's batch; then the recorder drops its trees.
    h = wait_health(port, token, lambda j: j["policy_version"] >= 1, timeout=60)
    check(h["policy_version"] >= 1, f"step 1 trained on the lifecycle sessions (version {h['policy_version']})")
    # The rollout ranks serve the new weights: the same greedy request, now stamped with a newer
    # version, gets other log-probabilities (with stale weights on the serving rank they would
    # be identical whatever the stamp says).
    after = probe(port, token, "probe-v1")
    if before and after:
        diff = max(abs(x - y) for x, y in zip(before["logprobs"], after["logprobs"]))
        check(min(after["versions"]) >= 1 and diff > 1e-5,
              f"after step 1 the gateway serves the new weights (versions {before['versions'][:1]} -> "
              f"{after['versions'][:1]}, max log-prob change {diff:.2e})")
    else:
        check(False, "greedy probe requests answered")


def probe(port, token, session):
    """One greedy completion of a fixed prompt; its tagflow extension (token ids, logprobs, versions)."""
    st, j = http_json(port, "POST", "/v1/completions", json.dumps(
        {"model": "tagflow-policy", "prompt": [10, 7, 8, 9, 11], "max_tokens": 4, "temperature": 0,
         "session": session}), token)
    return j.get("tagflow") if st == 200 else None


def check_multiplex(f, gw):
    """Rank 2 (rollout,train) is preempted into every training step and comes back to its
    rollout loop in between, while the gateway (rank 0) keeps serving: gateway requests finish
    during rank 2's training spans."""
    off = {int(r): float(o) for r, o in zip(f["ranks"]["rank"][()], f["ranks"]["clock_offset"][()])}
    tl = f["timeline"]
    rk, kind, t0, t1, st = (tl[c][()] for c in ("rank", "kind", "t_start", "t_end", "step"))
    train = (rk == 2) & (kind == 1)
    steps = sorted(set(st[train].tolist()))
    check(steps == list(range(STEPS)), f"multiplex: rank 2 trained in every step {steps}")
    back = [bool(np.any((rk == 2) & (kind != 1) & (t0 >= t1[train & (st == s)].max()))) for s in steps[:-1]]
    check(all(back) and back, f"multiplex: rank 2 left training after each step but the last {back}")
    spans = [(a + off[2], b + off[2]) for a, b in zip(t0[train], t1[train])]
    tr = f["tree"]
    ends = tr["t_end"][()] + off[0]  # the gateway rank (0) stamps every gateway request
    during = sum(1 for e in ends if any(a <= e <= b for a, b in spans))
    check(during > 0, f"multiplex: gateway requests finished while rank 2 was training ({during} /tree rows)")
    longest = int((tr["token_end"][()] - tr["token_start"][()]).max())
    check(longest < 100, f"multiplex: the cancelled streams left no /tree row (longest row {longest} tokens)")


REVERSE = "0123456789^=$"  # share/doc/tasks.md: reverse's ids 0-9 are digits, 10 BOS ^, 11 separator =, 12 EOS $
BYTE_SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]  # ids 256.. (gateway.md)


def byte_decode(ids):
    """The byte-level tokenizer's decode with special tokens kept (share/doc/gateway.md), as Python
    decodes bytes ('replace': U+FFFD for invalid sequences)."""
    b = b"".join(bytes([t]) if t < 256 else BYTE_SPECIALS[t - 256].encode() for t in ids if 0 <= t < 261)
    return b.decode("utf-8", "replace")


def check_texts(f, label):
    """/samples text (share/doc/hdf5-schema.md, "Sample text"): task rows are the reverse task's
    rendering of their ids, gateway rows the byte-level decode with special tokens kept."""
    s = f["samples"]
    task = tagflow_run._decode(s["task"])
    prompts, responses = tagflow_run.sample_texts(f)
    ok = {"gateway": [0, 0], "reverse": [0, 0]}
    for k in range(len(task)):
        t = tagflow_run.sample_tokens(f, k)
        m = t["loss_mask"].astype(bool)
        first = int(np.argmax(m)) if m.any() else len(m)
        ids = [int(x) for x in t["tokens"]]
        if task[k] == "gateway":
            want = (byte_decode(ids[:first]), byte_decode(ids[first:]))
        else:
            want = ("".join(REVERSE[i] if 0 <= i < 13 else "?" for i in ids[:first]),
                    "".join(REVERSE[i] if 0 <= i < 13 else "?" for i in ids[first:]))
        kind = ok.setdefault(str(task[k]), [0, 0])
        kind[0] += (prompts[k], responses[k]) == want
        kind[1] += 1
    check(all(a == b for a, b in ok.values()) and sum(b for _, b in ok.values()) == len(task),
          f"{label}: /samples text = the reverse task's rendering (task rows) / the byte-level decode with special "
          f"tokens kept (gateway rows) of the stored ids (ok/rows per task: {ok})")


# ---------------------------------------------------------------- --ckpt: checkpoint and resume
CONTRACT = re.compile(r"tagflow: checkpoint at step (\d+) after (SIGTERM|SIGUSR1); exiting for requeue")


class Client(threading.Thread):
    """Groups of 2 one-turn sessions on the reverse task's prompt format, then their rewards.
    Any failure (connection refused or reset, 401 with a stale token, 404 for a forgotten
    session): re-read gateway.url then gateway.token and redo the whole group."""

    def __init__(self, out):
        super().__init__(daemon=True)
        self.out, self.stop, self.accepted, self.groups, self.retries = out, False, [], 0, 0
        self.addr = None

    def connect(self):
        while not self.stop:
            try:
                url = open(os.path.join(self.out, "gateway.url")).read().strip()
                token = open(os.path.join(self.out, "gateway.token")).read().strip()
                if url.endswith("/v1") and token:
                    self.addr = url
                    return int(url.rsplit(":", 1)[1].split("/")[0]), token
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        return None, None

    def run(self):
        port, token = self.connect()
        n = 0
        while not self.stop:
            n += 1
            try:
                rewards = []
                for k in range(2):
                    q = [10, (n + k) % 10, (n * 3) % 10, (n * 7 + k) % 10, 11]
                    st, j = http_json(port, "POST", "/v1/completions", json.dumps(
                        {"model": "tagflow-policy", "prompt": q, "max_tokens": 4, "temperature": 1.0,
                         "stop_token_ids": [12], "session": f"c{n}-{k}"}), token)
                    if st != 200:
                        raise RuntimeError(f"completion -> {st}")
                    rewards.append(round(0.01 * ((n * 2 + k) % 100), 2))
                for k in range(2):
                    st, _ = http_json(port, "POST", "/v1/rewards", json.dumps(
                        {"session": f"c{n}-{k}", "reward": rewards[k], "group": f"g{n}"}), token)
                    if st != 200:
                        raise RuntimeError(f"reward -> {st}")
                    self.accepted.append(rewards[k])
                self.groups += 1
            except (OSError, RuntimeError, http.client.HTTPException):
                self.retries += 1
                time.sleep(0.2)
                port, token = self.connect()


def run_job(cmd, out, signal_after=None, sig=None):
    """Runs the job; with signal_after: after that step's line (usr1) or the first checkpoint at or
    after that step that holds gateway samples (kill), the signal."""
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    sent = threading.Event()

    def reader():
        for line in job.stdout:
            lines.append(line)
            m = re.match(r"step\s+(\d+)/", line)
            if signal_after and sig == signal.SIGUSR1 and m and int(m.group(1)) >= signal_after and not sent.is_set():
                sent.set()
                job.send_signal(signal.SIGUSR1)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    if sig == signal.SIGKILL:  # after the periodic checkpoint at step `signal_after`
        t0 = time.time()
        while job.poll() is None and time.time() - t0 < 120:
            try:
                mf = open(os.path.join(out, "checkpoint", "manifest.txt")).read()
                gw = re.search(r"^sched.gw_next_id (\d+)$", mf, re.M)  # a checkpoint with gateway ids in it
                if int(re.search(r"^step (\d+)$", mf, re.M).group(1)) >= signal_after and gw and int(gw.group(1)) > 0:
                    break
            except (OSError, AttributeError):
                pass
            time.sleep(0.02)
        time.sleep(0.1)  # some rewards after the checkpoint: lost with the job
        for pid in os.listdir("/proc"):
            try:
                if pid.isdigit() and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == str(job.pid):
                    os.kill(int(pid), signal.SIGKILL)
            except (OSError, IndexError):
                pass
        sent.set()
    try:
        job.wait(timeout=180)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
    t.join(timeout=10)
    return job.returncode, "".join(lines)


def ckpt_main(a):
    out = os.path.join(a.work, f"ckpt_{a.ckpt}" + ("_m" if a.mode == "multiplex" else ""))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    # kill-mixed: the built-in prompts alone keep the job training at ~50 steps/s, and the kill
    # lands ~0.1 s after the step-2 checkpoint (step 8-10): with 12 steps the resumed job could
    # finish on its restored pool before the client had reconnected (no gateway sample after the
    # resume). 40 steps leave it ~30 to do, time for the client to come back.
    steps = 40 if a.ckpt == "kill-mixed" else 12
    mp = a.mode == "multiplex"  # 3 ranks, rank 2 (rollout,train) preempted into every step
    cmd = ["mpirun", "-n", "3" if mp else "2", a.tagflow, "train", "--out", out, "--mode", a.mode,
           "--rank-tags", "0=rollout;1=rollout;2=rollout,train" if mp else "0=rollout;1=rollout,train",
           "--gateway", "127.0.0.1:0",
           "--task", "reverse", "--digits", "3", "--max-new-tokens", "8", "--steps", str(steps),
           "--group-size", "2", "--train-threshold", "4", "--staleness", "1", "--eval-every", "0",
           "--eval-prompts", "4", "--gemm-check", "false", "--max-batch", "8", "--threads", "1", "--seed", "5",
           "--ckpt-every", "2"]  # staleness 1: after the resume the pool is stale, so it trains on new sessions
    if a.ckpt != "kill-mixed":
        cmd.append("--gateway-only")
    client = Client(out)
    client.start()
    t0 = time.time()
    sig = signal.SIGUSR1 if a.ckpt == "usr1" else signal.SIGKILL
    rc, log1 = run_job(cmd, out, signal_after=3 if sig == signal.SIGUSR1 else 2, sig=sig)
    print(log1[-2500:])
    addr1, tok1 = client.addr, open(os.path.join(out, "gateway.token")).read().strip()
    mf = open(os.path.join(out, "checkpoint", "manifest.txt")).read()
    at = int(re.search(r"^step (\d+)$", mf, re.M).group(1))
    pool = int(re.search(r"^sched.pool_samples (\d+)$", mf, re.M).group(1))
    gw_next = int(re.search(r"^sched.gw_next_id (\d+)$", mf, re.M).group(1))
    rows_before = int(re.search(r"^rows.samples (\d+)$", mf, re.M).group(1))
    if sig == signal.SIGUSR1:
        m = CONTRACT.search(log1)
        check(rc == 75, f"SIGUSR1 to mpirun: exit 75 ({rc})")
        check(m is not None and m.group(2) == "SIGUSR1" and int(m.group(1)) == at and 3 <= at < steps,
              f"the contract line names the checkpoint's step ({m and m.group(0)}; checkpoint at {at})")
    else:
        check(rc != 0, f"mpirun reports the killed job ({rc})")
        check(2 <= at < steps and at % 2 == 0, f"a periodic checkpoint survived the kill (step {at})")
    check(gw_next > 0, f"the checkpoint holds the gateway id counter ({gw_next} ids used; {pool} pooled)")
    rc2, log2 = run_job(cmd, out)
    client.stop = True
    client.join(timeout=40)
    print(log2[-2500:])
    tok2 = open(os.path.join(out, "gateway.token")).read().strip()
    check(rc2 == 0, f"the resumed job exits 0 after {steps} steps ({time.time() - t0:.1f} s in all)")
    check(f"tagflow: resumed from checkpoint at step {at}" in log2 and f"{pool} untrained samples in the pool" in log2,
          "the resumed job restored that checkpoint and its pool")
    check(tok2 != tok1, "a fresh gateway.token after the restart")
    check(client.retries >= 1 and client.addr is not None,
          f"the client saw the restart and reconnected ({client.retries} retries; {addr1} -> {client.addr})")
    check(client.groups >= 4, f"client groups completed: {client.groups}")
    with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
        bad = tagflow_run.check_invariants(f)
        check(not bad, f"schema invariants hold {bad[:3]}")
        s = f["samples"]
        ids = s["id"][()]
        gw = np.where(ids >= GW_BASE)[0]
        check(len(gw) > 0 and len(set(ids.tolist())) == len(ids) and (a.ckpt == "kill-mixed" or len(gw) == len(ids)),
              f"every /samples id once ({len(gw)} gateway rows, {len(ids) - len(gw)} task rows)")
        if a.ckpt == "kill-mixed":  # built-in prompts too: the generator's order regenerated, nothing skipped
            tg = s["group"][()][ids < GW_BASE]
            cnt = {int(g): int(n) for g, n in zip(*np.unique(tg, return_counts=True))}
            n = 3 if mp else 1  # generator i takes the groups i, i+n, ... (checkpoints.md)
            holes, tops = [], []
            for i in range(n):
                ks = [g // n for g in cnt if g % n == i]
                top = max(ks) if ks else -1
                tops.append(top)
                holes += [k * n + i for k in range(top - 4) if cnt.get(k * n + i, 0) != 2]  # <= 4 groups in flight
            check(max(tops) > 8 and not holes, f"each generator's task prompt groups complete up to its last 4, "
                  f"each id once (last k per generator {tops}; holes {holes[:5]})")
        cid = f["consumed"]["id"][()]
        check(len(set(cid.tolist())) == len(cid) and set(cid.tolist()) <= set(ids.tolist()),
              f"every /consumed id once and in /samples ({len(cid)})")
        pre, post = ids[:rows_before], ids[rows_before:]  # the file was cut back to the checkpoint's rows
        pre_gw, post_gw = pre[pre >= GW_BASE], post[post >= GW_BASE]
        check(np.all(pre_gw < GW_BASE + gw_next) and len(post_gw) > 0 and np.all(post_gw >= GW_BASE + gw_next),
              f"the checkpoint's {len(pre_gw)} gateway /samples rows kept, ids below its counter; "
              f"{len(post_gw)} gateway samples after the resume, ids above it")
        ok = 0
        tree = tagflow_run.load_tree(f)
        ntree = len(f["tree"]["depth"])
        for row in gw:
            row = int(row)
            flat = tagflow_run.sample_tokens(f, row)
            tt = tagflow_run.sample_tree_tokens(f, row, tree)
            ok += (0 <= int(s["tree_node"][row]) < ntree and
                   all(np.array_equal(flat[c], tt[c]) for c in ("tokens", "versions", "loss_mask")) and
                   np.allclose(flat["logprobs"], tt["logprobs"], equal_nan=True))
        check(ok == len(gw), f"every gateway sample rebuilt from /tree equals its /samples row ({ok}/{len(gw)})")
        acc = {round(float(np.float32(x)), 5) for x in client.accepted}
        check(all(round(float(r), 5) in acc for r in s["reward"][()][gw]), "every reward is one the client had accepted")
        st, ver = f["steps"]["step"][()], f["steps"]["policy_version"][()]
        check(st.tolist() == list(range(steps)) and ver.tolist() == list(range(1, steps + 1)),
              f"/steps 0..{steps - 1}, versions 1..{steps} ({st.tolist()}, {ver.tolist()})")
        res = f["resumes"]["from_step"][()]
        check(res.tolist() == [at], f"one /resumes row, from step {at} ({res.tolist()})")
        check_texts(f, "after the resume")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print(f"all gateway checkpoint checks passed ({time.time() - t0:.1f} s)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tagflow", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mode", default="disaggregated", choices=("disaggregated", "multiplex"))
    p.add_argument("--ckpt", choices=("usr1", "kill", "kill-mixed"), help="checkpoint and resume case (see the docstring)")
    a = p.parse_args()
    if a.ckpt:
        return ckpt_main(a)
    if a.mode == "multiplex":
        a.ranks = 3
    out = os.path.join(a.work, f"run{a.ranks}" + ("m" if a.mode == "multiplex" else ""))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    port = free_port()
    tags = "0=rollout;1=rollout,train" if a.ranks == 2 else "0=rollout;1=rollout;2=rollout,train"
    cmd = ["mpirun", "-n", str(a.ranks), a.tagflow, "train", "--out", out, "--mode", a.mode,
           "--rank-tags", tags, "--gateway", f"127.0.0.1:{port}", "--gateway-only", "--task", "reverse",
           "--digits", "3", "--max-new-tokens", "16", "--steps", str(STEPS), "--group-size", "2",
           "--train-threshold", "4", "--train-timeout", "20", "--staleness", "100", "--eval-every", "0",
           "--eval-prompts", "8", "--gemm-check", "false", "--max-batch", "16", "--threads", "1", "--seed", "3"]
    if a.mode == "multiplex":  # long contexts: the streams the lifecycle phase cancels would run ~2000 tokens
        cmd[cmd.index("--max-new-tokens") + 1] = "2000"
        cmd += ["--gateway-session-idle", str(IDLE_S)]
    t0 = time.time()
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    agent = None
    try:
        tok_path = os.path.join(out, "gateway.token")
        while not os.path.exists(os.path.join(out, "gateway.url")) and job.poll() is None and time.time() - t0 < 90:
            time.sleep(0.1)
        check(os.path.exists(os.path.join(out, "gateway.url")), "the gateway rank writes OUT/gateway.url")
        if job.poll() is not None or not os.path.exists(tok_path):
            raise RuntimeError("tagflow train did not start its gateway")
        check(stat.S_IMODE(os.stat(tok_path).st_mode) == 0o600, "OUT/gateway.token has mode 0600")
        token = open(tok_path).read().strip()
        url = open(os.path.join(out, "gateway.url")).read().strip()
        check(url == f"http://127.0.0.1:{port}/v1", f"gateway.url is the requested address ({url})")
        # Auth and bad requests, while the job runs.
        s, j = http_json(port, "GET", "/health")
        check(s == 401 and "error" in j, f"no token -> 401 ({s})")
        s, j = http_json(port, "GET", "/health", token="tf-" + "0" * 64)
        check(s == 401 and j.get("error", {}).get("code") == "invalid_api_key", f"wrong token -> 401 ({s})")
        s, j = http_json(port, "POST", "/v1/completions", b'{"model": "tagflow-policy", "prompt": [10,', token)
        check(400 <= s < 500 and "error" in j, f"malformed JSON -> 4xx ({s})")
        s, j = http_json(port, "POST", "/v1/completions", json.dumps({"model": "tagflow-policy", "prompt": [99]}),
                         token)
        check(s == 400, f"token id outside the policy's vocabulary -> 400 ({s})")
        s, j = http_json(port, "POST", "/v1/rewards", json.dumps({"session": "nobody", "reward": 1}), token)
        check(s == 404, f"reward for an unknown session -> 404 ({s})")
        s, j = http_json(port, "GET", "/health", token=token)
        check(s == 200 and j.get("status") == "ok", f"still serving after the bad requests ({s})")
        s, j = http_json(port, "GET", "/v1/models", token=token)
        check(s == 200 and j["data"][0]["id"] == "tagflow-policy" and j["data"][0]["tagflow"]["vocab_size"] == 13,
              f"/v1/models serves the policy (vocabulary of the reverse task) ({s})")
        # The job's live status (issue 23), authenticated like the rest; the same record as OUT/status.json.
        s, _ = http_json(port, "GET", "/v1/status")
        check(s == 401, f"GET /v1/status without a token -> 401 ({s})")
        s, st = http_json(port, "GET", "/v1/status", token=token)
        check(s == 200 and st.get("format") == "tagflow-status" and st.get("mode") == a.mode and
              [r["rank"] for r in st["ranks"]] == list(range(a.ranks)),
              f"GET /v1/status: the live status record of every rank ({s})")
        if a.mode == "multiplex":
            lifecycle(port, token, int(j["data"][0]["tagflow"]["context_length"]))
        # The agent: until the job has trained STEPS steps and goes away.
        agent = subprocess.run([sys.executable, AGENT, "--out", out, "--sessions", "400", "--group", "2",
                                "--turns", "2", "--digits", "3", "--concurrency", "2", "--stream-every", "3"],
                               capture_output=True, text=True, timeout=240)
        print(agent.stdout.strip(), agent.stderr.strip()[-2000:])
        check(agent.returncode == 0, f"the agent exits 0 (rc {agent.returncode})")
        log, _ = job.communicate(timeout=120)
    except Exception as e:  # noqa: BLE001
        check(False, f"run: {e!r}")
        job.kill()
        log, _ = job.communicate()
    print(log[-3000:])
    if a.mode == "multiplex":
        import re
        m = re.search(r"gateway recorder: (\d+) requests, (\d+) samples; sessions closed (\d+), expired (\d+), "
                      r"live (\d+); trees dropped (\d+), live (\d+)", log)
        check(m is not None, "the coordinator prints the gateway recorder's summary")
        if m:
            closed, live, dropped, tlive = int(m[3]), int(m[5]), int(m[6]), int(m[7])
            check(closed >= 4 and live <= 8, f"recorder: sessions closed after their rewards ({closed} closed, "
                  f"{live} live at the end)")
            check(dropped >= 1 and tlive <= 2, f"recorder: replica trees dropped once unused ({dropped} dropped, "
                  f"{tlive} live)")
        m = re.search(r"gateway: (\d+) requests served, (\d+) cancelled", log)
        check(m is not None and int(m[2]) == 2, f"router summary: 2 cancelled ({m and m[0]})")
    check(job.returncode == 0, f"tagflow train --gateway exits 0 after {STEPS} steps ({time.time() - t0:.1f} s)")
    summary = json.load(open(os.path.join(out, "gateway_agent.json"))) if os.path.exists(
        os.path.join(out, "gateway_agent.json")) else {}
    check(summary.get("streamed", 0) > 0 and summary.get("chunks", 0) > summary.get("streamed", 0),
          f"some requests streamed, several SSE chunks each ({summary.get('streamed')} streams, "
          f"{summary.get('chunks')} chunks)")
    h5 = os.path.join(out, "tagflow.h5")
    if not os.path.exists(h5):
        check(False, "run file exists")
        sys.exit(1)
    with h5py.File(h5, "r") as f:
        bad = tagflow_run.check_invariants(f)
        check(not bad, f"schema invariants hold {bad[:3]}")
        s = f["samples"]
        ids = s["id"][()]
        task = np.array(tagflow_run._decode(s["task"]), dtype=str)
        gw = np.where(task == "gateway")[0]
        check(len(gw) >= 4 and np.all(ids[gw] >= GW_BASE) and len(gw) == len(ids),
              f"/samples holds the gateway sessions only (--gateway-only): {len(gw)} rows")
        agent_rewards = {round(float(r), 5) for _, r in summary.get("rewards", [])}
        if a.mode == "multiplex":
            agent_rewards |= {0.0, 0.25, 0.5, 0.75}  # the lifecycle sessions' rewards
        check(all(round(float(np.float32(r)), 5) in {round(float(np.float32(x)), 5) for x in agent_rewards}
                  for r in s["reward"][gw]), "every gateway sample's reward is one the agent reported")
        tree = tagflow_run.load_tree(f)
        rebuilt_ok = masked_inside = mask_ok = 0
        for row in gw:
            flat = tagflow_run.sample_tokens(f, int(row))
            tt = tagflow_run.sample_tree_tokens(f, int(row), tree)
            same = all(np.array_equal(flat[c], tt[c], equal_nan=(c == "logprobs")) for c in
                       ("tokens", "versions", "loss_mask")) and np.allclose(flat["logprobs"], tt["logprobs"],
                                                                            equal_nan=True)
            rebuilt_ok += same
            m = flat["loss_mask"].astype(bool)
            v, lp = flat["versions"], flat["logprobs"]
            mask_ok += bool(np.all(v[~m] == -1) and np.all(v[m] >= 0) and np.all(np.isnan(lp[~m]))
                            and np.all(np.isfinite(lp[m])) and flat["tokens"][0] == 10)
            first = np.argmax(m)
            masked_inside += bool(m.any() and (~m[first:]).any())
        check(rebuilt_ok == len(gw), f"every gateway sample rebuilt from /tree equals /samples ({rebuilt_ok}/{len(gw)})")
        check(mask_ok == len(gw), f"loss_mask 0 exactly on tokens the model did not generate ({mask_ok}/{len(gw)})")
        check(masked_inside == len(gw), f"two-turn sessions: the question of turn 2 is masked inside the sample "
              f"({masked_inside}/{len(gw)})")
        c = f["consumed"]
        cid, cstep, cw = c["id"][()], c["step"][()], c["weight"][()]
        steps = f["steps"]["step"][()]
        check(len(steps) == STEPS, f"{STEPS} training steps ({len(steps)})")
        check(all(np.any((cstep == st) & (cid >= GW_BASE) & (cw > 0)) for st in steps),
              "every training step trained on gateway samples")
        check(set(cid.tolist()) <= set(ids.tolist()), "every consumed id is a /samples row")
        ranks = set(s["rank"][gw].tolist())
        want = {0} if a.ranks == 2 else {0, 1}
        check(ranks <= want and len(ranks) >= 1, f"gateway samples were generated on rollout-only ranks {ranks}")
        if a.ranks == 3:
            check(ranks == {0, 1}, f"new sessions spread over both rollout-only ranks {ranks}")
        if a.mode == "multiplex":
            check_multiplex(f, gw)
        check_texts(f, "gateway samples")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all gateway training checks passed")


if __name__ == "__main__":
    main()
