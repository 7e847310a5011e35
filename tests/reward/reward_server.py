#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A small reward endpoint for tests/reward (the --reward-url protocol of share/doc/rewards.md),
on 127.0.0.1 only, standard library only. Prints "PORT N" when it listens and stops by itself
after --lifetime seconds. The path picks the behaviour:

  /score    {"results": [...]} from gsm8k_reward.compute_score (floats or dicts with extras)
  /big      like /score, but a sample whose solution_str is "big" scores 1e39
  /nan      Python's json.dumps of NaN (not JSON)
  /count    one result too few
  /error    {"error": ...} for a sample whose solution_str is "bad", scores for the rest
  /flaky    503 for the first two POSTs, then like /score
  /slow     sleeps 5 s before answering
  /auth     like /score if "Authorization: Bearer <--token>", else 401
  /http400  400 with a short body
GET /requests answers {"path": number of POSTs so far}.
"""
import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gsm8k_reward import compute_score  # noqa: E402

COUNTS = {}
LOCK = threading.Lock()
TOKEN = None


def scores(batch):
    out = []
    for it in batch:
        r = compute_score(data_source=it["data_source"], solution_str=it["solution_str"],
                          ground_truth=it["ground_truth"], extra_info=it["extra_info"])
        out.append(dict(r, id=it["id"]) if isinstance(r, dict) else r)
    return out


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def answer(self, code, body):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/requests":
            with LOCK:
                self.answer(200, json.dumps(COUNTS))
        else:
            self.answer(404, "{}")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        path = self.path
        with LOCK:
            COUNTS[path] = COUNTS.get(path, 0) + 1
            count = COUNTS[path]
        try:
            batch = json.loads(body)["batch"]
        except (ValueError, KeyError):
            return self.answer(400, '{"error": "not a batch"}')
        if path == "/score":
            return self.answer(200, json.dumps({"results": scores(batch)}))
        if path == "/big":
            res = [1e39 if it["solution_str"] == "big" else r for it, r in zip(batch, scores(batch))]
            return self.answer(200, json.dumps({"results": res}))
        if path == "/nan":
            return self.answer(200, json.dumps({"results": [float("nan")] * len(batch)}))
        if path == "/count":
            return self.answer(200, json.dumps({"results": scores(batch)[:-1]}))
        if path == "/error":
            res = [{"error": "cannot score this one"} if it["solution_str"] == "bad" else r
                   for it, r in zip(batch, scores(batch))]
            return self.answer(200, json.dumps({"results": res}))
        if path == "/flaky":
            if count <= 2:
                return self.answer(503, '{"error": "busy"}')
            return self.answer(200, json.dumps({"results": scores(batch)}))
        if path == "/slow":
            time.sleep(5)
            return self.answer(200, json.dumps({"results": scores(batch)}))
        if path == "/auth":
            if self.headers.get("Authorization") != "Bearer " + TOKEN:
                return self.answer(401, '{"error": "bad token"}')
            return self.answer(200, json.dumps({"results": scores(batch)}))
        if path == "/http400":
            return self.answer(400, '{"error": "no such task"}')
        return self.answer(404, "{}")


def main():
    global TOKEN
    ap = argparse.ArgumentParser()
    ap.add_argument("--token", default="s3cret-token-xyz")
    ap.add_argument("--lifetime", type=float, default=150.0)
    args = ap.parse_args()
    TOKEN = args.token
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Timer(args.lifetime, srv.shutdown).start()
    print(f"PORT {srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
