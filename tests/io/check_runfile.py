#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# check_runfile: validates a tagflow run file (HDF5 schema v1, share/doc/hdf5-schema.md) with
# h5py: groups, dtypes and S-lengths, chunked unlimited 1-D datasets, root attributes,
# enum_names/units, equal column lengths and the data invariants. Read-only; changes nothing.
# Usage: /usr/bin/python3 check_runfile.py RUN.h5 [--world-size N] [--samples N] [--steps N]
import argparse
import json
import sys

import h5py
import numpy as np

ROW = {  # group -> {dataset: numpy dtype string}; every group's datasets have equal length
    "samples": {"id": "<i8", "group": "<i8", "prompt_index": "<i8", "task": "|S32",
                "reward": "<f4", "finish_reason": "|u1", "rank": "<i4", "version_min": "<i4",
                "version_max": "<i4", "t_done": "<f8", "text_start": "<i8", "response_text_start": "<i8",
                "text_end": "<i8"},
    "consumed": {"id": "<i8", "step": "<i4", "advantage": "<f4", "weight": "<f4"},
    "steps": {"step": "<i4", "t_start": "<f8", "t_end": "<f8", "policy_version": "<i4",
              "samples": "<i8", "tokens": "<i8", "reward_mean": "<f4", "reward_std": "<f4",
              "loss": "<f4", "kl": "<f4", "entropy": "<f4", "clip_frac": "<f4",
              "logprob_diff_mean": "<f4", "staleness_mean": "<f4", "staleness_max": "<i4",
              "samples_per_s": "<f4", "idle_frac": "<f4"},
    "eval": {"step": "<i4", "task": "|S32", "score": "<f4", "n": "<i4"},
    "syncs": {"version": "<i4", "bytes": "<i8", "t_start": "<f8", "t_end": "<f8", "mode": "|S16",
              "dense_bytes": "<i8", "buckets": "<i4", "gbps": "<f4"},
    "timeline": {"rank": "<i4", "kind": "|u1", "t_start": "<f8", "t_end": "<f8", "step": "<i4"},
    "ranks": {"rank": "<i4", "host": "|S64", "tags": "|S32", "tag_source": "|S16", "gpus": "<i4",
              "clock_offset": "<f8"},
    "resumes": {"from_step": "<i4", "t": "<f8", "rows_discarded": "<i8"},
}
TOKENS = {"tokens": "<i4", "logprobs": "<f4", "versions": "<i4", "loss_mask": "|u1"}
ENUMS = {"samples/finish_reason": "stop,length,abort",
         "timeline/kind": "rollout,train,weight_sync,resplit,idle,io,checkpoint"}
T0_UNITS = "s since t0_unix"
UNITS = {"syncs/bytes": "B", "syncs/dense_bytes": "B", "syncs/gbps": "GB/s"}

errors = []


def fail(msg):
    errors.append(msg)


def text(v):
    return v.decode() if isinstance(v, (bytes, np.bytes_)) else str(v)


