#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gateway_agent: an external agent that trains a tagflow policy through the gateway.

    tagflow train --out RUN --mode disaggregated --gateway 127.0.0.1:0 --task reverse ... &
    python3 gateway_agent.py --out RUN --sessions 64 --group 2

Python standard library only (http.client, json). It reads the base URL and the bearer token
from RUN/gateway.url and RUN/gateway.token (waiting for them to appear), then runs sessions on
the built-in `reverse` task's prompt format, which it knows itself: a prompt is the token ids
`^ d1..dn =` (10, digits 0-9, 11), the answer is `dn..d1 $` ($ = 12). A session has --turns
turns; turn k > 1 feeds the previous answer back followed by the question again (environment
tokens: the trainer masks them out). The agent scores the last answer like the task does
(correct positions / max(target, answer length)) and reports it with POST /v1/rewards, grouping
the --group sessions that share a prompt (GRPO compares them). Every --stream-every-th request
streams (SSE). It stops after --sessions sessions, or earlier when the gateway goes away (the
training job ended), and prints a summary: sessions, requests, streamed chunks, mean reward of
the first and the last quarter of the sessions, and the policy versions it saw.
"""
import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

BOS, SEP, EOS = 10, 11, 12


class GatewayGone(Exception):
    pass


class Client:
    def __init__(self, url, token, timeout=120):
        rest = url.split("://", 1)[1]
        hostport = rest.split("/", 1)[0]
        if hostport.startswith("["):
            host, port = hostport[1:].split("]:")
        else:
            host, port = hostport.rsplit(":", 1)
        self.host, self.port, self.token, self.timeout = host, int(port), token, timeout
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = self.local.c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return c

    def _drop(self):
        c = getattr(self.local, "c", None)
        if c is not None:
            c.close()
        self.local.c = None

    def post(self, path, body, stream=False):
        """POST JSON; returns (status, parsed JSON) or, with stream, (status, list of chunks)."""
        for attempt in range(2):
            try:
                c = self._conn()
                c.request("POST", path, body=json.dumps(body),
                          headers={"Authorization": "Bearer " + self.token, "Content-Type": "application/json"})
                r = c.getresponse()
                if stream and r.status == 200:
                    chunks, buf = [], b""
                    while True:
                        line = r.readline()
                        if not line:
                            break
                        line = line.strip()
                        if not line.startswith(b"data: "):
                            continue
                        data = line[6:]
                        if data == b"[DONE]":
                            break
                        chunks.append(json.loads(data))
                    r.read()
                    return r.status, chunks
                raw = r.read()
                return r.status, json.loads(raw) if raw else {}
            except (ConnectionError, http.client.HTTPException, OSError):
                self._drop()
                if attempt == 1:
                    raise GatewayGone()
        raise GatewayGone()


def reverse_score(digits, answer):
    target = list(reversed(digits))
    n = answer.index(EOS) if EOS in answer else len(answer)
    denom = max(len(target), n)
    if denom == 0:
        return 1.0
    return sum(1 for i in range(min(len(target), n)) if answer[i] == target[i]) / denom


def complete(cli, session, prompt, max_tokens, stream, stats):
    body = {"model": "tagflow-policy", "prompt": prompt, "max_tokens": max_tokens, "temperature": 1.0,
            "stop_token_ids": [EOS], "session": session}
    if stream:
        st, chunks = cli.post("/v1/completions", dict(body, stream=True), stream=True)
        if st != 200:
            return None
        ids, vers = [], []
        for ch in chunks:
            if "error" in ch:
                return None
            if any(c.get("finish_reason") == "abort" for c in ch.get("choices") or []):
                raise GatewayGone()  # the job is ending: a cut answer is not one to score
            t = ch.get("tagflow") or {}
            ids += t.get("token_ids", [])
            vers += t.get("versions", [])
        with stats["lock"]:
            stats["chunks"] += len(chunks)
            stats["streamed"] += 1
        return ids, vers
    st, j = cli.post("/v1/completions", body)
    if st != 200:
        if st >= 500 or (j.get("error") or {}).get("code") == "abort":
            raise GatewayGone()
        return None
    if j["choices"][0].get("finish_reason") == "abort":
        raise GatewayGone()
    return j["tagflow"]["token_ids"], j["tagflow"]["versions"]


def run_group(cli, a, gidx, rng, stats):
    digits = [rng.randrange(10) for _ in range(a.digits)]
    question = [BOS] + digits + [SEP]
    rewards = []
    for k in range(a.group):
        session = f"{a.prefix}-{gidx}-{k}"
        inp = list(question)
        last, served = [], False
        for turn in range(a.turns):
            with stats["lock"]:
                stats["requests"] += 1
                stream = a.stream_every > 0 and stats["requests"] % a.stream_every == 0
            got = complete(cli, session, inp, a.digits + 1, stream, stats)
            if got is None:
                with stats["lock"]:
                    stats["failed"] += 1
                break
            last, vers = got
            served = True
            with stats["lock"]:
                stats["versions"].update(vers)
            inp = inp + last + question  # the environment asks again
        if not served:
            continue
        r = reverse_score(digits, last)
        st, j = cli.post("/v1/rewards", {"session": session, "reward": r, "group": f"{a.prefix}-{gidx}"})
        if st != 200:
            raise SystemExit(f"gateway_agent: reward refused ({st}): {j}")
        rewards.append(r)
    with stats["lock"]:
        stats["rewards"] += [(gidx, r) for r in rewards]
        stats["sessions"] += len(rewards)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="tagflow run directory (reads gateway.url and gateway.token)")
    p.add_argument("--url", help="base URL, e.g. http://127.0.0.1:8000/v1 (default: OUT/gateway.url)")
    p.add_argument("--token-file", help="default: OUT/gateway.token")
    p.add_argument("--sessions", type=int, default=64, help="sessions to run at most")
    p.add_argument("--group", type=int, default=2, help="sessions per prompt (= tagflow --group-size)")
    p.add_argument("--turns", type=int, default=1, help="turns per session")
    p.add_argument("--digits", type=int, default=3, help="= tagflow --digits")
    p.add_argument("--concurrency", type=int, default=4, help="groups run at once")
    p.add_argument("--stream-every", type=int, default=3, help="every N-th request streams (0 = never)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--prefix", default="agent", help="session name prefix")
    p.add_argument("--wait", type=float, default=120, help="seconds to wait for the gateway files")
    a = p.parse_args()
    if not a.url and not a.out:
        p.error("give --out RUN (or --url and --token-file)")
    url_file = os.path.join(a.out, "gateway.url") if a.out else None
    token_file = a.token_file or os.path.join(a.out, "gateway.token")
    t0 = time.time()
    while (not a.url and not os.path.exists(url_file)) or not os.path.exists(token_file):
        if time.time() - t0 > a.wait:
            sys.exit(f"gateway_agent: no gateway files in {a.out} after {a.wait:.0f} s")
        time.sleep(0.2)
    url = a.url or open(url_file).read().strip()
    token = open(token_file).read().strip()
    cli = Client(url, token)
    stats = {"lock": threading.Lock(), "requests": 0, "streamed": 0, "chunks": 0, "failed": 0, "sessions": 0,
             "rewards": [], "versions": set()}
    n_groups = max(1, a.sessions // a.group)
    next_g = [0]
    gone = [False]

    def worker(wid):
        rng = random.Random(a.seed * 1000 + wid)
        while not gone[0]:
            with stats["lock"]:
                g = next_g[0]
                next_g[0] += 1
            if g >= n_groups:
                return
            try:
                run_group(cli, a, g, rng, stats)
            except GatewayGone:
                gone[0] = True

    th = [threading.Thread(target=worker, args=(i,)) for i in range(a.concurrency)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    rw = [r for _, r in sorted(stats["rewards"])]
    q = max(1, len(rw) // 4)
    first = sum(rw[:q]) / len(rw[:q]) if rw else float("nan")
    last = sum(rw[-q:]) / len(rw[-q:]) if rw else float("nan")
    print(f"gateway_agent: {stats['sessions']} sessions, {stats['requests']} requests ({stats['streamed']} streamed, "
          f"{stats['chunks']} SSE chunks, {stats['failed']} failed), mean reward first quarter {first:.3f} "
          f"last quarter {last:.3f}, policy versions seen {sorted(stats['versions'])}"
          f"{', gateway gone (training ended)' if gone[0] else ''}", flush=True)
    summary = {k: (sorted(v) if isinstance(v, set) else v) for k, v in stats.items() if k != "lock"}
    if a.out:
        with open(os.path.join(a.out, "gateway_agent.json"), "w") as f:
            json.dump(summary, f)


if __name__ == "__main__":
    main()
