# SPDX-License-Identifier: Apache-2.0
# A reward function that misbehaves on request: solution_str names what to do. Used by
# tests/reward to drive every failure mode of the worker pool through a real worker.
import math
import os
import signal
import sys
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    what = solution_str
    if what == "raise":
        return 1 / 0
    if what == "nan":
        return float("nan")
    if what == "inf":
        return -math.inf
    if what == "big":
        return 1e39
    if what == "str":
        return "0.5"
    if what == "none":
        return None
    if what == "nokey":
        return {"acc": 1.0}
    if what == "dictnan":
        return {"score": float("nan")}
    if what == "exit":
        os._exit(3)
    if what == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if what == "sysexit":
        sys.exit(4)
    if what == "hang":
        time.sleep(3600)
    if what == "print":
        print("noise on stdout that must not reach the protocol")
        sys.stdout.flush()
        os.write(1, b"raw noise on fd 1\n")
        return 0.25
    if what == "true":
        return True
    if what == "int":
        return 7
    if what == "extras":
        return {"score": 0.5, "acc": True, "weird": {1: float("inf"), "o": object()}}
    if what == "pid":
        return float(os.getpid())
    return float(len(what))
