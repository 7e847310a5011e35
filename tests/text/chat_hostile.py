#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Hostile chat templates and conversations (issue 17's "Hostile input" rows for chat templates).
Each case runs chat_render and requires: exit 2, exactly one stderr line naming the problem
(line:column for a template, the input line for a conversation), nothing on stdout (output is
only written once every line rendered), no crash, within the time limit. Where Jinja2 also
rejects the input (syntax errors, raise_exception) the Jinja2 reference (chat_reference.py) must
reject it too, and raise_exception's message must be the same.

    chat_hostile.py GROUP --render chat_render --workdir DIR [--fixtures DIR]
GROUP: syntax, unsupported, raise, messages, nesting."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ONE_MSG = json.dumps({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}) + "\n"
CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
failures = []


def write(workdir, name, data):
    path = os.path.join(workdir, name)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def run(cmd, stdin, timeout=60):
    try:
        p = subprocess.run(cmd, input=stdin if isinstance(stdin, bytes) else stdin.encode(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, b"", b"timeout"
    return p.returncode, p.stdout, p.stderr


def expect_refused(label, cmd, stdin, want, reference=None, same_message=None, timeout=60):
    rc, out, err = run(cmd, stdin, timeout)
    text = err.decode(errors="replace")
    lines = text.rstrip("\n").split("\n")
    problems = []
    if rc is None:
        problems.append(f"did not finish in {timeout} s")
    elif rc != 2:
        problems.append(f"exit {rc}, want 2")
    if out:
        problems.append(f"{len(out)} bytes on stdout, want none")
    if len(lines) != 1 or not lines[0].startswith("chat_render: "):
        problems.append(f"stderr is not one 'chat_render: ' line: {text[:300]!r}")
    elif want not in lines[0]:
        problems.append(f"stderr {lines[0][:300]!r} does not contain {want!r}")
    if reference is not None:
        rrc, _, rerr = run(reference, stdin, timeout)
        if rrc == 0:
            problems.append("the Jinja2 reference did not refuse it")
        elif same_message and same_message not in rerr.decode(errors="replace"):
            problems.append(f"the Jinja2 reference's message differs: {rerr.decode(errors='replace')[:300]!r}")
    if problems:
        failures.append(f"{label}: " + "; ".join(problems))
        print(f"FAIL {label}: " + "; ".join(problems))
    else:
        print(f"ok   {label}: {lines[0][:160]}")


def template_case(args, label, template, want, stdin=ONE_MSG, compare=False, same_message=None, timeout=60):
    path = write(args.workdir, f"{args.group}_{label}.jinja", template)
    cmd = [args.render, "--template", path]
    ref = [sys.executable, os.path.join(HERE, "chat_reference.py"), "--template", path] if compare else None
    expect_refused(label, cmd, stdin, want, ref, same_message, timeout)


def group_syntax(args):
    cases = [
        ("unclosed_if", "{% if messages %}\nno end", "line 2:7: unexpected end of template, expected"),
        ("dangling_operator", "{{ 1 + }}", "line 1:8: unexpected '}}'"),
        ("for_without_name", "{% for in messages %}{% endfor %}", "line 1:11: expected 'in', got 'messages'"),
        ("unterminated_string", "{{ 'abc }}", "line 1:4: unterminated string"),
        ("stray_endfor", "text\n  {% endfor %}", "line 2:6: unexpected tag 'endfor'"),
        ("two_names", "{{ a b }}", "line 1:6: expected '}}', got 'b'"),
        ("empty_if", "{% if %}x{% endif %}", "line 1:7: unexpected '%}'"),
        ("open_comment", "a\n{# never closed", "line 2:1: missing end of comment tag"),
        ("open_print", "{{ messages", "line 1:1: missing end of print tag '}}'"),
        ("unbalanced", "{{ (1 ] }}", "line 1:7: unexpected ']'"),
        ("bad_char", "{{ 1 ? 2 }}", "line 1:6: unexpected character '?'"),
        ("break_outside_loop", "{% break %}", "line 1:4: 'break' outside of a for loop"),
        ("unknown_tag", "{% frobnicate %}", "line 1:4: unknown tag 'frobnicate'"),
    ]
    for label, tmpl, want in cases:
        template_case(args, label, tmpl, want, compare=True)
    # random bytes, NUL and invalid UTF-8: rendered or refused, never a crash
    data = bytes(range(256)) * 8 + b"{{ \xff\xfe }}{% \x00 %}"
    path = write(args.workdir, "syntax_binary.jinja", data)
    rc, out, err = run([args.render, "--template", path], ONE_MSG)
    lines = err.decode(errors="replace").rstrip("\n").split("\n")
    if rc not in (0, 2) or (rc == 2 and len(lines) != 1):
        failures.append(f"binary: exit {rc}, stderr {err[:200]!r}")
        print(f"FAIL binary: exit {rc}")
    else:
        print(f"ok   binary: exit {rc} {lines[0][:120]}")


def group_unsupported(args):
    cases = [
        ("filter_xmlattr", "{{ messages[0] | xmlattr }}", "line 1:18: unsupported filter 'xmlattr'"),
        ("filter_groupby", "x\n{{ messages | groupby('role') }}", "line 2:15: unsupported filter 'groupby'"),
        ("tag_include", "{% include 'other.jinja' %}", "line 1:4: unsupported tag 'include'"),
        ("tag_extends", "{% extends 'base' %}", "line 1:4: unsupported tag 'extends'"),
        ("tag_call", "{% call m() %}x{% endcall %}", "line 1:4: unsupported tag 'call'"),
        ("tag_filter", "{% filter upper %}x{% endfilter %}", "line 1:4: unsupported tag 'filter'"),
        ("tag_do", "{% do messages.append(1) %}", "line 1:4: unsupported tag 'do'"),
        ("test_escaped", "{{ 1 if x is escaped }}", "line 1:14: unsupported test 'escaped'"),
        ("recursive_loop", "{% for m in messages recursive %}{% endfor %}", "unsupported: recursive for loops"),
        ("star_args", "{{ f(*messages) }}", "line 1:6: unsupported: *args/**kwargs in calls"),
        ("percent_format", "{{ '%s' % messages[0].role }}", "line 1:9: unsupported: '%' string formatting"),
        ("mutating_method", "{{ messages.append(1) }}", "access to attribute 'append' of 'list' object is unsafe"),
        ("map_unknown_filter", "{{ messages | map('xmlattr') | list }}", "unsupported filter 'xmlattr'"),
    ]
    for label, tmpl, want in cases:
        template_case(args, label, tmpl, want)
    # through tokenizer_config.json: the file is named
    cfg = write(args.workdir, "unsupported_config.json", json.dumps({"chat_template": "{{ x | xmlattr }}"}))
    expect_refused("config_file_named", [args.render, "--config", cfg], ONE_MSG,
                   cfg + ": chat template: line 1:8: unsupported filter 'xmlattr'")


def group_raise(args):
    fx = args.fixtures
    llama3_cfg = os.path.join(os.path.dirname(fx), "fixtures", "mistral_v01.jinja")  # template file
    sys_msg = json.dumps({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                          "add_generation_prompt": True}) + "\n"
    ref = [sys.executable, os.path.join(HERE, "chat_reference.py"), "--template", llama3_cfg]
    expect_refused("mistral_roles", [args.render, "--template", llama3_cfg], ONE_MSG + sys_msg,
                   "line 2: " + llama3_cfg + ": chat template: line 1:125: raise_exception: "
                   "Conversation roles must alternate user/assistant/user/assistant/...",
                   reference=ref, same_message="Conversation roles must alternate user/assistant/user/assistant/...")
    template_case(args, "multiline_message", "{{ raise_exception('first line\\nsecond line') }}",
                  "raise_exception: first line\\nsecond line", compare=True, same_message="first line\nsecond line")
    template_case(args, "no_message", "{% if true %}{{ raise_exception() }}{% endif %}",
                  "line 1:32: raise_exception: ")


def group_messages(args):
    path = write(args.workdir, "messages_chatml.jinja", CHATML)
    cmd = [args.render, "--template", path]
    good = ONE_MSG
    cases = [
        ("string", json.dumps({"messages": "hello"}), "line 2: chat template: messages must be a list, got string"),
        ("null", json.dumps({"messages": None}), "line 2: chat template: messages must be a list, got null"),
        ("number_item", json.dumps({"messages": [1]}), "line 2: chat template: messages[0] must be an object, got number"),
        ("missing", json.dumps({"msgs": []}), "line 2: expected an object with \"messages\""),
        ("not_object", json.dumps([1, 2]), "line 2: expected an object with \"messages\""),
        ("not_json", "{\"messages\": [", "line 2: not valid JSON"),
        ("gen_not_bool", json.dumps({"messages": [], "add_generation_prompt": "yes"}),
         "line 2: add_generation_prompt must be true or false"),
        ("tools_not_list", json.dumps({"messages": [], "tools": "x"}), "line 2: chat template: tools must be a list"),
        ("content_list", json.dumps({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
         "line 1:61: unsupported operand type(s) for +: 'str' and 'list'"),
        ("content_missing", json.dumps({"messages": [{"role": "user"}]}),
         "'dict object' has no attribute 'content'"),
        ("clash", json.dumps({"messages": [], "documents": []}), "extra variable 'documents' clashes"),
    ]
    for label, line, want in cases:
        # a good line first: nothing of it may be printed when a later line fails
        expect_refused(label, cmd, good + line + "\n", want)
    bad_utf8 = good.encode() + b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}\n'
    expect_refused("invalid_utf8", cmd, bad_utf8, "line 2: not valid JSON")
    deep = '{"messages": [{"role": "user", "content": ' + "[" * 100000 + "]" * 100000 + "}]}"
    expect_refused("deep_json", cmd, good + deep + "\n", "line 2: JSON value nested more than 512 levels")
    # a 10 MB message renders, whole
    big = "é" * (5 * 1024 * 1024)
    rc, out, err = run(cmd, json.dumps({"messages": [{"role": "user", "content": big}]}) + "\n", timeout=120)
    if rc != 0 or len(json.loads(out)) != len("<|im_start|>user\n<|im_end|>\n") + len(big):
        failures.append(f"10MB message: exit {rc} {err[:200]!r}")
        print(f"FAIL big_message: exit {rc}")
    else:
        print(f"ok   big_message: {len(out)} bytes out")


def group_nesting(args):
    cases = [
        ("parens", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "nested too deeply (more than 200 levels)"),
        ("ifs", "{% if true %}" * 5000 + "x" + "{% endif %}" * 5000, "nested too deeply (more than 200 levels)"),
        ("lists", "{{ " + "[" * 5000 + "]" * 5000 + " }}", "nested too deeply"),
        ("chain", "{{ 1" + "+1" * 300000 + " }}", "expression nested more than 1000 levels"),
        ("attr_chain", "{{ messages" + ".x" * 100000 + " }}", "expression nested more than 1000 levels"),
        ("macro_recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macro calls nested more than 100 levels"),
        ("range", "{% for i in range(1000000000) %}{% endfor %}", "range too big"),
        ("repeat", "{{ 'abc' * 1000000000 }}", "repetition larger than 256 MiB"),
        ("endless_loops", "{% for a in range(100000) %}{% for b in range(100000) %}{{ a }}{% endfor %}{% endfor %}",
         "render stopped after 5000000 steps"),
        ("quadratic_concat", "{% set ns = namespace(s='') %}{% for i in range(100000) %}"
                             "{% set ns.s = ns.s + 'x' * 1000 %}{% endfor %}{{ ns.s | length }}",
         "render stopped after 5000000 steps"),
        ("doubling", "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                     "{% endfor %}{{ ns.s | length }}", "render stopped after 5000000 steps"),
        ("concat_cap", "{{ ('x' * 150000000 + 'y' * 150000000) | length }}", "string larger than 256 MiB"),
    ]
    for label, tmpl, want in cases:
        template_case(args, label, tmpl, want, timeout=120)
    # a real-world-style bug: the Hermes-style template recurses for ever on a "null" schema type;
    # Jinja2 dies with RecursionError, tagflow stops at 100 macro levels
    hermes = os.path.join(args.fixtures, "hermes_style.jinja")
    req = json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": {"type": "object", "properties": {
            "x": {"type": ["string", "null"], "description": "x"}}}}}]}) + "\n"
    expect_refused("hermes_null_type", [args.render, "--template", hermes], req, "macro calls nested more than 100 levels",
                   reference=[sys.executable, os.path.join(HERE, "chat_reference.py"), "--template", hermes],
                   same_message="RecursionError")
    # a 1.5 MB template with 40k tags renders
    big = ("text {{ messages[0].content }} {% if add_generation_prompt %}g{% endif %}\n" * 20000)
    path = write(args.workdir, "nesting_big.jinja", big)
    rc, out, err = run([args.render, "--template", path], ONE_MSG, timeout=120)
    if rc != 0 or not json.loads(out).startswith("text hi gtext hi g"):
        failures.append(f"big template: exit {rc} {err[:200]!r}")
        print(f"FAIL big_template: exit {rc}")
    else:
        print(f"ok   big_template: {len(big)} bytes of template, {len(out)} bytes out")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("group", choices=["syntax", "unsupported", "raise", "messages", "nesting"])
    ap.add_argument("--render", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--fixtures", default=os.path.join(HERE, "fixtures"))
    args = ap.parse_args()
    if args.group in ("syntax", "raise"):
        try:
            import jinja2  # noqa: F401
        except ImportError:
            print("FAIL: python3-jinja2 is missing: run `bash share/setup.sh --tests`")
            return 1
    os.makedirs(args.workdir, exist_ok=True)
    globals()["group_" + args.group](args)
    if failures:
        print(f"{len(failures)} case(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
