#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Serial.docs.format: every C/C++ file of the tree is formatted as .clang-format says.

Runs `clang-format --dry-run -Werror` over io/, mpi_app/, slurm_plugin/ and tests/ (.c .h .cpp .hpp;
build directories skipped) and fails naming each file that differs and its first differing line.
Fix with `clang-format -i FILE`; a table that reads better as written goes between
`// clang-format off` and `// clang-format on`.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

DIRS = ("io", "mpi_app", "slurm_plugin", "tests")
EXTS = (".c", ".h", ".cpp", ".hpp")


def sources(root):
    for d in DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames[:] = sorted(n for n in dirnames if not n.startswith(("build", ".")))
            for name in sorted(filenames):
                if name.endswith(EXTS):
                    yield os.path.join(dirpath, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--clang-format", default="clang-format")
    a = ap.parse_args()
    exe = shutil.which(a.clang_format)
    if not exe:
        print(f"FAIL: {a.clang_format} not found (Debian package clang-format; `bash share/setup.sh --tests`)")
        return 1
    files = list(sources(a.root))
    if len(files) < 100:
        print(f"FAIL: only {len(files)} C/C++ files under {a.root}: wrong --root?")
        return 1
    bad = {}
    for k in range(0, len(files), 50):
        p = subprocess.run([exe, "--dry-run", "-Werror", "--style=file"] + files[k:k + 50],
                           capture_output=True, text=True, cwd=a.root)
        for m in re.finditer(r"^(.+?):(\d+):\d+: (?:error|warning): code should be clang-formatted", p.stderr, re.M):
            bad.setdefault(os.path.relpath(m.group(1), a.root), m.group(2))
        if p.returncode != 0 and not bad:
            print(f"FAIL: clang-format failed: {p.stderr.strip()[:500]}")
            return 1
    for f, line in sorted(bad.items()):
        print(f"FAIL: {f}:{line}: not formatted as .clang-format says (clang-format -i {f})")
    print(f"{len(files)} files checked, {len(bad)} not formatted")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
