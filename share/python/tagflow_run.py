# SPDX-License-Identifier: Apache-2.0
"""tagflow_run: read a tagflow run file (HDF5 schema v1) and check its invariants.

    import tagflow_run
    run = tagflow_run.open_run("runs/main/tagflow.h5")
    steps = tagflow_run.table(run, "steps")          # pandas DataFrame (strings decoded)
    toks = tagflow_run.sample_tokens(run, 0)         # dict of numpy arrays for sample row 0
    prompt, response = tagflow_run.sample_text(run, 0)  # its text (str; None in older files)
    samples = tagflow_run.table(run, "samples")      # ... with prompt_text and response_text
    lens = tagflow_run.response_lengths(run)         # generated tokens of every sample row
    problems = tagflow_run.check_invariants(run)     # [] when the file is consistent
    same = tagflow_run.sample_tree_tokens(run, 0)    # sample row 0 rebuilt from /tree alone

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
                  "version_min", "version_max", "t_done", "tree_node", "text_start",
                  "response_text_start", "text_end", "extras_start", "extras_end"]
# /samples/text: the UTF-8 bytes of every sample's prompt and response text, indexed by the row
# columns text_start, response_text_start and text_end (share/doc/hdf5-schema.md, "Sample text").
TEXT = "text"
# /samples/reward_extras: the JSON object text of every sample's reward extras (the keys other than
# "score" of a dict its reward returned), indexed by extras_start and extras_end ("Reward extras").
EXTRAS = "reward_extras"
TOKEN_COLUMNS = ["tokens", "logprobs", "versions", "loss_mask"]
TREE_COLUMNS = ["parent", "depth", "token_start", "token_end", "rank", "t_start", "t_end"]
GROUPS = {
    "samples": SAMPLE_COLUMNS + ["token_offsets"] + TOKEN_COLUMNS + [TEXT, EXTRAS],
    "consumed": ["id", "step", "advantage", "weight"],
    "steps": ["step", "t_start", "t_end", "policy_version", "samples", "tokens", "reward_mean",
              "reward_std", "loss", "kl", "entropy", "clip_frac", "logprob_diff_mean",
              "staleness_mean", "staleness_max", "samples_per_s", "idle_frac", "stale_dropped",
              "stale_weighted", "skipped_updates", "is_weight_mean", "is_weight_max", "rs_rejected",
              "rs_rejected_tokens", "train_real_tokens", "train_token_slots", "lr", "train_members",
              "train_group", "regroup", "predicted_s", "predicted_current_s", "resplit_s", "resplit_bytes"],
    "eval": ["step", "task", "score", "n"],
    "syncs": ["version", "bytes", "t_start", "t_end", "mode", "dense_bytes", "buckets", "gbps"],
    "timeline": ["rank", "kind", "t_start", "t_end", "step"],
    "ranks": ["rank", "host", "tags", "tag_source", "gpus", "clock_offset", "clock_error"],
    "resumes": ["from_step", "t", "rows_discarded"],
    "tree": TREE_COLUMNS + TOKEN_COLUMNS,
}
# Columns added to schema v1 later: a file written before lacks them (the writer adds them, -1 in the
# older rows, "" for a string and 0 for an enum, when it resumes such a run); table() shows them as all -1
# (or MISSING's value).
ADDED_LATER = {("steps", "stale_dropped"), ("steps", "stale_weighted"), ("steps", "skipped_updates"),
               ("steps", "is_weight_mean"), ("steps", "is_weight_max"), ("steps", "rs_rejected"),
               ("steps", "rs_rejected_tokens"), ("steps", "train_real_tokens"), ("steps", "train_token_slots"), ("steps", "lr"),
               ("steps", "train_members"), ("steps", "train_group"), ("steps", "regroup"), ("steps", "predicted_s"),
               ("steps", "predicted_current_s"), ("steps", "resplit_s"), ("steps", "resplit_bytes"),
               ("samples", "text_start"), ("samples", "response_text_start"), ("samples", "text_end"),
               ("samples", TEXT), ("ranks", "clock_error"), ("samples", "extras_start"),
               ("samples", "extras_end"), ("samples", EXTRAS)}
# What table() shows for an added-later column a file lacks when it is not a number (-1).
MISSING = {("steps", "train_group"): "", ("steps", "regroup"): "none"}
FLAT = set(TOKEN_COLUMNS) | {"token_offsets", TEXT, EXTRAS}  # not row columns


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
    """A row table (every column but the flat token and text arrays) as a pandas DataFrame; for
    "samples" also prompt_text and response_text (str, None where not recorded) and reward_extras
    (dict; {} when the reward returned a number, None where not recorded)."""
    import pandas as pd
    cols = [c for c in GROUPS[group] if c not in FLAT]
    n = len(f[group][cols[0]])
    df = pd.DataFrame({c: _decode(f[group][c]) if c in f[group] else
                       np.full(n, MISSING[(group, c)], dtype=object) if (group, c) in MISSING else
                       np.full(n, -1, dtype=np.int64) for c in cols})
    if group == "samples":
        df["prompt_text"], df["response_text"] = sample_texts(f)
        df["reward_extras"] = sample_extras(f)
    return df


def config(f):
    return json.loads(f.attrs["config"])


def sample_tokens(f, row):
    """tokens/logprobs/versions/loss_mask of sample row `row`."""
    s = f["samples"]
    a, b = int(s["token_offsets"][row]), int(s["token_offsets"][row + 1])
    return {c: s[c][a:b] for c in TOKEN_COLUMNS}


def _text_offsets(s, rows=slice(None)):
    if "text_end" not in s or TEXT not in s:
        return None
    return (s["text_start"][rows], s["response_text_start"][rows], s["text_end"][rows])


def sample_text(f, row):
    """(prompt_text, response_text) of sample row `row` as str; (None, None) for a row written
    before the text columns existed. The text of the ids as the run rendered them: a built-in
    task's rendering, or the tokenizer's decode with special tokens kept (gateway samples)."""
    s = f["samples"]
    o = _text_offsets(s, slice(row, row + 1))
    if o is None or o[0][0] < 0:
        return None, None
    a, b, c = (int(x[0]) for x in o)
    raw = bytes(s[TEXT][a:c])
    return raw[:b - a].decode("utf-8", "replace"), raw[b - a:].decode("utf-8", "replace")


def sample_extras(f):
    """The reward extras of every /samples row: a dict (the keys other than "score" of the dict the
    sample's reward returned; {} when it returned a number), None for rows written before the
    extras columns existed (older files: every row). One read of /samples/reward_extras."""
    s = f["samples"]
    n = len(s["id"])
    if "extras_end" not in s or EXTRAS not in s:
        return [None] * n
    raw = s[EXTRAS][()].tobytes()
    out = []
    for a, b in zip(s["extras_start"][()].tolist(), s["extras_end"][()].tolist()):
        out.append(None if a < 0 else (json.loads(raw[a:b].decode("utf-8")) if b > a else {}))
    return out


def sample_texts(f):
    """(prompt_texts, response_texts): two lists of str (None where not recorded), one entry per
    /samples row; one read of /samples/text."""
    s = f["samples"]
    n = len(s["id"])
    o = _text_offsets(s)
    if o is None:
        return [None] * n, [None] * n
    raw = s[TEXT][()].tobytes()
    prompts, responses = [], []
    for a, b, c in zip(*(x.tolist() for x in o)):
        if a < 0:
            prompts.append(None)
            responses.append(None)
        else:
            prompts.append(raw[a:b].decode("utf-8", "replace"))
            responses.append(raw[b:c].decode("utf-8", "replace"))
    return prompts, responses


def response_lengths(f):
    """Generated tokens per sample row (the tokens with loss_mask set), as an int64 array."""
    s = f["samples"]
    off = s["token_offsets"][()]
    gen = np.concatenate([[0], np.cumsum(s["loss_mask"][()] != 0)])
    return (gen[off[1:]] - gen[off[:-1]]).astype(np.int64)


def load_tree(f):
    """The /tree group as a dict of numpy arrays (row columns and flat token arrays)."""
    return {c: f["tree"][c][()] for c in TREE_COLUMNS + TOKEN_COLUMNS}


def tree_tokens(f, node, length=None, tree=None):
    """tokens/logprobs/versions/loss_mask of the first `length` tokens of the sequence through
    /tree row `node` (default: up to the end of that row), rebuilt from /tree alone: walking up,
    each row contributes its own tokens [token_start, token_start + length - depth) and the
    walk continues in its parent with length = depth. `tree`: load_tree(f), to reuse it."""
    t = tree if tree is not None else load_tree(f)
    parent, depth, start, end = t["parent"], t["depth"], t["token_start"], t["token_end"]
    node = int(node)
    if not 0 <= node < len(parent):
        raise ValueError(f"/tree has no row {node} ({len(parent)} rows)")
    n = int(depth[node] + end[node] - start[node]) if length is None else int(length)
    pieces, left = [], n
    while node >= 0:
        own = left - int(depth[node])
        if own < 0 or own > end[node] - start[node]:
            raise ValueError(f"length {n} does not fit /tree row {node} (depth {depth[node]}, "
                             f"{end[node] - start[node]} tokens)")
        pieces.append((int(start[node]), int(start[node]) + own))
        left = int(depth[node])
        node = int(parent[node])
    if left != 0:
        raise ValueError(f"/tree path ends at depth {left}, not 0")
    pieces.reverse()
    return {c: (np.concatenate([t[c][a:b] for a, b in pieces]) if pieces else t[c][:0])
            for c in TOKEN_COLUMNS}


def sample_tree_tokens(f, row, tree=None):
    """Sample row `row` rebuilt from /tree (via /samples/tree_node and its length); equals
    sample_tokens(f, row). Raises ValueError when the sample is not in /tree (tree_node -1)."""
    s = f["samples"]
    node = int(s["tree_node"][row])
    if node < 0:
        raise ValueError(f"sample row {row} is not recorded in /tree")
    n = int(s["token_offsets"][row + 1] - s["token_offsets"][row])
    return tree_tokens(f, node, n, tree)


def tree_storage(f):
    """Tokens in /tree vs in /samples (of the samples recorded in /tree): the storage saved."""
    s = f["samples"]
    off = s["token_offsets"][()]
    inside = s["tree_node"][()] >= 0
    flat = int(np.sum(np.diff(off)[inside]))
    stored = len(f["tree"]["tokens"])
    return {"tree_tokens": stored, "sample_tokens": flat,
            "saved": 1.0 - stored / flat if flat else 0.0}


def check_tree(f):
    """Violations in /tree: parents are earlier rows, depths fit the parent, token ranges tile
    the flat arrays, and every sample with a tree_node rebuilds to its flat tokens."""
    bad = []
    t = load_tree(f)
    parent, depth, start, end = t["parent"], t["depth"], t["token_start"], t["token_end"]
    n = len(parent)
    rows = np.arange(n)
    if np.any(parent >= rows) or np.any(parent < -1):
        bad.append("/tree: a parent is not an earlier row (or < -1)")
        return bad
    if n and (start[0] != 0 or np.any(start[1:] != end[:-1]) or end[-1] != len(t["tokens"])):
        bad.append("/tree: token_start/token_end do not tile the token arrays")
        return bad
    if np.any(end <= start):
        bad.append("/tree: a row without tokens")
    has = parent >= 0
    p = parent[has]
    if np.any(depth[~has] != 0) or np.any(depth[has] < depth[p]) or \
            np.any(depth[has] > depth[p] + end[p] - start[p]):
        bad.append("/tree: a depth does not fit its parent row")
    if np.any(t["rank"][p] != t["rank"][has]):
        bad.append("/tree: a row's parent was written by another rank")
    if np.any(np.isnan(t["logprobs"]) != (t["loss_mask"] == 0)) or \
            np.any((t["versions"] >= 0) != (t["loss_mask"] == 1)):
        bad.append("/tree: logprobs NaN / versions -1 not exactly where loss_mask is 0")
    if bad:
        return bad
    s = f["samples"]
    nodes = s["tree_node"][()]
    if np.any(nodes >= n) or np.any(nodes < -1):
        bad.append("/samples/tree_node names a row missing from /tree")
        return bad
    inside = np.nonzero(nodes >= 0)[0]
    off = s["token_offsets"][()] if len(inside) else None
    flat = {c: s[c][()] for c in TOKEN_COLUMNS} if len(inside) else None
    for row in inside:
        a, b = int(off[row]), int(off[row + 1])
        try:
            got = tree_tokens(f, nodes[row], b - a, t)
        except ValueError as e:
            bad.append(f"sample row {row}: {e}")
            break
        want = {c: flat[c][a:b] for c in TOKEN_COLUMNS}
        if not all(np.array_equal(got[c], want[c], equal_nan=(c == "logprobs")) for c in TOKEN_COLUMNS):
            bad.append(f"sample row {row}: rebuilt from /tree differs from /samples")
            break
    return bad


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
        cols = [c for c in cols if c in f[g] or (g, c) not in ADDED_LATER]
        for c in cols:
            if c not in f[g]:
                bad.append(f"/{g}/{c} missing")
            elif f[g][c].ndim != 1 or f[g][c].maxshape != (None,) or f[g][c].chunks is None:
                bad.append(f"/{g}/{c} is not 1-D, chunked and extendable")
        if bad:
            continue
        lengths = {len(f[g][c]) for c in cols if c not in FLAT}
        if len(lengths) > 1:
            bad.append(f"/{g}: columns have different lengths {sorted(lengths)}")
    if bad:
        return bad

    for c in TOKEN_COLUMNS if "tree" in f else []:
        if len(f["tree"][c]) != len(f["tree"]["tokens"]):
            bad.append(f"/tree/{c} has {len(f['tree'][c])} entries, tokens has {len(f['tree']['tokens'])}")
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
    # Versions are -1 exactly on prompt/environment tokens (loss_mask 0); in multi-turn samples
    # those also follow generated tokens (tool output, the next user turn). Whole-array checks:
    # a per-row loop takes minutes on the millions of rows of a long run.
    wrong = np.nonzero((ver == -1) != (mask == 0))[0]
    if len(wrong):
        i = int(np.searchsorted(off, wrong[0], side="right")) - 1
        bad.append(f"sample row {i}: versions not -1 exactly where loss_mask is 0")
    elif n and ntok:
        gen = mask != 0
        big = np.iinfo(ver.dtype).max
        length = np.diff(off)
        rows = np.nonzero(length > 0)[0]
        starts = off[:-1][rows]
        ngen = np.add.reduceat(gen.astype(np.int64), starts)
        lo = np.minimum.reduceat(np.where(gen, ver, big), starts)
        hi = np.maximum.reduceat(np.where(gen, ver, -1), starts)
        has = ngen > 0
        off_rows = rows[has][(lo[has] != vmin[rows[has]]) | (hi[has] != vmax[rows[has]])]
        if len(off_rows):
            bad.append(f"sample row {int(off_rows[0])}: version_min/max disagree with per-token versions")
    bad += check_text(s)
    bad += check_extras(s)
    st = f["steps"]
    if np.any(st["t_end"][()] < st["t_start"][()]):
        bad.append("/steps has a row with t_end < t_start")
    bad += check_syncs(f["syncs"])
    bad += check_tree(f)
    tl = f["timeline"]
    if np.any(tl["t_end"][()] < tl["t_start"][()]):
        bad.append("/timeline has a span with t_end < t_start")
    cons = f["consumed"]["id"][()]
    if len(cons) and not np.all(np.isin(cons, ids)):
        bad.append("/consumed names a sample id missing from /samples")
    # One row per rank at start, and one more per rank at each checkpoint after step 0 (fresh clock
    # offsets): whole blocks of world_size rows that cover every rank.
    ranks = f["ranks"]["rank"][()]
    world = int(f.attrs["world_size"])
    if sorted(set(ranks.tolist())) != list(range(world)) or len(ranks) % max(world, 1) != 0:
        bad.append(f"/ranks rows {sorted(ranks.tolist())} do not cover world_size {world} in whole blocks")
    return bad


def check_extras(s):
    """Violations of the reward extras columns: rows written before them (-1 in both) come first;
    the others' extras are contiguous in row order from byte 0 of /samples/reward_extras to its end,
    and each non-empty one is a JSON object."""
    if "extras_end" not in s or EXTRAS not in s:
        return []
    a, b = s["extras_start"][()], s["extras_end"][()]
    raw = s[EXTRAS][()].tobytes()
    old = a < 0
    k = int(np.argmin(old)) if not old.all() else len(a)
    if np.any(old[k:]) or np.any(b[:k] != -1):
        return ["/samples extras offsets: -1 (not recorded) outside a prefix of rows, or only partly"]
    a, b = a[k:], b[k:]
    if len(a) == 0:
        return [] if len(raw) == 0 else [f"/samples/reward_extras holds {len(raw)} bytes no row refers to"]
    if a[0] != 0 or np.any(a[1:] != b[:-1]) or np.any(b < a) or b[-1] != len(raw):
        return ["/samples extras offsets not contiguous from 0 to len(reward_extras) with start <= end"]
    for i in np.nonzero(b > a)[0].tolist():
        try:
            if not isinstance(json.loads(raw[a[i]:b[i]].decode("utf-8")), dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError):
            return [f"sample row {k + i}: its reward extras are not a JSON object"]
    return []


def check_text(s):
    """Violations of the /samples text columns: rows written before they existed (-1 in all three)
    come first; the others' text is contiguous in row order from byte 0 of /samples/text to its end,
    text_start <= response_text_start <= text_end, and every prompt and response is valid UTF-8."""
    o = _text_offsets(s)
    if o is None:
        return []
    a, b, c = o
    raw = s[TEXT][()].tobytes()
    old = a < 0
    k = int(np.argmin(old)) if not old.all() else len(a)  # first row with text
    if np.any(old[k:]) or np.any((b[:k] != -1) | (c[:k] != -1)):
        return ["/samples text offsets: -1 (not recorded) outside a prefix of rows, or only partly"]
    a, b, c = a[k:], b[k:], c[k:]
    if len(a) == 0:
        return [] if len(raw) == 0 else [f"/samples/text holds {len(raw)} bytes no row refers to"]
    if a[0] != 0 or np.any(a[1:] != c[:-1]) or np.any(b < a) or np.any(c < b) or c[-1] != len(raw):
        return ["/samples text offsets not contiguous from 0 to len(text) with start <= response <= end"]
    for i, (x, y, z) in enumerate(zip(a.tolist(), b.tolist(), c.tolist())):
        try:
            raw[x:y].decode("utf-8")
            raw[y:z].decode("utf-8")
        except UnicodeDecodeError:
            return [f"sample row {k + i}: its text is not valid UTF-8"]
    return []


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
    try:
        f = open_run(a.run)
    except (OSError, ValueError) as e:  # not HDF5, truncated, another schema: one line, no traceback
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"tagflow_run.py: error: {msg if a.run in msg else a.run + ': ' + msg}", file=sys.stderr)
        return 1
    try:
        with f:
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
    except KeyError as e:  # a tagflow file of this version without a group or column it must have
        print(f"tagflow_run.py: error: {a.run}: incomplete run file: {str(e).strip(chr(34))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
