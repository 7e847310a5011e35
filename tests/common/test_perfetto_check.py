#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Serial.common.perfetto_check: perfetto_check.py (Perfetto's JSON import rules) finds what it should.

Crafted traces, one broken rule each (partially overlapping X slices on one thread, X without dur, a C
value that is not a number, a negative ts, an event without ph, a B never ended, an E with nothing open,
a B left open inside an X that ends, bad metadata, an unknown phase, flows without a start, bad top-level
shapes, NaN and a 20-digit fraction in the file's text): each is reported, naming the event. A good trace
(nested and touching X slices, a child listed before its parent at the same ts, B/E, counters, instants,
metadata, a flow, a numeric string) has no problem. Exit 0 when every check holds.
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perfetto_check import main, perfetto_file_problems, perfetto_problems, perfetto_text_problems  # noqa: E402

failed = []


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failed.append(msg)


def X(name, ts, dur, pid=1, tid=1, **kw):
    return dict(name=name, ph="X", ts=ts, dur=dur, pid=pid, tid=tid, **kw)


GOOD = {"displayTimeUnit": "ms", "traceEvents": [
    {"name": "process_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "rank 0"}},
    {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "ops"}},
    {"name": "process_sort_index", "ph": "M", "pid": 1, "tid": 1, "args": {"sort_index": 1}},
    {"name": "process_labels", "ph": "M", "pid": 1, "tid": 1, "args": {"labels": "ignored by Perfetto"}},
    X("child", 10.0, 5.0),  # listed before its parent, same ts: Perfetto sorts the longer first
    X("parent", 10.0, 20.0),
    X("grandchild", 11.0, 1.5),
    X("touching", 30.0, 4.0),  # begins where parent ends
    X("zero", 34.0, 0),
    {"name": "sync", "ph": "i", "s": "t", "ts": 12.0, "pid": 1, "tid": 1},
    {"name": "global", "ph": "i", "s": "g", "ts": 40.0, "pid": 1, "tid": 1},
    {"name": "span", "ph": "B", "ts": 50, "pid": 1, "tid": 2},
    X("inside", 51, 2, tid=2),
    {"name": "span", "ph": "E", "ts": 60, "pid": 1, "tid": 2},
    {"name": "loss", "ph": "C", "ts": 5, "pid": 3, "tid": 3, "args": {"value": 0.5, "other": "12.5"}},
    {"name": "f", "cat": "c", "ph": "s", "id": "0x1f", "ts": 10.5, "pid": 1, "tid": 1},
    {"name": "f", "cat": "c", "ph": "f", "bp": "e", "id": "0x1f", "ts": 51.5, "pid": 1, "tid": 2},
    X("a", 70.0, 3.0, tid="worker", args={"k": [1, 2]}),
], "otherData": {"x": 1}}


def problems_for(events, **top):
    return perfetto_problems(dict(traceEvents=events, **top))


def one_problem(label, events, words):
    p = problems_for(events)
    ok = len(p) == 1 and all(w in p[0] for w in words)
    check(ok, f"{label}: reported ({p if not ok else p[0]})")


def main_test():
    p = perfetto_problems(GOOD)
    check(p == [], f"a good trace has no problem ({p})")
    check(perfetto_problems(GOOD["traceEvents"]) == [], "the bare event list is a trace too")

    one_problem("partially overlapping X slices on one thread",
                [X("outer", 10, 10), X("crosses", 15, 10)],
                ["traceEvents[1]", "'crosses'", "slice_drop_overlapping_complete_event"])
    p = problems_for([X("outer", 10, 10), X("crosses", 15, 10, tid=2)])
    check(p == [], f"the same slices on two threads are fine ({p})")
    p = problems_for([X("outer", 10, 10), X("inner", 15, 5)])
    check(p == [], f"a child ending where its parent ends is fine ({p})")
    p = problems_for([X("outer", 10, 10), X("inner", 15, 5.001)])
    check(len(p) == 1 and "'inner'" in p[0], f"a child ending 1 ns after its parent is dropped ({p})")
    one_problem("X without dur", [{"name": "x", "ph": "X", "ts": 1, "pid": 1, "tid": 1}],
                ["traceEvents[0]", "without a numeric \"dur\"", "json_parser_failure"])
    one_problem("X with a negative dur", [X("neg", 5, -1)], ["slice_negative_duration"])
    one_problem("a C value that is a word", [{"name": "c", "ph": "C", "ts": 1, "pid": 1, "args": {"v": "fast"}}],
                ["args.v", "'fast'", "not a number"])
    one_problem("a C event without args", [{"name": "c", "ph": "C", "ts": 1, "pid": 1}], ["C without args"])
    one_problem("a negative ts", [X("early", -0.5, 1)], ["negative ts", "trace_sorter_negative_timestamp_dropped"])
    one_problem("ts a boolean", [X("b", True, 1)], ["\"ts\" missing or not a number"])
    one_problem("no ph", [{"name": "n", "ts": 1, "pid": 1, "tid": 1}], ["no \"ph\""])
    one_problem("a B never ended", [{"name": "open", "ph": "B", "ts": 1, "pid": 1, "tid": 1}], ["never ended"])
    one_problem("an E with nothing open", [{"name": "x", "ph": "E", "ts": 1, "pid": 1, "tid": 1}],
                ["no matching open B"])
    one_problem("a B left open inside an X that ends",
                [X("x", 0, 10), {"name": "b", "ph": "B", "ts": 5, "pid": 1, "tid": 1}, X("later", 20, 1)],
                ["misplaced_end_event", "'b'"])
    one_problem("thread_name without a name", [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {}}],
                ["thread_name without"])
    one_problem("an unknown phase", [{"name": "o", "ph": "O", "ts": 1, "pid": 1, "tid": 1}], ["phase 'O'"])
    one_problem("a pid out of range", [X("p", 1, 1, pid=-3)], ["outside [0, 2^32)"])
    one_problem("a flow end without a start",
                [X("x", 0, 10), {"name": "f", "ph": "f", "bp": "e", "id": 7, "ts": 5, "pid": 1, "tid": 1}],
                ["without an earlier start"])
    one_problem("a flow id that is a float", [X("x", 0, 10), {"name": "f", "ph": "s", "id": 1.5, "ts": 5, "pid": 1}],
                ["flow_invalid_id"])
    one_problem("args a list", [X("a", 1, 1, args=[1])], ["\"args\" is not an object"])
    p = problems_for([X("deep%d" % k, k, 10000 - 2 * k) for k in range(514)])
    check(len(p) == 2 and all("deeper than 512" in x for x in p),
          f"slices nested deeper than 512 are dropped ({p[:1]})")

    check(perfetto_problems({"traceEvents": {"a": 1}})[0].startswith("top level: \"traceEvents\" is not an array"),
          "traceEvents not an array")
    check(perfetto_problems("text")[0].startswith("top level: neither"), "a string is no trace")
    check("no \"traceEvents\"" in perfetto_problems({"otherData": {}})[0], "no traceEvents at all")
    check("is not an object" in perfetto_problems({"traceEvents": [1]})[0], "an event that is not an object")
    p, _ = perfetto_text_problems('{"traceEvents":[{"name":"c","ph":"C","ts":1,"pid":1,"args":{"v":NaN}}]}')
    check(len(p) == 1 and "NaN is not JSON" in p[0], f"NaN in the text ({p})")
    p, _ = perfetto_text_problems('{"traceEvents":[{"name":"c","ph":"C","ts":1,"pid":1,'
                                  '"args":{"v":0.00012345678901234567}}]}')
    check(len(p) == 1 and "20 digits" in p[0], f"a 20-digit fraction in the text ({p})")
    p, _ = perfetto_text_problems('{"traceEvents":[')
    check(len(p) == 1 and "not valid JSON" in p[0], f"truncated JSON ({p})")

    with tempfile.TemporaryDirectory() as d:
        good, bad = os.path.join(d, "good.json"), os.path.join(d, "bad.json")
        json.dump(GOOD, open(good, "w"))
        json.dump({"traceEvents": [X("outer", 10, 10), X("crosses", 15, 10)]}, open(bad, "w"))
        check(perfetto_file_problems(good) == [], "the good trace's file has no problem")
        check(main(["perfetto_check.py", good]) == 0, "CLI: exit 0 on the good file")
        check(main(["perfetto_check.py", bad]) == 1, "CLI: exit 1 on the bad file")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main_test())
