# SPDX-License-Identifier: Apache-2.0
"""tagflow_run: read a tagflow run file (HDF5 schema v1) and check its invariants.

    import tagflow_run
    run = tagflow_run.open_run("runs/main/tagflow.h5")
    steps = tagflow_run.table(run, "steps")          # pandas DataFrame (strings decoded)
    toks = tagflow_run.sample_tokens(run, 0)         # dict of numpy arrays for sample row 0
    problems = tagflow_run.check_invariants(run)     # [] when the file is consistent

Command line: python3 tagflow_run.py RUN.h5 [--min-steps N]  -> prints a summary, exit 1 on a
violated invariant. Needs only h5py and numpy (pandas for table()).
"""
import json
import math
import sys

import h5py
import numpy as np

FORMAT_VERSION = 1
SAMPLE_COLUMNS = ["id", "group", "prompt_index", "task", "reward", "finish_reason", "rank",
                  "version_min", "version_max", "t_done"]
TOKEN_COLUMNS = ["tokens", "logprobs", "versions", "loss_mask"]
GROUPS = {
    "samples": SAMPLE_COLUMNS + ["token_offsets"] + TOKEN_COLUMNS,
    "consumed": ["id", "step", "advantage", "weight"],
    "steps": ["step", "t_start", "t_end", "policy_version", "samples", "tokens", "reward_mean",
              "reward_std", "loss", "kl", "entropy", "clip_frac", "logprob_diff_mean",
              "staleness_mean", "staleness_max", "samples_per_s", "idle_frac"],
    "eval": ["step", "task", "score", "n"],
    "syncs": ["version", "bytes", "t_start", "t_end", "mode", "dense_bytes", "buckets", "gbps"],
    "timeline": ["rank", "kind", "t_start", "t_end", "step"],
    "ranks": ["rank", "host", "tags", "tag_source", "gpus", "clock_offset"],
    "resumes": ["from_step", "t", "rows_discarded"],
}


def open_run(path):
    """Opens a run file read-only and checks it is a tagflow file of a known version."""
    f = h5py.File(path, "r")
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != "tagflow":
        f.close()
        raise ValueError(f"{path}: not a tagflow run file (format={fmt!r})")
    ver = int(f.attrs.get("format_version", -1))
    if ver != FORMAT_VERSION:
        f.close()
        raise ValueError(f"{path}: schema version {ver}, this reader knows {FORMAT_VERSION}")
    return f


def _decode(ds):
    a = ds[()]
    if a.dtype.kind == "S":
        return np.array([x.decode() for x in a], dtype=object)
    names = ds.attrs.get("enum_names")
    if names is not None:
        if isinstance(names, bytes):
            names = names.decode()
        labels = np.array(names.split(","), dtype=object)
        return labels[a.astype(np.int64)]
    return a


def table(f, group):
    """A row table (every column but the flat token arrays) as a pandas DataFrame."""
    import pandas as pd
    cols = [c for c in GROUPS[group] if c not in TOKEN_COLUMNS and c != "token_offsets"]
    return pd.DataFrame({c: _decode(f[group][c]) for c in cols})


def config(f):
    return json.loads(f.attrs["config"])


def sample_tokens(f, row):
    """tokens/logprobs/versions/loss_mask of sample row `row`."""
    s = f["samples"]
    a, b = int(s["token_offsets"][row]), int(s["token_offsets"][row + 1])
    return {c: s[c][a:b] for c in TOKEN_COLUMNS}


