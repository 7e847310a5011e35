#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""generate_ref.py: the baseline of generate_bench — a plain PyTorch eager greedy decoding
loop with a KV cache (Hugging Face style: separate q/k/v projections, rotate_half RoPE,
cache grown with torch.cat, GQA by repeating k/v heads), fp32, under torch.inference_mode.

    generate_ref.py --model DIR --batch B --prompt-len P --new-tokens N
                    [--iters 3] [--warmup 1] [--threads 1] --out RESULT.json

Prompts: row b, position t holds token (7*b + 13*t + 3) % vocab (generate_bench uses the same).
Writes {"tokens_per_s", "sec_per_iter" (mean over iterations), "best_tokens_per_s",
"best_sec_per_iter" (fastest iteration), "tokens": [[...]], "logprobs": [[...]],
"gaps": [[...]]}: the greedy tokens of the last iteration, their log_softmax values and the
top-1/top-2 logit gap at each step (so the benchmark can tell a legitimate near-tie flip from a
bug). Reads the weights with tests/llama/reference_forward.py's safetensors parser.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama"))
import reference_forward as ref  # noqa: E402


class Model:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            self.cfg = c = json.load(f)
        self.w = {k: v.to(torch.float32).contiguous() for k, v in ref.load_weights(d).items()}
        self.H = c["num_attention_heads"]
        self.KV = c.get("num_key_value_heads", self.H)
        self.D = c.get("head_dim") or c["hidden_size"] // self.H
        self.eps = c["rms_norm_eps"]
        self.L = c["num_hidden_layers"]
        theta = c.get("rope_theta", 10000.0)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.D, 2, dtype=torch.int64).float() / self.D))
        tied = c.get("tie_word_embeddings", False)
        self.lm_head = self.w["model.embed_tokens.weight"] if tied else self.w["lm_head.weight"]

    def rms(self, x, weight):
        var = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(var + self.eps) * weight

    @staticmethod
    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def forward(self, tokens, cache, start):
        """tokens [B, T] at positions start.. ; cache: list of (k, v) per layer or None."""
        B, T = tokens.shape
        H, KV, D = self.H, self.KV, self.D
        pos = torch.arange(start, start + T, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        h = F.embedding(tokens, self.w["model.embed_tokens.weight"])
        new_cache = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            w = self.w
            x = self.rms(h, w[p + "input_layernorm.weight"])
            q = F.linear(x, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias"))
            k = F.linear(x, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias"))
            v = F.linear(x, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias"))
            q = q.view(B, T, H, D).transpose(1, 2)
            k = k.view(B, T, KV, D).transpose(1, 2)
            v = v.view(B, T, KV, D).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            if cache is not None:
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
            new_cache.append((k, v))
            if H != KV:
                k = k.repeat_interleave(H // KV, dim=1)
                v = v.repeat_interleave(H // KV, dim=1)
            s = torch.matmul(q, k.transpose(-2, -1)) / (D ** 0.5)
            if T > 1:
                S = k.shape[2]
                mask = torch.full((T, S), float("-inf")).triu(S - T + 1)
                s = s + mask
            a = torch.matmul(torch.softmax(s, dim=-1), v)
            a = a.transpose(1, 2).reshape(B, T, H * D)
            h = h + F.linear(a, w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))
            x = self.rms(h, w[p + "post_attention_layernorm.weight"])
            g = F.linear(x, w[p + "mlp.gate_proj.weight"])
            u = F.linear(x, w[p + "mlp.up_proj.weight"])
            h = h + F.linear(F.silu(g) * u, w[p + "mlp.down_proj.weight"])
        h = self.rms(h[:, -1], self.w["model.norm.weight"])
        return F.linear(h, self.lm_head), new_cache

    def generate(self, prompts, n):
        """Greedy: prefill, then n - 1 decode steps; returns tokens, logprobs, gaps [B, n]."""
        toks, lps, gaps = [], [], []
        logits, cache = self.forward(prompts, None, 0)
        pos = prompts.shape[1]
        for step in range(n):
            top2 = logits.topk(2, dim=-1).values
            t = logits.argmax(-1)
            toks.append(t)
            lps.append(torch.log_softmax(logits, -1).gather(-1, t[:, None])[:, 0])
            gaps.append(top2[:, 0] - top2[:, 1])
            if step + 1 == n:
                break
            logits, cache = self.forward(t[:, None], cache, pos)
            pos += 1
        return torch.stack(toks, 1), torch.stack(lps, 1), torch.stack(gaps, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--prompt-len", type=int, required=True)
    ap.add_argument("--new-tokens", type=int, required=True)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = Model(a.model)
    V = m.cfg["vocab_size"]
    b = torch.arange(a.batch)[:, None]
    t = torch.arange(a.prompt_len)[None, :]
    prompts = (7 * b + 13 * t + 3) % V
    with torch.inference_mode():
        for _ in range(a.warmup):
            m.generate(prompts, a.new_tokens)
        times = []
        for _ in range(max(1, a.iters)):
            t0 = time.perf_counter()
            toks, lps, gaps = m.generate(prompts, a.new_tokens)
            times.append(time.perf_counter() - t0)
    sec, best = sum(times) / len(times), min(times)
    out = {"tokens_per_s": a.batch * a.new_tokens / sec, "sec_per_iter": sec,
           "best_tokens_per_s": a.batch * a.new_tokens / best, "best_sec_per_iter": best,
           "tokens": toks.tolist(), "logprobs": lps.tolist(), "gaps": gaps.tolist()}
    with open(a.out, "w") as f:
        json.dump(out, f)
    print(f"generate_ref: batch {a.batch}: {out['tokens_per_s']:.1f} tokens/s ({sec * 1e3:.1f} ms per iteration)")


if __name__ == "__main__":
    main()
