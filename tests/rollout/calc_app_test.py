#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The multi-turn `calc` task end to end under real mpirun (App.calc_agent).

    calc_app_test.py --tagflow BIN --workdir DIR [--sft-steps N] [--train-steps N]
                     [--modes sync,multiplex,disaggregated] [--model SFT_MODEL]

`tagflow sft --task calc` (1 rank, a short warm start on demonstrations whose tool output is
masked out of the loss; skipped with --model, e.g. App.calc_agent's), then `tagflow train
--task calc --model OUT/model` on 2 ranks for a few steps in each of --modes (default sync;
App.calc_agent_async runs multiplex and disaggregated, whose rollout ranks run the sessions
with continuous batching and stream them while weights change). Checks, with h5py, on every
/samples row: the prompt `^EXPR?` and every tool output `=VALUE|` / `=error|` (the tokens
after a model-written `</calc>`) have loss_mask 0, logprob NaN and version -1, and nothing
else does; every tool output is what an independent Python evaluation of the call gives; the
reward is 1 exactly when the final answer is the expression's value; sync: one version per
sample; async: model-token versions never go back along a session and every trained sample's
oldest one is within --staleness of its step; /tree passes tagflow_run.check_tree and rebuilds
every sample; the run file passes tagflow_run.check_invariants.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "share", "python"))
import tagflow_run  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_hwloc_base_binding_policy="none")
for k in list(ENV):
    if k.startswith("TAGFLOW_"):
        del ENV[k]

# The calc vocabulary (mpi_app/rollout/task_calc.hpp).
SPELL = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "+", "-", "*", "^", "?",
         "<calc>", "</calc>", "=", "error", "|", "$"]
PLUS, MINUS, TIMES, BOS, ASK, CALL, END, RES, ERR, TERM, EOS = range(10, 21)


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)
    print("ok:", msg)


def text(tokens):
    return "".join(SPELL[t] if 0 <= t < len(SPELL) else "#" for t in tokens)


def calc(tokens):
    """Independent calculator: NUMBER (OP NUMBER)*, <= 48 tokens, numbers <= 12 digits, int64."""
    s = text(tokens)
    if len(tokens) == 0 or len(tokens) > 48 or not re.fullmatch(r"[0-9]+([-+*][0-9]+)*", s):
        return None
    if any(len(n) > 12 for n in re.split(r"[-+*]", s)):
        return None
    # (no eval(): a call may write numbers with leading zeros, e.g. 07+3, which the tool accepts)
    # int64 overflow of any partial product/sum would make the C++ side answer "error"
    terms = re.split(r"(?=[-+])", s)
    acc = 0
    for term in terms:
        prod = 1
        for n in term.lstrip("+-").split("*"):
            prod *= int(n)
            if abs(prod) >= 2**63:
                return None
        acc += -prod if term.startswith("-") else prod
        if abs(acc) >= 2**63:
            return None
    return acc


def tool_output(call):
    v = calc(call)
    return [RES] + ([ERR] if v is None else [int(c) if c.isdigit() else MINUS for c in str(v)]) + [TERM]


def mpirun(np_, args, timeout):
    p = subprocess.run(["mpirun", "-n", str(np_)] + args, env=ENV, capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(p.stdout[-1500:])
    if p.returncode != 0:
        sys.stdout.write(p.stderr[-3000:])
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--sft-steps", type=int, default=60)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--modes", default="sync")
    ap.add_argument("--model", default="")
    a = ap.parse_args()
    modes = a.modes.split(",")
    root = os.path.join(a.workdir, "calc" if modes == ["sync"] else "calc_" + "_".join(modes))
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    if a.model:
        check(os.path.isfile(os.path.join(a.model, "config.json")), f"sft model {a.model} exists")
        for mode in modes:
            train_and_check(a, os.path.join(root, mode), a.model, mode)
        return 0

    sft = os.path.join(root, "sft")
    p = mpirun(1, [a.tagflow, "sft", "--task", "calc", "--out", sft, "--steps", str(a.sft_steps), "--batch", "64",
                   "--warmup", "20", "--eval-prompts", "16", "--threads", "1", "--d-model", "64", "--d-ff", "128"], 300)
    check(p.returncode == 0, "tagflow sft --task calc exits 0")
    with open(os.path.join(sft, "sft.json")) as f:
        js = json.load(f)
    print("sft:", {k: v for k, v in js.items() if k in ("accuracy_before", "accuracy_after", "reward_after")})

    for mode in modes:
        train_and_check(a, os.path.join(root, "train" if mode == "sync" else mode), os.path.join(sft, "model"), mode)
    return 0


STALENESS = 1  # tagflow train's default --staleness


def train_and_check(a, out, model, mode):
    extra = ["--mode", mode]
    if mode == "disaggregated":
        extra += ["--rank-tags", "0=train;1=rollout"]  # the mode needs a rank that only rolls out
    t0 = time.time()
    p = mpirun(2, [a.tagflow, "train", "--task", "calc", "--model", model, "--out", out,
                   "--steps", str(a.train_steps), "--prompts-per-step", "4", "--group-size", "4", "--eval-every", "0",
                   "--eval-prompts", "16", "--gemm-check", "false", "--max-batch", "16", "--threads", "1"] + extra, 300)
    check(p.returncode == 0, f"tagflow train --task calc ({mode}, 2 ranks) exits 0 ({time.time() - t0:.1f}s)")

    with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
        s = f["samples"]
        n = len(s["id"])
        if mode == "sync":
            check(n == a.train_steps * 16, f"/samples has {n} rows = steps x prompts x group")
        else:
            cons = f["consumed"]
            check(len(cons["id"]) >= a.train_steps * 16 and n >= len(cons["id"]),
                  f"{mode}: {n} sessions streamed, {len(cons['id'])} consumed over {a.train_steps} steps")
        offs = s["token_offsets"][()]
        toks, mask, vers, lps = (s[c][()] for c in ("tokens", "loss_mask", "versions", "logprobs"))
        reward = s["reward"][()]
        vmin, vmax = s["version_min"][()], s["version_max"][()]
        calls = sessions_with_tool = solved = spanning = 0
        for r in range(n):
            lo, hi = int(offs[r]), int(offs[r + 1])
            t, m, v, lp = toks[lo:hi].tolist(), mask[lo:hi], vers[lo:hi], lps[lo:hi]
            where = f"sample {r}: {text(t)}"
            ask = t.index(ASK)
            check_row = t[0] == BOS and ask >= 2
            if not check_row:
                raise Failure(f"{where}: not a calc prompt")
            want = np.zeros(len(t), dtype=np.uint8)
            want[ask + 1:] = 1
            i = ask + 1
            turn_start = i
            while i < len(t):
                if t[i - 1] == END and want[i - 1] == 1 and i > ask + 1:
                    # environment: the tool's output for the turn's last <calc>...</calc>
                    j = i
                    while j < len(t) and t[j] != TERM:
                        j += 1
                    seg = t[i:j + 1]
                    turn = t[turn_start:i]
                    k = len(turn) - 2
                    while k >= 0 and turn[k] != CALL:
                        k -= 1
                    exp = tool_output(turn[k + 1:-1]) if k >= 0 else [RES, ERR, TERM]
                    if seg != exp:
                        raise Failure(f"{where}: tool output {text(seg)} != expected {text(exp)}")
                    want[i:j + 1] = 0
                    calls += 1
                    i = j + 1
                    turn_start = i
                    continue
                i += 1
            if not np.array_equal(m, want):
                raise Failure(f"{where}: loss_mask {m.tolist()} != expected {want.tolist()}")
            if not (np.all(np.isnan(lp[m == 0])) and not np.any(np.isnan(lp[m == 1]))):
                raise Failure(f"{where}: logprobs NaN not exactly where loss_mask is 0")
            if not (np.all(v[m == 0] == -1) and np.all(v[m == 1] >= 0)):
                raise Failure(f"{where}: versions -1 not exactly where loss_mask is 0")
            if mode == "sync" and not (np.all(v[m == 1] == vmin[r]) and vmin[r] == vmax[r]):
                raise Failure(f"{where}: sync mode: one version per sample")
            gen = v[m == 1]
            if mode != "sync":
                if np.any(np.diff(gen) < 0) or gen.min() != vmin[r] or gen.max() != vmax[r]:
                    raise Failure(f"{where}: versions {gen.tolist()} go back or disagree with version_min/max")
                spanning += int(vmin[r] != vmax[r])
            sessions_with_tool += int(np.any(m[ask + 1:] == 0))
            # reward: the final answer (after the last |, before $) is the value
            resp = t[ask + 1:]
            if EOS in resp:
                resp = resp[:resp.index(EOS)]
            last = len(resp) - 1 - resp[::-1].index(TERM) if TERM in resp else -1
            answer = text(resp[last + 1:])
            ok = answer == str(calc(t[1:ask]))
            if float(reward[r]) != (1.0 if ok else 0.0):
                raise Failure(f"{where}: reward {reward[r]} but answer {answer!r} vs {calc(t[1:ask])}")
            solved += ok
        check(True, f"every sample: loss_mask/logprob NaN/version -1 exactly on prompt + tool output, "
                    f"tool outputs right, rewards right ({calls} tool calls, {sessions_with_tool}/{n} sessions "
                    f"used the tool, {solved}/{n} solved)")
        check(sessions_with_tool > 0, "after sft the policy calls the tool")
        if mode != "sync":
            print(f"{mode}: {spanning}/{n} sessions span a weight update (two versions)")
            cons = f["consumed"]
            ids = s["id"][()].tolist()
            row_of = {int(i): k for k, i in enumerate(ids)}
            trained = 0
            for cid, cstep, w in zip(cons["id"][()], cons["step"][()], cons["weight"][()]):
                if w > 0:
                    trained += 1
                    age = int(cstep) - int(vmin[row_of[int(cid)]])
                    if age > STALENESS:
                        raise Failure(f"sample {cid} trained at step {cstep} with oldest version "
                                      f"{vmin[row_of[int(cid)]]} (staleness {age} > {STALENESS})")
            check(trained > 0, f"{mode}: {trained} trained sessions, each within staleness {STALENESS} "
                               "of its oldest model token's version")
        bad = tagflow_run.check_tree(f)
        check(not bad, f"/tree is consistent and rebuilds every sample ({bad[:3]})")
        tree = tagflow_run.load_tree(f)
        for r in range(n):
            rebuilt = tagflow_run.sample_tree_tokens(f, r, tree)
            flat = tagflow_run.sample_tokens(f, r)
            for c in ("tokens", "loss_mask", "versions"):
                if not np.array_equal(rebuilt[c], flat[c]):
                    raise Failure(f"sample {r}: /tree {c} {rebuilt[c].tolist()} != /samples {flat[c].tolist()}")
            if not np.array_equal(np.isnan(rebuilt["logprobs"]), np.isnan(flat["logprobs"])):
                raise Failure(f"sample {r}: /tree logprob NaNs differ from /samples")
        check(True, "every /samples row rebuilt from /tree alone equals its flat tokens, loss_mask and versions")
        steps = f["steps"]
        check(np.all(np.isfinite(steps["loss"][()])), "finite losses with environment tokens masked")
        bad = tagflow_run.check_invariants(f)
        check(not bad, f"{mode}: run file invariants hold ({bad[:3]})")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Failure, subprocess.TimeoutExpired) as e:
        print("FAIL:", e)
        sys.exit(1)
