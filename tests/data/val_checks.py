# SPDX-License-Identifier: Apache-2.0
"""val_checks.py: the --val-data checks shared by test_train_data.py (sync) and test_train_data_async.py.

A validation file whose rows carry their own score in extra_info["v"] (a reward function returns it for
such rows), so the expected means are known whatever the model answers; and the checks of a run's /eval
rows and progress lines against those means:
  - /eval has rows at exactly the expected steps, task = the file's name;
  - at each step, one row per data_source and one overall (data_source ""), greedy (k 0) and, with K > 1,
    mean@K (k K), each the mean of its rows' scores with n = its row count;
  - every score is within [0, 1], and the overall row is the row-weighted mean of the per-source rows;
  - the progress lines show the validation (sync's format) once per expected step.
Not a test by itself: imported."""
import json

# (data_source, score of the row): 4 gsm8k rows (mean 0.75), 3 MATH rows (mean 0.4167).
VAL_ROWS = [("openai/gsm8k", 1.0), ("openai/gsm8k", 0.0), ("openai/gsm8k", 1.0), ("openai/gsm8k", 1.0),
            ("lighteval/MATH", 0.0), ("lighteval/MATH", 0.25), ("lighteval/MATH", 1.0)]

# The branch a reward function in veRL's signature takes for these rows.
VAL_BRANCH = '''    if "v" in extra_info:        # a validation row (tests/data/val_checks.py): its score is in the row
        return float(extra_info["v"])
'''


def write_val(path):
    """The validation file: chat and string prompts, ground truth 2i, extra_info {"v": score, "i": i}."""
    with open(path, "w") as f:
        for i, (ds, v) in enumerate(VAL_ROWS):
            prompt = f"Check {i}: what is {i} times two?"
            f.write(json.dumps({"prompt": prompt if i % 2 else [{"role": "user", "content": prompt}],
                                "data_source": ds, "reward_model": {"ground_truth": str(2 * i)},
                                "extra_info": {"v": v, "i": i}}) + "\n")


def expected():
    """data_source ("" = overall) -> (mean score, rows)."""
    want = {}
    for ds in sorted({d for d, _ in VAL_ROWS}) + [""]:
        vs = [v for d, v in VAL_ROWS if ds in ("", d)]
        want[ds] = (sum(vs) / len(vs), len(vs))
    return want


def progress_text(k):
    """What a progress line shows (step/validation.hpp describe()): greedy overall, per data_source in
    byte order, then mean@K."""
    want = expected()
    s = f" val {want[''][0]:.3f} (" + ", ".join(f"{ds} {want[ds][0]:.3f}" for ds in sorted(want) if ds) + ")"
    return s + (f" mean@{k} {want[''][0]:.3f}" if k > 1 else "")


def eval_rows(f):
    """(step, task, data_source, k, score, n) of every /eval row of an open run file."""
    e = f["eval"]
    return [(int(st), t.decode(), src.decode(), int(k), float(sc), int(n)) for st, t, src, k, sc, n in
            zip(e["step"][()], e["task"][()], e["data_source"][()], e["k"][()], e["score"][()], e["n"][()])]


def check_eval(check, rows, stdout, steps, k, what):
    """The checks of the file comment on /eval `rows` (eval_rows) and the run's `stdout`: validations at
    `steps` exactly, with mean@`k` when k > 1. `check(cond, msg)` is the caller's."""
    got_steps = sorted({r[0] for r in rows})
    check(got_steps == sorted(steps), f"{what}: /eval at steps {sorted(steps)}: {got_steps}")
    check(all(r[1] == "val" for r in rows),
          f"{what}: /eval task is the file's name 'val' {sorted({r[1] for r in rows})}")
    check(all(0.0 <= r[4] <= 1.0 for r in rows), f"{what}: every /eval score within [0, 1]")
    want = expected()
    ks = (0, k) if k > 1 else (0,)
    for st in got_steps:
        got = {(r[2], r[3]): (r[4], r[5]) for r in rows if r[0] == st}
        exp = {(ds, kk): want[ds] for ds in want for kk in ks}
        check(set(got) == set(exp) and all(abs(got[x][0] - exp[x][0]) < 1e-6 and got[x][1] == exp[x][1] for x in exp),
              f"{what}: step {st}: greedy{' and mean@%d' % k if k > 1 else ''} per data_source and overall are the "
              f"means of the rows' scores (got {sorted(got.items())}, want {sorted(exp.items())})")
        for kk in ks:
            per = [got[x] for x in got if x[1] == kk and x[0]]
            n = sum(c for _, c in per)
            overall = got.get(("", kk))
            check(overall is not None and n == overall[1] and
                  abs(sum(m * c for m, c in per) / max(1, n) - overall[0]) < 1e-6,
                  f"{what}: step {st} k {kk}: the overall row is the row-weighted mean of the per-source rows "
                  f"({overall} vs {per})")
    text = progress_text(k)
    lines = [l for l in stdout.splitlines() if text in l]
    check(len(lines) == len(steps), f"{what}: the progress lines show '{text}' at the {len(steps)} validations "
          f"({len(lines)} lines: {[l for l in stdout.splitlines() if ' val ' in l][:4]})")
