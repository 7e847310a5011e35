// SPDX-License-Identifier: Apache-2.0
// llama_decode: LlamaSlotDecoder (see llama.hpp), the batched inference path of the
// Llama/Qwen2 decoder: fused weight snapshot, slot-based preallocated KV cache, batched
// prefill of prompts of different lengths, and a decode step with per-row positions.
// Small models are overhead-bound, so the decode step keeps the tensor ops per layer low
// (~20): one GEMM for q|k|v and one for gate|up, RMSNorm weights folded into them, RoPE on q, k
// and v at once (v heads get cos 1, sin 0), residual adds fused into addmm_. On CPU in fp32 the
// k/v stores are memcpy's and the attention of every (sequence, kv head) is a direct BLAS
// sgemm_ call on the cache (GQA without repeat_interleave); elsewhere (bf16, other devices)
// index_put_/baddbmm/bmm do the same. Does not sample or schedule (rollout/engine.cpp does).
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <ATen/Parallel.h>
#include <ATen/core/List.h>
#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "model/llama.hpp"

namespace tagflow::model {

namespace {

// The Fortran BLAS sgemm_ that LibTorch itself calls (libblas.so.3, OpenBLAS here), looked up
// at run time. Decode attention is a batch of tiny GEMMs (one per sequence and kv head) at
// different cache offsets; at::bmm runs such a batch as one dispatched addmm_ per matrix
// (~10 us each), a direct sgemm_ call costs ~1 us. Null: use at::baddbmm/at::bmm.
using SgemmFn = void(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                     const int*, const float*, const int*, const float*, float*, const int*);
SgemmFn* blas_sgemm() {
    static SgemmFn* f = reinterpret_cast<SgemmFn*>(dlsym(RTLD_DEFAULT, "sgemm_"));
    return f;
}

struct LayerW {
    torch::Tensor qkv_t, qkv_b;  ///< [dm, (H+2KV)*D] (transposed, contiguous), bias or undefined
    torch::Tensor o_t, o_b;      ///< [H*D, dm], bias or undefined
    torch::Tensor gu_t;          ///< [dm, 2F]
    torch::Tensor down_t;        ///< [F, dm]
};

}  // namespace

struct LlamaSlotDecoder::State {
    LlamaModel model{nullptr};
    HfConfig c;
    torch::Dtype dt = torch::kFloat;
    torch::TensorOptions opt;  ///< compute dtype + device
    int64_t H = 0, KV = 0, G = 0, D = 0, NH = 0, F = 0, dm = 0, V = 0, L = 0;
    int64_t slots = 0, cap = 0;

    // weight snapshot
    std::vector<torch::Tensor> params;  ///< the model's parameters, for change detection
    std::vector<std::pair<const void*, int64_t>> signature;
    torch::Tensor embed;  ///< [V, dm] in dt
    torch::Tensor pos_embed;  ///< [max_positions, dm] in dt; undefined unless HfConfig::abs_positions
    std::vector<LayerW> layers;
    torch::Tensor lm_t;   ///< [dm, V], final norm folded in

    // cache and position tables
    std::vector<torch::Tensor> cache;  ///< per layer [2, slots, KV, cap, D], zero-initialised
    torch::Tensor cos_tab, sin_tab;    ///< [cap, D]; sin_tab has its first half negated
    torch::Tensor is_v;                ///< [1, NH, 1] bool: true for v heads
    torch::Tensor arange;              ///< [max(cap, slots)] int64

    std::vector<std::pair<const void*, int64_t>> current_signature() const {
        std::vector<std::pair<const void*, int64_t>> s;
        s.reserve(params.size());
        for (const auto& p : params) s.emplace_back(p.data_ptr(), static_cast<int64_t>(p._version()));
        return s;
    }

