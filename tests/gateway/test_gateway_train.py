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
names gateway samples in every training step; and the schema invariants hold.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "share", "python"))
import tagflow_run  # noqa: E402

AGENT = os.path.join(ROOT, "share", "examples", "gateway_agent.py")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
for k in list(ENV):
    if k.startswith("TAGFLOW_"):
        del ENV[k]
GW_BASE = 1 << 60
STEPS = 3
failures = []


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def req(port, method, path, body=None, token=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + token
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, {}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tagflow", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--ranks", type=int, default=2)
    a = p.parse_args()
    out = os.path.join(a.work, f"run{a.ranks}")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    port = free_port()
    tags = "0=rollout;1=rollout,train" if a.ranks == 2 else "0=rollout;1=rollout;2=rollout,train"
    cmd = ["mpirun", "-n", str(a.ranks), a.tagflow, "train", "--out", out, "--mode", "disaggregated",
           "--rank-tags", tags, "--gateway", f"127.0.0.1:{port}", "--gateway-only", "--task", "reverse",
           "--digits", "3", "--max-new-tokens", "16", "--steps", str(STEPS), "--group-size", "2",
           "--train-threshold", "4", "--train-timeout", "20", "--staleness", "100", "--eval-every", "0",
           "--eval-prompts", "8", "--gemm-check", "false", "--max-batch", "16", "--threads", "1", "--seed", "3"]
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
        s, j = req(port, "GET", "/health")
        check(s == 401 and "error" in j, f"no token -> 401 ({s})")
        s, j = req(port, "GET", "/health", token="tf-" + "0" * 64)
        check(s == 401 and j.get("error", {}).get("code") == "invalid_api_key", f"wrong token -> 401 ({s})")
        s, j = req(port, "POST", "/v1/completions", b'{"model": "tagflow-policy", "prompt": [10,', token)
        check(400 <= s < 500 and "error" in j, f"malformed JSON -> 4xx ({s})")
        s, j = req(port, "POST", "/v1/completions", json.dumps({"model": "tagflow-policy", "prompt": [99]}), token)
        check(s == 400, f"token id outside the policy's vocabulary -> 400 ({s})")
        s, j = req(port, "POST", "/v1/rewards", json.dumps({"session": "nobody", "reward": 1}), token)
        check(s == 404, f"reward for an unknown session -> 404 ({s})")
        s, j = req(port, "GET", "/health", token=token)
        check(s == 200 and j.get("status") == "ok", f"still serving after the bad requests ({s})")
        s, j = req(port, "GET", "/v1/models", token=token)
        check(s == 200 and j["data"][0]["id"] == "tagflow-policy" and j["data"][0]["tagflow"]["vocab_size"] == 13,
              f"/v1/models serves the policy (vocabulary of the reverse task) ({s})")
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
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all gateway training checks passed")


if __name__ == "__main__":
    main()
