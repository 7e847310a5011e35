#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Gateway.http: the gateway end to end, with Python's standard library only.

    test_gateway.py --server BUILD/tests/gateway/gateway_test_server --work DIR

Starts gateway_test_server (a real rollout engine on a small random model behind the
gateway) and checks: the token file (mode 0600) and 401s with OpenAI error bodies; /health and
/v1/models; greedy /v1/completions tokens and log-probabilities against an independent float64
forward of the saved checkpoint (tests/llama/reference_forward.py); string vs token-id prompts;
chat completions; SSE streaming (framing, [DONE], same tokens as non-streaming, usage);
64 concurrent clients; rewards (recorded in records.jsonl); and that after each bad request
(malformed JSON, unknown model, oversized body, too-long prompt, unknown path, wrong method,
garbage bytes, half a request) the gateway still serves; 16 streams closed after their first
token are cancelled inside the engine (/health "cancelled", records with finish_reason
"cancelled") and the gateway keeps serving. Exits non-zero on failure.
"""
import argparse
import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama"))
import reference_forward as ref  # noqa: E402

MODEL = "tagflow-test"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import failures, post_stream, read_first_chunk  # noqa: E402
from testlib import soft_check as check  # noqa: E402  (records a failure and goes on)


class Gw:
    def __init__(self, host, port, token):
        self.host, self.port, self.token = host, port, token

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(self, method, path, body=None, token=True, headers=None, conn=None):
        c = conn or self.conn()
        h = {"Content-Type": "application/json"}
        if token is True:
            h["Authorization"] = "Bearer " + self.token
        elif token:
            h["Authorization"] = token
        h.update(headers or {})
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        if conn is None:
            c.close()
        return r.status, r.getheader("Content-Type"), raw

    def json(self, method, path, body=None, **kw):
        s, _, raw = self.request(method, path, body, **kw)
        try:
            return s, json.loads(raw)
        except ValueError:
            return s, {"_raw": raw}

    def stream(self, path, body):
        """POST with stream=true; returns (status, content-type, list of data payloads)."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(body),
                  headers={"Authorization": "Bearer " + self.token, "Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode()  # http.client undoes the chunked transfer encoding
        c.close()
        events = []
        for block in raw.split("\n\n"):
            if not block:
                continue
            assert block.startswith("data: "), f"bad SSE block {block!r}"
            events.append(block[len("data: "):])
        return r.status, r.getheader("Content-Type"), events, raw


def is_openai_error(obj, status, got_status):
    e = obj.get("error") if isinstance(obj, dict) else None
    return (got_status == status and isinstance(e, dict) and set(e) >= {"message", "type", "param", "code"}
            and isinstance(e["message"], str) and e["message"])


def reference_greedy(cfg, w, prompt, n, stop=(257,)):
    seq, ids, lps, gaps = list(prompt), [], [], []
    for _ in range(n):
        logits = ref.forward(cfg, w, torch.tensor([seq]))[0, -1]
        top2 = torch.topk(logits, 2).values
        t = int(logits.argmax())
        ids.append(t)
        lps.append(float(torch.log_softmax(logits, -1)[t]))
        gaps.append(float(top2[0] - top2[1]))
        seq.append(t)
        if t in stop:
            break
    return ids, lps, gaps


def test_auth_and_token_file(gw, work):
    path = os.path.join(work, "gateway.token")
    mode = stat.S_IMODE(os.stat(path).st_mode)
    check(mode == 0o600, f"gateway.token has mode 0600 (got {oct(mode)})")
    check(gw.token.startswith("tf-") and len(gw.token) == 67, "token is tf- + 64 hex digits")
    s, j = gw.json("GET", "/v1/models", token=None)
    check(is_openai_error(j, 401, s), f"no token -> 401 with an OpenAI error body ({s}, {j})")
    s, j = gw.json("GET", "/v1/models", token="Bearer " + gw.token[:-1] + ("1" if gw.token.endswith("0") else "0"))
    check(is_openai_error(j, 401, s) and j["error"]["code"] == "invalid_api_key", f"wrong token -> 401 invalid_api_key ({s})")
    s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": "x"}, token="Basic " + gw.token)
    check(is_openai_error(j, 401, s), f"non-Bearer scheme -> 401 ({s})")
    s, j = gw.json("GET", "/health", token=None)
    check(s == 401, f"/health also needs the token ({s})")


def test_info(gw):
    s, j = gw.json("GET", "/health")
    check(s == 200 and j.get("status") == "ok", f"/health -> 200 ok ({s} {j})")
    s, j = gw.json("GET", "/v1/models")
    check(s == 200 and j.get("object") == "list" and [m["id"] for m in j["data"]] == [MODEL]
          and j["data"][0]["object"] == "model" and "created" in j["data"][0] and "owned_by" in j["data"][0],
          f"/v1/models lists {MODEL} in the OpenAI layout ({j})")
    s, j = gw.json("GET", "/v1/models/" + MODEL)
    check(s == 200 and j.get("id") == MODEL, "/v1/models/{id} -> the model")
    s, j = gw.json("GET", "/v1/models/nope")
    check(is_openai_error(j, 404, s), "/v1/models/nope -> 404")


def test_greedy_against_reference(gw, work):
    mdir = os.path.join(work, "model")
    with open(os.path.join(mdir, "config.json")) as f:
        cfg = json.load(f)
    w = ref.load_weights(mdir)
    prompt = "Hello, tagflow!"
    pids = list(prompt.encode())
    n = 10
    want, want_lp, gaps = reference_greedy(cfg, w, pids, n)
    s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": n,
                                               "temperature": 0, "logprobs": 1})
    check(s == 200, f"greedy completion -> 200 ({s} {j if s != 200 else ''})")
    if s != 200:
        return
    ext = j["tagflow"]
    check(j["object"] == "text_completion" and j["id"].startswith("cmpl-") and isinstance(j["created"], int)
          and j["model"] == MODEL, "completion has id/object/created/model")
    ch = j["choices"][0]
    check(ch["index"] == 0 and ch["finish_reason"] in ("stop", "length") and isinstance(ch["text"], str),
          f"choices[0] has index/text/finish_reason ({ch['finish_reason']})")
    check(ext["prompt_token_ids"] == pids, "tagflow.prompt_token_ids = the prompt's bytes")
    # Compare where the float64 reference's top-2 gap is not a float tie.
    got = ext["token_ids"]
    k = len(want)
    for i, g in enumerate(gaps):
        if g < 1e-3:
            k = i
            break
    check(got[:k] == want[:k], f"greedy token ids {got} == float64 reference {want} (first {k})")
    diff = max(abs(a - b) for a, b in zip(ext["logprobs"][:k], want_lp[:k])) if k else 0
    check(diff < 1e-4, f"tagflow.logprobs match the reference (max diff {diff:.2e})")
    check(ext["versions"] == [0] * len(got), "tagflow.versions: policy version 0 per token")
    u = j["usage"]
    check(u == {"prompt_tokens": len(pids), "completion_tokens": len(got), "total_tokens": len(pids) + len(got)},
          f"usage counts ({u})")
    text = bytes(t for t in got if t < 256).decode("utf-8", "replace")
    check(ch["text"] == text, "choices[0].text = the decoded token ids")
    lp = ch["logprobs"]
    check(lp is not None and lp["token_logprobs"] == [x for t, x in zip(got, ext["logprobs"]) if t < 256],
          "choices[0].logprobs.token_logprobs = the extension's (non-special tokens)")
    # Token-id prompt: same answer.
    s, j2 = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": pids, "max_tokens": n, "temperature": 0})
    check(s == 200 and j2["tagflow"]["token_ids"] == got, "token-id prompt gives the same tokens as the string")
    # Sampling: same seed, same tokens.
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "seed": 11}
    a = gw.json("POST", "/v1/completions", body)[1]["tagflow"]["token_ids"]
    b = gw.json("POST", "/v1/completions", body)[1]["tagflow"]["token_ids"]
    check(a == b, f"same seed, same sampled tokens ({a})")