    void snapshot() {
        torch::NoGradGuard ng;
        const double qscale = 1.0 / std::sqrt(static_cast<double>(D));
        auto cvt = [&](const torch::Tensor& t) { return t.detach().to(opt).contiguous(); };
        auto& bb = model->model;
        embed = cvt(bb->embed_tokens->weight);
        pos_embed = bb->embed_positions ? cvt(bb->embed_positions->weight) : torch::Tensor();
        layers.assign(static_cast<std::size_t>(L), LayerW{});
        for (int64_t l = 0; l < L; ++l) {
            auto* ly = bb->layers[static_cast<std::size_t>(l)]->as<LlamaDecoderLayerImpl>();
            auto& a = ly->self_attn;
            const double sdm = std::sqrt(static_cast<double>(dm));  // see rms()
            const torch::Tensor w1 = ly->input_layernorm->weight.detach().to(torch::kFloat) * sdm;
            const torch::Tensor w2 = ly->post_attention_layernorm->weight.detach().to(torch::kFloat) * sdm;
            const torch::Tensor qkv = torch::cat({a->q_proj->weight.detach().to(torch::kFloat) * qscale,
                                                  a->k_proj->weight.detach().to(torch::kFloat),
                                                  a->v_proj->weight.detach().to(torch::kFloat)}) *
                                      w1.unsqueeze(0);
            LayerW& w = layers[static_cast<std::size_t>(l)];
            w.qkv_t = cvt(qkv.t());
            if (c.qkv_bias)
                w.qkv_b = cvt(torch::cat({a->q_proj->bias.detach().to(torch::kFloat) * qscale,
                                          a->k_proj->bias.detach().to(torch::kFloat),
                                          a->v_proj->bias.detach().to(torch::kFloat)}));
            w.o_t = cvt(a->o_proj->weight.t());
            if (c.o_bias) w.o_b = cvt(a->o_proj->bias);
            auto& m = ly->mlp;
            w.gu_t = cvt((torch::cat({m->gate_proj->weight.detach().to(torch::kFloat),
                                      m->up_proj->weight.detach().to(torch::kFloat)}) *
                          w2.unsqueeze(0))
                             .t());
            w.down_t = cvt(m->down_proj->weight.t());
        }
        const torch::Tensor head =
            c.tie_word_embeddings ? bb->embed_tokens->weight : model->lm_head->weight;
        lm_t = cvt((head.detach().to(torch::kFloat) *
                    (bb->norm->weight.detach().to(torch::kFloat) * std::sqrt(static_cast<double>(dm))).unsqueeze(0))
                       .t());
        signature = current_signature();
    }

    void build_tables() {
        // Same formula and op order as LlamaModelImpl (inv_freq in fp32, outer product).
        const torch::Tensor i2 = torch::arange(0, D, 2, torch::kLong).to(torch::kFloat);
        const torch::Tensor inv_freq = 1.0 / torch::pow(static_cast<double>(c.rope_theta), i2 / static_cast<double>(D));
        const torch::Tensor pos = torch::arange(0, cap, torch::TensorOptions().dtype(torch::kFloat));
        const torch::Tensor freqs = torch::outer(pos, inv_freq);
        const torch::Tensor emb = torch::cat({freqs, freqs}, -1);
        cos_tab = emb.cos().to(opt);
        torch::Tensor s = emb.sin();
        s.narrow(1, 0, D / 2).neg_();  // rotate_half(x) = flip_halves(x) * [-1.., +1..]
        sin_tab = s.to(opt);
        arange = torch::arange(std::max(cap, slots), torch::TensorOptions().dtype(torch::kLong).device(opt.device()));
    }

    /// x * rsqrt(sum(x^2) + dm * eps) = RMSNorm(x) / sqrt(dm): the norm weight and sqrt(dm)
    /// are folded into the next matrix (one op fewer than a mean).
    torch::Tensor rms(const torch::Tensor& x) const {
        const double deps = static_cast<double>(dm) * c.rms_norm_eps;
        if (dt == torch::kFloat) return x * x.pow(2).sum(-1, /*keepdim=*/true).add_(deps).rsqrt_();
        const torch::Tensor xf = x.to(torch::kFloat);
        return (xf * xf.pow(2).sum(-1, true).add_(deps).rsqrt_()).to(dt);
    }

    torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& wt, const torch::Tensor& b) const {
        return b.defined() ? at::addmm(b, x, wt) : at::mm(x, wt);
    }

    /// RoPE on [..., NH, D] (v heads: cos 1, sin 0, so they pass unchanged).
    torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) const {
        std::vector<int64_t> split = x.sizes().vec();
        split.back() = D / 2;
        split.insert(split.end() - 1, 2);
        const torch::Tensor flipped = x.view(split).flip({static_cast<int64_t>(split.size()) - 2}).view(x.sizes());
        torch::Tensor r = x * cos;
        return r.addcmul_(flipped, sin);
    }

    torch::Tensor softmax(const torch::Tensor& s) const {
        if (dt == torch::kFloat) return at::softmax(s, -1);
        return at::softmax(s, -1, torch::kFloat).to(dt);
    }

    /// Residual + MLP, in place on h [N, dm].
    void mlp(torch::Tensor& h, const LayerW& w) const {
        const torch::Tensor gu = at::mm(rms(h), w.gu_t);
        const torch::Tensor act = at::silu(gu.narrow(1, 0, F)).mul_(gu.narrow(1, F, F));
        h.addmm_(act, w.down_t);
    }

    void attn_out(torch::Tensor& h, const torch::Tensor& o, const LayerW& w) const {
        h.addmm_(o, w.o_t);
        if (w.o_b.defined()) h.add_(w.o_b);
    }

    /// Writes the new k/v of rows 0..n-1 (heads H.. of r [n, NH, D]) into cache positions pos[i].
    void store_kv(torch::Tensor& kv, const torch::Tensor& r, const std::vector<int64_t>& pos,
                  const c10::List<c10::optional<at::Tensor>>& where_new) const {
        const auto n = static_cast<int64_t>(pos.size());
        if (!kv.is_cpu() || !r.is_contiguous() || r.scalar_type() != kv.scalar_type()) {
            kv.index_put_(where_new, r.narrow(1, H, 2 * KV).view({n, 2, KV, D}));
            return;
        }
        // CPU: 2*KV contiguous runs of D elements per row (index_put_ costs ~100 us here).
        const auto es = static_cast<int64_t>(kv.element_size());
        const char* src = static_cast<const char*>(r.data_ptr());
        char* dst = static_cast<char*>(kv.data_ptr());
        for (int64_t b = 0; b < n; ++b)
            for (int64_t t = 0; t < 2 * KV; ++t)  // t < KV: k head t; else v head t - KV
                std::memcpy(dst + ((((t / KV) * slots + b) * KV + t % KV) * cap + pos[static_cast<std::size_t>(b)]) * D * es,
                            src + (b * NH + H + t) * D * es, static_cast<std::size_t>(D * es));
    }

    /// Causal attention of a prefill: r [m, P, NH, D] (rotated q|k|v), kvp = its k|v as
    /// [2, m, KV, P, D] (a view of r), the same already in the layer's cache `kvc` rows slot_ids;
    /// causal [P, P].
    /// Returns [m*P, H*D].
    torch::Tensor prefill_attention(const torch::Tensor& r, const torch::Tensor& kvp, const torch::Tensor& kvc,
                                    const std::vector<int64_t>& slot_ids, const torch::Tensor& causal) const {
        const int64_t m = r.size(0), P = r.size(1);
        SgemmFn* sgemm = blas_sgemm();
        if (sgemm == nullptr || dt != torch::kFloat || !r.is_cpu() || !r.is_contiguous()) {
            const torch::Tensor q =
                r.narrow(2, 0, H).view({m, P, KV, G, D}).permute({0, 2, 3, 1, 4}).reshape({m, KV, G * P, D});
            const torch::Tensor k = kvp.select(0, 0), v = kvp.select(0, 1);  // [m, KV, P, D]
            const torch::Tensor p = softmax(at::matmul(q, k.transpose(-2, -1)) + causal.repeat({G, 1}));
            return at::matmul(p, v).view({m, KV, G, P, D}).permute({0, 3, 1, 2, 4}).reshape({m * P, H * D});
        }
        // One [P, D] x [D, P] and one [P, P] x [P, D] sgemm per (prompt, query head), q read in
        // place from r (row stride NH*D), k/v from the cache rows (row stride D).
        torch::Tensor sc = torch::empty({m, H, P, P}, opt);
        torch::Tensor out = torch::empty({m * P, H * D}, opt);
        const float* rp = r.data_ptr<float>();
        const float* kp = kvc.data_ptr<float>();
        const float* vp = kp + slots * KV * cap * D;
        float* sp = sc.data_ptr<float>();
        float* op = out.data_ptr<float>();
        const int iP = static_cast<int>(P), iD = static_cast<int>(D), ldq = static_cast<int>(NH * D),
                  ldo = static_cast<int>(H * D);
        const float one = 1.0f, zero = 0.0f;
        at::parallel_for(0, m * H, 8, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const int64_t b = i / H, hh = i % H, slot = slot_ids[static_cast<std::size_t>(b)];
                sgemm("T", "N", &iP, &iP, &iD, &one, kp + (slot * KV + hh / G) * cap * D, &iD,
                      rp + (b * P * NH + hh) * D, &ldq, &zero, sp + i * P * P, &iP);
            }
        });
        const torch::Tensor p = at::softmax(sc.add_(causal), -1);
        const float* pp = p.data_ptr<float>();
        at::parallel_for(0, m * H, 8, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const int64_t b = i / H, hh = i % H, slot = slot_ids[static_cast<std::size_t>(b)];
                sgemm("N", "N", &iD, &iP, &iP, &one, vp + (slot * KV + hh / G) * cap * D, &iD, pp + i * P * P, &iP,
                      &zero, op + (b * P * H + hh) * D, &ldo);
            }
        });
        return out;
    }

    /// Attention of one decode step: r [n, NH, D] (rotated q|k|v, k/v already in the cache),
    /// cache [2, slots, KV, cap, D], mask [n, 1, 1, S] (-inf beyond each row's position).
    /// Returns [n, H*D].
    torch::Tensor decode_attention(const torch::Tensor& r, const torch::Tensor& kv, const torch::Tensor& mask,
                                   int64_t n, int64_t S) const {
        SgemmFn* sgemm = blas_sgemm();
        if (sgemm == nullptr || dt != torch::kFloat || !r.is_cpu() || !r.is_contiguous()) {
            const torch::Tensor q = r.narrow(1, 0, H).reshape({n * KV, G, D});
            const torch::Tensor k = kv.select(0, 0).narrow(0, 0, n).narrow(2, 0, S).view({n * KV, S, D});
            const torch::Tensor v = kv.select(0, 1).narrow(0, 0, n).narrow(2, 0, S).view({n * KV, S, D});
            const torch::Tensor m3 = mask.expand({n, KV, G, S}).reshape({n * KV, G, S});
            return at::bmm(softmax(at::baddbmm(m3, q, k.transpose(1, 2))), v).view({n, H * D});
        }
        torch::Tensor sc = torch::empty({n, KV, G, S}, opt);
        torch::Tensor out = torch::empty({n, H * D}, opt);
        const float* rp = r.data_ptr<float>();
        const float* kp = kv.data_ptr<float>();
        const float* vp = kp + slots * KV * cap * D;
        float* sp = sc.data_ptr<float>();
        float* op = out.data_ptr<float>();
        const int iS = static_cast<int>(S), iG = static_cast<int>(G), iD = static_cast<int>(D);
        const float one = 1.0f, zero = 0.0f;
        // Row-major C[G,S] = Q[G,D] K^T  <=>  column-major C^T = K Q^T ("T","N").
        at::parallel_for(0, n * KV, 16, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const int64_t b = i / KV, h = i % KV;
                sgemm("T", "N", &iS, &iG, &iD, &one, kp + (b * KV + h) * cap * D, &iD, rp + b * NH * D + h * G * D,
                      &iD, &zero, sp + i * G * S, &iS);
            }
        });
        const torch::Tensor p = at::softmax(sc.add_(mask), -1);
        const float* pp = p.data_ptr<float>();
        // Row-major O[G,D] = P[G,S] V[S,D]  <=>  column-major O^T = V^T P^T ("N","N").
        at::parallel_for(0, n * KV, 16, [&](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) {
                const int64_t b = i / KV, h = i % KV;
                sgemm("N", "N", &iD, &iG, &iS, &one, vp + (b * KV + h) * cap * D, &iD, pp + i * G * S, &iS, &zero,
                      op + i * G * D, &iD);
            }
        });
        return out;
    }

    torch::Tensor logits(const torch::Tensor& h) const { return at::mm(rms(h), lm_t).to(torch::kFloat); }
};

