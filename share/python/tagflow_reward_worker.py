#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""tagflow's reward worker: one long-lived process of the `--reward-fn FILE.py[:NAME]` pool.

    tagflow_reward_worker.py FILE.py NAME [PARENT_PID [TRACEBACKS]]

Loads FILE.py the way veRL loads a custom reward function (importlib, module name
"custom_module"; FILE's folder is put first on sys.path so it can import its neighbours), checks
that NAME can be called as NAME(data_source=, solution_str=, ground_truth=, extra_info=), then
serves batches. Protocol (share/doc/rewards.md), JSON Lines on the process's stdin/stdout:

  worker -> tagflow, once:  {"ready": {"pid": P, "python": "3.11.2"}}  or  {"fatal": "one line"}
  tagflow -> worker:        {"batch": [{"id", "data_source", "solution_str", "ground_truth",
                                        "extra_info"}, ...]}
  worker -> tagflow, one line per sample, in order, written as soon as it is scored:
                            {"id": N, "score": X, "extras": {...}}  or  {"id": N, "error": "..."}

The function is called with keyword arguments, as veRL's reward managers call it. It may return
a bool, an int, a float (any numbers.Real, e.g. numpy scalars) or a dict with a "score"; the
dict's other keys come back as "extras" (values JSON cannot hold become strings, non-finite
floats null). A score that is not a number, NaN, infinite or too large for float32 is an error
for that sample. What the function prints goes to stderr (tagflow's worker log), never into the
protocol: the protocol uses private copies of fds 0 and 1, and fd 1 is pointed at stderr.
With TRACEBACKS=1 (tagflow gives the workers a log file) the full traceback of every failure
goes to stderr too; otherwise only the one-line cause reaches tagflow.

Does not: retry, time anything out or restart itself (tagflow kills and restarts a worker that
hangs or dies), or need anything beyond the standard library.
"""
import importlib.util
import inspect
import json
import math
import numbers
import os
import signal
import struct
import sys
import traceback

TRACEBACKS = False


def one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def die_with_parent(parent_pid):
    """SIGKILL this worker when tagflow dies (prctl PR_SET_PDEATHSIG), if ctypes allows."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001  (not Linux, no ctypes: EOF on stdin still ends the loop)
        pass
    if parent_pid and os.getppid() != parent_pid:
        os._exit(0)


def load(path, name):
    """Returns (function, None) or (None, one-line problem)."""
    if not os.path.isfile(path):
        return None, f"{path}: no such file"
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location("custom_module", path)
        if spec is None or spec.loader is None:
            return None, f"{path}: not a Python file Python can load"
        module = importlib.util.module_from_spec(spec)
        sys.modules["custom_module"] = module
        spec.loader.exec_module(module)
    except BaseException as e:  # noqa: BLE001  (SystemExit at import is a bad file too)
        if TRACEBACKS:
            traceback.print_exc()
        where = ""
        if isinstance(e, SyntaxError) and e.lineno:
            where = f" (line {e.lineno})"
        else:
            frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
            if frames:
                where = f" (line {frames[-1].lineno})"
        return None, f"{path}: does not import: {type(e).__name__}: {one_line(e)}{where}"
    fn = getattr(module, name, None)
    if fn is None:
        return None, f"{path}: defines no '{name}'"
    if not callable(fn):
        return None, f"{path}: '{name}' is a {type(fn).__name__}, not a function"
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn, None  # a builtin without a signature: find out at the first call
    try:
        sig.bind(data_source="", solution_str="", ground_truth=None, extra_info=None)
    except TypeError as e:
        return None, (f"{path}: {name}{sig} cannot be called as {name}(data_source=, solution_str=, "
                      f"ground_truth=, extra_info=): {one_line(e)}")
    return fn, None


def float32_ok(x):
    try:
        struct.pack("f", x)
    except OverflowError:
        return False
    return math.isfinite(x)


def clean(v, depth=0):
    """A JSON-safe copy of an extras value."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, numbers.Real):
        f = float(v)
        return f if math.isfinite(f) else None
    if depth < 32 and isinstance(v, dict):
        return {str(k): clean(x, depth + 1) for k, x in v.items()}
    if depth < 32 and isinstance(v, (list, tuple)):
        return [clean(x, depth + 1) for x in v]
    return one_line(repr(v), 200)


def score_one(fn, name, path, item):
    rid = item.get("id")
    try:
        out = fn(data_source=item.get("data_source"), solution_str=item.get("solution_str"),
                 ground_truth=item.get("ground_truth"), extra_info=item.get("extra_info"))
    except BaseException as e:  # noqa: BLE001  (sys.exit() in the function is the sample's error)
        if isinstance(e, KeyboardInterrupt):
            raise
        if TRACEBACKS:
            traceback.print_exc()
        frames = traceback.extract_tb(e.__traceback__)
        ours = [f for f in frames if f.filename == path]
        at = ours[-1] if ours else (frames[-1] if frames else None)
        where = f" ({os.path.basename(at.filename)}:{at.lineno})" if at else ""
        return {"id": rid, "error": f"{name} raised {type(e).__name__}: {one_line(e)}{where}"}
    extras = {}
    value = out
    if isinstance(out, dict):
        if "score" not in out:
            return {"id": rid, "error": f"{name} returned a dict without \"score\" (keys: "
                                        f"{one_line(', '.join(map(str, list(out)[:10])), 200)})"}
        value = out["score"]
        extras = clean({k: v for k, v in out.items() if k != "score"})
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, numbers.Real):
        return {"id": rid, "error": f"{name} returned {type(value).__name__} {one_line(repr(value), 80)}, "
                                    f"not a number"}
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError) as e:
        return {"id": rid, "error": f"{name} returned {one_line(repr(value), 80)}, not a number: {e}"}
    if not float32_ok(value):
        return {"id": rid, "error": f"{name} returned {value!r}, not finite in float32"}
    return {"id": rid, "score": value, "extras": extras}


def main():
    if len(sys.argv) < 3:
        sys.stderr.write("usage: tagflow_reward_worker.py FILE.py NAME [PARENT_PID [TRACEBACKS]]\n")
        return 2
    global TRACEBACKS
    path, name = sys.argv[1], sys.argv[2]
    TRACEBACKS = len(sys.argv) > 4 and sys.argv[4] == "1"
    die_with_parent(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # tagflow decides when a worker ends
    # The protocol gets private copies of stdin/stdout; what the function prints goes to stderr.
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(obj):
        data = (json.dumps(obj, allow_nan=False) + "\n").encode()
        while data:
            data = data[os.write(proto_out, data):]

    fn, problem = load(path, name)
    if problem:
        send({"fatal": problem})
        return 1
    send({"ready": {"pid": os.getpid(), "python": sys.version.split()[0]}})
    for line in proto_in:
        try:
            batch = json.loads(line)["batch"]
        except (ValueError, KeyError, TypeError) as e:
            send({"fatal": f"bad frame from tagflow: {one_line(e)}"})
            return 1
        for item in batch:
            send(score_one(fn, name, path, item))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BrokenPipeError, ConnectionResetError):
        os._exit(0)  # tagflow closed the socket (it is ending, or gave up on this worker)
