#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""test_train_data_async.py: `tagflow train --data` in the asynchronous modes (issue 18 point 2).

    test_train_data_async.py CASE --tagflow BIN --work DIR

Every case writes a small JSON Lines data set (chat and string prompts, ground truths, extra_info),
a small byte-level BPE tokenizer (tests/ckpt/export_tests.py's, 264 ids, so the model is tiny) and
a fresh 1-layer qwen3, a --reward-fn file in veRL's signature that returns a dict with a score and
two extra keys, and runs `mpirun -n 2 tagflow train --data --epochs 2 --staleness 0 --admission off`, so
samples go stale and groups are dropped (admission would keep them from going stale). Each run file is read back with h5py (share/python/tagflow_run.py):
  - stale drops happened (consumed with weight 0), and dropped groups were dropped whole;
  - every (epoch, row) of the 2 epochs has exactly one prompt group trained, all its G samples
    consumed once with weight > 0; no other group trained (a dropped row was requeued, not burned);
  - prompt_index is the row (group = attempt x 2^32 + epoch x rows + row), each prompt text holds
    its row's question, each reward is the function's (row / 100 + a small length term);
  - every sample's reward extras read back by tagflow_run equal what the function returned.
CASE multiplex: --mode multiplex, rank 0 rollout only, rank 1 rollout and train; with --val-data
  (tests/data/val_checks.py: rows that carry their score) --val-samples 2 --eval-every 5: /eval at step 0,
  every 5th and the last, greedy and mean@2 per data_source and overall, the means of the rows' scores, the
  progress lines show them (the coordinator, rank 1, validates between steps).
CASE disaggregated: --mode disaggregated, rank 0 generates, rank 1 trains; the same --val-data checks (the
  coordinator, rank 1, only trains otherwise: it answers the validation rows on an engine of its own).
CASE admission: the multiplex run with --admission staleness: at most 10% dropped, every row trained once;
  then the same with both ranks rollout and train (the budget is shared, so neither waits for good).
CASE kill: the multiplex run SIGKILLed on both ranks after its checkpoint at step 2, then resumed
  with the same command line: the same checks across the kill, one /resumes row.
CASE valfail: --reward-error fail on a validation reward in multiplex: the function refuses every
  validation row after the step-0 validation's, so the validation after step 2 fails: exit 1, one line
  naming the validation reward and the cause, the coordinator's checkpoint at step 2; resumed with the
  function repaired, the run completes with every (epoch, row) trained exactly once and validates on.
CASE url: the multiplex run scored by --reward-url (an HTTP endpoint in this process computing the
  same function, with a bearer token) instead of --reward-fn: the same checks, and the endpoint saw
  every sample once. Then --reward-error fail through the endpoint in multiplex: it refuses row 4,
  the run exits 1 with one line naming the row and the endpoint's reason, after a checkpoint;
  resumed with the endpoint repaired, every (epoch, row) is trained exactly once.
Exits non-zero on failure."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "share", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "rollout"))
sys.path.insert(0, os.path.join(ROOT, "tests", "ckpt"))
import h5py  # noqa: E402
import tagflow_run  # noqa: E402
from export_tests import write_small_tokenizer  # noqa: E402
from generate_text import write_qwen3  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
# ENV: mpirun as root, no TAGFLOW_*, one tokenizer thread; check() records a failure in `failures` and goes on.
from testlib import ENV_ONE_THREAD as ENV, failures, kill_ranks, manifest_step  # noqa: E402,F401
from testlib import soft_check as check  # noqa: E402
from val_checks import VAL_BRANCH, check_eval, eval_rows, write_val  # noqa: E402

ROWS, P, G, EPOCHS = 6, 2, 2, 2
STRIDE = 1 << 32
MODES = {"multiplex": ["--mode", "multiplex", "--rank-tags", "0=rollout;1=rollout,train"],
         "disaggregated": ["--mode", "disaggregated", "--rank-tags", "0=rollout;1=train"],
         # both ranks rollout and train (the tags of a plain mpirun): each starts only its --rollout-ahead share
         "colocated": ["--mode", "multiplex"]}

REWARD_FN = '''
import os
VAL_CALLS = [0]
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if "v" in extra_info:        # case valfail: validation rows fail after the first BREAK_VAL_AFTER
        VAL_CALLS[0] += 1
        if VAL_CALLS[0] > int(os.environ.get("BREAK_VAL_AFTER", "1000000")):
            raise ValueError("validation row %d refused" % extra_info["i"])
''' + VAL_BRANCH + '''    k = extra_info["k"]
    return {"score": k / 100.0 + (len(solution_str) % 5) / 1000.0, "gt_len": len(ground_truth), "tag": "k%d" % k}
'''


def question(r):
    return f"Q{r}: {r}+{r + 3}?"


class Setup:
    def __init__(self, a):
        self.a = a
        shutil.rmtree(a.work, ignore_errors=True)
        os.makedirs(a.work)
        self.model = os.path.join(a.work, "model")
        tok = os.path.join(a.work, "tok")
        write_small_tokenizer(tok)
        write_qwen3(self.model, 264, seed=5)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok, f), self.model)
        self.data = os.path.join(a.work, "train.jsonl")
        with open(self.data, "w") as f:
            for r in range(ROWS):
                prompt = question(r) if r % 2 else [{"role": "user", "content": question(r)}]
                f.write(json.dumps({"prompt": prompt, "data_source": "my/src",
                                    "reward_model": {"ground_truth": str(2 * r + 3)}, "extra_info": {"k": r}}) + "\n")
        self.val = os.path.join(a.work, "val.jsonl")
        write_val(self.val)
        self.fn = os.path.join(a.work, "reward.py")
        with open(self.fn, "w") as f:
            f.write(REWARD_FN)

    def cmd(self, out, mode, admission="off", val=()):
        return (["mpirun", "-n", "2", self.a.tagflow, "train", "--out", out, "--model", self.model, "--data", self.data,
                 "--epochs", str(EPOCHS), "--prompts-per-step", str(P), "--group-size", str(G), "--max-new-tokens",
                 "6", "--gemm-check", "false", "--threads", "1", "--max-batch", "4", "--seed", "3", "--ckpt-every",
                 "1", "--staleness", "0", "--admission", admission, "--reward-fn", self.fn, "--reward-workers", "1"]
                + MODES[mode] + list(val))

    def run(self, out, mode, admission="off", val=()):
        t = time.time()
        try:
            p = subprocess.run(self.cmd(out, mode, admission, val), capture_output=True, text=True, env=ENV,
                               timeout=300)
        except subprocess.TimeoutExpired as e:  # a run that waits for good fails its checks, not the suite
            p = subprocess.CompletedProcess(e.cmd, 124, (e.stdout or b"").decode(errors="replace"),
                                            (e.stderr or b"").decode(errors="replace") + "\n(killed after 300 s)")
        print(f"     ({mode}: {time.time() - t:.1f} s)", flush=True)
        return p


