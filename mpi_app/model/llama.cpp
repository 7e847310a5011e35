// SPDX-License-Identifier: Apache-2.0
// llama: the Llama/Qwen2/Qwen3 decoder, its RoPE frequencies, its KV-cache path, and
// checkpoint-directory I/O (config.json + safetensors, single or sharded). See llama.hpp.
#include "model/llama.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "common/safe_file.hpp"
#include "model/layer_checkpoint.hpp"

namespace tagflow::model {
namespace fs = std::filesystem;
namespace F = torch::nn::functional;

namespace {

torch::Dtype torch_dtype_of(st::DType d) {
    switch (d) {
        case st::DType::F32: return torch::kFloat;
        case st::DType::F16: return torch::kHalf;
        case st::DType::BF16: return torch::kBFloat16;
    }
    return torch::kFloat;
}

const char* config_dtype_name(st::DType d) {
    switch (d) {
        case st::DType::F32: return "float32";
        case st::DType::F16: return "float16";
        case st::DType::BF16: return "bfloat16";
    }
    return "float32";
}

torch::Tensor rotate_half(const torch::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
    return x * cos + rotate_half(x) * sin;
}

void write_text(const fs::path& p, const std::string& text) {
    write_file_replace(p.string(), text);  // a temporary renamed into place: never through a planted link
}

}  // namespace

// ---- torch glue ----

std::map<std::string, torch::Tensor> load_safetensors(const std::string& path, torch::Dtype dtype) {
    st::Reader r(path);
    std::map<std::string, torch::Tensor> out;
    for (const auto& info : r.header().tensors) {
        torch::Tensor t = torch::empty(info.shape, torch::TensorOptions().dtype(torch_dtype_of(info.dtype)));
        if (info.nbytes() > 0) r.read(info, t.data_ptr());
        out[info.name] = t.to(dtype);
    }
    return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      st::DType dtype, const std::map<std::string, std::string>& metadata) {
    std::vector<torch::Tensor> keep;
    std::vector<st::TensorView> views;
    keep.reserve(tensors.size());
    for (const auto& [name, t] : tensors) {
        keep.push_back(t.detach().to(torch::kCPU).to(torch_dtype_of(dtype)).contiguous());
        const torch::Tensor& c = keep.back();
        views.push_back(
            {name, dtype, c.sizes().vec(), c.data_ptr(), static_cast<std::size_t>(c.numel()) * st::dtype_size(dtype)});
    }
    st::write_file(path, views, metadata);
}

// ---- modules ----

torch::Tensor rope_inv_freq(const HfConfig& c) {
    // transformers' _compute_default_rope_parameters, in fp32 like it.
    const torch::Tensor i2 = torch::arange(0, c.head_dim, 2, torch::kLong).to(torch::kFloat);
    const torch::Tensor inv_freq =
        1.0 / torch::pow(static_cast<double>(c.rope_theta), i2 / static_cast<double>(c.head_dim));
    if (c.rope_type != "llama3") return inv_freq;
    // _compute_llama3_parameters, op for op (fp32 tensors, double scalars).
    const double factor = c.rope_factor, low = c.rope_low_freq_factor, high = c.rope_high_freq_factor;
    const auto old_len = static_cast<double>(c.rope_original_max_position_embeddings);
    const double low_freq_wavelen = old_len / low, high_freq_wavelen = old_len / high;
    const torch::Tensor wavelen = 2 * M_PI / inv_freq;
    torch::Tensor out = torch::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
    const torch::Tensor smooth = (old_len / wavelen - low) / (high - low);
    const torch::Tensor smoothed = (1 - smooth) * out / factor + smooth * out;
    const torch::Tensor medium =
        (wavelen < high_freq_wavelen).logical_not() & (wavelen > low_freq_wavelen).logical_not();
    return torch::where(medium, smoothed, out);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
    const torch::Tensor xf = x.to(torch::kFloat);
    const torch::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
    return xf * torch::rsqrt(var + eps_) * weight.to(torch::kFloat);
}

LlamaAttentionImpl::LlamaAttentionImpl(const HfConfig& c)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
    using O = torch::nn::LinearOptions;
    q_proj = register_module("q_proj", torch::nn::Linear(O(c.hidden_size, heads_ * head_dim_).bias(c.qkv_bias)));
    k_proj = register_module("k_proj", torch::nn::Linear(O(c.hidden_size, kv_heads_ * head_dim_).bias(c.qkv_bias)));
    v_proj = register_module("v_proj", torch::nn::Linear(O(c.hidden_size, kv_heads_ * head_dim_).bias(c.qkv_bias)));
    o_proj = register_module("o_proj", torch::nn::Linear(O(heads_ * head_dim_, c.hidden_size).bias(c.o_bias)));
    if (c.qk_norm) {
        q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps));
        k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps));
    }
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                          torch::Tensor* k_cache, torch::Tensor* v_cache,
                                          const torch::Tensor& blocked) {
    const int64_t B = x.size(0), T = x.size(1);
    torch::Tensor q = q_proj(x).view({B, T, heads_, head_dim_});
    torch::Tensor k = k_proj(x).view({B, T, kv_heads_, head_dim_});
    if (q_norm) {  // Qwen3: per-head RMSNorm of q and k, before RoPE
        q = q_norm(q);
        k = k_norm(k);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    torch::Tensor v = v_proj(x).view({B, T, kv_heads_, head_dim_}).transpose(1, 2);
    q = apply_rope(q, cos, sin);
    k = apply_rope(k, cos, sin);
    if (k_cache != nullptr) {
        if (k_cache->defined()) {
            k = torch::cat({*k_cache, k}, 2);
            v = torch::cat({*v_cache, v}, 2);
        }
        *k_cache = k;
        *v_cache = v;
    }
    const int64_t S = k.size(2);
    const int64_t groups = heads_ / kv_heads_;
    if (groups > 1) {  // query head i reads kv head i / groups (HF repeat_kv)
        k = k.repeat_interleave(groups, 1);
        v = v.repeat_interleave(groups, 1);
    }
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim_));
    if (blocked.defined()) {  // packed rows: the caller's block-diagonal causal mask
        scores = scores.masked_fill(blocked, -std::numeric_limits<float>::infinity());
    } else if (T > 1) {  // query t (absolute position S-T+t) sees keys 0..S-T+t
        const torch::Tensor mask =
            torch::ones({T, S}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(S - T + 1);
        scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    }
    const torch::Tensor p = torch::softmax(scores.to(torch::kFloat), -1).to(q.scalar_type());
    const torch::Tensor o = torch::matmul(p, v).transpose(1, 2).reshape({B, T, heads_ * head_dim_});
    return o_proj(o);
}

