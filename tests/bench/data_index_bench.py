#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""data_index_bench.py: dataset indexing speed (MB of uncompressed JSON Lines per second) of
`tagflow data check` (mpi_app/data: one pass that finds every line, parses and checks every row
and keeps its offset; for gzip also inflates and keeps an access point per MiB) against `wc -l`
on the same file (for gzip: `gzip -dc FILE | wc -l`, the least a line count of it can cost),
measured in the same run on a generated veRL-shaped file (seeded), plain and gzip (`gzip -6`).
Prints MB/s of both (tagflow: the index pass as the command times it, start-up excluded; the whole
command's seconds are printed too), the ratio (tagflow / baseline), the index's memory against the
data size, the process's peak RSS growth during indexing, and the mean time to read one random row.
No timed assertions: exits non-zero only when the row counts disagree.
  data_index_bench.py BUILD_DIR [--mb 200] [--repeat 3] [--work DIR] [--tokenizer PATH]
With --tokenizer a third row ("+tok") indexes the plain file rendering and counting every prompt
(the chat template for message lists), as `--max-prompt-tokens` needs.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time


def generate(path, mb, seed):
    rng = random.Random(seed)
    words = ("the of and to in is was for on that with as by at from apples pears Ann Bob has had "
             "how many does each total cost dollars \u00e9t\u00e9 \u4e2d\u6587 12,000 3/4 \\frac{1}{2}").split()
    target = int(mb * 1e6)
    size = rows = 0
    with open(path, "w", encoding="utf-8") as f:
        while size < target:
            q = " ".join(rng.choice(words) for _ in range(rng.randint(20, 300)))
            row = {"data_source": rng.choice(["openai/gsm8k", "lighteval/MATH", "mine"]),
                   "prompt": [{"role": "system", "content": "Answer with \\boxed{}."}, {"role": "user", "content": q}]
                   if rows % 2 else q,
                   "ability": "math",
                   "reward_model": {"ground_truth": str(rows), "style": "rule"},
                   "extra_info": {"index": rows, "split": "train", "answer": f"#### {rows}"}}
            line = json.dumps(row, ensure_ascii=rows % 3 == 0) + "\n"
            f.write(line)
            size += len(line.encode("utf-8"))
            rows += 1
    return rows


def best_time(cmd, repeat, shell=False):
    best, out = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, shell=shell, capture_output=True, check=True)
        dt = time.perf_counter() - t0
        if best is None or dt < best:
            best, out = dt, p.stdout
    return best, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--work")
    ap.add_argument("--tokenizer", help="also index the plain file with this tokenizer (prompts rendered and counted)")
    a = ap.parse_args()
    tagflow = os.path.join(a.build, "mpi_app", "tagflow")
    if not os.access(tagflow, os.X_OK):
        sys.exit(f"data_index_bench.py: {tagflow} missing (cmake --build {a.build} --target tagflow)")
    work = a.work or os.path.join(a.build, "data-index-bench")
    os.makedirs(work, exist_ok=True)
    plain = os.path.join(work, "bench.jsonl")
    gz = plain + ".gz"
    rows = generate(plain, a.mb, 11)
    subprocess.run(f"gzip -6 -c '{plain}' > '{gz}'", shell=True, check=True)
    size = os.path.getsize(plain)
    rev = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "?"
    print(f"# data_index_bench.py {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())} {rev} "
          f"{size / 1e6:.1f} MB, {rows} rows (gzip {os.path.getsize(gz) / 1e6:.1f} MB), best of {a.repeat}, "
          f"page cache warm")
    print(f"{'file':6} {'tagflow MB/s':>12} {'baseline MB/s':>13} {'ratio':>7} {'command s':>9} {'index MB':>9} "
          f"{'index/data':>10} {'RSS +MB':>8} {'row read ms':>11}  baseline")
    subprocess.run(["cat", plain, gz], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
    status = 0
    runs = [("plain", plain, ["wc", "-l", plain], []), ("gzip", gz, f"gzip -dc '{gz}' | wc -l", [])]
    if a.tokenizer:
        runs.append(("+tok", plain, ["wc", "-l", plain], ["--tokenizer", a.tokenizer]))
    for name, path, base, extra in runs:
        tb, out = best_time(base, a.repeat, shell=isinstance(base, str))
        wc_lines = int(out.split()[0])
        tt, j = None, None
        for _ in range(a.repeat):  # best index pass
            t0 = time.perf_counter()
            out = subprocess.run([tagflow, "data", "check", path, "--sample-reads", str(a.reads)] + extra,
                                 capture_output=True, check=True).stdout
            dt, jj = time.perf_counter() - t0, json.loads(out)
            if j is None or jj["index_mb_per_s"] > j["index_mb_per_s"]:
                tt, j = dt, jj
        if j["rows"] != wc_lines or j["rows"] != rows:
            print(f"data_index_bench.py: {name}: tagflow {j['rows']} rows, baseline {wc_lines} lines, written {rows}",
                  file=sys.stderr)
            status = 1
        # tagflow: the index pass (timed inside the process: `tagflow` itself takes seconds to start, MPI
        # and LibTorch); the baseline: the whole command (wc starts in a millisecond).
        t_mb, b_mb = j["index_mb_per_s"], size / 1e6 / tb
        rss = (j["peak_rss_bytes"] - j["peak_rss_before_index_bytes"]) / 1e6
        print(f"{name:6} {t_mb:12.1f} {b_mb:13.1f} {t_mb / b_mb:6.2f}x {tt:9.1f} {j['index_bytes'] / 1e6:9.2f} "
              f"{j['index_bytes'] / size:10.2%} {rss:8.1f} {j.get('row_read_ms', 0):11.3f}  "
              f"{base if isinstance(base, str) else ' '.join(base[:2])}")
    sys.exit(status)


if __name__ == "__main__":
    main()