def read(out):
    with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
        d = {"bad": tagflow_run.check_invariants(f)}
        s = f["samples"]
        for k in ("id", "group", "prompt_index", "reward"):
            d[k] = s[k][()]
        d["cons_id"], d["cons_w"] = f["consumed"]["id"][()], f["consumed"]["weight"][()]
        d["resumes"] = f["resumes"]["from_step"][()]
        d["steps"] = f["steps"]["step"][()]
        d["eval"] = eval_rows(f)
        d["prompt_text"], d["response_text"] = tagflow_run.sample_texts(f)
        d["extras"] = tagflow_run.sample_extras(f)
        d["table_extras"] = tagflow_run.table(f, "samples")["reward_extras"].tolist()
    return d


def check_once(d, what, admission=False):
    check(not d["bad"], f"{what}: run file invariants hold {d['bad']}")
    n = len(d["id"])
    check(len(np.unique(d["cons_id"])) == len(d["cons_id"]), f"{what}: no sample consumed twice")
    weight = dict(zip(d["cons_id"].tolist(), d["cons_w"].tolist()))
    groups = {}
    for k in range(n):
        groups.setdefault(int(d["group"][k]), []).append(k)
    at = [int(g) % STRIDE for g in d["group"]]
    check(all(int(d["prompt_index"][k]) == at[k] % ROWS for k in range(n)),
          f"{what}: prompt_index is the row of group = attempt x 2^32 + epoch x rows + row")
    trained, dropped, part_trained, part_dropped = {}, 0, [], []
    for g, ks in groups.items():
        ws = [weight.get(int(d["id"][k])) for k in ks]
        if any(w is not None and w > 0 for w in ws):
            if not (len(ks) == G and all(w is not None and w > 0 for w in ws)):
                part_trained.append((g, ws))
                continue
            ticket = ((g % STRIDE) // ROWS, (g % STRIDE) % ROWS)
            trained.setdefault(ticket, []).append(g)
        elif any(w is not None for w in ws):
            dropped += 1
            if not (all(w == 0 for w in ws) and len(ks) == G):
                part_dropped.append((g, ws))
    check(not part_trained, f"{what}: every trained group has all {G} samples consumed with weight > 0 "
          f"{part_trained[:3]}")
    check(not part_dropped, f"{what}: every dropped group was dropped whole (every sample weight 0) {part_dropped[:3]}")
    drops = int(np.sum(d["cons_w"] == 0))
    if admission:  # the hand-outs stay within what trains at --staleness 0: (almost) nothing goes stale
        check(drops <= len(d["id"]) // 10, f"{what}: at most 10% of the samples dropped as stale ({drops} of "
              f"{len(d['id'])}; --admission off drops many)")
    else:
        check(drops > 0 and dropped > 0, f"{what}: stale drops happened ({drops} samples, {dropped} groups dropped)")
    want = {(e, r) for e in range(EPOCHS) for r in range(ROWS)}
    check(set(trained) == want and all(len(v) == 1 for v in trained.values()),
          f"{what}: every (epoch, row) of {EPOCHS} epochs x {ROWS} rows trained exactly once "
          f"(missing {sorted(want - set(trained))}, extra {sorted(set(trained) - want)}, "
          f"twice {[t for t, v in trained.items() if len(v) > 1]})")
    retried = sum(1 for v in trained.values() if v[0] >= STRIDE)
    print(f"     {what}: {n} samples, {len(d['steps'])} steps, {dropped} groups dropped, "
          f"{retried} rows trained on a later attempt", flush=True)
    wrong = [k for k in range(n) if question(int(d["prompt_index"][k])) not in (d["prompt_text"][k] or "")]
    check(not wrong, f"{what}: every sample's prompt text holds its row's question (wrong rows: {wrong[:3]})")
    bad_r = [k for k in range(n) if not (int(d["prompt_index"][k]) / 100 - 1e-6 <= float(d["reward"][k])
                                         < int(d["prompt_index"][k]) / 100 + 0.005)]
    check(not bad_r, f"{what}: every reward is the function's score of its row (bad rows {bad_r[:3]})")
    want_x = [{"gt_len": len(str(2 * int(r) + 3)), "tag": f"k{int(r)}"} for r in d["prompt_index"]]
    check(d["extras"] == want_x and d["table_extras"] == want_x,
          f"{what}: every sample's reward extras read back as the function returned them "
          f"({d['extras'][:2]} vs {want_x[:2]})")


def case_admission(s):
    """--admission staleness (the default) on the multiplex run: the coordinator hands out groups only
    within what trains at --staleness 0, so (almost) nothing is dropped; every row still trains once."""
    out = os.path.join(s.a.work, "admission")
    p = s.run(out, "multiplex", admission="staleness")
    if not check(p.returncode == 0, f"--admission staleness --data run exits 0 (rc {p.returncode})" +
                 ("" if p.returncode == 0 else p.stdout[-2000:] + p.stderr[-3000:])):
        return
    check("every row trained once" in p.stdout, "admission: the run says it ended after the epochs")
    check_once(read(out), "admission", admission=True)
    # Both ranks generate and train: the budget (one step's groups at --staleness 0) is shared between
    # them, so each can start its --rollout-ahead half of a step (handing it all to the first rank, which
    # may start only half, left the run waiting for good).
    out = os.path.join(s.a.work, "admission_colocated")
    p = s.run(out, "colocated", admission="staleness")
    if not check(p.returncode == 0, f"--admission staleness --data, both ranks rollout+train: exits 0 (rc "
                 f"{p.returncode})" + ("" if p.returncode == 0 else p.stdout[-2000:] + p.stderr[-3000:])):
        return
    check_once(read(out), "admission colocated", admission=True)


def case_mode(s, mode):
    out = os.path.join(s.a.work, mode)
    K, EVERY = 2, 5  # a run takes 6 or more steps: the validation after the last is one of its own
    p = s.run(out, mode, val=["--val-data", s.val, "--val-samples", str(K), "--eval-every", str(EVERY)])
    if not check(p.returncode == 0, f"{mode} --data run exits 0 (rc {p.returncode})" +
                 ("" if p.returncode == 0 else p.stdout[-2000:] + p.stderr[-3000:])):
        return
    check("every row trained once" in p.stdout, f"{mode}: the run says it ended after the epochs")
    d = read(out)
    check_once(d, mode)
    # --val-data: at the start, every EVERY steps and after the step that trained the last row.
    n = len(d["steps"])
    check_eval(check, d["eval"], p.stdout, sorted({0, n} | set(range(EVERY, n + 1, EVERY))), K, mode)
    if mode != "multiplex":
        return
    # A file written before the reward extras columns still reads: extras None, invariants hold.
    old = os.path.join(s.a.work, "no_extras.h5")
    shutil.copy(os.path.join(out, "tagflow.h5"), old)
    with h5py.File(old, "r+") as f:
        for c in ("extras_start", "extras_end", "reward_extras"):
            del f["samples"][c]
    with h5py.File(old, "r") as f:
        bad = tagflow_run.check_invariants(f)
        ex = tagflow_run.sample_extras(f)
        check(not bad and all(x is None for x in ex) and tagflow_run.table(f, "samples")["reward_extras"].isna().all(),
              f"a run file without the extras columns: invariants hold, extras None {bad}")


def case_kill(s):
    out = os.path.join(s.a.work, "kill")
    t = time.time()
    proc = subprocess.Popen(s.cmd(out, "multiplex"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and (manifest_step(out) or 0) < 2:
        time.sleep(0.02)
    at = manifest_step(out)
    if not check(proc.poll() is None and at is not None and at >= 2, f"run reached the checkpoint at step 2 (at {at})"):
        proc.kill()
        o, e = proc.communicate()
        print(o[-2000:], e[-2000:])
        return
    kill_ranks(proc.pid)
    proc.communicate(timeout=60)
    print(f"     (killed after {time.time() - t:.1f} s, checkpoint at step {manifest_step(out)})", flush=True)
    check(proc.returncode != 0, f"killed run exits non-zero (rc {proc.returncode})")
    p = s.run(out, "multiplex")
    if not check(p.returncode == 0, f"resumed run exits 0 (rc {p.returncode})" +
                 ("" if p.returncode == 0 else p.stdout[-2000:] + p.stderr[-3000:])):
        return
    d = read(out)
    check(len(d["resumes"]) == 1, f"one /resumes row {d['resumes'].tolist()}")
    check_once(d, "kill + resume")


def case_valfail(s):
    out = os.path.join(s.a.work, "valfail")
    val = ["--val-data", s.val, "--eval-every", "2"]
    env = dict(ENV, BREAK_VAL_AFTER="7")  # the step-0 validation's 7 rows pass, then every one fails
    p = subprocess.run(s.cmd(out, "multiplex", val=val), capture_output=True, text=True, env=env, timeout=600)
    lines = [l for l in p.stderr.splitlines() if "--reward-error fail" in l]
    check(p.returncode == 1 and len(lines) == 1 and "validation reward" in lines[0] and "refused" in lines[0],
          f"a failed validation reward in multiplex: exit 1, one line naming it and the cause "
          f"(rc {p.returncode}: {lines[:2]} {p.stderr.splitlines()[-3:]})")
    at = manifest_step(out)
    check(at == 2, f"the coordinator's checkpoint at the failed validation's step 2 (at {at})")
    p = s.run(out, "multiplex", val=val)
    if not check(p.returncode == 0,
                 f"resumed with the function repaired: exit 0 (rc {p.returncode}) {p.stderr[-2000:]}"):
        return
    d = read(out)
    check(len(d["resumes"]) == 1, f"one /resumes row {d['resumes'].tolist()}")
    check_once(d, "validation reward failure + resume")
    n = len(d["steps"])
    steps = sorted({r[0] for r in d["eval"]})
    check(steps == sorted({0, n} | set(range(4, n + 1, 2))), f"/eval at step 0 and after the resume at every 2nd "
          f"step and the last {n} (the failed step 2's validation is not repeated): {steps}")


class Endpoint:
    """--reward-url's protocol (share/doc/rewards.md) on 127.0.0.1, in a thread: scores like REWARD_FN,
    refuses the rows in `refuse` with {"error": ...}, counts the samples it scored per row."""

    def __init__(self, token):
        import http.server
        import threading
        ep = self
        self.refuse, self.seen, self.bad_auth = set(), {}, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Authorization") != "Bearer " + token:
                    ep.bad_auth += 1
                    code, out = 401, b'{"error": "no token"}'
                else:
                    res = []
                    for it in json.loads(body)["batch"]:
                        k = it["extra_info"]["k"]
                        if k in ep.refuse:
                            res.append({"error": f"row k={k} refused by the endpoint"})
                            continue
                        ep.seen[k] = ep.seen.get(k, 0) + 1
                        res.append({"score": k / 100.0 + (len(it["solution_str"]) % 5) / 1000.0,
                                    "gt_len": len(it["ground_truth"]), "tag": "k%d" % k})
                    code, out = 200, json.dumps({"results": res}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/score"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def case_url(s):
    token = "t0ken-for-the-test"
    tf = os.path.join(s.a.work, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    os.chmod(tf, 0o600)
    ep = Endpoint(token)

    def run(out):
        cmd = s.cmd(out, "multiplex")
        i = cmd.index("--reward-fn")
        cmd[i:i + 4] = ["--reward-url", ep.url, "--reward-token-file", tf]
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
        print(f"     (url: {time.time() - t:.1f} s)", flush=True)
        return p

    out = os.path.join(s.a.work, "url")
    p = run(out)
    if check(p.returncode == 0, f"--reward-url run exits 0 (rc {p.returncode})" +
             ("" if p.returncode == 0 else p.stdout[-2000:] + p.stderr[-3000:])):
        d = read(out)
        check_once(d, "reward-url")
        per_row = {r: int(np.sum(d["prompt_index"] == r)) for r in range(ROWS)}
        check(ep.seen == per_row and ep.bad_auth == 0, f"the endpoint scored each sample once, with the token "
              f"({ep.seen} vs /samples {per_row}, {ep.bad_auth} without it)")
    # --reward-error fail (the default) in multiplex: a refused row stops the run after a checkpoint.
    out = os.path.join(s.a.work, "url_fail")
    ep.refuse = {4}
    p = run(out)
    lines = [l for l in p.stderr.splitlines() if "row k=4 refused" in l]
    check(p.returncode == 1 and len(lines) == 1, f"a refused reward in multiplex: exit 1, one line naming it "
          f"(rc {p.returncode}: {lines[:2]} {p.stderr.splitlines()[-3:]})")
    at = manifest_step(out)
    check(at is not None, f"a checkpoint to resume from (step {at})")
    ep.refuse = set()
    p = run(out)
    if check(p.returncode == 0, f"resumed with the endpoint repaired: exit 0 (rc {p.returncode}) {p.stderr[-2000:]}"):
        d = read(out)
        check(len(d["resumes"]) == 1, f"one /resumes row {d['resumes'].tolist()}")
        check_once(d, "reward failure + resume")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["multiplex", "disaggregated", "kill", "admission", "url", "valfail"])
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    s = Setup(a)
    if a.case == "kill":
        case_kill(s)
    elif a.case == "admission":
        case_admission(s)
    elif a.case == "url":
        case_url(s)
    elif a.case == "valfail":
        case_valfail(s)
    else:
        case_mode(s, a.case)
    print(f"{len(failures)} failure(s)" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
