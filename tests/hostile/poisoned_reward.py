#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile.poisoned_reward: rewards that are finite in float32 but poison the update.

    poisoned_reward.py --tagflow BIN --work DIR

A 2-rank `tagflow train --mode disaggregated --gateway 127.0.0.1:0 --gateway-only --algo rloo
--max-bad-steps 2` job; a client sends, per training step, two groups of two one-turn sessions
and then their rewards through /v1/rewards. Clean steps get rewards 0/1; poisoned steps get
+3e38 and -3e38, which the gateway must accept (finite in float32) but whose RLOO advantage
(r - mean of the others = 6e38) overflows float32: the update's loss and gradients are not finite.

Steps: clean, poisoned, clean, poisoned, poisoned. Checks: /v1/rewards answers 200 to the
poisoned rewards; each poisoned step prints one warning line and is counted in /steps
skipped_updates (1, 3 with the clean ones 0); the single poisoned step does not stop the run;
the second poisoned step in a row stops it (--max-bad-steps 2) with exit 1 and one error line
naming --max-bad-steps, after a checkpoint at step 5; that checkpoint's policy weights are all
finite and equal to the step-3 checkpoint's (--ckpt-every 3, copied aside when it appears),
since the skipped updates changed nothing.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
# ENV: mpirun as root, no TAGFLOW_*; check() records a failure in `failures` and goes on.
from testlib import ENV, failures, soft_check as check  # noqa: E402


def req(port, method, path, body, token):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request(method, path, body=json.dumps(body),
              headers={"Content-Type": "application/json", "Authorization": "Bearer " + token})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, raw


def safetensors(path):
    """name -> float32 array of an F32 safetensors file (the checkpoint's exact weights)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in ("F32", "BF16"):
            raise SystemExit(f"{path}: unexpected dtype {t['dtype']}")
        b, e = t["data_offsets"]
        if t["dtype"] == "F32":
            out[name] = np.frombuffer(body[b:e], dtype=np.float32)
        else:
            out[name] = (np.frombuffer(body[b:e], dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return out


def manifest_step(ckpt_dir):
    """The `step` of DIR/manifest.txt (None while there is none)."""
    try:
        for ln in open(os.path.join(ckpt_dir, "manifest.txt")):
            k, _, v = ln.strip().partition(" ")
            if k == "step":
                return int(v)
    except OSError:
        return None
    return None


def policy_weights(ckpt_dir):
    fp32 = os.path.join(ckpt_dir, "policy_fp32.safetensors")
    return safetensors(fp32 if os.path.exists(fp32) else os.path.join(ckpt_dir, "policy", "model.safetensors"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tagflow", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    out = os.path.join(a.work, "run")
    cmd = ["mpirun", "-n", "2", a.tagflow, "train", "--out", out, "--mode", "disaggregated",
           "--rank-tags", "0=rollout;1=rollout,train", "--gateway", "127.0.0.1:0", "--gateway-only",
           "--task", "reverse", "--digits", "3", "--max-new-tokens", "4", "--steps", "8", "--group-size", "2",
           "--train-threshold", "4", "--algo", "rloo", "--max-bad-steps", "2", "--ckpt-every", "3",
           "--eval-every", "0", "--eval-prompts", "2", "--gemm-check", "false", "--threads", "1", "--seed", "3"]
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True)
    reader.start()

    def wait_for(cond, seconds):
        t0 = time.time()
        while time.time() - t0 < seconds:
            if cond():
                return True
            if job.poll() is not None:
                return cond()
            time.sleep(0.05)
        return False

    try:
        url_file = os.path.join(out, "gateway.url")
        if not wait_for(lambda: os.path.exists(url_file), 120):
            check(False, "the job wrote gateway.url\n" + "".join(lines[-20:]))
            return
        port = int(open(url_file).read().strip().rsplit(":", 1)[1].split("/")[0])
        token = open(os.path.join(out, "gateway.token")).read().strip()
        plan = ["clean", "poison", "clean", "poison", "poison"]
        step3_copy = os.path.join(a.work, "checkpoint-step3")
        for step, kind in enumerate(plan, 1):
            for g in range(2):
                sessions = [f"s{step}-g{g}-{k}" for k in range(2)]
                for sess in sessions:
                    st, raw = req(port, "POST", "/v1/completions",
                                  {"model": "tagflow-policy", "prompt": [10, 1, 2, 3, 11], "max_tokens": 4,
                                   "temperature": 1.0, "session": sess}, token)
                    check(st == 200, f"step {step}: completion for {sess} -> 200 ({st} {raw[:200]!r})")
                rewards = [1.0, 0.0] if kind == "clean" else [3e38, -3e38]
                for sess, r in zip(sessions, rewards):
                    st, raw = req(port, "POST", "/v1/rewards", {"session": sess, "reward": r,
                                                               "group": f"s{step}-g{g}"}, token)
                    check(st == 200, f"step {step}: reward {r} for {sess} accepted, finite in float32 ({st} {raw[:200]!r})")
            done = wait_for(lambda: any(re.match(rf"step\s+{step}/", ln) for ln in lines), 120)
            check(done, f"step {step} ({kind}) trained")
            if step == 3:
                ck = os.path.join(out, "checkpoint")
                check(wait_for(lambda: manifest_step(ck) == 3, 60), "the step-3 checkpoint was committed")
                shutil.copytree(ck, step3_copy)
        try:
            rc = job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            rc = None
        reader.join(timeout=10)
        text = "".join(lines)
        tail = "".join(lines[-25:])
        warnings = [ln for ln in lines if "update(s) skipped" in ln]
        check(len(warnings) == 3, f"one warning line per poisoned step (3): {len(warnings)}\n{''.join(warnings)}")
        errors = [ln for ln in lines if "error:" in ln or "fatal" in ln]
        check(rc == 1, f"two poisoned steps in a row stop the job with exit 1 (exit {rc})\n{tail if rc != 1 else ''}")
        check(len(errors) == 1 and "--max-bad-steps 2" in errors[0] and "step 5" in errors[0],
              f"one error line naming step 5 and --max-bad-steps: {errors}")
        crash = re.search(r"Traceback|terminate called|Segmentation|core dumped|MPI_ABORT|fatal:", text)
        check(crash is None, f"no crash, abort or fatal error ({crash.group(0) if crash else ''})")
        import h5py
        with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
            skipped = f["steps"]["skipped_updates"][()].tolist()
            steps = f["steps"]["step"][()].tolist()
        check(steps == [0, 1, 2, 3, 4] and skipped == [0, 1, 0, 1, 1],
              f"/steps skipped_updates counts the poisoned steps: steps {steps}, skipped {skipped}")
        ck = os.path.join(out, "checkpoint")
        check(manifest_step(ck) == 5, f"the stop wrote a checkpoint at step 5 (manifest step {manifest_step(ck)})")
        w5 = policy_weights(ck)
        check(all(np.isfinite(v).all() for v in w5.values()), "the final checkpoint's weights are all finite")
        if os.path.exists(step3_copy):
            w3 = policy_weights(step3_copy)
            same = set(w3) == set(w5) and all(np.array_equal(w3[k], w5[k]) for k in w3)
            check(same, "the step-5 checkpoint holds the step-3 weights exactly (steps 4 and 5 were skipped)")
        else:
            check(False, "the step-3 checkpoint was copied aside")
    finally:
        if job.poll() is None:
            job.kill()
    print("PASS" if not failures else f"FAILED: {len(failures)} check(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