def check_dataset(f, path, dtype):
    if path not in f:
        fail(f"missing dataset /{path}")
        return None
    d = f[path]
    if np.dtype(d.dtype).str != dtype:
        fail(f"/{path}: dtype {np.dtype(d.dtype).str}, want {dtype}")
    if d.ndim != 1 or d.maxshape != (None,) or d.chunks is None:
        fail(f"/{path}: want 1-D chunked unlimited, got shape {d.shape} max {d.maxshape} "
             f"chunks {d.chunks}")
    name = path.split("/")[-1]
    if (name.startswith("t_") or path == "resumes/t") and text(d.attrs.get("units", "")) != T0_UNITS:
        fail(f"/{path}: attribute units should be '{T0_UNITS}'")
    if path in UNITS and text(d.attrs.get("units", "")) != UNITS[path]:
        fail(f"/{path}: attribute units should be '{UNITS[path]}'")
    return d[...]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("file")
    ap.add_argument("--world-size", type=int)
    ap.add_argument("--samples", type=int)
    ap.add_argument("--steps", type=int)
    a = ap.parse_args()
    with h5py.File(a.file, "r") as f:
        at = f.attrs
        if text(at.get("format", "")) != "tagflow":
            fail("root attribute format != 'tagflow'")
        fv = at.get("format_version")
        if fv is None or np.asarray(fv).dtype.kind != "i" or int(fv) != 1:
            fail(f"format_version should be integer 1, got {fv!r}")
        try:
            json.loads(text(at.get("config", "")))
        except ValueError as e:
            fail(f"config is not JSON: {e}")
        for key in ("tagflow_version", "world_size", "t0_unix"):
            if key not in at:
                fail(f"missing root attribute {key}")
        if "t0_unix" in at and np.asarray(at["t0_unix"]).dtype != np.float64:
            fail("t0_unix should be float64")
        if a.world_size is not None and int(at.get("world_size", -1)) != a.world_size:
            fail(f"world_size {at.get('world_size')} != {a.world_size}")

        cols = {}
        for group, ds in ROW.items():
            if group not in f:
                fail(f"missing group /{group}")
                continue
            for name, dtype in ds.items():
                cols[f"{group}/{name}"] = check_dataset(f, f"{group}/{name}", dtype)
            lens = {len(cols[f"{group}/{n}"]) for n in ds if cols[f"{group}/{n}"] is not None}
            if len(lens) > 1:
                fail(f"/{group}: columns of different lengths {sorted(lens)}")
        for name, dtype in {**TOKENS, "token_offsets": "<i8"}.items():
            cols[f"samples/{name}"] = check_dataset(f, f"samples/{name}", dtype)
        cols["samples/text"] = check_dataset(f, "samples/text", "|u1")
        for path, names in ENUMS.items():
            if path in f and text(f[path].attrs.get("enum_names", "")) != names:
                fail(f"/{path}: enum_names should be '{names}'")
                continue
            v = cols.get(path)
            if v is not None and len(v) and v.max() >= len(names.split(",")):
                fail(f"/{path}: value {v.max()} outside enum_names")

        off, tok = cols.get("samples/token_offsets"), cols.get("samples/tokens")
        n = len(cols["samples/id"]) if cols.get("samples/id") is not None else None
        if off is not None and tok is not None and n is not None:
            if len(off) != n + 1 or off[0] != 0:
                fail(f"token_offsets: {len(off)} entries starting {off[:1]}, want {n + 1} from 0")
            elif np.any(np.diff(off) < 0) or off[-1] != len(tok):
                fail(f"token_offsets not monotonic or last {off[-1]} != len(tokens) {len(tok)}")
            lens = {len(cols[f"samples/{k}"]) for k in TOKENS if cols[f"samples/{k}"] is not None}
            if len(lens) > 1:
                fail(f"/samples token arrays of different lengths {sorted(lens)}")
            lp, ver, mask = (cols.get(f"samples/{k}") for k in ("logprobs", "versions", "loss_mask"))
            if len(lens) == 1 and all(x is not None for x in (lp, ver, mask)):
                if np.any(np.isnan(lp) != (mask == 0)):
                    fail("logprobs must be NaN exactly where loss_mask == 0")
                if np.any(ver[mask != 0] < 0):
                    fail("versions must be >= 0 on generated (loss_mask 1) tokens")
                if np.any(ver < -1):
                    fail("versions below -1")
                vmin, vmax = cols["samples/version_min"], cols["samples/version_max"]
                if len(off) == n + 1:
                    for i in range(n):
                        v = ver[off[i]:off[i + 1]]
                        v = v[v >= 0]
                        if len(v) and (v.min() < vmin[i] or v.max() > vmax[i]):
                            fail(f"sample row {i}: versions outside [version_min, version_max]")
                            break
        ts, rs, te, txt = (cols.get(f"samples/{k}") for k in ("text_start", "response_text_start", "text_end", "text"))
        if all(x is not None for x in (ts, rs, te, txt)) and n:
            # Written by this version: every row has text, contiguous from byte 0, valid UTF-8.
            if ts[0] != 0 or np.any(ts[1:] != te[:-1]) or np.any(rs < ts) or np.any(te < rs) or te[-1] != len(txt):
                fail("/samples text offsets not contiguous from 0 to len(text) with start <= response <= end")
            else:
                try:
                    for i in range(n):
                        bytes(txt[ts[i]:rs[i]]).decode("utf-8")
                        bytes(txt[rs[i]:te[i]]).decode("utf-8")
                except UnicodeDecodeError as e:
                    fail(f"/samples/text row {i}: not UTF-8 ({e})")
                if bytes(txt[ts[0]:te[0]]).decode() != "Countdown 0 \u2192r0\u00e9":
                    fail(f"/samples/text row 0: {bytes(txt[ts[0]:te[0]])!r}")
        for group in ("steps", "syncs", "timeline"):
            t0, t1 = cols.get(f"{group}/t_start"), cols.get(f"{group}/t_end")
            if t0 is not None and t1 is not None and len(t0) == len(t1) and np.any(t1 < t0):
                fail(f"/{group}: t_end < t_start")
        sy = {k: cols.get(f"syncs/{k}") for k in ROW["syncs"]}
        if all(v is not None for v in sy.values()) and len({len(v) for v in sy.values()}) == 1:
            if np.any(sy["bytes"] < 0) or np.any(sy["bytes"] > sy["dense_bytes"]):
                fail("/syncs: need 0 <= bytes <= dense_bytes")
            if np.any(sy["buckets"] < 0):
                fail("/syncs: buckets < 0")
            dt = sy["t_end"] - sy["t_start"]
            want = np.where(dt > 0, sy["bytes"] / np.where(dt > 0, dt, 1.0) / 1e9, 0.0)
            if np.any(np.abs(sy["gbps"].astype(np.float64) - want) > 1e-4 * np.abs(want) + 1e-9):
                fail("/syncs: gbps != bytes / (t_end - t_start) / 1e9")
        if a.samples is not None and n != a.samples:
            fail(f"{n} samples, want {a.samples}")
        steps = cols.get("steps/step")
        if a.steps is not None and (steps is None or len(steps) != a.steps):
            fail(f"{None if steps is None else len(steps)} steps, want {a.steps}")

    for e in errors:
        print(f"check_runfile: {a.file}: {e}", file=sys.stderr)
    if not errors:
        print(f"check_runfile: {a.file}: OK (schema v1, {n} samples, {len(tok)} tokens)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