LlamaMLPImpl::LlamaMLPImpl(const HfConfig& c) {
    using O = torch::nn::LinearOptions;
    gate_proj = register_module("gate_proj", torch::nn::Linear(O(c.hidden_size, c.intermediate_size).bias(false)));
    up_proj = register_module("up_proj", torch::nn::Linear(O(c.hidden_size, c.intermediate_size).bias(false)));
    down_proj = register_module("down_proj", torch::nn::Linear(O(c.intermediate_size, c.hidden_size).bias(false)));
}

torch::Tensor LlamaMLPImpl::forward(const torch::Tensor& x) { return down_proj(F::silu(gate_proj(x)) * up_proj(x)); }

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const HfConfig& c) {
    input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    self_attn = register_module("self_attn", LlamaAttention(c));
    post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    mlp = register_module("mlp", LlamaMLP(c));
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                             torch::Tensor* k_cache, torch::Tensor* v_cache,
                                             const torch::Tensor& blocked) {
    torch::Tensor h = x + self_attn(input_layernorm(x), cos, sin, k_cache, v_cache, blocked);
    return h + mlp(post_attention_layernorm(h));
}

LlamaBackboneImpl::LlamaBackboneImpl(const HfConfig& c) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
    if (c.abs_positions)
        embed_positions =
            register_module("embed_positions", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(LlamaDecoderLayer(c));
    norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor LlamaBackboneImpl::embed(const torch::Tensor& tokens, int64_t start) {
    torch::Tensor h = embed_tokens(tokens);
    if (!embed_positions) return h;
    const int64_t T = tokens.size(1);
    return h + embed_positions(
                   torch::arange(start, start + T, torch::TensorOptions().dtype(torch::kLong).device(tokens.device())))
                   .unsqueeze(0);
}

torch::Tensor LlamaBackboneImpl::embed_at(const torch::Tensor& tokens, const torch::Tensor& positions) {
    torch::Tensor h = embed_tokens(tokens);
    return embed_positions ? h + embed_positions(positions) : h;
}

torch::Tensor LlamaBackboneImpl::run_layers(const torch::Tensor& h, const torch::Tensor& cos,
                                            const torch::Tensor& sin) {
    torch::Tensor x = h;
    for (size_t l = 0; l < layers->size(); ++l) {
        LlamaDecoderLayerImpl* layer = layers[l]->as<LlamaDecoderLayerImpl>();
        x = run_layer(
            activation_checkpointing,
            [layer, cos, sin](const torch::Tensor& in) { return layer->forward(in, cos, sin, nullptr, nullptr); }, x);
    }
    return x;
}

namespace {

// Self-attention of one layer on packed rows, per run of slots: run i = (row, first slot, length)
// attends causally within itself only, so its cost is length^2, not row length^2 (a block-diagonal
// mask over whole rows would cost the latter). Same ops per run as LlamaAttentionImpl::forward.
torch::Tensor attention_runs(LlamaAttentionImpl& a, const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin, const std::vector<std::array<int64_t, 3>>& runs) {
    const int64_t B = x.size(0), T = x.size(1), D = cos.size(-1);
    const int64_t H = a.q_proj->weight.size(0) / D, KV = a.k_proj->weight.size(0) / D;
    torch::Tensor q = a.q_proj(x).view({B, T, H, D});
    torch::Tensor k = a.k_proj(x).view({B, T, KV, D});
    if (a.q_norm) {
        q = a.q_norm(q);
        k = a.k_norm(k);
    }
    q = apply_rope(q.transpose(1, 2), cos, sin);
    k = apply_rope(k.transpose(1, 2), cos, sin);
    torch::Tensor v = a.v_proj(x).view({B, T, KV, D}).transpose(1, 2);
    if (H / KV > 1) {
        k = k.repeat_interleave(H / KV, 1);
        v = v.repeat_interleave(H / KV, 1);
    }
    std::vector<std::vector<torch::Tensor>> rows(static_cast<size_t>(B));
    for (const auto& [b, o, n] : runs) {
        const torch::Tensor qs = q[b].narrow(1, o, n), ks = k[b].narrow(1, o, n), vs = v[b].narrow(1, o, n);
        torch::Tensor scores = torch::matmul(qs, ks.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
        if (n > 1)
            scores = scores.masked_fill(
                torch::ones({n, n}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1),
                -std::numeric_limits<float>::infinity());
        const torch::Tensor p = torch::softmax(scores.to(torch::kFloat), -1).to(qs.scalar_type());
        rows[static_cast<size_t>(b)].push_back(torch::matmul(p, vs));  // [H,n,D]
    }
    std::vector<torch::Tensor> out;
    for (auto& r : rows) out.push_back(torch::cat(r, 1));
    return a.o_proj(torch::stack(out).transpose(1, 2).reshape({B, T, H * D}));
}

}  // namespace

torch::Tensor packed_hidden_states(LlamaBackboneImpl& m, const HfConfig& c, const torch::Tensor& tokens,
                                   const torch::Tensor& positions, const torch::Tensor& segments) {
    TORCH_CHECK(tokens.dim() == 2 && positions.sizes() == tokens.sizes() && segments.sizes() == tokens.sizes(),
                "packed forward: tokens, positions and segments must be [B, T] alike");
    const int64_t B = tokens.size(0), T = tokens.size(1);
    if (tokens.numel() > 0)
        TORCH_CHECK(positions.max().item<int64_t>() < c.max_position_embeddings, "packed forward: position ",
                    positions.max().item<int64_t>(), " beyond max_position_embeddings ", c.max_position_embeddings);
    // Runs of equal segment ids in each row (padding at a row's end is a run of its own).
    const torch::Tensor ids = segments.to(torch::kCPU).contiguous();
    const auto id = ids.accessor<int64_t, 2>();
    std::vector<std::array<int64_t, 3>> runs;
    for (int64_t b = 0; b < B; ++b) {
        int64_t start = 0;
        for (int64_t t = 1; t <= T; ++t)
            if (t == T || id[b][t] != id[b][t - 1]) {
                runs.push_back({b, start, t - start});
                start = t;
            }
    }
    // The same fp32 products as the padded forward's outer(arange(T), inv_freq), per slot.
    const torch::Tensor inv_freq = rope_inv_freq(c).to(tokens.device());
    const torch::Tensor freqs = positions.to(torch::kFloat).unsqueeze(-1) * inv_freq;  // [B,T,D/2]
    const torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);             // [B,1,T,D]
    const torch::Tensor cos = emb.cos(), sin = emb.sin();
    torch::Tensor h = m.embed_at(tokens, positions);
    auto shared_runs = std::make_shared<const std::vector<std::array<int64_t, 3>>>(std::move(runs));
    for (size_t l = 0; l < m.layers->size(); ++l) {
        LlamaDecoderLayerImpl* layer = m.layers[l]->as<LlamaDecoderLayerImpl>();
        h = run_layer(
            m.activation_checkpointing,
            [layer, cos, sin, shared_runs](const torch::Tensor& x) {
                torch::Tensor y =
                    x + attention_runs(*layer->self_attn, layer->input_layernorm(x), cos, sin, *shared_runs);
                return y + layer->mlp(layer->post_attention_layernorm(y));
            },
            h);
    }
    return m.norm(h);
}

LlamaModelImpl::LlamaModelImpl(const HfConfig& cfg, uint64_t seed) : cfg_(cfg) {
    cfg_.validate("LlamaModel");
    model = register_module("model", LlamaBackbone(cfg_));
    if (!cfg_.tie_word_embeddings)
        lm_head = register_module(
            "lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg_.hidden_size, cfg_.vocab_size).bias(false)));
    inv_freq_ = register_buffer("inv_freq", rope_inv_freq(cfg_));
    reset_parameters(seed);
}

void LlamaModelImpl::reset_parameters(uint64_t seed, double std) {
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(seed);
    for (auto& item : named_parameters(/*recurse=*/true)) {
        torch::Tensor p = item.value();
        torch::Tensor draw = torch::empty(p.sizes(), torch::kFloat);
        draw.normal_(0.0, std, gen);
        const std::string& n = item.key();
        const bool is_norm = n.size() >= 11 && n.compare(n.size() - 11, 11, "norm.weight") == 0;
        if (is_norm) draw += 1.0;
        p.copy_(draw);
    }
}

torch::Tensor LlamaModelImpl::run(const torch::Tensor& tokens, LlamaKVCache* cache) {
    TORCH_CHECK(tokens.dim() == 2, "LlamaModel: tokens must be [B, T], got ", tokens.sizes());
    const int64_t T = tokens.size(1);
    const int64_t start = cache ? cache->len : 0;
    TORCH_CHECK(start + T <= cfg_.max_position_embeddings, "LlamaModel: position ", start + T - 1,
                " beyond max_position_embeddings ", cfg_.max_position_embeddings);
    const torch::Tensor pos =
        torch::arange(start, start + T, torch::TensorOptions().dtype(torch::kFloat).device(inv_freq_.device()));
    const torch::Tensor freqs = torch::outer(pos, inv_freq_);  // [T, D/2]
    const torch::Tensor emb = torch::cat({freqs, freqs}, -1);  // [T, D]: rotate-half layout
    const torch::Tensor cos = emb.cos(), sin = emb.sin();

    torch::Tensor h = model->embed(tokens, start);
    const auto n_layers = static_cast<int64_t>(model->layers->size());
    if (cache) {
        if (cache->k.empty()) {
            cache->k.resize(static_cast<std::size_t>(n_layers));
            cache->v.resize(static_cast<std::size_t>(n_layers));
        }
        TORCH_CHECK(static_cast<int64_t>(cache->k.size()) == n_layers, "LlamaModel: cache has wrong layer count");
    }
    if (cache) {
        for (int64_t l = 0; l < n_layers; ++l) {
            const auto li = static_cast<std::size_t>(l);
            h = model->layers[li]->as<LlamaDecoderLayerImpl>()->forward(h, cos, sin, &cache->k[li], &cache->v[li]);
        }
    } else {
        h = model->run_layers(h, cos, sin);
    }
    h = model->norm(h);
    if (cache) cache->len += T;
    return head(h);
}

torch::Tensor LlamaModelImpl::head(const torch::Tensor& hidden) {
    return cfg_.tie_word_embeddings ? F::linear(hidden, model->embed_tokens->weight) : lm_head(hidden);
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& tokens) { return run(tokens, nullptr); }

torch::Tensor LlamaModelImpl::forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                             const torch::Tensor& segments) {
    return head(packed_hidden_states(*model, cfg_, tokens, positions, segments));
}

LlamaKVCache LlamaModelImpl::make_cache() const { return LlamaKVCache{}; }

torch::Tensor LlamaModelImpl::forward_cached(const torch::Tensor& tokens, LlamaKVCache& cache) {
    return run(tokens, &cache);
}

std::vector<std::pair<std::string, torch::Tensor>> LlamaModelImpl::hf_state_dict() const {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& item : named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
    return out;
}

void LlamaModelImpl::load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors, bool strict) {
    torch::NoGradGuard no_grad;
    auto params = named_parameters(/*recurse=*/true);
    std::set<std::string> loaded;
    const std::string inv = "rotary_emb.inv_freq";
    for (const auto& [name, t] : tensors) {
        if (name.size() >= inv.size() && name.compare(name.size() - inv.size(), inv.size(), inv) == 0) continue;
        if (name == "lm_head.weight" && cfg_.tie_word_embeddings) continue;
        torch::Tensor* p = params.find(name);
        if (p == nullptr) throw Error("LlamaModel: unexpected tensor '" + name + "' in checkpoint");
        if (p->sizes() != t.sizes()) {
            std::ostringstream os;
            os << "LlamaModel: tensor '" << name << "' has shape " << t.sizes() << ", model expects " << p->sizes();
            throw Error(os.str());
        }
        p->copy_(t);
        loaded.insert(name);
    }
    if (strict) {
        std::string missing;
        for (const auto& item : params)
            if (!loaded.count(item.key())) missing += (missing.empty() ? "" : ", ") + item.key();
        if (!missing.empty()) {
            // A tied checkpoint stores no lm_head.weight; say so when the config disagrees.
            const bool head = params.find("lm_head.weight") != nullptr && !loaded.count("lm_head.weight");
            throw Error(
                "LlamaModel: checkpoint lacks " + missing +
                (head ? " (config.json has tie_word_embeddings=false; a tied checkpoint stores no lm_head)" : ""));
        }
    }
}

