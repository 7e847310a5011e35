#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# check_tree: reads a run file written by tagflow_traj_write_example with h5py through
# share/python/tagflow_run.py: the whole file passes check_invariants (which checks /tree), and
# every /samples row rebuilt from /tree alone (tagflow_run.sample_tree_tokens) equals its flat
# tokens, logprobs, versions and loss_mask. Prints the storage /tree saves. Read-only.
# Usage: /usr/bin/python3 check_tree.py RUN.h5 --python-dir share/python
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--python-dir", required=True)
    a = ap.parse_args()
    sys.path.insert(0, a.python_dir)
    import tagflow_run

    errors = []
    with tagflow_run.open_run(a.file) as f:
        errors += tagflow_run.check_invariants(f)
        tree = tagflow_run.load_tree(f)
        n = len(f["samples/id"])
        if n == 0 or len(tree["parent"]) == 0:
            errors.append(f"expected samples and /tree rows, got {n} and {len(tree['parent'])}")
        nodes = f["samples/tree_node"][()]
        for row in range(n):
            flat = tagflow_run.sample_tokens(f, row)
            rebuilt = tagflow_run.sample_tree_tokens(f, row, tree)
            for c in tagflow_run.TOKEN_COLUMNS:
                x, y = flat[c], rebuilt[c]
                same = len(x) == len(y) and (np.array_equal(x, y, equal_nan=True) if c == "logprobs"
                                             else np.array_equal(x, y))
                if not same:
                    errors.append(f"sample row {row} (tree_node {nodes[row]}): {c} from /tree "
                                  f"differs from /samples")
                    break
        # Samples ending in the same /tree row are the same trajectory or its prefix.
        st = tagflow_run.tree_storage(f)
        print(f"check_tree: {a.file}: {n} samples rebuilt from {len(tree['parent'])} /tree rows; "
              f"{st['tree_tokens']} /tree tokens for {st['sample_tokens']} sample tokens "
              f"({100 * st['saved']:.1f}% saved)")
        if st["tree_tokens"] >= st["sample_tokens"]:
            errors.append("/tree stores no less than the flat samples")
    for e in errors:
        print(f"check_tree: {a.file}: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
