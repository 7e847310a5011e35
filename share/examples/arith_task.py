#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""arith_task: writes a small text task -- arithmetic word problems -- as train and validation
JSON Lines in veRL's row format (share/doc/data.md), for `tagflow sft --data` and `tagflow train
--data` with the reward in arith_reward.py.

Each row:
  {"data_source": "arith/add" | "arith/sub",
   "prompt": [{"role": "user", "content": "Mia has 7 shells. She finds 5 more. How many shells ..."}],
   "reward_model": {"style": "rule", "ground_truth": "12"},
   "extra_info": {"split": "train", "index": 0, "a": 7, "b": 5, "op": "+"},
   "response": "#### 12"}            (--chain: "7 + 5 = 12\\n#### 12")

The validation rows are drawn from the same distribution with another seed and never repeat a
training question (word problems; see --short). Python 3 standard library only.

--short writes the bare sum as a plain-string prompt, "7 + 5 =", and the response "#### 12": about 6
prompt tokens instead of about 30 (the chat template and the sentence), which keeps a training step of
a model with a 150k-token vocabulary cheap (share/examples/arith_e2e.sh uses it). Its questions are
few (at --max-number 5: 25 sums and 15 differences), so validation rows repeat training questions:
validation then measures how many of the task's answers the model gets right, not generalisation to
unseen questions.

usage: arith_task.py --out DIR [--train N] [--val N] [--max-number M] [--seed S] [--chain] [--short]
writes DIR/arith_train.jsonl and DIR/arith_val.jsonl
"""
import argparse
import json
import os
import random
import sys

NAMES = ["Mia", "Sam", "Ava", "Leo", "Zoe", "Max", "Ivy", "Tom", "Eva", "Ben"]
THINGS = ["apples", "shells", "stamps", "coins", "books", "cards", "marbles", "pens"]
ADD = [
    "{n} has {a} {t}. {p} finds {b} more. How many {t} does {n} have now?",
    "{n} had {a} {t} and got {b} more. How many {t} does {n} have?",
    "There are {a} {t} in a box. {n} puts in {b} more. How many {t} are in the box?",
]
SUB = [
    "{n} has {a} {t}. {p} gives away {b}. How many {t} does {n} have left?",
    "{n} had {a} {t} and lost {b}. How many {t} does {n} have now?",
    "There are {a} {t} in a box. {n} takes out {b}. How many {t} are left in the box?",
]
PRONOUN = {"Mia": "She", "Ava": "She", "Zoe": "She", "Ivy": "She", "Eva": "She"}


def make_row(rng, max_number, chain, short=False):
    op = rng.choice("+-")
    a = rng.randint(1, max_number)
    b = rng.randint(1, max_number)
    if op == "-" and b > a:
        a, b = b, a
    n, t = rng.choice(NAMES), rng.choice(THINGS)
    text = rng.choice(ADD if op == "+" else SUB).format(n=n, p=PRONOUN.get(n, "He"), a=a, b=b, t=t)
    answer = a + b if op == "+" else a - b
    return {
        "data_source": "arith/add" if op == "+" else "arith/sub",
        "prompt": f"{a} {op} {b} =" if short else [{"role": "user", "content": text}],
        "reward_model": {"style": "rule", "ground_truth": str(answer)},
        "extra_info": {"a": a, "b": b, "op": op},
        "response": (f"{a} {op} {b} = {answer}\n" if chain else "") + f"#### {answer}",
    }


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--train", type=int, default=20000, help="training rows")
    ap.add_argument("--val", type=int, default=200, help="validation rows")
    ap.add_argument("--max-number", type=int, default=20, help="operands are 1..M")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chain", action="store_true", help='responses "a + b = c\\n#### c" instead of "#### c"')
    ap.add_argument("--short", action="store_true", help='plain-string prompts "a + b =" (validation repeats training '
                    'questions)')
    a = ap.parse_args(argv)
    if a.train < 1 or a.val < 1 or a.max_number < 1:
        ap.error("--train, --val and --max-number must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    val_rng = random.Random(a.seed + 1000003)
    val, seen = [], set()
    for _ in range(a.val):
        r = make_row(val_rng, a.max_number, a.chain, a.short)
        if not a.short:
            seen.add(r["prompt"][0]["content"])
        val.append(r)
    train = []
    tries = 0
    while len(train) < a.train:
        r = make_row(rng, a.max_number, a.chain, a.short)
        tries += 1
        if not a.short and r["prompt"][0]["content"] in seen and tries < 100 * a.train:
            continue  # never train on a validation question
        train.append(r)
    for name, rows, split in (("arith_train.jsonl", train, "train"), ("arith_val.jsonl", val, "validation")):
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            for i, r in enumerate(rows):
                r["extra_info"] = {"split": split, "index": i, **r["extra_info"]}
                f.write(json.dumps(r) + "\n")
    print(f"wrote {len(train)} train and {len(val)} validation rows to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