LlamaSlotDecoder::LlamaSlotDecoder(LlamaModel model, int64_t slots, int64_t capacity, bool bf16)
    : s_(std::make_unique<State>()) {
    State& s = *s_;
    s.model = std::move(model);
    s.c = s.model->config();
    s.dt = bf16 ? torch::kBFloat16 : torch::kFloat;
    s.opt = torch::TensorOptions().dtype(s.dt).device(s.model->model->embed_tokens->weight.device());
    s.H = s.c.num_attention_heads;
    s.KV = s.c.num_key_value_heads;
    s.G = s.H / s.KV;
    s.D = s.c.head_dim;
    s.NH = s.H + 2 * s.KV;
    s.F = s.c.intermediate_size;
    s.dm = s.c.hidden_size;
    s.V = s.c.vocab_size;
    s.L = s.c.num_hidden_layers;
    for (const auto& p : s.model->parameters(/*recurse=*/true)) s.params.push_back(p);
    c10::InferenceMode im;
    s.snapshot();
    std::vector<uint8_t> v(static_cast<std::size_t>(s.NH), 0);
    for (int64_t i = s.H + s.KV; i < s.NH; ++i) v[static_cast<std::size_t>(i)] = 1;
    s.is_v = torch::tensor(v, torch::kBool).view({1, s.NH, 1}).to(s.opt.device());
    reserve(std::max<int64_t>(1, slots), std::max<int64_t>(1, capacity));
}

