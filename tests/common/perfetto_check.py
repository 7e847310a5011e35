#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Would Perfetto import every event of this Chrome trace (Trace Event JSON)? A checker written from the
rules of Perfetto's JSON importer (trace_processor), for tests on machines that cannot run Perfetto.

    perfetto_check.py TRACE.json   ->  exit 0 (nothing to report) or 1 (one line per problem)

perfetto_problems(trace_dict) -> list of problems (empty: every event imports); perfetto_file_problems(path)
adds what only the file's text shows (NaN, long fractions). Not Perfetto's code: the rules below, read
from its sources in the copy vendored by github.com/klzgrad/naiveproxy under
src/third_party/perfetto/src/trace_processor/ (shortened to TP/ here; files at commits f61530d and 591b71e),
and checked here one by one. Each problem names the event (traceEvents[i]) and the stat Perfetto counts.

Document (TP/importers/json/json_trace_tokenizer.cc: Parse, HandleDictionaryKey, HandleTraceEvent,
NotifyEndOfFile; TP/importers/json/json_parser.h: ParseValue, ParseNumber, StringToDouble):
  D1 the top level is an object, or an array that is the event list; anything else fails the import.
  D2 in the object, "traceEvents" must be an array, "systemTraceEvents" a string, "displayTimeUnit" a
     string (else the import fails); other keys, before or after traceEvents, are skipped.
  D3 every element of traceEvents must be an object (else "Failure parsing JSON": the import fails).
  D4 (file text) NaN / Infinity are not JSON: the import fails. A number with more than 19 digits after
     the decimal point is misread (the fraction is summed in a 64-bit integer and divided by 10^digits).
Each event (json_trace_tokenizer.cc: ParseTraceEventContents; stat json_tokenizer_failure):
  E1 "ph" must be a non-empty string; else the event is dropped.
  E2 "ts" must be a number, or a string holding one, for every phase but "M"; else dropped. Perfetto
     keeps ts in integer ns: llround(ts * 1000) for a fraction, ts * 1000 for an integer.
  E3 ts < 0 (after that rounding) is dropped by the sorter (TP/sorter/trace_sorter.h, Stream::Push:
     trace_sorter_negative_timestamp_dropped).
  E4 "pid" / "tid": an integer or a string (a string is interned as a name); a number outside
     [0, 2^32) becomes pid 0 (CoerceToUint32), other types are ignored. No tid: the tid is the pid.
  E5 "name" / "cat" other than a string are ignored (the slice is named "[No name]"); "args" other than
     an object is ignored.
Each phase (TP/importers/json/json_trace_parser.cc / json_trace_parser_impl.cc: ParseJsonPacket):
  P-X "dur" must be a number or numeric string (else json_parser_failure, dropped); dur < 0 is dropped
      (TP/importers/common/slice_tracker.cc, Scoped: slice_negative_duration).
  P-B/E on one thread track, an "E" closes the innermost open "B" whose name and cat match (an E without
      name or cat matches any; slice_tracker.cc: End, MatchingIncompleteSliceIndex); an E with none open
      is ignored; a B never closed stays a slice without an end.
  P-C "args" must be a non-empty object (else json_parser_failure, dropped); each value a number or a
      string holding one (else that counter value is dropped: json_parser_failure).
  P-i "i"/"I"/"R": "s" "g" (global), "p" (needs a pid) or "t"/none (needs a tid or pid; a 0-length slice
      on the thread track, taking part in nesting below).
  P-M "process_name"/"thread_name" need args.name a non-empty string, "process_sort_index"/
      "thread_sort_index" need args.sort_index a number (else json_parser_failure). Other metadata names
      (e.g. process_labels) are not imported and not counted as errors: not reported here.
  P-b/e/n async events need a pid and an "id" (integer or string) or "id2" (else json_parser_failure).
  P-flow "s"/"t"/"f" need "id": an integer or a hex string (else flow_invalid_id); flows are keyed by
      (id, cat, name). "s" needs a slice open on its thread (flow_no_enclosing_slice) and a fresh key
      (flow_duplicate_id); "t" and "f" with "bp":"e" need an open slice and an earlier "s"
      (flow_step_without_start, flow_end_without_start; TP/importers/common/flow_tracker.cc). v2 flows:
      "bind_id" (integer or hex string) needs "flow_in" and/or "flow_out" true (flow_without_direction);
      flow_in needs an earlier flow_out of that bind_id (flow_end_without_start).
  P-? any other phase letter is not imported by the JSON parser (no case for it): reported.