def test_chat_and_stream(gw):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    base = {"model": MODEL, "messages": msgs, "max_tokens": 12, "temperature": 0, "session": "chat-1"}
    s, j = gw.json("POST", "/v1/chat/completions", base)
    check(s == 200 and j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-")
          and j["choices"][0]["message"]["role"] == "assistant"
          and isinstance(j["choices"][0]["message"]["content"], str), f"chat completion layout ({s})")
    if s != 200:
        return
    check(j["tagflow"]["session"] == "chat-1", "session from the body is echoed in the extension")
    toks = j["tagflow"]["token_ids"]
    st, ctype, events, raw = gw.stream("/v1/chat/completions",
                                       dict(base, stream=True, stream_options={"include_usage": True}, logprobs=True))
    check(st == 200 and ctype.startswith("text/event-stream"), f"stream -> 200 text/event-stream ({st} {ctype})")
    check(events and events[-1] == "[DONE]" and raw.endswith("data: [DONE]\n\n"), "stream ends with data: [DONE]")
    chunks = [json.loads(e) for e in events[:-1]]
    check(all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks),
          "every chunk is a chat.completion.chunk with one id")
    check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", "first delta carries the role")
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    stoks = [t for c in chunks if "tagflow" in c for t in c["tagflow"]["token_ids"]]
    check(stoks == toks, f"streamed token ids == non-streamed ({stoks} vs {toks})")
    check(content == j["choices"][0]["message"]["content"], "streamed content == non-streamed content")
    fin = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    check(len(fin) == 1 and fin[0]["choices"][0]["finish_reason"] == j["choices"][0]["finish_reason"],
          "exactly one chunk has the finish_reason")
    check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(toks),
          "include_usage: a last chunk with empty choices and usage")
    # Completions streaming, header session.
    st, _, events, _ = gw.stream("/v1/completions", {"model": MODEL, "prompt": "abc", "max_tokens": 5,
                                                     "temperature": 0, "stream": True})
    chunks = [json.loads(e) for e in events[:-1]]
    check(st == 200 and events[-1] == "[DONE]" and all(c["object"] == "text_completion" for c in chunks)
          and "text" in chunks[0]["choices"][0], "completions stream: text_completion chunks and [DONE]")


