#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_data_cli.py: `tagflow data` end to end (issue 18 points 1, 3 and 5).
  test_data_cli.py CASE --tagflow BIN --npm BUILD/npm --work DIR
CASE check: a veRL-shaped data set written by pandas (`df.to_json(lines=True, orient="records")`,
  the documented conversion), plain and gzip (Python's gzip, no .gz suffix too): rows and
  data_sources equal pandas' counts; with the Llama 3 tokenizer (string prompts, BOS added) the
  prompt token statistics and the rows skipped at --max-prompt-tokens equal those computed from
  Hugging Face `tokenizers` (hf_reference.js --add-special-tokens); --help exits 0.
CASE score: `data score` with builtin:math / gsm8k / exact and the data_source defaults.
CASE verl: seeded answer/ground-truth pairs through `data score`: builtin:gsm8k equals veRL's
  gsm8k.compute_score on every pair, and builtin:math scores 1 wherever veRL's math.compute_score
  does (verl_reference.py, transcribed from veRL); the pairs where math is more lenient are counted.
CASE hostile (Hostile.data.files): not JSON, a missing prompt, a wrong type, an empty file, a gzip
  cut short, a row over the limit when every row is, bad flags; also under mpirun -n 2: exit 2,
  one stderr line naming FILE:LINE (or the file/flag) and the problem, nothing on stdout, no
  traceback or abort banner."""
import argparse
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
# ENV: mpirun as root, no TAGFLOW_*, one tokenizer thread; check() records a failure in `failures` and goes on.
from testlib import ENV_ONE_THREAD as ENV, err_lines, failures  # noqa: E402
from testlib import soft_check as check  # noqa: E402
NOISE = re.compile(r"Traceback|MPI_ABORT|Abort|Segmentation|core dumped|terminate called|AddressSanitizer")


def run(args, stdin=b"", np_=None):
    cmd = (["mpirun", "-n", str(np_)] if np_ else []) + args
    return subprocess.run(cmd, input=stdin, capture_output=True, env=ENV, timeout=300)


def verl_frame(n, seed):
    import pandas as pd
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        q = " ".join(rng.choice(["how", "many", "apples", "does", "Ann", "have", "?", "\u00e9t\u00e9", "12,000"])
                     for _ in range(rng.randint(1, 60)))
        rows.append({"data_source": rng.choice(["openai/gsm8k", "lighteval/MATH", "mine"]),
                     "prompt": f"Question {i}: {q}",
                     "ability": "math",
                     "reward_model": {"ground_truth": str(i), "style": "rule"},
                     "extra_info": {"index": i, "split": "train", "answer": f"#### {i}"}})
    return pd.DataFrame(rows)


def case_check(a):
    llama = os.path.join(a.npm, "node_modules", "@lenml", "tokenizer-llama3", "models")
    if not os.path.isfile(os.path.join(llama, "tokenizer.json")):
        check(False, f"the Llama 3 reference tokenizer is missing under {a.npm} (bash share/setup.sh --tests)")
        return
    df = verl_frame(800, 3)
    plain = os.path.join(a.work, "train.jsonl")
    df.to_json(plain, lines=True, orient="records")  # the documented one-line conversion
    data = open(plain, "rb").read()
    with open(os.path.join(a.work, "train_gz"), "wb") as f:  # gzip without a .gz name
        f.write(gzip.compress(data))
    want_sources = df["data_source"].value_counts().to_dict()
    for path in (plain, os.path.join(a.work, "train_gz")):
        p = run([a.tagflow, "data", "check", path])
        check(p.returncode == 0, f"check {os.path.basename(path)} exits 0 ({p.stderr.decode(errors='replace')[-200:]})")
        if p.returncode:
            continue
        j = json.loads(p.stdout)
        check(j["rows"] == len(df) and j["skipped_over_limit"] == 0, f"{j['rows']} rows = pandas' {len(df)}")
        check(j["data_sources"] == want_sources, f"data_sources {j['data_sources']} = pandas' counts")
        check(j["gzip"] == path.endswith("_gz"), "gzip found by its magic bytes")
        check(j["uncompressed_bytes"] == len(data), "uncompressed size")
        check(j["default_scorers"] == {"openai/gsm8k": "gsm8k", "lighteval/MATH": "math", "mine": None},
              f"default scorers {j['default_scorers']}")
    # token counts against Hugging Face tokenizers (string prompts: encoded with special tokens)
    prompts = "".join(json.dumps(x) + "\n" for x in df["prompt"]).encode()
    ref = subprocess.run(["node", os.path.join(HERE, "..", "text", "hf_reference.js"), a.npm,
                          os.path.join(llama, "tokenizer.json"), "--add-special-tokens"],
                         input=prompts, capture_output=True, env=ENV)
    check(ref.returncode == 0, f"Hugging Face reference ran ({ref.stderr.decode(errors='replace')[-200:]})")
    counts = sorted(len(json.loads(l)["ids"]) for l in ref.stdout.decode().splitlines() if l)
    limit = counts[len(counts) // 2]
    p = run([a.tagflow, "data", "check", plain, "--tokenizer", llama, "--max-prompt-tokens", str(limit)])
    check(p.returncode == 0, f"check --tokenizer llama3 --max-prompt-tokens {limit}")
    if p.returncode == 0:
        j = json.loads(p.stdout)
        kept = [c for c in counts if c <= limit]
        check(j["skipped_over_limit"] == len(counts) - len(kept), f"skipped {j['skipped_over_limit']} = HF's "
              f"{len(counts) - len(kept)} prompts over {limit} tokens")
        pt = j["prompt_tokens"]
        check(pt["min"] == kept[0] and pt["max"] == kept[-1], f"token min/max {pt['min']}/{pt['max']} = HF's "
              f"{kept[0]}/{kept[-1]}")
        check(abs(pt["mean"] - sum(kept) / len(kept)) < 0.051, f"token mean {pt['mean']} = HF's {sum(kept) / len(kept):.2f}")
    p = run([a.tagflow, "data", "check", "--help"])
    check(p.returncode == 0 and b"--max-prompt-tokens" in p.stdout, "data check --help")
    p = run([a.tagflow, "data", "--help"])
    check(p.returncode == 0 and b"data score" in p.stdout, "data --help")


def case_score(a):
    rows = [({"solution": "so \\boxed{\\frac{1}{2}}", "ground_truth": "0.5"}, "builtin:math", 1),
            ({"solution": "#### 1,000", "ground_truth": "1000"}, "builtin:gsm8k", 1),
            ({"solution": "#### 1000.0", "ground_truth": "1000"}, "builtin:gsm8k", 0),
            ({"solution": " Paris ", "ground_truth": "Paris"}, "builtin:exact", 1),
            ({"solution": "it is 12", "ground_truth": "#### 12", "data_source": "lighteval/MATH"}, None, 1),
            ({"solution": "it is 12", "ground_truth": "12", "data_source": "openai/gsm8k"}, None, 0)]
    for row, spec, want in rows:
        p = run([a.tagflow, "data", "score"] + (["--reward", spec] if spec else []), (json.dumps(row) + "\n").encode())
        check(p.returncode == 0 and p.stdout.decode().strip() == str(want), f"score {row} with {spec}: {p.stdout!r}")
    p = run([a.tagflow, "data", "score"], b'{"solution": "1", "ground_truth": "1", "data_source": "mine"}\n')
    check(p.returncode == 2 and "stdin line 1: no built-in scorer for data_source 'mine'" in p.stderr.decode(),
          "a data_source without a default scorer is refused")
    p = run([a.tagflow, "data", "score", "--reward", "builtin:nope"])
    check(p.returncode == 2 and "unknown built-in scorer 'nope'" in p.stderr.decode(), "unknown scorer")


def case_verl(a):
    sys.path.insert(0, HERE)
    import verl_reference as verl
    rng = random.Random(31)
    forms = ["1/2", "0.5", ".5", "0.50", "\\frac12", "\\frac{1}{2}", "\\dfrac{1}{2}", "\\tfrac{1}{2}", "x = 5", "5",
             "5.0", "1,000", "1000", "-3", "- 3", "\\left(1,2\\right)", "(1,2)", "(1, 2)", "90^\\circ", "90", "50\\%",
             "50%", "50", "10\\text{ cm}", "10", "\\sqrt2", "\\sqrt{2}", "a/b", "a / b", "3/4", "0.75", "\\frac{3}{4}",
             "{a}+{b}", "x^2+1", "x^2 + 1", "", "\\$18", "18", "$18", "k = 7", "7", "1/0", "\\frac{1}", "\\sqrt"]
    prefixes = ["", "The answer is ", "Step 1: 2+2=4.\nSo ", "x" * 320 + " ", "We get $", "#### 9\n"]
    wraps = ["\\boxed{%s}", "\\boxed %s$", "\\fbox{%s}", "#### %s", "%s", "\\boxed{%s} and \\boxed{%s}",
             "\\boxed{\\boxed{%s}}", "####%s", "#### %s."]
    pairs = []
    for _ in range(3000):
        w = rng.choice(wraps)
        ans = rng.choice(forms)
        body = w % ((rng.choice(forms), ans) if w.count("%s") == 2 else (ans,))
        # a third of the ground truths are the answer itself, a third it without commas (as gsm8k's
        # preprocessing writes it), a third any form
        gt = rng.choice([rng.choice(forms), ans, ans.replace(",", "")])
        pairs.append((rng.choice(prefixes) + body + rng.choice(["", ".", " ", "\n"]), gt))
    for spec, ref in (("builtin:gsm8k", verl.gsm8k_compute_score), ("builtin:math", verl.math_compute_score)):
        lines = "".join(json.dumps({"solution": sol, "ground_truth": gt}) + "\n" for sol, gt in pairs).encode()
        p = run([a.tagflow, "data", "score", "--reward", spec], lines)
        got = [float(x) for x in p.stdout.decode().split()]
        check(p.returncode == 0 and len(got) == len(pairs), f"{spec}: {len(got)} scores for {len(pairs)} pairs")
        if len(got) != len(pairs):
            continue
        want = [float(ref(sol, gt)) for sol, gt in pairs]
        if spec == "builtin:gsm8k":
            bad = [(pairs[i], got[i], want[i]) for i in range(len(pairs)) if got[i] != want[i]]
            check(not bad and sum(want) > 40, f"gsm8k = veRL's gsm8k on all {len(pairs)} pairs ({sum(want):.0f} score 1)"
                  + (f"; first difference {bad[0]}" if bad else ""))
        else:
            bad = [(pairs[i], got[i]) for i in range(len(pairs)) if want[i] == 1.0 and got[i] != 1.0]
            more = sum(1 for i in range(len(pairs)) if got[i] == 1.0 and want[i] != 1.0)
            check(not bad and sum(want) > 300, f"math scores 1 wherever veRL's math does ({sum(want):.0f} pairs); "
                  f"{more} more pairs accepted by math's extraction and numeric equivalence"
                  + (f"; first miss {bad[0]}" if bad else ""))


def expect_one_line(a, args, want, what, np_=None):
    p = run([a.tagflow] + args, np_=np_)
    lines = err_lines(p.stderr.decode(errors="replace"))
    ok = (p.returncode == 2 and len(lines) == 1 and re.search(want, lines[0]) is not None and p.stdout == b""
          and not NOISE.search(p.stderr.decode(errors="replace")))
    check(ok, f"{what}: exit {p.returncode}, stderr {lines[:3]}" + ("" if ok else f" (want /{want}/)"))


def case_hostile(a):
    w = a.work
    good = '{"prompt": "ok", "data_source": "x"}\n'
    files = {
        "notjson.jsonl": (good + '{"prompt": "x",}\n', r":2: not JSON: parse error"),
        "missing.jsonl": (good * 3 + '{"question": "x"}\n', r":4: no \"prompt\""),
        "wrongtype.jsonl": (good + '{"prompt": 12}\n', r":2: \"prompt\" must be a string or a list .* not a number"),
        "msgtype.jsonl": ('{"prompt": [{"role": "user", "content": {"a": 1}}]}\n',
                          r":1: \"prompt\"\[0\] needs a string \"content\", not an object"),
        "empty.jsonl": ("", r": empty file, no rows"),
        "binary.jsonl": ("\x00\x01\x02\xff\xfe\n", r":1: not JSON"),
    }
    for name, (text, want) in files.items():
        path = os.path.join(w, name)
        with open(path, "wb") as f:
            f.write(text.encode("latin-1"))
        expect_one_line(a, ["data", "check", path], re.escape(path) + want, f"bad file {name}")
    big = "".join(json.dumps({"prompt": "word " * 50, "data_source": "x"}) + "\n" for _ in range(20000)).encode()
    gz = gzip.compress(big)
    cut = os.path.join(w, "cut.jsonl.gz")
    with open(cut, "wb") as f:
        f.write(gz[: len(gz) // 2])
    expect_one_line(a, ["data", "check", cut], re.escape(cut) + r": gzip data ends early, cut short", "gzip cut short")
    expect_one_line(a, ["data", "check", cut], re.escape(cut) + r": gzip data ends early", "gzip cut short, mpirun -n 2",
                    np_=2)
    expect_one_line(a, ["data", "check", os.path.join(w, "notjson.jsonl")], r"notjson\.jsonl:2: not JSON",
                    "not JSON, mpirun -n 2", np_=2)
    # These commands start no MPI; under a launcher they still print once (rank 0 by its environment).
    okfile = os.path.join(w, "ok.jsonl")
    with open(okfile, "w") as f:
        f.write(good * 3)
    for args in (["data", "check", okfile], ["version"]):
        p = run([a.tagflow] + args, np_=2)
        lines = p.stdout.decode(errors="replace").splitlines()
        check(p.returncode == 0 and len(lines) == 1, f"mpirun -n 2 tagflow {args[0]}: one line on stdout ({lines[:3]})")
    # over the limit: rows are skipped; every row over it is an error naming the shortest
    over = os.path.join(w, "over.jsonl")
    with open(over, "w") as f:
        f.write(json.dumps({"prompt": "x " * 5}) + "\n" + json.dumps({"prompt": "x " * 40}) + "\n")
    llama = os.path.join(a.npm, "node_modules", "@lenml", "tokenizer-llama3", "models")
    expect_one_line(a, ["data", "check", over, "--tokenizer", llama, "--max-prompt-tokens", "3"],
                    re.escape(over) + r": every row's prompt is over --max-prompt-tokens 3 \(the shortest has \d+ tokens, "
                    r"the first is line 1\)", "every prompt over the limit")
    p = run([a.tagflow, "data", "check", over, "--tokenizer", llama, "--max-prompt-tokens", "10"])
    j = json.loads(p.stdout) if p.returncode == 0 else {}
    check(j.get("rows") == 1 and j.get("skipped_over_limit") == 1, f"one row over the limit skipped and counted: {j}")
    expect_one_line(a, ["data", "check", over, "--max-prompt-tokens", "3"], r"--max-prompt-tokens needs --tokenizer",
                    "limit without a tokenizer")
    expect_one_line(a, ["data", "check", over, "--max-prompt-tokens", "-1", "--tokenizer", llama],
                    r"--max-prompt-tokens must be positive", "negative limit")
    expect_one_line(a, ["data", "check", over, "--max-prompt-tokens", "x"], r"data check: .*max-prompt-tokens",
                    "non-numeric limit")
    expect_one_line(a, ["data", "check"], r"FILE is required", "no file")
    expect_one_line(a, ["data", "check", w], r"is a directory", "a directory")
    expect_one_line(a, ["data", "frob"], r"unknown subcommand 'frob'", "unknown subcommand")
    sft = os.path.join(w, "sft.jsonl")
    with open(sft, "w") as f:
        f.write(json.dumps({"prompt": "p", "response": "r"}) + "\n" + json.dumps({"prompt": "p"}) + "\n")
    expect_one_line(a, ["data", "check", sft, "--sft"], re.escape(sft) + r":2: sft needs", "sft row without a response")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["check", "score", "verl", "hostile"])
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    {"check": case_check, "score": case_score, "verl": case_verl, "hostile": case_hostile}[a.case](a)
    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("all ok")


if __name__ == "__main__":
    main()
