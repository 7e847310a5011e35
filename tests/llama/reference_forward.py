#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# reference_forward.py <dir>: an independent Llama/Qwen2/Qwen3 forward pass written from the
# Hugging Face definitions (modeling_llama/qwen2/qwen3, modeling_rope_utils; not from
# tagflow's C++), in float64 with Debian's python3-torch. Reads <dir>/config.json and the
# weights (model.safetensors or the shards listed in model.safetensors.index.json) with a tiny
# pure-Python safetensors parser (no `safetensors` package), checks that the checkpoint holds
# exactly the tensors Hugging Face's model of that config has (no lm_head.weight when tied),
# recomputes the logits for the token ids in <dir>/expected.safetensors, and asserts
# max |C++ - reference| < 1e-4 for the full ("logits"), KV-cache ("logits_cached") and
# slot-decoder ("logits_engine", where not NaN) C++ outputs. With rope_scaling or q/k norms it
# also shows that they matter: the reference without them differs by more than 1e-2.
# Exit 0 on success, 1 on mismatch.
import json
import math
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


def head_dim(cfg):
    # Qwen3Config defaults head_dim to 128; Llama/Qwen2 to hidden_size / num_attention_heads.
    default = 128 if cfg["model_type"] == "qwen3" else cfg["hidden_size"] // cfg["num_attention_heads"]
    return cfg.get("head_dim") or default


def has_qk_norm(cfg):
    return cfg["model_type"] == "qwen3"


def rope_inv_freq(cfg, D, scaling=True):
    theta = cfg.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    rs = cfg.get("rope_scaling")
    if not scaling or rs is None or rs.get("rope_type", rs.get("type")) == "default":
        return inv_freq
    assert rs.get("rope_type", rs.get("type")) == "llama3", rs
    # Llama 3.1 (modeling_rope_utils "llama3"): keep the high frequencies, divide the low ones
    # by factor, and blend linearly (in old_len / wavelength) between the two bands.
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    out = []
    for f in inv_freq.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
            out.append(f)
        elif wavelen > old / lo:
            out.append(f / factor)
        else:
            a = (old / wavelen - lo) / (hi - lo)
            out.append((1 - a) * f / factor + a * f)
    return torch.tensor(out, dtype=torch.float64)


def expected_names(cfg):
    # The parameters of Hugging Face's *ForCausalLM for this config (what save_pretrained writes).
    mt = cfg["model_type"]
    qkv_bias = True if mt == "qwen2" else cfg.get("attention_bias", False)
    o_bias = False if mt == "qwen2" else cfg.get("attention_bias", False)
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not cfg.get("tie_word_embeddings", False):
        names.add("lm_head.weight")
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names |= {p + n for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")}
        for proj in ("q", "k", "v", "o"):
            names.add(p + f"self_attn.{proj}_proj.weight")
            if (proj != "o" and qkv_bias) or (proj == "o" and o_bias):
                names.add(p + f"self_attn.{proj}_proj.bias")
        if has_qk_norm(cfg):
            names |= {p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"}
    return names


def forward(cfg, w, tokens, rope_scaling=True, qk_norm=True):
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D = head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    B, T = tokens.shape
    inv_freq = rope_inv_freq(cfg, D, rope_scaling)
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
        q = q.view(B, T, H, D)
        k = k.view(B, T, KV, D)
        if has_qk_norm(cfg) and qk_norm:  # Qwen3: RMSNorm over each head's D values, before RoPE
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
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
    want = expected_names(cfg)
    if set(w) != want:
        print(f"{d}: checkpoint tensors differ from the Hugging Face model's: "
              f"missing {sorted(want - set(w))}, unexpected {sorted(set(w) - want)}")
        sys.exit(1)
    exp = read_safetensors(os.path.join(d, "expected.safetensors"))
    tokens = exp["tokens"].round().long()
    ref = forward(cfg, w, tokens)
    ok = True
    for key in ("logits", "logits_cached", "logits_engine"):
        got = exp[key]
        have = ~torch.isnan(got).any(-1)  # positions with logits ([B, T])
        n = int(have.sum())
        diff = (got - ref)[have].abs().max().item() if n else float("inf")
        print(f"{d}: {cfg['model_type']} {key}: max |C++ - reference| = {diff:.3e} over {n} positions "
              f"(|ref|max {ref.abs().max().item():.3f}, tol {TOL:g})")
        # The engine returns logits only for each call's last token; the others return all.
        ok = ok and diff < TOL and n >= (tokens.numel() if key != "logits_engine" else tokens.numel() // 2)
    # The features under test change the numbers: without them the reference is far off.
    ablations = []
    if cfg.get("rope_scaling") is not None:
        ablations.append(("without rope_scaling", dict(rope_scaling=False)))
    if has_qk_norm(cfg):
        ablations.append(("without q/k norms", dict(qk_norm=False)))
    for what, kw in ablations:
        diff = (forward(cfg, w, tokens, **kw) - exp["logits"]).abs().max().item()
        print(f"{d}: reference {what}: max |C++ - it| = {diff:.3e} (must be > 1e-2)")
        ok = ok and diff > 1e-2
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
