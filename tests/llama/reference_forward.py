#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# reference_forward.py <dir>: an independent Llama/Qwen2 forward pass written from the
# Hugging Face formulas (not from tagflow's C++), in float64 with Debian's python3-torch.
# Reads <dir>/config.json and the weights (model.safetensors or the shards listed in
# model.safetensors.index.json) with a tiny pure-Python safetensors parser (no `safetensors`
# package), recomputes the logits for the token ids in <dir>/expected.safetensors, and
# asserts max |C++ - reference| < 1e-4 for both the full ("logits") and KV-cache
# ("logits_cached") C++ outputs. Exit 0 on success, 1 on mismatch.
import json
import os
import struct
import sys

import numpy as np
import torch

TOL = 1e-4


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = data[b:e]
        shape = info["shape"]
        if info["dtype"] == "F32":
            arr = np.frombuffer(buf, dtype="<f4").astype(np.float64)
        elif info["dtype"] == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float64)
        elif info["dtype"] == "BF16":
            u16 = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"{path}: dtype {info['dtype']} not handled")
        out[name] = torch.from_numpy(arr.reshape(shape).copy())
    return out


def load_weights(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wm = json.load(f)["weight_map"]
        w = {}
        for shard in sorted(set(wm.values())):
            w.update(read_safetensors(os.path.join(d, shard)))
        assert set(w) == set(wm), "index and shards disagree"
        return w
    return read_safetensors(os.path.join(d, "model.safetensors"))


def rms_norm(x, weight, eps):
    # HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then times weight
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def linear(x, w, b=None):
    y = x @ w.T
    return y + b if b is not None else y


def forward(cfg, w, tokens):
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta", 10000.0)
    B, T = tokens.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)

    h = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = linear(x, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias"))
        k = linear(x, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias"))
        v = linear(x, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias"))
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, KV, D).transpose(1, 2)
        v = v.view(B, T, KV, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        heads = []
        for qh in range(H):
            kvh = qh // (H // KV)  # GQA: query head i uses kv head i // (H / KV)
            s = q[:, qh] @ k[:, kvh].transpose(-1, -2) / (D ** 0.5) + causal
            heads.append(torch.softmax(s, dim=-1) @ v[:, kvh])
        o = torch.stack(heads, dim=1).transpose(1, 2).reshape(B, T, H * D)
        h = h + linear(o, w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        g = linear(x, w[p + "mlp.gate_proj.weight"])
        u = linear(x, w[p + "mlp.up_proj.weight"])
        h = h + linear(torch.nn.functional.silu(g) * u, w[p + "mlp.down_proj.weight"])
    h = rms_norm(h, w["model.norm.weight"], eps)
    if cfg.get("tie_word_embeddings", False):
        assert "lm_head.weight" not in w, "tied checkpoint should not store lm_head.weight"
        head = w["model.embed_tokens.weight"]
    else:
        head = w["lm_head.weight"]
    return h @ head.T


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    w = load_weights(d)
    if cfg["model_type"] == "qwen2":
        assert "model.layers.0.self_attn.q_proj.bias" in w and "model.layers.0.self_attn.o_proj.bias" not in w
    exp = read_safetensors(os.path.join(d, "expected.safetensors"))
    tokens = exp["tokens"].round().long()
    ref = forward(cfg, w, tokens)
    ok = True
    for key in ("logits", "logits_cached"):
        diff = (exp[key] - ref).abs().max().item()
        print(f"{d}: {cfg['model_type']} {key}: max |C++ - reference| = {diff:.3e} "
              f"(|ref|max {ref.abs().max().item():.3f}, tol {TOL:g})")
        ok = ok and diff < TOL
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