def test_stream_per_token(gw, clients=16):
    """stream: true answers one SSE chunk per generated token (Engine::step's on_token), also
    with many clients streaming at once; the streamed ids equal the non-streamed ones."""
    results = [None] * clients

    def worker(i):
        try:
            body = {"model": MODEL, "prompt": [3 + i % 100, 7, 11], "max_tokens": 10, "temperature": 0,
                    "stop_token_ids": []}
            s, j = gw.json("POST", "/v1/completions", body)
            st, _, events, _ = gw.stream("/v1/completions", dict(body, stream=True))
            results[i] = (s, j, st, events)
        except Exception as e:  # noqa: BLE001
            results[i] = e

    th = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    good = 0
    for r in results:
        if not isinstance(r, tuple) or r[0] != 200 or r[2] != 200 or r[3][-1] != "[DONE]":
            continue
        toks = r[1]["tagflow"]["token_ids"]
        chunks = [json.loads(e) for e in r[3][:-1]]
        per = [c["tagflow"]["token_ids"] for c in chunks if c.get("tagflow", {}).get("token_ids")]
        if len(toks) >= 2 and all(len(p) == 1 for p in per) and [p[0] for p in per] == toks:
            good += 1
    check(good == clients, f"{clients} concurrent streams: one SSE chunk per token, ids == non-streamed "
          f"({good}/{clients} ok)")


def test_rewards(gw, work):
    s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": "r", "max_tokens": 2},
                   headers={"X-Tagflow-Session": "agent-7"})
    check(s == 200 and j["tagflow"]["session"] == "agent-7", "X-Tagflow-Session sets the session")
    s, r = gw.json("POST", "/v1/rewards", {"session": "agent-7", "reward": 0.75})
    check(s == 200 and r.get("accepted") is True, f"reward for a served session accepted ({s} {r})")
    s, r = gw.json("POST", "/v1/rewards", {"id": j["id"], "reward": -1})
    check(s == 200, f"reward by completion id accepted ({s})")
    s, r = gw.json("POST", "/v1/rewards", {"session": "never-seen", "reward": 1})
    check(is_openai_error(r, 404, s), f"reward for an unknown session -> 404 ({s})")
    s, r = gw.json("POST", "/v1/rewards", {"session": "agent-7", "reward": "high"})
    check(is_openai_error(r, 400, s), f"non-numeric reward -> 400 ({s})")
    s, r = gw.json("POST", "/v1/rewards", {"session": "agent-7", "reward": 1e39})
    check(is_openai_error(r, 400, s) and "1e+39" in r["error"]["message"] and r["error"]["param"] == "reward",
          f"a reward finite as a double but not in float32 (1e39) -> 400 naming the value ({s} {r})")
    s, r = gw.json("POST", "/v1/rewards", {"session": "agent-7", "reward": -3.4e38})
    check(s == 200, f"a reward at the edge of float32 (-3.4e38) is accepted ({s})")
    recs = [json.loads(l) for l in open(os.path.join(work, "records.jsonl"))]
    rw = [x for x in recs if x["type"] == "reward"]
    comp = [x for x in recs if x["type"] == "completion" and x["session"] == "agent-7"]
    check(any(x["session"] == "agent-7" and x["reward"] == 0.75 for x in rw) and
          any(x["id"] == j["id"] and x["reward"] == -1 for x in rw), "rewards are recorded")
    check(len(comp) == 1 and comp[0]["token_ids"] == j["tagflow"]["token_ids"]
          and comp[0]["logprobs"] == j["tagflow"]["logprobs"], "the completion is recorded with its tokens")