LlamaSlotDecoder::~LlamaSlotDecoder() = default;

int64_t LlamaSlotDecoder::slots() const { return s_->slots; }
int64_t LlamaSlotDecoder::capacity() const { return s_->cap; }
bool LlamaSlotDecoder::bf16() const { return s_->dt == torch::kBFloat16; }
const HfConfig& LlamaSlotDecoder::config() const { return s_->c; }

void LlamaSlotDecoder::reserve(int64_t slots, int64_t capacity) {
    State& s = *s_;
    if (capacity > s.c.max_position_embeddings)
        throw Error("LlamaSlotDecoder: capacity " + std::to_string(capacity) + " exceeds max_position_embeddings " +
                    std::to_string(s.c.max_position_embeddings));
    const int64_t ns = std::max(slots, s.slots), nc = std::max(capacity, s.cap);
    if (ns == s.slots && nc == s.cap) return;
    c10::InferenceMode im;
    for (int64_t l = 0; l < s.L; ++l) {
        torch::Tensor fresh = torch::zeros({2, ns, s.KV, nc, s.D}, s.opt);
        if (s.slots > 0 && s.cap > 0)
            fresh.narrow(1, 0, s.slots).narrow(3, 0, s.cap).copy_(s.cache[static_cast<std::size_t>(l)]);
        if (static_cast<int64_t>(s.cache.size()) <= l) s.cache.push_back(fresh);
        else s.cache[static_cast<std::size_t>(l)] = fresh;
    }
    s.slots = ns;
    s.cap = nc;
    s.build_tables();
}

