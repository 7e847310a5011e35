#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Serial.docs.links: every relative link in README.md and share/doc/*.md points to a file or
folder of the repository, and every #anchor into a markdown file names one of its headings
(GitHub's heading ids). Prints one line per broken link (FILE:LINE: target: problem) and exits 1
if there is any. Does not: fetch web links (http:, https:, mailto:, ...), or look inside code
blocks and `code spans`, where link-like text is not a link.

PENDING names pages that a branch links before the page lands; a missing pending page is
reported as such and not counted as broken. Keep it empty on main.
"""
import argparse
import glob
import os
import re
import sys

PENDING: set = set()

LINK = re.compile(r"\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with `code spans` blanked."""
    fence = None
    for no, line in enumerate(text.split("\n"), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)[0] * 3
            if fence is None:
                fence = mark
            elif mark == fence:
                fence = None
            continue
        if fence is None:
            yield no, re.sub(r"(`+)(.+?)\1", lambda c: " " * len(c.group(0)), line)


def slug(heading):
    """GitHub's id for a heading: lower case, punctuation dropped, spaces to hyphens."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        ids = set()
        text = open(path, encoding="utf-8").read()
        fence = None
        for line in text.split("\n"):
            m = re.match(r"^\s*(`{3,}|~{3,})", line)
            if m:
                fence = None if fence else m.group(1)[0]
                continue
            if fence:
                continue
            h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not h:
                continue
            base = slug(h.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            ids.add(base if n == 0 else f"{base}-{n}")
        cache[path] = ids
    return cache[path]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="the repository root")
    args = ap.parse_args()
    root = os.path.realpath(args.root)
    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "share/doc/*.md")))
    broken, checked, pending = [], 0, set()
    for f in files:
        rel_f = os.path.relpath(f, root)
        for no, line in prose_lines(open(f, encoding="utf-8").read()):
            targets = [m.group(2) for m in LINK.finditer(line)]
            ref = REF_DEF.match(line)
            if ref:
                targets.append(ref.group(1))
            for t in targets:
                if SCHEME.match(t):
                    continue
                checked += 1
                path, _, anchor = t.partition("#")
                dest = f if path == "" else os.path.normpath(os.path.join(os.path.dirname(f), path))
                rel_dest = os.path.relpath(dest, root)
                if rel_dest.startswith(".."):
                    broken.append(f"{rel_f}:{no}: {t}: points outside the repository")
                    continue
                if not os.path.exists(dest):
                    if rel_dest in PENDING:
                        pending.add(rel_dest)
                        continue
                    broken.append(f"{rel_f}:{no}: {t}: no such file {rel_dest}")
                    continue
                if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    broken.append(f"{rel_f}:{no}: {t}: {rel_dest} has no heading with id '{anchor}'")
    for p in sorted(pending):
        print(f"note: {p} is linked but not in this tree yet (pending from another branch)")
    for b in broken:
        print(b)
    print(f"{checked} links in {len(files)} files checked, {len(broken)} broken, {len(pending)} pending pages")
    if checked == 0:
        print("error: no links found: wrong --root?")
        return 1
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
