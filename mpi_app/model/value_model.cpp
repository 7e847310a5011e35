// SPDX-License-Identifier: Apache-2.0
// value_model: the critic's forward (RoPE, decoder layers, final norm, scalar head), its
// initialisation from a policy, and HF-named state dicts. See value_model.hpp.
#include "model/value_model.hpp"

#include <set>
#include <sstream>

#include <torch/torch.h>

#include "common/error.hpp"

namespace tagflow::model {

ValueModelImpl::ValueModelImpl(const HfConfig& cfg, uint64_t seed) : cfg_(cfg) {
    cfg_.validate("ValueModel");
    model = register_module("model", LlamaBackbone(cfg_));
    score = register_module("score", torch::nn::Linear(torch::nn::LinearOptions(cfg_.hidden_size, 1).bias(true)));
    inv_freq_ = register_buffer("inv_freq", rope_inv_freq(cfg_));  // the same RoPE table as LlamaModelImpl
    // Draw the backbone exactly as a policy with this seed would, then zero the head.
    LlamaModelImpl donor(cfg_, seed);
    init_from_policy(donor);
    torch::NoGradGuard no_grad;
    score->weight.zero_();
    score->bias.zero_();
}

torch::Tensor ValueModelImpl::hidden_states(const torch::Tensor& tokens) {
    TORCH_CHECK(tokens.dim() == 2, "ValueModel: tokens must be [B, T], got ", tokens.sizes());
    const int64_t T = tokens.size(1);
    TORCH_CHECK(T <= cfg_.max_position_embeddings, "ValueModel: ", T, " positions beyond max_position_embeddings ",
                cfg_.max_position_embeddings);
    const torch::Tensor pos =
        torch::arange(0, T, torch::TensorOptions().dtype(torch::kFloat).device(inv_freq_.device()));
    const torch::Tensor freqs = torch::outer(pos, inv_freq_);
    const torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    const torch::Tensor cos = emb.cos(), sin = emb.sin();
    torch::Tensor h = model->embed(tokens, 0);
    return model->norm(model->run_layers(h, cos, sin));
}

torch::Tensor ValueModelImpl::forward(const torch::Tensor& tokens) {
    return score(hidden_states(tokens)).squeeze(-1).to(torch::kFloat32);
}

torch::Tensor ValueModelImpl::forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                             const torch::Tensor& segments) {
    return score(packed_hidden_states(*model, cfg_, tokens, positions, segments)).squeeze(-1).to(torch::kFloat32);
}

void ValueModelImpl::init_from_policy(const LlamaModelImpl& policy) {
    std::map<std::string, torch::Tensor> backbone;
    for (const auto& [name, t] : policy.hf_state_dict())
        if (name.rfind("model.", 0) == 0) backbone[name] = t.detach();
    load_hf_state_dict(backbone, /*strict=*/false);
    // Every backbone tensor must have come across (same shapes, same layer count).
    for (const auto& item : named_parameters(/*recurse=*/true))
        if (item.key().rfind("model.", 0) == 0 && !backbone.count(item.key()))
            throw Error("ValueModel: policy lacks '" + item.key() + "' (different shape?)");
}

std::vector<std::pair<std::string, torch::Tensor>> ValueModelImpl::hf_state_dict() const {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
    return out;
}

void ValueModelImpl::load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors, bool strict) {
    torch::NoGradGuard no_grad;
    auto params = named_parameters(/*recurse=*/true);
    std::set<std::string> loaded;
    for (const auto& [name, t] : tensors) {
        if (name == "lm_head.weight" || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
        torch::Tensor* p = params.find(name);
        if (p == nullptr) throw Error("ValueModel: unexpected tensor '" + name + "'");
        if (p->sizes() != t.sizes()) {
            std::ostringstream os;
            os << "ValueModel: tensor '" << name << "' has shape " << t.sizes() << ", model expects " << p->sizes();
            throw Error(os.str());
        }
        p->copy_(t);
        loaded.insert(name);
    }
    if (!strict) return;
    std::string missing;
    for (const auto& item : params)
        if (!loaded.count(item.key())) missing += (missing.empty() ? "" : ", ") + item.key();
    if (!missing.empty()) throw Error("ValueModel: state lacks " + missing);
}

}  // namespace tagflow::model