bool LlamaSlotDecoder::sync_weights() {
    State& s = *s_;
    if (s.current_signature() == s.signature) return false;
    c10::InferenceMode im;
    s.snapshot();
    return true;
}

torch::Tensor LlamaSlotDecoder::prefill(const std::vector<int64_t>& slot_ids,
                                        const std::vector<std::vector<int32_t>>& prompts) {
    State& s = *s_;
    TORCH_CHECK(slot_ids.size() == prompts.size(), "prefill: slots and prompts differ in number");
    const auto m = static_cast<int64_t>(prompts.size());
    TORCH_CHECK(m > 0, "prefill: no prompts");
    int64_t P = 0;
    for (const auto& p : prompts) {
        TORCH_CHECK(!p.empty(), "prefill: empty prompt");
        P = std::max<int64_t>(P, static_cast<int64_t>(p.size()));
    }
    TORCH_CHECK(P <= s.cap, "prefill: prompt of ", P, " tokens exceeds the cache capacity ", s.cap);
    for (int64_t r : slot_ids) TORCH_CHECK(r >= 0 && r < s.slots, "prefill: slot ", r, " out of range");
    c10::InferenceMode im;

    // Right-padded tokens (pads are token 0 after the prompt: causal attention keeps real
    // tokens from seeing them; their cache entries are overwritten by the first decode steps).
    std::vector<int64_t> flat(static_cast<std::size_t>(m * P), 0), last(static_cast<std::size_t>(m));
    for (int64_t b = 0; b < m; ++b) {
        const auto& p = prompts[static_cast<std::size_t>(b)];
        for (std::size_t t = 0; t < p.size(); ++t) {
            TORCH_CHECK(p[t] >= 0 && p[t] < s.V, "prefill: token id ", p[t], " outside the vocabulary (", s.V, ")");
            flat[static_cast<std::size_t>(b * P) + t] = p[t];
        }
        last[static_cast<std::size_t>(b)] = b * P + static_cast<int64_t>(p.size()) - 1;
    }
    const auto dev = s.opt.device();
    const torch::Tensor tok = torch::from_blob(flat.data(), {m * P}, torch::kLong).to(dev);
    const torch::Tensor rows = torch::from_blob(const_cast<int64_t*>(slot_ids.data()), {m}, torch::kLong).to(dev);
    const torch::Tensor last_t = torch::from_blob(last.data(), {m}, torch::kLong).to(dev);

    const torch::Tensor cos = at::where(s.is_v, 1.0, s.cos_tab.narrow(0, 0, P).unsqueeze(1));  // [P, NH, D]
    const torch::Tensor sin = at::where(s.is_v, 0.0, s.sin_tab.narrow(0, 0, P).unsqueeze(1));
    const torch::Tensor causal =  // [P, P]: query t sees keys 0..t
        torch::zeros({P, P}, s.opt)
            .masked_fill_(torch::ones({P, P}, torch::TensorOptions().dtype(torch::kBool).device(dev)).triu(1),
                          -std::numeric_limits<float>::infinity());

    torch::Tensor h = s.embed.index_select(0, tok);  // [m*P, dm]
    if (s.pos_embed.defined())  // learned absolute positions 0..P-1 of every prompt row
        h = (h.view({m, P, -1}) + s.pos_embed.narrow(0, 0, P).unsqueeze(0)).view({m * P, -1});
    for (int64_t l = 0; l < s.L; ++l) {
        const LayerW& w = s.layers[static_cast<std::size_t>(l)];
        const torch::Tensor r = s.rope(s.linear(s.rms(h), w.qkv_t, w.qkv_b).view({m, P, s.NH, s.D}), cos, sin);
        const torch::Tensor kv = r.narrow(2, s.H, 2 * s.KV).view({m, P, 2, s.KV, s.D}).permute({2, 0, 3, 1, 4});
        s.cache[static_cast<std::size_t>(l)].narrow(3, 0, P).index_copy_(1, rows, kv);
        s.attn_out(h, s.prefill_attention(r, kv, s.cache[static_cast<std::size_t>(l)], slot_ids, causal), w);
        s.mlp(h, w);
    }
    return s.logits(h.index_select(0, last_t));
}

