#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reference renderer for the chat-template parity tests: Jinja2 (Debian's python3-jinja2) set up
exactly as Hugging Face transformers sets it up in chat_template_utils._compile_jinja_template
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the loopcontrols extension, a
{% generation %} tag, its own tojson, raise_exception, strftime_now) and called as
apply_chat_template(tokenize=False) calls it. Same command line and JSON Lines as chat_render:

    chat_reference.py [--config tokenizer_config.json] [--template FILE] < in.jsonl > out.jsonl

Exit 2 with "chat_reference: line N: why" on the first line that fails to render."""
import argparse
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("chat_reference: python3-jinja2 is missing: run `bash share/setup.sh --tests`", file=sys.stderr)
    sys.exit(3)


class GenerationTag(Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def special_tokens(cfg):
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = cfg.get(key)
        if v is None:
            continue
        out[key] = v["content"] if isinstance(v, dict) else v
    extra = cfg.get("additional_special_tokens")
    if isinstance(extra, list):
        out["additional_special_tokens"] = [t["content"] if isinstance(t, dict) else t for t in extra]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config")
    ap.add_argument("--template")
    args = ap.parse_args()
    cfg = {}
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            cfg = json.load(f)
    if args.template:
        with open(args.template, encoding="utf-8", newline="") as f:
            templates = {"default": f.read()}
    else:
        t = cfg["chat_template"]
        templates = {"default": t} if isinstance(t, str) else {e["name"]: e["template"] for e in t}
    compiled = {}
    try:
        for name, src in templates.items():
            compiled[name] = compile_template(src)
    except jinja2.TemplateError as e:
        print(f"chat_reference: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
    special = special_tokens(cfg)
    out = []
    for n, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        req = json.loads(line)
        tools = req.get("tools")
        if len(compiled) == 1 and "default" in compiled:
            tmpl = compiled["default"]
        elif tools is not None and "tool_use" in compiled:
            tmpl = compiled["tool_use"]
        else:
            tmpl = compiled["default"]
        extra = {k: v for k, v in req.items() if k not in ("messages", "add_generation_prompt", "tools")}
        kwargs = {**special, **extra}
        try:
            text = tmpl.render(messages=req["messages"], tools=tools, documents=None,
                               add_generation_prompt=req.get("add_generation_prompt", False), **kwargs)
        except Exception as e:  # noqa: BLE001 - any template error is reported like chat_render does
            print(f"chat_reference: line {n}: {type(e).__name__}: {e}", file=sys.stderr)
            sys.exit(2)
        out.append(json.dumps(text, ensure_ascii=False))
    sys.stdout.write("".join(s + "\n" for s in out))


if __name__ == "__main__":
    main()