Nesting (TP/importers/common/slice_tracker.cc: StartSlice, MaybeCloseStack, CompleteSlice; order from
TP/sorter/trace_sorter.h, SlowOperatorLess):
  N0 events are imported in ts order; at equal ts "E" first, then "X" longest first, then the rest, in
     file order (modelled as one full sort; without any "X" in the trace: ts, then file order).
  N1 per thread track (pid, tid) a stack of slices: a slice that ended before the new one begins (or at
     its begin, unless both have length 0) is popped. A complete slice (X, instant) that begins inside an
     open one and ends after it is DROPPED (slice_drop_overlapping_complete_event).
  N2 an event after the end of a complete slice that still has an open B above it truncates that B to the
     slice's end (misplaced_end_event).
  N3 a stack deeper than 512 drops the new slice (kMaxDepth).
Not checked: systemTraceEvents' text, "P" (V8 samples), id2 details, the "bp" binding of "f" to the next
slice, the args' own flattening. Plain Python 3 stdlib.
"""
import json
import math
import sys

MAX_DEPTH = 512
PENDING = None  # the duration of an open B
KNOWN_PHASES = set("BEXCiIRbensftMP")


def _num(v):
    """A JSON number (not bool) or a string holding one -> float; None otherwise (Perfetto's coercion)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


def _to_ns(v):
    """Perfetto's CoerceToTs: µs -> integer ns (llround of a fraction, exact for an integer); None: invalid."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v * 1000
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        x = v * 1000.0
        return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))
    if isinstance(v, str):
        f = _num(v)
        if f is None:
            return None
        return int(round(f * 1000.0))
    return None


def _id_value(v):
    """An id / bind_id: an integer, or a string parsed as hexadecimal (Perfetto's flow ids); None: invalid."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v & 0xFFFFFFFFFFFFFFFF
    if isinstance(v, str):
        try:
            return int(v, 16)
        except ValueError:
            return None
    return None


def _thread_key(e):
    """The (pid, tid) thread track Perfetto puts the event on (E4); strings are names, kept apart."""

    def coerce(v):
        if isinstance(v, bool) or v is None:
            return None
        if isinstance(v, str):
            return ("name", v)
        if isinstance(v, (int, float)) and math.isfinite(v):
            n = int(v)
            return n if 0 <= n < 2**32 else 0
        return None

    pid, tid = coerce(e.get("pid")), coerce(e.get("tid"))
    if pid is None:
        pid = 0
    if tid is None or tid == 0:
        tid = pid
    return pid, tid


def _describe(i, e):
    name = e.get("name")
    bits = [f"traceEvents[{i}]", f"ph {e.get('ph')!r}"]
    if name is not None:
        bits.append(repr(name) if len(str(name)) < 60 else repr(str(name)[:57] + "..."))
    for k in ("pid", "tid", "ts", "dur"):
        if k in e:
            bits.append(f"{k} {e[k]!r}")
    return " ".join(bits)


def _event_problems(i, e, out):
    """E1-E5 and the phase rules that need no other event. Returns (ph, ts_ns) when the event goes on to
    the sorter, else None."""
    d = _describe(i, e)
    ph = e.get("ph")
    if not isinstance(ph, str) or not ph:
        out.append(f"{d}: no \"ph\" string: dropped (json_tokenizer_failure)")
        return None
    p = ph[0]
    ts = _to_ns(e["ts"]) if "ts" in e else None
    if p != "M":
        if ts is None:
            out.append(f"{d}: \"ts\" missing or not a number: dropped (json_tokenizer_failure)")
            return None
        if ts < 0:
            out.append(f"{d}: negative ts: dropped by the sorter (trace_sorter_negative_timestamp_dropped)")
            return None
    for k in ("pid", "tid"):
        if k in e:
            v = e[k]
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                out.append(f"{d}: \"{k}\" is neither a number nor a string: ignored")
            elif isinstance(v, (int, float)) and not (math.isfinite(v) and 0 <= v < 2**32):
                out.append(f"{d}: \"{k}\" outside [0, 2^32): becomes 0")
            elif isinstance(v, float) and v != int(v):
                out.append(f"{d}: \"{k}\" is not an integer: truncated")
    for k in ("name", "cat"):
        if k in e and e[k] is not None and not isinstance(e[k], str):
            out.append(f"{d}: \"{k}\" is not a string: ignored")
    if "args" in e and not isinstance(e["args"], dict):
        out.append(f"{d}: \"args\" is not an object: ignored")
    args = e.get("args") if isinstance(e.get("args"), dict) else None
    pid_set = _thread_key(e)[0] != 0
    if p not in KNOWN_PHASES:
        out.append(f"{d}: phase {ph!r} is not imported by Perfetto's JSON parser")
        return None
    if p == "X":
        dur = _to_ns(e["dur"]) if "dur" in e else None
        if dur is None:
            out.append(f"{d}: X without a numeric \"dur\": dropped (json_parser_failure)")
            return None
        if dur < 0:
            out.append(f"{d}: X with a negative dur: dropped (slice_negative_duration)")
            return None
    elif p == "C":
        if not args:
            out.append(f"{d}: C without args values: dropped (json_parser_failure)")
            return None
        for k, v in args.items():
            if _num(v) is None:
                out.append(f"{d}: C value args.{k} = {v!r} is not a number: that value is dropped "
                           "(json_parser_failure)")
    elif p in "iIR":
        s = e.get("s")
        if s == "p" and not pid_set:
            out.append(f"{d}: process-scoped instant without a pid: dropped (json_parser_failure)")
            return None
        if s not in ("g", "p") and _thread_key(e)[1] == 0:
            out.append(f"{d}: thread-scoped instant without a tid or pid: dropped (json_parser_failure)")
            return None
    elif p == "M":
        n = e.get("name")
        if n in ("process_name", "thread_name"):
            v = args.get("name") if args else None
            if not isinstance(v, str) or not v:
                out.append(f"{d}: {n} without a non-empty args.name string: not applied (json_parser_failure)")
        elif n in ("process_sort_index", "thread_sort_index"):
            v = args.get("sort_index") if args else None
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                out.append(f"{d}: {n} without a numeric args.sort_index: not applied (json_parser_failure)")
        return None  # metadata takes no part in ordering or nesting
    elif p in "ben":
        if not pid_set or ("id" not in e and not isinstance(e.get("id2"), dict)) or \
                ("id" in e and (isinstance(e["id"], bool) or not isinstance(e["id"], (int, str)))):
            out.append(f"{d}: async event without a pid and an integer/string id: dropped (json_parser_failure)")
            return None
    elif p in "stf":
        if _id_value(e.get("id")) is None:
            out.append(f"{d}: flow event without an integer or hex-string id (flow_invalid_id)")
            return None
    if "bind_id" in e:
        if _id_value(e["bind_id"]) is None:
            out.append(f"{d}: bind_id is neither an integer nor a hex string: ignored")
        elif p in "XBbn" and e.get("flow_in") is not True and e.get("flow_out") is not True:
            out.append(f"{d}: bind_id without flow_in/flow_out true (flow_without_direction)")
    return p, ts


def _sort_key(p, e, ts, idx, slow):
    if not slow:
        return (ts, 0, idx)
    if p == "E":
        return (ts, -(2**63), idx)
    if p == "X":
        return (ts, (2**63 - 1) - _to_ns(e["dur"]), idx)
    return (ts, 2**63 - 1, idx)


def _nesting_problems(items, events, out):
    """N0-N3 and the flow rules: replays the sorted events on one slice stack per thread track."""
    slow = any(p == "X" for _, p, _ in items)
    items = sorted(items, key=lambda t: _sort_key(t[1], events[t[0]], t[2], t[0], slow))
    stacks = {}  # (pid, tid) -> list of [start_ns, dur_ns or PENDING, index, name, cat]
    v1_flows, v2_flows = set(), set()

    def close_stack(stack, new_ts, new_dur, i):
        """Perfetto's MaybeCloseStack; False: the new complete slice partially overlaps one and is dropped."""
        incomplete = False
        k = len(stack) - 1
        while k >= 0:
            start, dur, j, _, _ = stack[k]
            if dur is PENDING:
                incomplete = True
                k -= 1
                continue
            end = start + dur
            if incomplete:
                if new_ts <= end:
                    k -= 1
                    continue
                opened = [stack[m][2] for m in range(len(stack) - 1, k, -1)]
                out.append(f"{_describe(opened[-1], events[opened[-1]])}: a B still open above the complete slice "
                           f"traceEvents[{j}] when {_describe(i, events[i])} comes: truncated to that slice's end "
                           "(misplaced_end_event)")
                del stack[k:]
                incomplete = False
                k -= 1
                continue
            if end < new_ts or (end == new_ts and not (dur == 0 and new_dur == 0)):
                stack.pop()  # Perfetto pops the top of the stack here, whichever slice ended
                k -= 1
                continue
            if new_dur is not PENDING and new_ts < end < new_ts + new_dur:
                out.append(f"{_describe(i, events[i])}: begins inside {_describe(j, events[j])} and ends after it: "
                           "dropped (slice_drop_overlapping_complete_event)")
                return False
            k -= 1
        return True

    for i, p, ts in items:
        e = events[i]
        key = _thread_key(e)
        stack = stacks.setdefault(key, [])
        name = e.get("name") if isinstance(e.get("name"), str) and e.get("name") else None
        cat = e.get("cat") if isinstance(e.get("cat"), str) and e.get("cat") else None
        slice_dur = None
        if p == "X":
            slice_dur = _to_ns(e["dur"])
        elif p in "iIR" and e.get("s") not in ("g", "p"):
            slice_dur = 0
        if p == "X" or p == "B" or slice_dur == 0:
            new_dur = PENDING if p == "B" else slice_dur
            if not close_stack(stack, ts, new_dur, i):
                continue
            if len(stack) >= MAX_DEPTH:
                out.append(f"{_describe(i, e)}: nested deeper than {MAX_DEPTH} slices: dropped")
                continue
            stack.append([ts, new_dur, i, name, cat])
        elif p == "E":
            close_stack(stack, ts, PENDING, i)
            found = None
            for k in range(len(stack) - 1, -1, -1):
                _, dur, _, sname, scat = stack[k]
                if dur is not PENDING:
                    continue
                if cat is not None and scat != cat:
                    continue
                if name is not None and sname is not None and sname != name:
                    continue
                found = k
                break
            if found is None:
                out.append(f"{_describe(i, e)}: E with no matching open B on its thread: ignored")
                continue
            stack[found][1] = ts - stack[found][0]
            if found == len(stack) - 1:
                stack.pop()
        # flows (v1 keyed by id, cat, name; v2 by bind_id)
        if p in "stf":
            fid = (_id_value(e.get("id")), cat, name)
            if p == "s":
                if not stack:
                    out.append(f"{_describe(i, e)}: flow start with no slice open on its thread "
                               "(flow_no_enclosing_slice)")
                elif fid in v1_flows:
                    out.append(f"{_describe(i, e)}: a second flow start of the same id, cat and name "
                               "(flow_duplicate_id)")
                else:
                    v1_flows.add(fid)
            elif p == "t" or e.get("bp") == "e":
                if not stack:
                    out.append(f"{_describe(i, e)}: flow step/end with no slice open on its thread "
                               "(flow_no_enclosing_slice)")
                elif fid not in v1_flows:
                    out.append(f"{_describe(i, e)}: flow step/end without an earlier start "
                               "(flow_step_without_start / flow_end_without_start)")
        if p in "XBbn" and "bind_id" in e and _id_value(e["bind_id"]) is not None:
            b = _id_value(e["bind_id"])
            if e.get("flow_in") is True and b not in v2_flows:
                out.append(f"{_describe(i, e)}: flow_in of bind_id {e['bind_id']!r} without an earlier flow_out "
                           "(flow_end_without_start)")
            if e.get("flow_out") is True:
                v2_flows.add(b)
    for key, stack in stacks.items():
        for _, dur, j, _, _ in stack:
            if dur is PENDING:
                out.append(f"{_describe(j, events[j])}: B never ended on its thread: a slice without an end")


def perfetto_problems(trace):
    """Problems Perfetto's JSON importer would have with `trace` (a parsed Chrome trace: an object with
    traceEvents, or the event list itself), one string each; empty when every event imports."""
    out = []
    if isinstance(trace, list):
        events = trace
    elif isinstance(trace, dict):
        for k, typ, what in (("traceEvents", list, "an array"), ("systemTraceEvents", str, "a string"),
                             ("displayTimeUnit", str, "a string")):
            if k in trace and not isinstance(trace[k], typ):
                out.append(f"top level: \"{k}\" is not {what}: the import fails")
        if out:
            return out
        if "traceEvents" not in trace:
            return ["top level: no \"traceEvents\" array: no event imported"]
        events = trace["traceEvents"]
    else:
        return ["top level: neither an object nor an array: the import fails"]
    bad = [i for i, e in enumerate(events) if not isinstance(e, dict)]
    if bad:
        return [f"traceEvents[{i}] is not an object: the import fails" for i in bad[:20]]
    items = []
    for i, e in enumerate(events):
        r = _event_problems(i, e, out)
        if r is not None:
            items.append((i, r[0], r[1]))
    _nesting_problems(items, events, out)
    return out


def perfetto_text_problems(text):
    """D4: what the file's text shows that a parsed dict no longer does; also invalid JSON."""
    out = []

    def constant(name):
        out.append(f"file: {name} is not JSON: the import fails")
        return float("nan")

    def flt(s):
        frac = s.split(".", 1)[1] if "." in s else ""
        digits = len(frac.split("e")[0].split("E")[0])
        if digits > 19:
            out.append(f"file: the number {s} has {digits} digits after the point: Perfetto misreads it (more than 19)")
        return float(s)

    try:
        doc = json.loads(text, parse_constant=constant, parse_float=flt)
    except ValueError as e:
        return out + [f"file: not valid JSON ({e}): the import fails"], None
    return out, doc


def perfetto_file_problems(path):
    """perfetto_text_problems + perfetto_problems for a trace file."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    out, doc = perfetto_text_problems(text)
    if doc is not None:
        out += perfetto_problems(doc)
    return out


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: perfetto_check.py TRACE.json  (exit 0: Perfetto imports every event; 1: problems listed)",
              file=sys.stderr)
        return 2
    try:
        problems = perfetto_file_problems(argv[1])
    except (OSError, UnicodeDecodeError) as e:
        print(f"{argv[1]}: {e}", file=sys.stderr)
        return 2
    for p in problems[:200]:
        print(p)
    if len(problems) > 200:
        print(f"... and {len(problems) - 200} more")
    print(f"{argv[1]}: {len(problems)} problem(s)" if problems else f"{argv[1]}: Perfetto imports every event")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