torch::Tensor LlamaSlotDecoder::decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions) {
    State& s = *s_;
    const auto n = static_cast<int64_t>(tokens.size());
    TORCH_CHECK(n > 0 && tokens.size() == positions.size() && n <= s.slots,
                "decode: need 1..", s.slots, " rows with one position each");
    int64_t S = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = tokens[static_cast<std::size_t>(i)], p = positions[static_cast<std::size_t>(i)];
        TORCH_CHECK(t >= 0 && t < s.V, "decode: token id ", t, " outside the vocabulary (", s.V, ")");
        TORCH_CHECK(p >= 0 && p < s.cap, "decode: position ", p, " outside the cache capacity ", s.cap);
        S = std::max(S, p + 1);
    }
    c10::InferenceMode im;
    const auto dev = s.opt.device();
    const torch::Tensor tok = torch::from_blob(const_cast<int64_t*>(tokens.data()), {n}, torch::kLong).to(dev);
    const torch::Tensor pos = torch::from_blob(const_cast<int64_t*>(positions.data()), {n}, torch::kLong).to(dev);
    const torch::Tensor rows = s.arange.narrow(0, 0, n);

    const torch::Tensor cos = at::where(s.is_v, 1.0, s.cos_tab.index_select(0, pos).unsqueeze(1));  // [n, NH, D]
    const torch::Tensor sin = at::where(s.is_v, 0.0, s.sin_tab.index_select(0, pos).unsqueeze(1));
    // Row i sees cache positions 0..pos[i]; mask [n, 1, 1, S] shared by every layer.
    const torch::Tensor mask = torch::zeros({n, S}, s.opt)
                                   .masked_fill_(s.arange.narrow(0, 0, S).unsqueeze(0) > pos.unsqueeze(1),
                                                 -std::numeric_limits<float>::infinity())
                                   .view({n, 1, 1, S});
    c10::List<c10::optional<at::Tensor>> where_new;  // cache[:, rows, :, pos]
    where_new.push_back(c10::nullopt);
    where_new.push_back(rows);
    where_new.push_back(c10::nullopt);
    where_new.push_back(pos);

    torch::Tensor h = s.embed.index_select(0, tok);  // [n, dm]
    if (s.pos_embed.defined()) h = h + s.pos_embed.index_select(0, pos);
    for (int64_t l = 0; l < s.L; ++l) {
        const LayerW& w = s.layers[static_cast<std::size_t>(l)];
        torch::Tensor& cache = s.cache[static_cast<std::size_t>(l)];
        const torch::Tensor r = s.rope(s.linear(s.rms(h), w.qkv_t, w.qkv_b).view({n, s.NH, s.D}), cos, sin);
        s.store_kv(cache, r, positions, where_new);
        s.attn_out(h, s.decode_attention(r, cache, mask, n, S), w);
        s.mlp(h, w);
    }
    return s.logits(h);
}

void LlamaSlotDecoder::move_slot(int64_t from, int64_t to, int64_t len) {
    State& s = *s_;
    TORCH_CHECK(from >= 0 && from < s.slots && to >= 0 && to < s.slots && len >= 0 && len <= s.cap,
                "move_slot: bad arguments");
    if (from == to || len == 0) return;
    c10::InferenceMode im;
    for (auto& c : s.cache) c.narrow(1, to, 1).narrow(3, 0, len).copy_(c.narrow(1, from, 1).narrow(3, 0, len));
}

}  // namespace tagflow::model
