#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""`tagflow reward` end to end: real worker processes, a real HTTP server (reward_server.py).

    reward_tests.py CASE --tagflow BIN --workdir DIR

  cli_parity  (Serial.reward.cli_parity) 300 gsm8k-style samples scored through the pool (2 and
              3 workers, small batches) equal calling gsm8k_reward.py's functions directly in
              Python, as float32, extras included, in input order
  cli_input   (Serial.reward.cli_input) bad input lines and options: exit 2, one line naming
              stdin:LINE or the option, nothing on stdout
  fn_file     (Hostile.reward.fn_file) reward files that do not import, have the wrong
              signature, lack the function, are not files: exit 2, one line naming the file
  fn_policy   (Hostile.reward.fn_policy) every failure of a function (raise, NaN, inf, 1e39,
              str, no "score", exit, SIGSEGV, hang past --reward-timeout): under fail exit 1 with
              one line naming the row and the cause and nothing on stdout; under zero every
              line scored, the bad one 0 with its cause, one warning naming it
  url         (Hostile.reward.url) the URL path: parity with direct calls, 1e39 and NaN
              rejected, errors per sample, wrong result count, 503 retried (request count
              checked on the server), refusal and timeouts after bounded retries, HTTP 400
  token       (Hostile.reward.token) --reward-token-file: accepted at 0600, refused when others
              may read it, empty, or not a file; a wrong token is a 401 cause; the token never
              appears in any output
