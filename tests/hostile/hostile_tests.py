#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile input: the real `tagflow` binary (and share/python/tagflow_run.py) fed bad external
input, one ctest per input (Hostile.<case>). share/doc/hostile-input.md names these.

    hostile_tests.py CASE --tagflow BIN --workdir DIR

Every bad input must give: the documented exit code; exactly one non-empty stderr line that
names the problem (no Python traceback, no HDF5 error stack, no MPI_Abort banner, no abort or
signal); nothing written (no run directory) or, where a file already existed, that file
byte-identical afterwards. Cases:
  config     --config files: unknown key, bad number, duplicate key, no '=', binary garbage,
             a directory, a 1 MiB line
  cli        command-line values: non-numbers, out of range, NaN/inf, control characters,
             non-UTF-8 bytes, format specifiers, 64 KiB values, an --out that cannot be created
  tags       --rank-tags / --tags / TAGFLOW_TAGS / TAGFLOW_TAG_SOURCE: malformed lists, duplicate
             ranks, huge rank numbers, newlines, non-UTF-8, %n%s
  runfile    run files of another schema version, not tagflow, random bytes, truncated:
             `tagflow trace` and tagflow_run.py; a corrupt tagflow.h5 in an existing --out
  model      safetensors/config.json of a checkpoint: truncated data, wrong shapes (config and
             header), header lying about offsets, huge header length, unknown dtype, missing
             tensor, bad config.json; via `tagflow generate --model` (exit 1), and `tagflow train
             --model` / `tagflow sft --init` (exit 2 on every rank, no --out directory left)
  perms      run directories 0750 (new, nested; a stricter umask still applies) whatever the umask,
             so others cannot reach the files inside (which follow the umask); an existing --out
             keeps its mode
  links      links planted in a real run directory (tagflow.h5 with --overwrite, membership.json,
             gateway.token, gateway.url, checkpoint.tmp-N staging dirs; sft's sft.json) leave their
             targets byte-identical; an
             --out writable by others or owned by another user is refused (train, sft) unless
             --allow-shared-dir; a sticky 1777 --out is accepted
Does not test the gateway (tests/gateway: Gateway.http, Serial.gateway_unit.*), the SPANK plugin
(Hostile.spank_rl_tags, a C test) or checkpoints (mpi_app/ckpt's own tests).
"""
import argparse
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from testlib import ENV, Failure, err_lines, failures  # noqa: E402  (mpirun environment without TAGFLOW_*)
from testlib import soft_check as check  # noqa: E402  (records a failure and goes on: one run lists every bad input)

RUN_PY = os.path.join(HERE, "..", "..", "share", "python", "tagflow_run.py")
# Things that must never appear on stderr for bad input.
NOISE = re.compile(r"Traceback|HDF5-DIAG|#\d+: |MPI_ABORT|Abort|Segmentation|core dumped|"
                   r"terminate called|AddressSanitizer|runtime error|stack smashing")


def run(cmd, env=None, timeout=120, umask=None):
    t0 = time.time()
    pre = (lambda: os.umask(umask)) if umask is not None else None
    p = subprocess.run(cmd, env=dict(ENV, **(env or {})), capture_output=True, timeout=timeout, preexec_fn=pre)
    p.wall = time.time() - t0
    p.err = p.stderr.decode("utf-8", "replace")
    p.out = p.stdout.decode("utf-8", "replace")
    return p


def tagflow(a, args, env=None, np_=None, timeout=120, umask=None):
    cmd = ([] if np_ is None else ["mpirun", "-n", str(np_)]) + [a.tagflow] + args
    return run(cmd, env=env, timeout=timeout, umask=umask)


def show(x, n=70):
    if isinstance(x, bytes):
        x = x.decode("utf-8", "backslashreplace")
    x = x.encode("unicode_escape").decode("ascii")
    return x if len(x) <= n else x[:n] + f"...({len(x)} chars)"


def one_line(p, code, needle, what, lines_max=1):
    """Exit `code`, at most `lines_max` non-empty stderr lines (one per rank), each the same
    error naming `needle`, no tracebacks/aborts/HDF5 stacks."""
    lines = err_lines(p.err)
    if p.returncode != code or not (1 <= len(lines) <= lines_max):
        sys.stdout.write("  stderr: " + show(p.err, 2000) + "\n")
    check(p.returncode == code, f"{what}: exit {code} (got {p.returncode}, {p.wall:.1f}s)")
    check(1 <= len(lines) <= lines_max and len(set(lines)) == 1,
          f"{what}: one error line (got {len(lines)}): {show(lines[0] if lines else '', 160)}")
    first = lines[0] if lines else ""
    needles = needle if isinstance(needle, (list, tuple)) else [needle]
    check(all(n in first for n in needles), f"{what}: the line names {needles}")
    check(not NOISE.search(p.err), f"{what}: no traceback, HDF5 stack, abort or signal")
    check(len(first) <= 4200, f"{what}: the line is bounded ({len(first)} chars)")
    return first


def fresh(a, name):
    d = os.path.join(a.workdir, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def digest(path):
    with open(path, "rb") as fh:
        return fh.read()


# ---------------------------------------------------------------- config files
CONFIGS = [
    ("unknown_key", "steps = 3\nstpes = 4\n", ["stpes"]),
    ("bad_number", "steps = many\n", ["many", "steps"]),
    ("float_for_int", "steps = 2.5\n", ["2.5", "steps"]),
    ("out_of_range", "top-p = 7\n", ["--top-p"]),
    ("duplicate_key", "steps = 3\nsteps = 4\n", ["steps", "more than once"]),
    ("no_equals", "steps\n", ["steps"]),
    ("nan", "lr = nan\n", ["--lr nan"]),
    ("binary", b"\x00\xff\xfe\x01steps\x00=\x07\n\x80\x81", ["--config"]),
    ("long_line", "steps = " + "9" * (1 << 20) + "\n", ["steps"]),
]


def case_config(a):
    d = fresh(a, "config")
    out = os.path.join(d, "run")
    for name, text, needles in CONFIGS:
        cfg = os.path.join(d, name + ".ini")
        with open(cfg, "wb") as fh:
            fh.write(text.encode() if isinstance(text, str) else text)
        p = tagflow(a, ["train", "--out", out, "--config", cfg])
        one_line(p, 2, needles, f"config {name}")
        check(not os.path.exists(out), f"config {name}: no run directory")
    # a directory, an unreadable path, a FIFO would block: only regular files are read
    for name, path, needle in (("directory", d, "not a regular file"),
                               ("missing", os.path.join(d, "nope.ini"), "cannot open")):
        p = tagflow(a, ["train", "--out", out, "--config", path])
        one_line(p, 2, [path, needle], f"config {name}")
        check(not os.path.exists(out), f"config {name}: no run directory")


# ---------------------------------------------------------------- command line
def case_cli(a):
    d = fresh(a, "cli")
    out = os.path.join(d, "run")
    bad = [
        (["--steps", "-1"], "--steps"),
        (["--steps", "99999999999999999999"], "steps"),
        (["--steps", "1e3"], "steps"),
        (["--lr", "inf"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--temperature", "-1"], "--temperature"),
        (["--steps", "3\n4"], "steps"),
        (["--steps", "%n%s%s%s"], "steps"),
        (["--task", "rev\nerse"], "unknown task"),
        (["--task", "%n%s%x%p"], "unknown task"),
        (["--task", "\xff\xfe".encode("latin-1").decode("utf-8", "surrogateescape")], "unknown task"),
        (["--task", "x" * 65536], "unknown task"),
        (["--mode", "sync\r\nX-Evil: 1"], "--mode"),
        (["--out", ""], "--out"),
        (["--out", out, "stray"], "unexpected argument"),
        (["--bogus-option-\x1b[31m"], "unknown option"),
    ]
    # the gateway binds beyond loopback only when asked (--gateway-any)
    if "--gateway-any" in tagflow(a, ["train", "--help"]).out:
        bad += [(["--mode", "disaggregated", "--gateway", "0.0.0.0:8000"], "--gateway-any"),
                (["--mode", "disaggregated", "--gateway", "[::]:0"], "--gateway-any"),
                (["--mode", "disaggregated", "--gateway", "127.0.0.1:99999"], "--gateway"),
                (["--mode", "disaggregated", "--gateway", ":0", "--gateway-session-idle", "0"],
                 "--gateway-session-idle")]
    else:
        print("note: this tagflow has no --gateway option; gateway address cases not run")
    for args, needle in bad:
        full = ["train"] + (args if args[0] == "--out" else ["--out", out] + args)
        p = tagflow(a, full)
        one_line(p, 2, needle, "cli " + show(" ".join(args), 50))
        check(not os.path.exists(out), f"cli {show(' '.join(args), 50)}: no run directory")
    # an --out that cannot be created (a regular file on the way): exit 1 naming the path,
    # nothing written; before any rank starts writing
    blocker = os.path.join(d, "file")
    open(blocker, "w").write("x")
    bad_out = os.path.join(blocker, "run")
    p = tagflow(a, ["train", "--out", bad_out, "--steps", "1", "--gemm-check", "false"])
    lines = [l for l in p.err.splitlines() if l.strip() and not l.startswith("-")]
    check(p.returncode != 0 and any(blocker in l for l in lines),
          f"--out under a regular file: exit {p.returncode} naming it: {show(p.err, 200)}")
    check(digest(blocker) == b"x", "--out under a regular file: the file is untouched")
    # generate's own arguments
    for args, needle in ((["--prompt-ids", "1,x"], "--prompt-ids"), (["--prompt-ids", "-5"], "--prompt-ids"),
                         (["--prompt-ids", "1,2", "--max-tokens", "0"], "--max-tokens"),
                         (["--prompt-ids", "1"], "--model")):
        p = tagflow(a, ["generate"] + (["--model", d] if args[-1] != "1" else []) + args)
        one_line(p, 2, needle, "generate " + " ".join(args))


# ---------------------------------------------------------------- tags
def case_tags(a):
    d = fresh(a, "tags")
    out = os.path.join(d, "run")
    bad = [
        (["--rank-tags", "0=rollout;;1=train"], {}, "--rank-tags"),
        (["--rank-tags", "x=train"], {}, "not a rank number"),
        (["--rank-tags", "0=rollout,train;0=train"], {}, "listed twice"),
        (["--rank-tags", "-1=train"], {}, "--rank-tags"),
        (["--rank-tags", "99999999999999999999999=train"], {}, "--rank-tags"),
        (["--rank-tags", "0=rollout,train\n1=train"], {}, "--rank-tags"),
        (["--rank-tags", "0=%n%s%s"], {}, "unknown tag"),
        (["--rank-tags", "0"], {}, "expected RANK=TAGS"),
        (["--rank-tags", "=" * 10000], {}, "--rank-tags"),
        (["--tags", "rollout,,train"], {}, "empty tag"),
        (["--tags", " "], {}, "empty tag list"),
        (["--tags", "rollout;train"], {}, "unknown tag"),
        ([], {"TAGFLOW_TAGS": "rollout\ntrain"}, "TAGFLOW_TAGS"),
        ([], {"TAGFLOW_TAGS": "roll\xffout".encode("latin-1").decode("utf-8", "surrogateescape")}, "TAGFLOW_TAGS"),
        ([], {"TAGFLOW_TAGS": "train" * 20000}, "TAGFLOW_TAGS"),
    ]
    for args, env, needle in bad:
        what = "tags " + show(" ".join(args) + " ".join(f"{k}={v}" for k, v in env.items()), 50)
        p = tagflow(a, ["train", "--out", out] + args, env=env)
        one_line(p, 2, needle, what)
        check(not os.path.exists(out), f"{what}: no run directory")
    # TAGFLOW_TAG_SOURCE is informational (what the plugin says): a hostile value must not
    # break a run; it is stored bounded and printable. Checked on a 1-step run.
    ts = "map\n%n%s" + "y" * 300
    p = tagflow(a, ["train", "--out", out, "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
                    "--eval-prompts", "2", "--gemm-check", "false"], env={"TAGFLOW_TAG_SOURCE": ts,
                                                                          "TAGFLOW_TAGS": "rollout,train"})
    if p.returncode == 0:
        import h5py
        with h5py.File(os.path.join(out, "tagflow.h5"), "r") as f:
            src = bytes(f["ranks"]["tag_source"][0]).rstrip(b"\0")
        check(len(src) <= 64 and b"\n" not in src, f"hostile TAGFLOW_TAG_SOURCE stored bounded: {src[:40]!r}")
    else:
        one_line(p, 2, "TAGFLOW_TAG_SOURCE", "hostile TAGFLOW_TAG_SOURCE refused")


# ---------------------------------------------------------------- run files
def write_min_run(path, version=1, fmt=b"tagflow"):
    import h5py
    import numpy as np
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_(fmt)
        f.attrs["format_version"] = version
        f.attrs["world_size"] = 1
        f.attrs["t0_unix"] = 1.7e9
        g = f.create_group("timeline")
        for c, t in (("rank", np.int32), ("kind", np.uint8), ("t_start", np.float64), ("t_end", np.float64),
                     ("step", np.int32)):
            g[c] = np.zeros(1, dtype=t)
        g["kind"].attrs["enum_names"] = np.bytes_(b"rollout,train,weight_sync,resplit,idle,io,checkpoint")


def case_runfile(a):
    d = fresh(a, "runfile")
    v99 = os.path.join(d, "v99.h5")
    write_min_run(v99, version=99)
    foreign = os.path.join(d, "foreign.h5")
    write_min_run(foreign, fmt=b"other")
    rnd = os.path.join(d, "random.h5")
    with open(rnd, "wb") as fh:
        fh.write(os.urandom(64 * 1024))
    # the HDF5 signature followed by garbage: the library gets further before it fails
    sig = os.path.join(d, "signature_garbage.h5")
    with open(sig, "wb") as fh:
        fh.write(b"\x89HDF\r\n\x1a\n" + os.urandom(64 * 1024))
    good = os.path.join(d, "good.h5")
    write_min_run(good)
    trunc = os.path.join(d, "truncated.h5")
    shutil.copy(good, trunc)
    with open(trunc, "r+b") as fh:
        fh.truncate(os.path.getsize(good) // 3)
    empty = os.path.join(d, "empty.h5")
    open(empty, "wb").close()
    cases = [(v99, "format_version 99"), (foreign, "not a tagflow run file"), (rnd, "not an HDF5 file"),
             (sig, "signature_garbage.h5"), (trunc, "truncated.h5"), (empty, "empty.h5")]
    for path, needle in cases:
        name = os.path.basename(path)
        o = os.path.join(d, "out.json")
        before = digest(path)
        p = tagflow(a, ["trace", path, "-o", o])
        one_line(p, 1, needle, f"trace {name}")
        check(not os.path.exists(o) and not os.path.exists(o + ".tmp"), f"trace {name}: no output written")
        check(digest(path) == before, f"trace {name}: the input is unchanged")
    # the Python reader: one line, exit 1, no traceback
    py = [(v99, "schema version 99"), (foreign, "not a tagflow run file"), (rnd, "random.h5"),
          (sig, "signature_garbage.h5"), (trunc, "truncated.h5"), (os.path.join(d, "missing.h5"), "missing.h5"),
          (good, ["incomplete run file", "steps"])]
    for path, needle in py:
        p = run(["/usr/bin/python3", RUN_PY, path])
        one_line(p, 1, needle, f"tagflow_run.py {os.path.basename(path)}")
    # a corrupt run file in an existing --out: refused, kept byte-identical, no other file
    for src in (rnd, trunc, v99):
        out = fresh(a, "runfile_out")
        shutil.copy(src, os.path.join(out, "tagflow.h5"))
        before = digest(os.path.join(out, "tagflow.h5"))
        p = tagflow(a, ["train", "--out", out, "--steps", "1", "--gemm-check", "false"], np_=2, timeout=120)
        lines = err_lines(p.err)
        check(p.returncode in (1, 2) and lines and "tagflow.h5" in lines[0],
              f"existing corrupt {os.path.basename(src)} in --out: exit {p.returncode}, names the file: "
              f"{show(lines[0] if lines else '', 160)}")
        check(not NOISE.search(p.err) and len(lines) <= 2, f"existing {os.path.basename(src)}: no stack dump ({len(lines)} lines)")
        check(digest(os.path.join(out, "tagflow.h5")) == before, f"existing {os.path.basename(src)}: kept byte-identical")
        check(sorted(os.listdir(out)) == ["tagflow.h5"], f"existing {os.path.basename(src)}: nothing else written")


# ---------------------------------------------------------------- checkpoints (safetensors)
def read_st(path):
    with open(path, "rb") as fh:
        data = fh.read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st(path, header, body, pad=True):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + body)


def make_checkpoint(a, d):
    ck = os.path.join(d, "sft")
    p = tagflow(a, ["sft", "--task", "reverse", "--out", ck, "--steps", "1", "--batch", "4", "--eval-prompts", "4",
                    "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--threads", "1"],
                timeout=180)
    if p.returncode != 0:
        sys.stdout.write(p.out[-2000:] + p.err[-2000:])
    check(p.returncode == 0, f"a 1-step sft writes a checkpoint ({p.wall:.1f}s)")
    return os.path.join(ck, "model")


def variant(good, d, name, mutate):
    """Copies checkpoint dir `good` to d/name and applies mutate(dir)."""
    v = os.path.join(d, name)
    shutil.rmtree(v, ignore_errors=True)
    shutil.copytree(good, v)
    mutate(v)
    return v


def case_model(a):
    d = fresh(a, "model")
    good = make_checkpoint(a, d)
    st = lambda v: os.path.join(v, "model.safetensors")  # noqa: E731
    gen = ["--prompt-ids", "1,2,3", "--max-tokens", "2", "--threads", "1"]
    p = tagflow(a, ["generate", "--model", good] + gen)
    check(p.returncode == 0 and p.out.strip(), f"the good checkpoint generates: {p.out.strip()!r}")
    hdr, body = read_st(st(good))
    tensors = {k: v for k, v in hdr.items() if k != "__metadata__"}
    # a non-square 2-D tensor (transposing its shape keeps the byte count: the header is valid)
    rect = next(k for k, v in tensors.items() if len(v["shape"]) == 2 and v["shape"][0] != v["shape"][1])
    last = max(tensors, key=lambda k: tensors[k]["data_offsets"][1])

    def truncate(v):
        with open(st(v), "r+b") as fh:
            fh.truncate(os.path.getsize(st(v)) - 100)

    def transpose(v):
        h = json.loads(json.dumps(hdr))
        h[rect]["shape"] = h[rect]["shape"][::-1]
        write_st(st(v), h, body)

    def lie_offsets(v):
        h = json.loads(json.dumps(hdr))
        h[last]["data_offsets"][1] += 1 << 40
        write_st(st(v), h, body)

    def huge_header(v):
        with open(st(v), "r+b") as fh:
            fh.write(struct.pack("<Q", (1 << 63) + 5))

    def header_past_eof(v):
        with open(st(v), "r+b") as fh:
            fh.write(struct.pack("<Q", os.path.getsize(st(v))))

    def bad_dtype(v):
        h = json.loads(json.dumps(hdr))
        h[rect]["dtype"] = "I64"
        write_st(st(v), h, body)

    def drop_tensor(v):
        h = json.loads(json.dumps(hdr))
        h[last + ".renamed"] = h.pop(last)
        write_st(st(v), h, body)

    def not_json(v):
        with open(st(v), "r+b") as fh:
            fh.seek(8)
            fh.write(b"{{{{")

    def config_hidden(v):
        c = json.load(open(os.path.join(v, "config.json")))
        c["hidden_size"] = c["hidden_size"] * 2
        c["intermediate_size"] = c["intermediate_size"] * 2
        json.dump(c, open(os.path.join(v, "config.json"), "w"))

    def config_garbage(v):
        open(os.path.join(v, "config.json"), "wb").write(b"\x00\xff{not json")

    def config_negative(v):
        c = json.load(open(os.path.join(v, "config.json")))
        c["num_hidden_layers"] = -3
        json.dump(c, open(os.path.join(v, "config.json"), "w"))

    def no_weights(v):
        os.remove(st(v))

    def random_bytes(v):
        open(st(v), "wb").write(os.urandom(4096))

    # exit 1: the weights are bad (found while loading); exit 2: config.json is bad (checked
    # up front, like an option)
    bad = [("truncated", truncate, ["model.safetensors"], 1),
           ("transposed_shape", transpose, [rect, "shape"], 1),
           ("offsets_past_end", lie_offsets, ["model.safetensors"], 1),
           ("huge_header_length", huge_header, ["model.safetensors", "header"], 1),
           ("header_past_eof", header_past_eof, ["model.safetensors", "header"], 1),
           ("dtype_i64", bad_dtype, ["I64"], 1),
           ("missing_tensor", drop_tensor, [last], 1),
           ("header_not_json", not_json, ["model.safetensors"], 1),
           ("random_bytes", random_bytes, ["model.safetensors"], 1),
           ("config_hidden_size", config_hidden, ["shape"], 1),
           ("config_not_json", config_garbage, ["config.json", "not valid JSON"], 2),
           ("config_negative", config_negative, ["num_hidden_layers"], 2),
           ("no_weights", no_weights, ["model.safetensors"], 1)]
    for name, mutate, needles, code in bad:
        v = variant(good, d, name, mutate)
        p = tagflow(a, ["generate", "--model", v] + gen)
        one_line(p, code, needles, f"generate --model {name}")
        check(not p.out.strip(), f"generate --model {name}: no tokens printed")
    # the same through `tagflow train --model` under mpirun: the weights are checked (headers,
    # shapes against config.json, sizes) on every rank before anything is written, so each bad
    # checkpoint is a usage error (exit 2), one line from rank 0, and leaves no run directory
    # (an empty tagflow.h5 left there used to block the next start)
    train = ["--steps", "1", "--gemm-check", "false", "--prompts-per-step", "2", "--group-size", "2",
             "--eval-prompts", "2"]
    # (every kind of bad checkpoint is a unit test of the same check, Serial.pretrained_check;
    # here four of them end to end, one per layer: data size, shapes, names, config.json)
    for name, needles in (("truncated", ["--model", "model.safetensors", "out of range"]),
                          ("transposed_shape", [rect, "shape"]),
                          ("missing_tensor", [last]),
                          ("config_not_json", ["config.json"])):
        v = os.path.join(d, name)
        out = os.path.join(d, "train_" + name)
        p = tagflow(a, ["train", "--out", out, "--model", v] + train, np_=2, timeout=180)
        errs = {re.sub(r"^\[tagflow \d+/\d+\] ", "", l) for l in err_lines(p.err) if "fatal:" in l or "error:" in l}
        check(p.returncode == 2, f"train --model {name}: exit 2 (got {p.returncode}, {p.wall:.1f}s)")
        check(len(err_lines(p.err)) == 1 and len(errs) == 1 and all(n in next(iter(errs)) for n in needles),
              f"train --model {name}: one error line naming {needles}: {[show(e, 200) for e in errs]}")
        check(not NOISE.search(p.err), f"train --model {name}: no traceback, HDF5 stack, abort or signal")
        check(not os.path.exists(os.path.join(out, "tagflow.h5")), f"train --model {name}: no tagflow.h5 left")
        check(not os.path.exists(out), f"train --model {name}: no --out directory left")
    # an existing run directory with --overwrite: the old run file stays byte-identical
    out = os.path.join(d, "train_existing")
    os.makedirs(out)
    with open(os.path.join(out, "tagflow.h5"), "wb") as fh:
        fh.write(b"an earlier run")
    p = tagflow(a, ["train", "--out", out, "--overwrite", "--model", os.path.join(d, "truncated")] + train, np_=2,
                timeout=180)
    check(p.returncode == 2 and digest(os.path.join(out, "tagflow.h5")) == b"an earlier run" and
          sorted(os.listdir(out)) == ["tagflow.h5"],
          f"train --overwrite --model truncated: exit 2 (got {p.returncode}), the existing run dir untouched")
    # after a refused start the same --out starts normally with good weights
    out = os.path.join(d, "train_truncated")
    p = tagflow(a, ["train", "--out", out, "--model", good] + train, np_=2, timeout=180)
    if p.returncode != 0:
        sys.stdout.write(p.err[-2000:])
    check(p.returncode == 0 and os.path.exists(os.path.join(out, "tagflow.h5")),
          f"train --model good in the --out of a refused start: exit 0 (got {p.returncode}, {p.wall:.1f}s)")
    # `tagflow sft --init` checks the same way: exit 2, one line, no --out
    out = os.path.join(d, "sft_transposed")
    p = tagflow(a, ["sft", "--task", "reverse", "--out", out, "--init", os.path.join(d, "transposed_shape"),
                    "--steps", "1", "--batch", "4", "--eval-prompts", "4", "--threads", "1"], np_=2, timeout=180)
    one_line(p, 2, ["--init", rect, "shape"], "sft --init transposed_shape")
    check(not os.path.exists(out), "sft --init transposed_shape: no --out directory left")


# ---------------------------------------------------------------- permissions
def case_perms(a):
    d = fresh(a, "perms")
    short = ["--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--eval-prompts", "2",
             "--gemm-check", "false"]
    for umask, want in ((0o022, 0o750), (0o077, 0o700), (0o000, 0o750)):
        out = os.path.join(d, f"u{umask:03o}", "nested", "run")
        p = tagflow(a, ["train", "--out", out] + short, umask=umask, timeout=180)
        if p.returncode != 0:
            sys.stdout.write(p.err[-2000:])
        check(p.returncode == 0, f"umask {umask:03o}: 1-step run exits 0 ({p.wall:.1f}s)")
        for path in (out, os.path.dirname(out)):
            mode = stat.S_IMODE(os.stat(path).st_mode)
            check(mode == want, f"umask {umask:03o}: {os.path.relpath(path, d)} has mode {want:o} (got {mode:o})")
        # files inside follow the umask (0666 under umask 000): the directory keeps others out
        mode = stat.S_IMODE(os.stat(os.path.join(out, "tagflow.h5")).st_mode)
        check(mode == 0o666 & ~umask, f"umask {umask:03o}: tagflow.h5 follows the umask ({mode:o})")
    # an existing --out keeps the mode its owner gave it (tagflow never chmods user directories)
    out = os.path.join(d, "existing")
    os.makedirs(out)
    os.chmod(out, 0o755)
    p = tagflow(a, ["train", "--out", out] + short, umask=0o022, timeout=180)
    check(p.returncode == 0 and stat.S_IMODE(os.stat(out).st_mode) == 0o755, "an existing --out keeps its mode")
    # tagflow sft makes its --out the same way (it used to follow the umask: 0777 under 000)
    out = os.path.join(d, "sft", "nested")
    p = tagflow(a, ["sft", "--task", "addition", "--out", out, "--steps", "1", "--eval-prompts", "2"],
                umask=0o000, timeout=180)
    if p.returncode != 0:
        sys.stdout.write(p.err[-2000:])
    modes = [stat.S_IMODE(os.stat(x).st_mode) for x in (out, os.path.dirname(out))] if p.returncode == 0 else []
    check(modes == [0o750, 0o750], f"umask 000: tagflow sft makes --out and its parent 0750 (got {[oct(m) for m in modes]})")


def case_links(a):
    """Planted links in a real run directory, and run directories others may write to."""
    d = fresh(a, "links")
    victims = {}
    for name in ("tagflow.h5", "membership.json", "gateway.token", "gateway.url"):
        v = os.path.join(d, "victim-" + name)
        with open(v, "wb") as fh:
            fh.write(b"precious " + name.encode() + b"\n")
        victims[name] = v
    run_dir = os.path.join(d, "run")
    os.makedirs(run_dir, mode=0o750)
    for name, v in victims.items():
        os.symlink(v, os.path.join(run_dir, name))
    before = {n: digest(v) for n, v in victims.items()}
    # Checkpoint staging directories planted beforehand: a link to a directory of the user's at the
    # step the final checkpoint stages into, and a stale one holding a link to it.
    vdir = os.path.join(d, "victim-dir")
    os.makedirs(vdir)
    with open(os.path.join(vdir, "keep"), "wb") as fh:
        fh.write(b"precious dir\n")
    os.symlink(vdir, os.path.join(run_dir, "checkpoint.tmp-2"))
    os.makedirs(os.path.join(run_dir, "checkpoint.tmp-7"))
    os.symlink(vdir, os.path.join(run_dir, "checkpoint.tmp-7", "policy"))
    os.symlink(os.path.join(vdir, "keep"), os.path.join(run_dir, "checkpoint.tmp-7", "manifest"))
    # A 2-rank async run with the gateway: it writes the run file (--overwrite: a link is there),
    # membership.json, gateway.token and gateway.url, each where a link to a victim was planted.
    p = tagflow(a, ["train", "--out", run_dir, "--overwrite", "--mode", "disaggregated", "--rank-tags",
                    "0=rollout;1=rollout,train", "--gateway", "127.0.0.1:0", "--task", "reverse", "--digits", "3",
                    "--max-new-tokens", "4", "--steps", "2", "--group-size", "2", "--train-threshold", "4",
                    "--eval-prompts", "2", "--gemm-check", "false", "--threads", "1"], np_=2, timeout=240)
    if p.returncode != 0:
        sys.stdout.write(p.err[-3000:])
    check(p.returncode == 0, f"a run over planted links exits 0 ({p.wall:.1f}s)")
    for name, v in victims.items():
        check(digest(v) == before[name], f"the victim behind the planted {name} is byte-identical")
        path = os.path.join(run_dir, name)
        if os.path.lexists(path):
            check(not os.path.islink(path), f"{name} is now tagflow's own file, not the planted link")
    check(sorted(os.listdir(vdir)) == ["keep"] and open(os.path.join(vdir, "keep"), "rb").read() == b"precious dir\n",
          "the directory behind the planted checkpoint.tmp-* links is untouched")
    check(os.path.isdir(os.path.join(run_dir, "checkpoint")) and not os.path.islink(os.path.join(run_dir, "checkpoint"))
          and not [n for n in os.listdir(run_dir) if n.startswith("checkpoint.tmp-")],
          "the checkpoint was staged in a fresh directory of tagflow's own; the planted staging dirs are gone")
    check(stat.S_IMODE(os.stat(os.path.join(run_dir, "gateway.token")).st_mode) == 0o600
          if os.path.exists(os.path.join(run_dir, "gateway.token")) else True, "gateway.token is 0600")
    short = ["--steps", "1", "--prompts-per-step", "2", "--group-size", "2", "--eval-prompts", "2",
             "--gemm-check", "false"]
    # A run directory writable by others (no sticky bit) is refused before anything is written there.
    shared = os.path.join(d, "shared")
    os.makedirs(shared)
    os.chmod(shared, 0o777)
    p = tagflow(a, ["train", "--out", shared] + short)
    one_line(p, 2, ["run directory", "writable by others (mode 0777)", "--allow-shared-dir"], "train into a 0777 --out")
    check(os.listdir(shared) == [], "nothing was written into the refused directory")
    p = tagflow(a, ["sft", "--task", "addition", "--out", shared, "--steps", "1", "--eval-prompts", "2"])
    one_line(p, 2, ["run directory", "writable by others", "--allow-shared-dir"], "sft into a 0777 --out")
    # Owned by another user: refused too (tests run as root: chown works).
    other = os.path.join(d, "other")
    os.makedirs(other, mode=0o755)
    os.chown(other, 65534, 65534)
    p = tagflow(a, ["train", "--out", other] + short)
    one_line(p, 2, ["run directory", "belongs to user id 65534", "--allow-shared-dir"], "train into another user's --out")
    # --allow-shared-dir accepts it; the sticky bit (like /tmp) is accepted as it is.
    p = tagflow(a, ["train", "--out", shared, "--allow-shared-dir"] + short, timeout=180)
    check(p.returncode == 0, f"--allow-shared-dir: the 0777 --out is used (exit {p.returncode})")
    sticky = os.path.join(d, "sticky")
    os.makedirs(sticky)
    os.chmod(sticky, 0o1777)
    p = tagflow(a, ["train", "--out", sticky] + short, timeout=180)
    check(p.returncode == 0, f"a 1777 --out (sticky, like /tmp) is accepted (exit {p.returncode})")
    # tagflow sft's OUT/sft.json over a planted link.
    sft_out = os.path.join(d, "sft")
    os.makedirs(sft_out, mode=0o750)
    v = os.path.join(d, "victim-sft.json")
    with open(v, "wb") as fh:
        fh.write(b"precious sft\n")
    os.symlink(v, os.path.join(sft_out, "sft.json"))
    p = tagflow(a, ["sft", "--task", "addition", "--out", sft_out, "--steps", "1", "--eval-prompts", "2"], timeout=180)
    check(p.returncode == 0, f"sft over a planted sft.json link exits 0 (exit {p.returncode})")
    check(digest(v) == b"precious sft\n", "the victim behind the planted sft.json is byte-identical")
    check(not os.path.islink(os.path.join(sft_out, "sft.json")), "sft.json is sft's own file")


CASES = {"config": case_config, "cli": case_cli, "tags": case_tags, "runfile": case_runfile,
         "model": case_model, "perms": case_perms, "links": case_links}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    a.workdir = os.path.join(a.workdir, "hostile_" + a.case)
    os.makedirs(a.workdir, exist_ok=True)
    try:
        CASES[a.case](a)
    except Failure as e:
        failures.append(str(e))
    if failures:
        print(f"FAIL hostile {a.case}: {len(failures)} failed check(s):\n  " + "\n  ".join(failures))
        return 1
    print(f"PASS hostile {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
