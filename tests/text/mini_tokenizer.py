#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A small tokenizer cut from a real byte-level BPE `tokenizer.json` (Qwen3's in the tests).

Keeps the first N vocabulary ids (the 256 byte symbols come first), the merges whose two parts and
result all stay, and every added token renumbered to N, N+1, ... (tokenizer_config.json's
added_tokens_decoder likewise); the normalizer, pre-tokenizer, decoder and chat template are the
original's. The result is a valid Hugging Face tokenizer with the original's behaviour on text and
special tokens but a vocabulary ~40x smaller, for tests that exercise the data, reward and training
plumbing (where the 151,936-row output projection would make every step and every start slow), not
tokenizer parity, which keeps the real file.

Usage: mini_tokenizer.py SRC_DIR DST_DIR [N]   (as a module: derive(src, dst, n) -> dst)
"""
import json
import os
import sys

DEFAULT_N = 4096


def derive(src, dst, n=DEFAULT_N):
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    if model.get("type") != "BPE":
        raise ValueError(f"{src}: not a BPE tokenizer")
    vocab = {t: i for t, i in model["vocab"].items() if i < n}
    merges = []
    for m in model["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    model["vocab"], model["merges"] = vocab, merges
    remap = {}
    for k, t in enumerate(sorted(tok["added_tokens"], key=lambda t: t["id"])):
        remap[t["id"]] = n + k
        t["id"] = n + k
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg_path = os.path.join(src, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
        dec = cfg.get("added_tokens_decoder", {})
        cfg["added_tokens_decoder"] = {str(remap.get(int(k), int(k))): v for k, v in dec.items()}
        with open(os.path.join(dst, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
    return dst


def vocab_size(dst):
    """Ids the derived tokenizer uses (model vocabulary plus added tokens)."""
    with open(os.path.join(dst, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    return max(max(tok["model"]["vocab"].values()), max(t["id"] for t in tok["added_tokens"])) + 1


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[-1])
    print(derive(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else DEFAULT_N))