def test_cancel(gw, work, n=16, attempts=3):
    """Clients that close their stream mid-generation: the engine cancels their requests
    (/health "cancelled", records with finish_reason "cancelled" and fewer tokens than asked).
    A round in which the engine wrote all 120 tokens before the clients closed (a starved test
    process) never closes mid-generation: it is run again, up to `attempts` rounds."""
    def health():
        return gw.json("GET", "/health")[1]
    for attempt in range(1, attempts + 1):
        t0 = time.time()
        while health()["pending"] and time.time() - t0 < 20:
            time.sleep(0.05)
        c0 = health()["cancelled"]
        socks = []
        session = f"cancel-me-{attempt}"
        body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 120, "stream": True, "session": session}
        for _ in range(n):  # as many as the engine has slots (--max-batch 16): all decode together
            socks.append(post_stream(gw.host, gw.port, gw.token, body))
        for s in socks:  # each has its first token
            read_first_chunk(s)
        for s in socks:
            s.close()
        t0 = time.time()
        while (health()["pending"] or health()["cancelled"] == c0) and time.time() - t0 < 20:
            time.sleep(0.05)
        h = health()
        recs = [json.loads(l) for l in open(os.path.join(work, "records.jsonl"))]
        mine = [x for x in recs if x["type"] == "completion" and x["session"] == session]
        cancelled = [x for x in mine if x["finish_reason"] == "cancelled"]
        if h["cancelled"] > c0 or attempt == attempts:
            break
        print(f"note: round {attempt}: all {len(mine)} streams finished before their clients closed; again")
    check(h["pending"] == 0 and h["cancelled"] - c0 >= 1 and len(mine) == n and
          len(cancelled) == h["cancelled"] - c0 and all(x["cancelled"] and len(x["token_ids"]) < 120 for x in cancelled),
          f"{n} streams closed after their first token: {h['cancelled'] - c0} cancelled inside the engine "
          f"(finish_reason cancelled, {sorted(len(x['token_ids']) for x in cancelled)[:4]}.. tokens), nothing pending "
          f"(round {attempt})")
    s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 4})
    check(s == 200 and len(j["tagflow"]["token_ids"]) == 4, f"still serving after the cancels ({s})")


def test_concurrency(gw, clients=64):
    results = [None] * clients

    def worker(i):
        try:
            body = {"model": MODEL, "prompt": [1 + i % 200, 2, 3], "max_tokens": 6, "temperature": 0}
            c = gw.conn()  # keep-alive: two requests on one connection
            a = gw.json("POST", "/v1/completions", body, conn=c)
            b = gw.json("POST", "/v1/completions", body, conn=c)
            c.close()
            results[i] = (a, b)
        except Exception as e:  # noqa: BLE001
            results[i] = e

    t0 = time.time()
    th = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    ok = all(isinstance(r, tuple) and r[0][0] == 200 and r[1][0] == 200 and
             r[0][1]["tagflow"]["token_ids"] == r[1][1]["tagflow"]["token_ids"] for r in results)
    ids = {r[0][1]["id"] for r in results if isinstance(r, tuple) and r[0][0] == 200}
    check(ok and len(ids) == clients, f"{clients} concurrent keep-alive clients x 2 requests all 200, "
          f"deterministic, distinct ids ({time.time() - t0:.1f} s)")


def raw_exchange(gw, data, read=True):
    s = socket.create_connection((gw.host, gw.port), timeout=30)
    s.sendall(data)
    out = b""
    if read:
        while True:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            out += b
    s.close()
    return out


