// SPDX-License-Identifier: Apache-2.0
// policy: the transformer's layers, its seeded initialisation and the one code path
// (run) behind both the full forward and the KV-cache step. Attention is written out by
// hand (LibTorch 1.13 has no fused scaled-dot-product attention).
#include "model/policy.hpp"

#include <cmath>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/error.hpp"

namespace tagflow::model {

PolicyImpl::PolicyImpl(const PolicyConfig& cfg, uint64_t seed) : cfg_(cfg) {
    if (cfg.vocab < 2 || cfg.d_model < 1 || cfg.n_layers < 1 || cfg.n_heads < 1 ||
        cfg.d_ff < 1 || cfg.max_seq < 2)
        throw ConfigError("policy: vocab, d_model, n_layers, n_heads, d_ff, max_seq must be positive");
    if (cfg.d_model % cfg.n_heads != 0)
        throw ConfigError("policy: d_model (" + std::to_string(cfg.d_model) +
                          ") must be a multiple of n_heads (" + std::to_string(cfg.n_heads) + ")");
    namespace nn = torch::nn;
    const int64_t d = cfg.d_model;
    tok_emb_ = register_module("tok_emb", nn::Embedding(cfg.vocab, d));
    pos_emb_ = register_module("pos_emb", nn::Embedding(cfg.max_seq, d));
    for (int64_t i = 0; i < cfg.n_layers; ++i) {
        const std::string p = "h" + std::to_string(i) + "_";
        Layer L;
        L.ln1 = register_module(p + "ln1", nn::LayerNorm(nn::LayerNormOptions({d})));
        L.qkv = register_module(p + "qkv", nn::Linear(d, 3 * d));
        L.proj = register_module(p + "proj", nn::Linear(d, d));
        L.ln2 = register_module(p + "ln2", nn::LayerNorm(nn::LayerNormOptions({d})));
        L.fc1 = register_module(p + "fc1", nn::Linear(d, cfg.d_ff));
        L.fc2 = register_module(p + "fc2", nn::Linear(cfg.d_ff, d));
        layers_.push_back(L);
    }
    ln_f_ = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({d})));
    head_ = register_module("head", nn::Linear(nn::LinearOptions(d, cfg.vocab).bias(false)));
    reset_parameters(seed);
}

void PolicyImpl::reset_parameters(uint64_t seed) {
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(seed);
    const double std0 = 0.02;
    const double std_res = std0 / std::sqrt(2.0 * static_cast<double>(cfg_.n_layers));
    // named_parameters() is ordered by registration, so the draw order is fixed.
    for (auto& item : named_parameters(/*recurse=*/true)) {
        const std::string& name = item.key();
        torch::Tensor& p = item.value();
        const bool is_ln = name.find("ln") != std::string::npos;
        const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
        if (is_ln) p.fill_(is_bias ? 0.0 : 1.0);
        else if (is_bias) p.zero_();
        else if (name.find("proj") != std::string::npos || name.find("fc2") != std::string::npos)
            p.normal_(0.0, std_res, gen);
        else
            p.normal_(0.0, std0, gen);
    }
}

int64_t PolicyImpl::num_parameters() const {
    int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
}

KVCache PolicyImpl::make_cache(int64_t batch, const torch::Tensor& pad) const {
    const int64_t dh = cfg_.d_model / cfg_.n_heads;
    KVCache c;
    for (int64_t i = 0; i < cfg_.n_layers; ++i) {
        c.k.push_back(torch::zeros({batch, cfg_.n_heads, cfg_.max_seq, dh}));
        c.v.push_back(torch::zeros({batch, cfg_.n_heads, cfg_.max_seq, dh}));
    }
    if (pad.defined() && pad.numel() > 0 && pad.max().item<int64_t>() > 0) {
        TORCH_CHECK(pad.dim() == 1 && pad.size(0) == batch, "make_cache: pad must be [batch]");
        c.pad = pad.to(torch::kInt64);
        auto slots = torch::arange(cfg_.max_seq, torch::kInt64).unsqueeze(0);  // [1, S]
        c.key_valid = slots >= c.pad.unsqueeze(1);                             // [B, S]
    }
    return c;
}

torch::Tensor PolicyImpl::forward(const torch::Tensor& tokens) { return run(tokens, nullptr); }

torch::Tensor PolicyImpl::forward_cached(const torch::Tensor& tokens, KVCache& cache) {
    return run(tokens, &cache);
}

torch::Tensor PolicyImpl::run(const torch::Tensor& tokens, KVCache* cache) {
    TORCH_CHECK(tokens.dim() == 2, "policy: tokens must be [B, T]");
    const int64_t B = tokens.size(0), T = tokens.size(1);
    const int64_t H = cfg_.n_heads, d = cfg_.d_model, dh = d / H;
    const int64_t past = cache ? cache->len : 0;
    const int64_t total = past + T;
    TORCH_CHECK(total <= cfg_.max_seq, "policy: sequence of ", total, " tokens exceeds max_seq ",
                cfg_.max_seq);

    // Slot s of row b holds position s - pad[b] (padding slots get position 0).
    auto slots = torch::arange(past, total, torch::kInt64).unsqueeze(0);  // [1, T]
    torch::Tensor pos = slots.expand({B, T});
    if (cache && cache->pad.defined()) pos = (slots - cache->pad.unsqueeze(1)).clamp_min(0);

    // allowed[b, i, j]: query slot past+i may read key slot j. Causal, and padding keys
    // are hidden except from the padding slot itself (keeps padding rows finite).
    auto q_slot = slots.view({T, 1});
    auto k_slot = torch::arange(total, torch::kInt64).view({1, total});
    torch::Tensor allowed = (k_slot <= q_slot).view({1, 1, T, total});
    if (cache && cache->key_valid.defined()) {
        auto valid = cache->key_valid.narrow(1, 0, total).view({B, 1, 1, total});
        allowed = allowed & (valid | (k_slot == q_slot).view({1, 1, T, total}));
    }
    const bool need_mask = T > 1 || (cache && cache->key_valid.defined());

    torch::Tensor x = tok_emb_->forward(tokens) + pos_emb_->forward(pos);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
    for (size_t li = 0; li < layers_.size(); ++li) {
        Layer& L = layers_[li];
        auto qkv = L.qkv->forward(L.ln1->forward(x)).view({B, T, 3, H, dh}).permute({2, 0, 3, 1, 4});
        torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];  // [B, H, T, dh]
        if (cache) {
            cache->k[li].narrow(2, past, T).copy_(k);
            cache->v[li].narrow(2, past, T).copy_(v);
            k = cache->k[li].narrow(2, 0, total);
            v = cache->v[li].narrow(2, 0, total);
        }
        auto att = torch::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, T, total]
        if (need_mask) att = att.masked_fill(allowed.logical_not(), -INFINITY);
        att = torch::softmax(att, -1);
        auto y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, d});
        x = x + L.proj->forward(y);
        x = x + L.fc2->forward(torch::gelu(L.fc1->forward(L.ln2->forward(x))));
    }
    if (cache) cache->len = total;
    return head_->forward(ln_f_->forward(x));
}

void copy_parameters(PolicyImpl& dst, const PolicyImpl& src) {
    torch::NoGradGuard no_grad;
    auto d = dst.parameters();
    auto s = src.parameters();
    TORCH_CHECK(d.size() == s.size(), "copy_parameters: models differ");
    for (size_t i = 0; i < d.size(); ++i) d[i].copy_(s[i]);
}

}  // namespace tagflow::model