def check_invariants(f):
    """Returns a list of human-readable violations of schema v1 (empty when consistent)."""
    bad = []
    for a in ["format", "format_version", "config", "tagflow_version", "world_size", "t0_unix"]:
        if a not in f.attrs:
            bad.append(f"root attribute {a} missing")
    try:
        json.loads(f.attrs["config"])
    except Exception as e:  # noqa: BLE001
        bad.append(f"config attribute is not JSON: {e}")
    for g, cols in GROUPS.items():
        if g not in f:
            bad.append(f"group /{g} missing")
            continue
        for c in cols:
            if c not in f[g]:
                bad.append(f"/{g}/{c} missing")
            elif f[g][c].ndim != 1 or f[g][c].maxshape != (None,) or f[g][c].chunks is None:
                bad.append(f"/{g}/{c} is not 1-D, chunked and extendable")
        if bad:
            continue
        lengths = {len(f[g][c]) for c in cols if c not in TOKEN_COLUMNS and c != "token_offsets"}
        if len(lengths) > 1:
            bad.append(f"/{g}: columns have different lengths {sorted(lengths)}")
    if bad:
        return bad

    s = f["samples"]
    n = len(s["id"])
    off = s["token_offsets"][()]
    ntok = len(s["tokens"])
    if len(off) != n + 1:
        bad.append(f"token_offsets has {len(off)} entries for {n} samples (want n+1)")
    elif off[0] != 0 or off[-1] != ntok or np.any(np.diff(off) < 0):
        bad.append("token_offsets not monotonic from 0 to len(tokens)")
    for c in TOKEN_COLUMNS:
        if len(s[c]) != ntok:
            bad.append(f"/samples/{c} has {len(s[c])} entries, tokens has {ntok}")
    if bad:
        return bad
    ids = s["id"][()]
    if len(np.unique(ids)) != n:
        bad.append("duplicate sample ids in /samples")
    lp = s["logprobs"][()]
    mask = s["loss_mask"][()]
    ver = s["versions"][()]
    if np.any(np.isnan(lp) != (mask == 0)):
        bad.append(f"logprobs NaN not exactly where loss_mask is 0 ({int(np.sum(np.isnan(lp) != (mask == 0)))} tokens)")
    vmin, vmax = s["version_min"][()], s["version_max"][()]
    for i in range(n):
        a, b = off[i], off[i + 1]
        m, v = mask[a:b], ver[a:b]
        # Prompt tokens come first: versions -1 exactly on the prompt (mask 0 prefix).
        prompt_len = int(np.argmax(m)) if np.any(m) else b - a
        if np.any(v[:prompt_len] != -1) or np.any(v[prompt_len:] == -1):
            bad.append(f"sample row {i}: versions not -1 exactly on the prompt tokens")
            break
        if np.any(m[prompt_len:] != 1):
            bad.append(f"sample row {i}: loss_mask has a prompt token after the response began")
            break
        gen = v[prompt_len:]
        if len(gen) and (gen.min() != vmin[i] or gen.max() != vmax[i]):
            bad.append(f"sample row {i}: version_min/max disagree with per-token versions")
            break
    st = f["steps"]
    if np.any(st["t_end"][()] < st["t_start"][()]):
        bad.append("/steps has a row with t_end < t_start")
    bad += check_syncs(f["syncs"])
    tl = f["timeline"]
    if np.any(tl["t_end"][()] < tl["t_start"][()]):
        bad.append("/timeline has a span with t_end < t_start")
    cons = f["consumed"]["id"][()]
    if len(cons) and not np.all(np.isin(cons, ids)):
        bad.append("/consumed names a sample id missing from /samples")
    ranks = f["ranks"]["rank"][()]
    if sorted(ranks.tolist()) != list(range(int(f.attrs["world_size"]))):
        bad.append(f"/ranks rows {sorted(ranks.tolist())} do not cover world_size {int(f.attrs['world_size'])}")
    return bad


def check_syncs(g):
    """Violations in /syncs: t_end >= t_start, 0 <= bytes <= dense_bytes, buckets >= 0, and gbps
    == bytes / (t_end - t_start) / 1e9 within float32 rounding (0 when the duration is 0)."""
    bad = []
    b, d, k = g["bytes"][()], g["dense_bytes"][()], g["buckets"][()]
    t0, t1, gb = g["t_start"][()], g["t_end"][()], g["gbps"][()].astype(np.float64)
    if np.any(t1 < t0):
        bad.append("/syncs has a row with t_end < t_start")
    if np.any(b < 0) or np.any(b > d):
        bad.append("/syncs has a row with bytes < 0 or bytes > dense_bytes")
    if np.any(k < 0):
        bad.append("/syncs has a row with buckets < 0")
    dt = t1 - t0
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(dt > 0, b / np.where(dt > 0, dt, 1.0) / 1e9, 0.0)
    off = np.abs(gb - want) > 1e-4 * np.abs(want) + 1e-9
    if np.any(off):
        i = int(np.argmax(off))
        bad.append(f"/syncs row {i}: gbps {gb[i]:.6g} != bytes/(t_end-t_start)/1e9 = {want[i]:.6g}")
    return bad


def main(argv):
    import argparse
    p = argparse.ArgumentParser(description="Summarise and check a tagflow run file.")
    p.add_argument("run")
    p.add_argument("--min-steps", type=int, default=0, help="fail if /steps has fewer rows")
    a = p.parse_args(argv)
    with open_run(a.run) as f:
        problems = check_invariants(f)
        nsteps = len(f["steps"]["step"])
        print(f"{a.run}: {len(f['samples']['id'])} samples, {nsteps} steps, "
              f"{len(f['eval']['step'])} evals, {len(f['timeline']['rank'])} spans, "
              f"world_size {int(f.attrs['world_size'])}")
        if nsteps < a.min_steps:
            problems.append(f"/steps has {nsteps} rows, expected at least {a.min_steps}")
        for msg in problems:
            print("violation:", msg)
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