std::shared_ptr<LlamaModelImpl> LlamaModelImpl::from_pretrained(const std::string& dir_str) {
    const fs::path dir(dir_str);
    const HfConfig cfg = load_hf_config((dir / "config.json").string());
    auto m = std::make_shared<LlamaModelImpl>(cfg, 0);
    std::map<std::string, torch::Tensor> all;
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
        nlohmann::json j;
        try {
            std::ifstream in(index);
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            throw Error(index.string() + ": not valid JSON: " + e.what());
        }
        if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
            throw Error(index.string() + ": missing object 'weight_map'");
        std::map<std::string, std::string> where;  // tensor -> shard file
        std::set<std::string> files;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string())
                throw Error(index.string() + ": weight_map['" + it.key() + "'] is not a string");
            const std::string f = it.value().get<std::string>();
            if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
                throw Error(index.string() + ": shard name '" + f + "' must be a plain file name");
            where[it.key()] = f;
            files.insert(f);
        }
        for (const auto& f : files) {
            for (auto& [name, t] : load_safetensors((dir / f).string())) {
                auto w = where.find(name);
                if (w == where.end() || w->second != f)
                    throw Error(index.string() + ": tensor '" + name + "' found in " + f + " but the index " +
                                (w == where.end() ? "does not list it" : "places it in " + w->second));
                all[name] = std::move(t);
            }
        }
        for (const auto& [name, f] : where)
            if (!all.count(name)) throw Error(index.string() + ": tensor '" + name + "' not found in " + f);
    } else if (fs::exists(dir / "model.safetensors")) {
        all = load_safetensors((dir / "model.safetensors").string());
    } else {
        throw Error(dir_str + ": neither model.safetensors nor model.safetensors.index.json found");
    }
    m->load_hf_state_dict(all, /*strict=*/true);
    return m;
}