def test_bad_requests(gw):
    def still_serves(after):
        s, j = gw.json("GET", "/health")
        check(s == 200, f"still serving after {after}")

    tok = gw.token
    cases = [
        ("malformed JSON", "/v1/completions", "POST", b"{\"model\": ", 400),
        ("JSON array body", "/v1/completions", "POST", b"[1,2]", 400),
        ("unknown model", "/v1/completions", "POST", json.dumps({"model": "gpt-4", "prompt": "x"}).encode(), 404),
        ("too-long prompt", "/v1/completions", "POST", json.dumps({"model": MODEL, "prompt": "x" * 200}).encode(), 400),
        ("prompt + max_tokens over context", "/v1/completions", "POST",
         json.dumps({"model": MODEL, "prompt": "x" * 100, "max_tokens": 100}).encode(), 400),
        ("token id outside vocab", "/v1/completions", "POST", json.dumps({"model": MODEL, "prompt": [1, 9999]}).encode(), 400),
        ("bad temperature", "/v1/chat/completions", "POST",
         json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "temperature": -1}).encode(), 400),
        ("deeply nested JSON", "/v1/completions", "POST", b"[" * 1500 + b"]" * 1500, 400),
        ("invalid UTF-8 in JSON", "/v1/completions", "POST", b"{\"model\": \"\xff\xfe\", \"prompt\": \"x\"}", 400),
        ("unknown path", "/v1/embeddings", "POST", b"{}", 404),
        ("wrong method", "/v1/completions", "GET", None, 405),
        ("wrong method on models", "/v1/models", "DELETE", None, 405),
    ]
    for name, path, method, body, want in cases:
        s, _, raw = gw.request(method, path, body)
        try:
            j = json.loads(raw)
        except ValueError:
            j = {}
        check(is_openai_error(j, want, s), f"{name} -> {want} with an OpenAI error body (got {s}: {raw[:150]!r})")
        still_serves(name)
    # Context-length error uses OpenAI's code.
    s, j = gw.json("POST", "/v1/completions", {"model": MODEL, "prompt": "x" * 200})
    check(j.get("error", {}).get("code") == "context_length_exceeded", "too-long prompt: code context_length_exceeded")
    # Oversized body (server started with --max-body 4096): rejected from the headers alone.
    big = json.dumps({"model": MODEL, "prompt": "x" * 10000}).encode()
    s, _, raw = gw.request("POST", "/v1/completions", big)
    check(s == 413 and is_openai_error(json.loads(raw), 413, s), f"oversized body -> 413 OpenAI error ({s})")
    still_serves("an oversized body")
    # Raw garbage and broken framing on fresh sockets.
    out = raw_exchange(gw, b"\x16\x03\x01\x02\x00garbage that is not http\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 400"), f"garbage bytes -> 400 ({out[:40]!r})")
    still_serves("garbage bytes")
    out = raw_exchange(gw, b"POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer " + tok.encode() +
                       b"\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 501"), f"chunked request body -> 501 ({out[:40]!r})")
    still_serves("a chunked request")
    out = raw_exchange(gw, b"GET /health HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 431"), f"huge header -> 431 ({out[:40]!r})")
    still_serves("a huge header")
    raw_exchange(gw, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mod", read=False)
    still_serves("a client that hung up mid-body")
    # A client that disconnects while its completion is generating.
    s = socket.create_connection((gw.host, gw.port))
    body = json.dumps({"model": MODEL, "prompt": "bye", "max_tokens": 50}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer " + tok.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.close()
    still_serves("a client that left during generation")
    # Pipelined requests on one connection are answered in order.
    one = b"GET /health HTTP/1.1\r\nAuthorization: Bearer " + tok.encode() + b"\r\n\r\n"
    out = raw_exchange(gw, one * 2 + b"GET /health HTTP/1.1\r\nConnection: close\r\nAuthorization: Bearer " +
                       tok.encode() + b"\r\n\r\n")
    check(out.count(b"HTTP/1.1 200 OK") == 3, f"three pipelined requests -> three 200s ({out.count(b'200 OK')})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for f in ("records.jsonl", "gateway.token"):
        if os.path.exists(os.path.join(a.work, f)):
            os.remove(os.path.join(a.work, f))
    p = subprocess.Popen([a.server, "--out", a.work, "--max-body", "4096", "--context", "128",
                          "--model-id", MODEL], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        check(line.startswith("gateway listening on http://127.0.0.1:"), f"server binds 127.0.0.1 ({line!r})")
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        with open(os.path.join(a.work, "gateway.token")) as f:
            token = f.read().strip()
        gw = Gw("127.0.0.1", port, token)
        test_auth_and_token_file(gw, a.work)
        test_info(gw)
        test_greedy_against_reference(gw, a.work)
        test_chat_and_stream(gw)
        test_stream_per_token(gw)
        test_rewards(gw, a.work)
        test_bad_requests(gw)
        test_cancel(gw, a.work)
        test_concurrency(gw)
    finally:
        p.terminate()
        try:
            out, _ = p.communicate(timeout=30)
            print(out.strip())
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, "server stops on SIGTERM within 30 s")
    check(p.returncode == 0, f"server exits 0 on SIGTERM (rc {p.returncode})")
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all gateway checks passed")


if __name__ == "__main__":
    main()
