#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""`tagflow sim` end to end: a small run prints the table and writes JSON whose samples obey
the simulator's accounting; the same seed gives the same JSON; bad options exit 2 with one line."""
import argparse
import json
import os
import subprocess
import sys


def run(a, args):
    return subprocess.run([a.tagflow, "sim"] + args, capture_output=True, text=True, timeout=240)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    outs = []
    for k in range(2):
        j = os.path.join(a.workdir, f"sim{k}.json")
        p = run(a, ["--nodes", "4,8", "--steps", "3", "--batch-per-node", "16", "--seed", "3", "--json", j])
        if p.returncode != 0:
            sys.exit(f"tagflow sim: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        for m in ("sync", "disaggregated", "multiplex"):
            assert m in p.stdout, p.stdout
        with open(j) as f:
            outs.append(json.load(f))
    assert outs[0] == outs[1], "same seed, different JSON"
    rs = outs[0]["results"]
    assert len(rs) == 6, rs
    for r in rs:
        assert r["trained"] + r["dropped"] + r["leftover"] == r["generated"], r
        assert r["samples_per_s"] > 0 and r["steps"] == 3, r
    # The calibrated-cost path: a cost file adding a type.
    cost = os.path.join(a.workdir, "cost.json")
    with open(cost, "w") as f:
        json.dump({"hw": {"box": {"decode_batch": [1, 64], "decode_s": [0.001, 0.004], "train_s_per_token": 1e-4}}}, f)
    p = run(a, ["--nodes", "2", "--hw", "box:rollout:0.5;box:rollout,train:0.5", "--lengths", "longtail",
                "--batch", "128", "--steps", "3", "--cost", cost])
    assert p.returncode == 0 and "box:rollout,train" in p.stdout, p.stdout + p.stderr
    # Measured lengths from a file (what sim_vs_real.sh passes): the table names it.
    lens = os.path.join(a.workdir, "lengths.txt")
    with open(lens, "w") as f:
        f.write("\n".join(str(9 + 2 * (k % 7)) for k in range(98)) + "\n")
    p = run(a, ["--nodes", "2", "--hw", "box:rollout:0.5;box:rollout,train:0.5", "--lengths", "file:" + lens,
                "--batch", "64", "--steps", "2", "--cost", cost])
    assert p.returncode == 0 and f"lengths file {lens} (98 lengths, mean 15.0)" in p.stdout, p.stdout + p.stderr
    badlens = os.path.join(a.workdir, "badlengths.txt")
    with open(badlens, "w") as f:
        f.write("12\n-3\n")
    for bad in (["--lengths", "file:" + badlens], ["--lengths", "file:/nonexistent/l.txt"],
                ["--nodes", "x"], ["--hw", "zz:rollout:1"], ["--modes", "fast"], ["--cost", "/nonexistent.json"],
                ["--median", "0"]):
        p = run(a, bad)
        err = [l for l in p.stderr.splitlines() if l.strip()]
        assert p.returncode == 2, (bad, p.returncode, p.stdout, p.stderr)
        assert len(err) == 1 and bad[0] in err[0], (bad, p.stderr)
    print("ok")


if __name__ == "__main__":
    main()