void LlamaModelImpl::save_pretrained(const std::string& dir_str, int64_t shard_bytes, st::DType dtype) const {
    const fs::path dir(dir_str);
    fs::create_directories(dir);
    HfConfig c = cfg_;
    c.torch_dtype = config_dtype_name(dtype);
    write_text(dir / "config.json", to_hf_json(c));

    const auto sd = hf_state_dict();
    uint64_t total = 0;
    std::vector<uint64_t> bytes;
    for (const auto& [name, t] : sd) {
        bytes.push_back(static_cast<uint64_t>(t.numel()) * st::dtype_size(dtype));
        total += bytes.back();
    }
    const std::map<std::string, std::string> meta{{"format", "pt"}};
    const fs::path index = dir / "model.safetensors.index.json";
    if (shard_bytes <= 0 || total <= static_cast<uint64_t>(shard_bytes)) {
        fs::remove(index);  // a stale index would take precedence in from_pretrained
        save_safetensors((dir / "model.safetensors").string(), sd, dtype, meta);
        return;
    }
    std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
    uint64_t cur = 0;
    for (std::size_t i = 0; i < sd.size(); ++i) {
        if (!shards.back().empty() && cur + bytes[i] > static_cast<uint64_t>(shard_bytes)) {
            shards.emplace_back();
            cur = 0;
        }
        shards.back().push_back(sd[i]);
        cur += bytes[i];
    }
    nlohmann::json weight_map = nlohmann::json::object();
    for (std::size_t s = 0; s < shards.size(); ++s) {
        char fname[64];
        std::snprintf(fname, sizeof fname, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        save_safetensors((dir / fname).string(), shards[s], dtype, meta);
        for (const auto& [name, t] : shards[s]) weight_map[name] = fname;
    }
    fs::remove(dir / "model.safetensors");
    nlohmann::json j;
    j["metadata"] = {{"total_size", total}};
    j["weight_map"] = weight_map;
    write_text(index, j.dump(2) + "\n");
}

}  // namespace tagflow::model
