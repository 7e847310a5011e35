#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""App.generate_cli: `tagflow generate` end to end.

    generate_cli.py --tagflow BIN --model CHECKPOINT_DIR [--prompt-len N]

Greedy ids (and --logprobs) of the binary against an independent float64 greedy loop
(tests/llama/reference_forward.py's forward, full sequence each step); same seed => same
sampled ids; --help; bad usage exits 2 with one line; under mpirun -n 2 one line only.
Runs on any checkpoint the reference reads (llama, qwen2, qwen3, llama3 rope_scaling);
--prompt-len makes a longer prompt (e.g. past rope_scaling's original context).
Exits non-zero on failure.
"""
import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama"))
import reference_forward as ref  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import failures, soft_check as check  # noqa: E402  (records a failure and goes on)


def run(cmd):
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=5)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    w = ref.load_weights(a.model)

    prompt, n = [5, 17, 3, 42, 8], 12
    if a.prompt_len != len(prompt):
        prompt = [(7 * i + 5) % cfg["vocab_size"] for i in range(a.prompt_len)]
    seq, want, want_lp = list(prompt), [], []
    for _ in range(n):
        logits = ref.forward(cfg, w, torch.tensor([seq]))[0, -1]
        t = int(logits.argmax())
        want.append(t)
        want_lp.append(float(torch.log_softmax(logits, -1)[t]))
        seq.append(t)

    base = [a.tagflow, "generate", "--model", a.model, "--prompt-ids", ",".join(map(str, prompt)),
            "--max-tokens", str(n)]
    p = run(base + ["--temperature", "0", "--logprobs"])
    check(p.returncode == 0, f"greedy run exits 0 (rc {p.returncode}, stderr {p.stderr.strip()[:200]})")
    lines = p.stdout.strip().splitlines()
    check(len(lines) == 2, f"two output lines with --logprobs (got {len(lines)})")
    if len(lines) == 2:
        got = [int(x) for x in lines[0].split()]
        check(got == want, f"greedy ids {got} == float64 reference {want}")
        lps = [float(x) for x in lines[1].split()]
        diff = max(abs(x - y) for x, y in zip(lps, want_lp)) if len(lps) == len(want_lp) else 1e9
        check(diff < 1e-4, f"logprobs match the reference (max diff {diff:.2e})")

    # Stop ids: the response ends at the first one produced.
    stop = want[4]
    end = want.index(stop) + 1
    p = run(base + ["--stop-ids", f"{stop},96"])
    check(p.returncode == 0 and [int(x) for x in p.stdout.split()] == want[:end],
          f"--stop-ids {stop},96 ends after {end} tokens (got {p.stdout.strip()!r})")

    # Sampling: the same seed gives the same ids; bf16 runs.
    samp = base + ["--temperature", "1.0", "--top-p", "0.9", "--top-k", "20", "--seed", "7"]
    p1, p2 = run(samp), run(samp)
    check(p1.returncode == 0 and p1.stdout == p2.stdout and len(p1.stdout.split()) == n,
          f"same --seed, same sampled ids ({p1.stdout.strip()})")
    p = run(base + ["--bf16"])
    check(p.returncode == 0 and len(p.stdout.split()) == n, "--bf16 runs")

    # Under mpirun: one line from rank 0.
    p = run(["mpirun", "-n", "2", *base])
    check(p.returncode == 0 and p.stdout.strip().splitlines() == [" ".join(map(str, want))],
          f"mpirun -n 2 prints the ids once (got {p.stdout!r})")

    p = run([a.tagflow, "generate", "--help"])
    check(p.returncode == 0 and "usage: tagflow generate" in p.stdout and "--prompt-ids" in p.stdout,
          "--help prints the usage and exits 0")

    bad = [
        (["--prompt-ids", "1,2"], "--model"),
        (["--model", a.model, "--prompt-ids", "1,x"], "'x'"),
        (["--model", a.model, "--prompt-ids", "1,2", "--top-p", "0"], "--top-p"),
        (["--model", a.model, "--prompt-ids", "1,200"], "vocabulary"),
        (["--model", a.model, "--prompt-ids", "1,2", "--max-tokens", str(cfg["max_position_embeddings"])],
         "max_position_embeddings"),
        (["--model", a.model, "--prompt-ids", "1,2", "--frobnicate"], "frobnicate"),
        (["--model", "/nonexistent/ckpt", "--prompt-ids", "1,2"], "/nonexistent/ckpt"),
    ]
    for args, needle in bad:
        p = run([a.tagflow, "generate", *args])
        err = p.stderr.strip().splitlines()
        check(p.returncode == 2 and len(err) == 1 and needle in err[0] and p.stdout == "",
              f"{' '.join(args)} -> exit 2, one line naming {needle!r} (rc {p.returncode}: {p.stderr.strip()!r})")

    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