Every bad case also checks that stderr holds no traceback or crash text.
"""
import argparse
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gsm8k_reward  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from testlib import failures, soft_check as check  # noqa: E402  (records a failure and goes on)

NOISE = re.compile(r"Traceback|core dumped|terminate called|Abort|MPI_ABORT")
TAGFLOW = None
WORK = None


def f32(x):
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def reward(args, lines, timeout=120):
    text = "".join((json.dumps(l) if not isinstance(l, str) else l) + "\n" for l in lines)
    p = subprocess.run([TAGFLOW, "reward"] + args, input=text.encode(), capture_output=True, timeout=timeout,
                       env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def err_lines(err):
    return [l for l in err.split("\n") if l.strip()]


def one_line_error(rc, out, err, code, words, what):
    lines = err_lines(err)
    ok = check(rc == code, f"{what}: exit {rc}, expected {code}")
    ok &= check(out == "", f"{what}: nothing on stdout (got {out[:80]!r})")
    ok &= check(len(lines) == 1, f"{what}: one stderr line (got {len(lines)}: {lines[:3]})")
    ok &= check(not NOISE.search(err), f"{what}: no traceback/crash text on stderr")
    for w in words:
        ok &= check(w in err, f"{what}: {w!r} in {err.strip()[:300]!r}")
    return ok


def samples(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 999), rng.randint(1, 999)
        truth = str(a + b)
        kind = rng.random()
        if kind < 0.4:
            text = f"{a} plus {b} is {a + b}.\n#### {a + b}"
        elif kind < 0.6:
            text = f"#### {a + b + rng.randint(1, 5)}"
        elif kind < 0.8:
            text = f"I think the total is {a + b:,}" + " and more words" * rng.randint(0, 40)
        else:
            text = "no answer" + "\u00e9\u4e2d" * rng.randint(0, 3)
        ds = "gsm8k/dict" if i % 3 == 0 else "openai/gsm8k"
        out.append({"data_source": ds, "solution_str": text, "ground_truth": truth,
                    "extra_info": {"index": i, "max_chars": 40}})
    return out


def case_cli_parity():
    rows = samples(300, 7)
    for name, fn in (("compute_score", gsm8k_reward.compute_score), ("length_penalty", gsm8k_reward.length_penalty)):
        expect = []
        for r in rows:
            v = fn(data_source=r["data_source"], solution_str=r["solution_str"], ground_truth=r["ground_truth"],
                   extra_info=r["extra_info"])
            if isinstance(v, dict):
                expect.append((f32(v["score"]), {k: x for k, x in v.items() if k != "score"}))
            else:
                expect.append((f32(v), {}))
        for workers, batch in ((2, 8), (3, 1)):
            spec = os.path.join(HERE, "gsm8k_reward.py") + ("" if name == "compute_score" else ":" + name)
            rc, out, err = reward(["--reward-fn", spec, "--reward-workers", str(workers), "--reward-batch", str(batch)],
                                  rows)
            what = f"{name}, {workers} workers, batch {batch}"
            if not check(rc == 0, f"{what}: exit 0 ({err.strip()[:200]})"):
                continue
            got = [json.loads(l) for l in out.splitlines()]
            check([g["line"] for g in got] == list(range(1, len(rows) + 1)), f"{what}: one line per sample, in order")
            same = [(f32(g["score"]), g["extras"]) == e for g, e in zip(got, expect)]
            check(all(same) and len(got) == len(expect),
                  f"{what}: scores and extras equal direct calls ({sum(same)}/{len(expect)})")
            check(len({e[0] for e in expect}) > 1, f"{what}: the samples are not all scored the same")


def case_cli_input():
    fn = ["--reward-fn", os.path.join(HERE, "gsm8k_reward.py")]
    good = {"solution_str": "#### 1", "ground_truth": "1"}
    one_line_error(*reward(fn, [good, "{not json"]), 2, ["stdin:2: not JSON"], "a line that is not JSON")
    one_line_error(*reward(fn, [good, good, [1, 2]]), 2, ["stdin:3: not a JSON object"], "an array line")
    one_line_error(*reward(fn, [{"ground_truth": "1"}]), 2, ['stdin:1: no "solution_str"'], "no solution_str")
    one_line_error(*reward(fn, [{"solution_str": 5}]), 2, ['stdin:1: "solution_str" is not a string'],
                   "solution_str a number")
    one_line_error(*reward(fn, [{"solution_str": "x", "data_source": ["a"]}]), 2,
                   ['stdin:1: "data_source" is not a string'], "data_source a list")
    one_line_error(*reward(fn, [b"\xff\xfe".decode("latin-1")]), 2, ["stdin:1: not JSON"], "bytes that are not JSON")
    one_line_error(*reward(fn + ["--reward-error", "ignore"], [good]), 2, ["--reward-error 'ignore'"], "bad policy")
    one_line_error(*reward([], [good]), 2, ["--reward-fn", "--reward-url"], "no reward option")
    one_line_error(*reward(fn + ["--reward-url", "http://127.0.0.1:9/"], [good]), 2, ["not both"], "both options")
    one_line_error(*reward(fn + ["--reward-timeout", "-1"], [good]), 2, ["--reward-timeout"], "negative timeout")
    one_line_error(*reward(fn + ["--reward-workers", "0"], [good]), 2, ["--reward-workers 0"], "no workers")
    one_line_error(*reward(fn + ["--reward-batch", "x"], [good]), 2, ["reward-batch"], "batch not a number")
    one_line_error(*reward(["--reward-url", "ftp://127.0.0.1/"], [good]), 2, ["http:// or https://"], "ftp URL")
    rc, out, err = reward(fn, [])
    check(rc == 0 and out == "", "empty input: exit 0, no output")
    rc, out, err = reward(fn, [good, "", "  ", good])
    check(rc == 0 and len(out.splitlines()) == 2 and json.loads(out.splitlines()[1])["line"] == 4,
          "blank lines are skipped, line numbers kept")


def case_fn_file():
    def fn(spec, words, what):
        one_line_error(*reward(["--reward-fn", spec], [{"solution_str": "x"}]), 2, ["--reward-fn"] + words, what)
    fn(os.path.join(HERE, "bad_import.py"), ["bad_import.py: does not import", "tagflow_no_such_module"],
       "a file that does not import")
    fn(os.path.join(HERE, "bad_syntax.py"), ["bad_syntax.py: does not import: SyntaxError", "(line 3)"],
       "a file with a syntax error")
    fn(os.path.join(HERE, "wrong_signature.py"), ["compute_score(solution_str, ground_truth) cannot be called"],
       "the wrong signature")
    fn(os.path.join(HERE, "wrong_signature.py") + ":needs_more", ["needs_more(", "judge"],
       "a function needing a fifth argument")
    fn(os.path.join(HERE, "wrong_signature.py") + ":not_a_function", ["not a function"], "a name that is an int")
    fn(os.path.join(HERE, "gsm8k_reward.py") + ":nope", ["defines no 'nope'"], "a missing function")
    fn(os.path.join(HERE, "no_such.py"), ["no_such.py", "No such file"], "a missing file")
    fn(HERE, ["not a regular file"], "a directory")
    fn(os.path.join(HERE, "gsm8k_reward.py") + ":a-b", ["not a Python identifier"], "a bad function name")
    # A log file: the full traceback goes there, still one line on the terminal.
    log = os.path.join(WORK, "workers.log")
    if os.path.exists(log):
        os.remove(log)
    one_line_error(*reward(["--reward-fn", os.path.join(HERE, "bad_import.py"), "--reward-log", log],
                           [{"solution_str": "x"}]), 2, ["does not import"], "a file that does not import, with a log")
    check(os.path.exists(log) and "Traceback" in open(log).read(), "the traceback is in --reward-log")


def case_fn_policy():
    fn = ["--reward-fn", os.path.join(HERE, "hostile_reward.py"), "--reward-timeout", "2"]
    cases = [("raise", "compute_score raised ZeroDivisionError: division by zero (hostile_reward.py:"),
             ("nan", "compute_score returned nan"), ("inf", "compute_score returned -inf"),
             ("big", "compute_score returned 1e+39, not finite in float32"),
             ("str", "compute_score returned str '0.5', not a number"),
             ("nokey", 'compute_score returned a dict without "score"'),
             ("exit", "died (exit status 3) while scoring it"),
             ("segv", "died (killed by signal 11"), ("hang", "compute_score timed out after 2 s")]
    for what, words in cases:
        lines = [{"solution_str": "ok"}, {"solution_str": what}, {"solution_str": "fine"}]
        one_line_error(*reward(fn, lines), 1, ["row 2: ", words], f"fail policy, {what}")
    # zero: one run with every bad sample between good ones (rows 2, 4, 6, ...).
    lines = []
    for what, _ in cases:
        lines += [{"solution_str": "ok"}, {"solution_str": what}]
    lines.append({"solution_str": "fine"})
    # A longer timeout here: a good row answered late on a loaded machine must not be the one blamed.
    zero = ["--reward-fn", os.path.join(HERE, "hostile_reward.py"), "--reward-timeout", "4"]
    rc, out, err = reward(zero + ["--reward-error", "zero"], lines)
    got = [json.loads(l) for l in out.splitlines()]
    check(rc == 0 and len(got) == len(lines), f"zero policy: exit 0, every line ({rc}, {err.strip()[:200]})")
    check(not NOISE.search(err), "zero policy: no traceback on stderr")
    if len(got) == len(lines):
        bad = [(i + 1, g) for i, g in enumerate(got) if i % 2 == 0 and (g["score"] != (4 if i == len(got) - 1 else 2)
                                                                       or "error" in g)]
        check(not bad, f"zero policy: the good rows are scored, also after crashes and hangs {bad}")
        for i, (what, words) in enumerate(cases):
            words = words.replace("after 2 s", "after 4 s")
            row = 2 * i + 2
            g = got[row - 1]
            check(g["score"] == 0 and words in g.get("error", ""), f"zero policy, {what}: row {row} is 0 with its cause")
            warn = [l for l in err_lines(err) if f"row {row}:" in l]
            check(len(warn) == 1 and words in warn[0], f"zero policy, {what}: one warning line naming row {row}")


class Server:
    def __init__(self, *args):
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "reward_server.py")] + list(args),
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.startswith("PORT "), line
        self.base = f"http://127.0.0.1:{int(line.split()[1])}"

    def requests(self):
        with urllib.request.urlopen(self.base + "/requests", timeout=10) as r:
            return json.loads(r.read())

    def close(self):
        self.p.kill()
        self.p.wait()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def case_url():
    srv = Server()
    try:
        rows = samples(120, 3)
        expect = []
        for r in rows:
            v = gsm8k_reward.compute_score(**{k: r[k] for k in ("data_source", "solution_str", "ground_truth",
                                                                "extra_info")})
            expect.append((f32(v["score"]), {k: x for k, x in v.items() if k != "score"}) if isinstance(v, dict)
                          else (f32(v), {}))
        rc, out, err = reward(["--reward-url", srv.base + "/score", "--reward-batch", "7"], rows)
        got = [json.loads(l) for l in out.splitlines()]
        check(rc == 0 and [(f32(g["score"]), g["extras"]) for g in got] == expect,
              f"URL: 120 samples equal direct calls ({rc}, {err.strip()[:200]})")

        lines = [{"solution_str": "#### 1", "ground_truth": "1"}, {"solution_str": "big"}]
        one_line_error(*reward(["--reward-url", srv.base + "/big"], lines), 1,
                       ["row 2: POST " + srv.base + "/big: score 1e+39 is not finite in float32"], "URL: a 1e39 score")
        rc, out, err = reward(["--reward-url", srv.base + "/big", "--reward-error", "zero"], lines)
        got = [json.loads(l) for l in out.splitlines()]
        check(rc == 0 and len(got) == 2 and got[0]["score"] == 1 and got[1]["score"] == 0 and "1e+39" in got[1]["error"],
              "URL, zero policy: 1e39 scored 0, the other row kept")
        one_line_error(*reward(["--reward-url", srv.base + "/nan"], lines), 1,
                       ["row 1: POST", "NaN and Infinity are not JSON"], "URL: NaN in the response")
        one_line_error(*reward(["--reward-url", srv.base + "/count"], lines), 1, ["row 1: POST", "1 results for 2 requests"],
                       "URL: a result missing")
        one_line_error(*reward(["--reward-url", srv.base + "/error"], [lines[0], {"solution_str": "bad"}]), 1,
                       ["row 2: POST " + srv.base + "/error: cannot score this one"], "URL: an error for one sample")
        one_line_error(*reward(["--reward-url", srv.base + "/http400"], lines), 1, ["row 1: POST", "HTTP 400", "no such task"],
                       "URL: HTTP 400 (not retried)")
        check(srv.requests().get("/http400") == 1, "URL: HTTP 400 was not retried")

        rc, out, err = reward(["--reward-url", srv.base + "/flaky", "--reward-batch", "64"], rows[:10])
        check(rc == 0 and len(out.splitlines()) == 10, f"URL: 503 twice, then answered ({rc}, {err.strip()[:200]})")
        check(srv.requests().get("/flaky") == 3, f"URL: two retries, three POSTs ({srv.requests().get('/flaky')})")

        one_line_error(*reward(["--reward-url", srv.base + "/slow", "--reward-timeout", "0.5", "--reward-retries", "1"],
                               lines[:1]), 1, ["row 1: POST", "timed out after 0.5 s (after 2 tries)"], "URL: timeouts")
        check(srv.requests().get("/slow") == 2, "URL: a timed-out POST is retried, bounded")

        dead = f"http://127.0.0.1:{free_port()}/score"
        one_line_error(*reward(["--reward-url", dead, "--reward-retries", "2"], lines), 1,
                       ["row 1: POST " + dead, "(after 3 tries)"], "URL: connection refused")
    finally:
        srv.close()


def case_token():
    token = "s3cret-token-xyz"
    srv = Server("--token", token)
    try:
        good = os.path.join(WORK, "token")
        with open(good, "w") as f:
            f.write(token + "\n")
        os.chmod(good, 0o600)
        lines = [{"solution_str": "#### 1", "ground_truth": "1"}]
        rc, out, err = reward(["--reward-url", srv.base + "/auth", "--reward-token-file", good], lines)
        check(rc == 0 and json.loads(out)["score"] == 1, f"token 0600: accepted and sent ({err.strip()[:200]})")
        for mode in (0o644, 0o606):
            os.chmod(good, mode)
            r = reward(["--reward-url", srv.base + "/auth", "--reward-token-file", good], lines)
            one_line_error(*r, 2, ["--reward-token-file " + good, "chmod 600"], f"token mode {oct(mode)}")
            check(token not in r[1] + r[2], f"token mode {oct(mode)}: the token is not echoed")
        os.chmod(good, 0o600)
        empty = os.path.join(WORK, "token-empty")
        open(empty, "w").close()
        os.chmod(empty, 0o600)
        one_line_error(*reward(["--reward-url", srv.base + "/auth", "--reward-token-file", empty], lines), 2,
                       ["token-empty: empty"], "an empty token file")
        one_line_error(*reward(["--reward-url", srv.base + "/auth", "--reward-token-file", WORK], lines), 2,
                       ["not a regular file"], "a directory as token file")
        one_line_error(*reward(["--reward-url", srv.base + "/auth", "--reward-token-file", WORK + "/none"], lines), 2,
                       ["No such file"], "a missing token file")
        wrong = os.path.join(WORK, "token-wrong")
        with open(wrong, "w") as f:
            f.write("another-token\n")
        os.chmod(wrong, 0o600)
        r = reward(["--reward-url", srv.base + "/auth", "--reward-token-file", wrong], lines)
        one_line_error(*r, 1, ["row 1: POST", "HTTP 401"], "a wrong token")
        check("another-token" not in r[1] + r[2], "a wrong token is not echoed")
        r = reward(["--reward-fn", os.path.join(HERE, "gsm8k_reward.py"), "--reward-token-file", good], lines)
        one_line_error(*r, 2, ["only with --reward-url"], "a token file with --reward-fn")
    finally:
        srv.close()


def main():
    global TAGFLOW, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    TAGFLOW = a.tagflow
    WORK = os.path.join(a.workdir, a.case)
    os.makedirs(WORK, exist_ok=True)
    globals()["case_" + a.case]()
    if failures:
        print(f"{len(failures)} check(s) failed:\n  " + "\n  ".join(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
