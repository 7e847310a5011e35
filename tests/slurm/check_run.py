#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""check_run.py: checks a tagflow run file written under the SPANK plugin.

Checks that every rank's /ranks/tag_source is `map`, that each rank has the
expected tags (--expect "0=rollout,train,critic;1=rollout": the ranks' node
placement is known from srun's block distribution), that ranks without the
`train` tag (rollout-only pools, e.g. T4 nodes) never appear in a /timeline
span of kind `train`, and that some rank did train. Exit 0 on success, 1 with
one line per problem otherwise. Reads only; needs h5py (Debian python3-h5py).
"""
import argparse
import sys

import h5py


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_file")
    ap.add_argument("--expect", default="", help='per-rank tags, "0=rollout,train;1=rollout"')
    ap.add_argument("--source", default="map", help="expected tag_source of every rank")
    a = ap.parse_args()

    problems = []
    with h5py.File(a.run_file, "r") as f:
        world = int(f.attrs["world_size"])
        ranks = [int(r) for r in f["/ranks/rank"][:]]
        tags = {r: text(t) for r, t in zip(ranks, f["/ranks/tags"][:])}
        srcs = {r: text(s) for r, s in zip(ranks, f["/ranks/tag_source"][:])}
        names = text(f["/timeline/kind"].attrs["enum_names"]).split(",")
        if "train" not in names:
            problems.append(f"/timeline/kind enum_names has no 'train': {names}")
            train_kind = -1
        else:
            train_kind = names.index("train")
        rollout_kind = names.index("rollout") if "rollout" in names else -1
        span_rank = [int(r) for r in f["/timeline/rank"][:]]
        span_kind = [int(k) for k in f["/timeline/kind"][:]]

    if sorted(set(ranks)) != list(range(world)):  # every mode adds a row per rank at each checkpoint
        problems.append(f"/ranks/rank is {sorted(ranks)}, expected 0..{world - 1}")
    for r in sorted(srcs):
        if srcs[r] != a.source:
            problems.append(f"rank {r}: tag_source '{srcs[r]}', expected '{a.source}'")
    if a.expect:
        for item in a.expect.split(";"):
            r, want = item.split("=", 1)
            if tags.get(int(r)) != want:
                problems.append(f"rank {r}: tags '{tags.get(int(r))}', expected '{want}'")
    trained = {r for r, k in zip(span_rank, span_kind) if k == train_kind}
    # ranks that may not train: those without the train tag
    for r in sorted(tags):
        if "train" not in tags[r].split(",") and r in trained:
            problems.append(f"rank {r} (tags '{tags[r]}') appears in a train span")
    if not trained:
        problems.append("no rank has a train span")
    rolled = {r for r, k in zip(span_rank, span_kind) if k == rollout_kind}
    for r in sorted(tags):
        if tags[r] == "rollout" and r not in rolled:
            problems.append(f"rollout-only rank {r} has no rollout span")

    for p in problems:
        print(f"check_run: {a.run_file}: {p}")
    if problems:
        return 1
    only = sorted(r for r in tags if "train" not in tags[r].split(","))
    print(f"check_run: ok: {world} ranks, tag_source {a.source} everywhere, trainers {sorted(trained)}, "
          f"rollout-only ranks {only} never in a train span")
    return 0


if __name__ == "__main__":
    sys.exit(main())
