// SPDX-License-Identifier: Apache-2.0
// llama_decode: LlamaSlotDecoder (see llama.hpp), the batched inference path of the
// Llama/Qwen2/Qwen3 decoder: fused weight snapshot, slot-based preallocated KV cache, and one
// row-based forward used by prefill, extend and decode alike: every row is one token with its
// own cache slot and position (a prefill is the concatenation of its prompts, no padding; a
// decode step is one row per sequence), so causal masking is just "keys 0..pos".
// Small models are overhead-bound, so a layer is ~10 tensor ops: one GEMM for q|k|v and one for
// gate|up, RMSNorm weights folded into them, residual adds fused into addmm_, and every GEMM
// output written into a preallocated workspace (no per-step allocation: fresh multi-100-KiB
// temporaries cost page faults on every step). On CPU in fp32 the RMSNorms (Qwen3's per-head
// q/k norms too), the RoPE of q and k, the k/v stores and the attention are plain loops over
// the rows (decode_kernels.hpp: attention is one pass per (row, kv head) over its cache row,
// scores + softmax + PV fused, AVX2/FMA when the CPU has it); elsewhere (bf16, other devices)
// the same steps are tensor ops (index_put_, baddbmm, bmm).
// Does not sample or schedule (rollout/engine.cpp does).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include <ATen/Parallel.h>
#include <ATen/core/List.h>
#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "model/decode_kernels.hpp"
#include "model/llama.hpp"

namespace tagflow::model {

namespace {

struct LayerW {
    torch::Tensor qkv_t, qkv_b;  ///< [dm, (H+2KV)*D] (transposed, contiguous), bias or undefined
    torch::Tensor o_t, o_b;      ///< [H*D, dm], bias or undefined
    torch::Tensor gu_t;          ///< [dm, 2F]
    torch::Tensor down_t;        ///< [F, dm]
    torch::Tensor qn_w, kn_w;    ///< [D] per-head q/k norm weights (q's times 1/sqrt(D)); undefined unless qk_norm
};

}  // namespace

using decode::Geo;

struct LlamaSlotDecoder::State {
    LlamaModel model{nullptr};
    HfConfig c;
    torch::Dtype dt = torch::kFloat;
    torch::TensorOptions opt;  ///< compute dtype + device
    int64_t H = 0, KV = 0, G = 0, D = 0, NH = 0, F = 0, dm = 0, V = 0, L = 0;
    int64_t slots = 0, cap = 0;
    bool fast = false;  ///< fp32 on CPU: the loop kernels of decode_kernels.hpp

    // weight snapshot
    std::vector<torch::Tensor> params;  ///< the model's parameters, for change detection
    std::vector<std::pair<const void*, int64_t>> signature;
    torch::Tensor embed;      ///< [V, dm] in dt
    torch::Tensor pos_embed;  ///< [max_positions, dm] in dt; undefined unless HfConfig::abs_positions
    std::vector<LayerW> layers;
    torch::Tensor lm_t;  ///< [dm, V], final norm folded in

    // cache and position tables
    std::vector<torch::Tensor> cache;  ///< per layer [2, slots, KV, cap, D], zero-initialised
    torch::Tensor cos_tab, sin_tab;    ///< [cap, D]; sin_tab has its first half negated
    torch::Tensor is_v;                ///< [1, NH, 1] bool: true for v heads
    torch::Tensor arange;              ///< [max(cap, slots)] int64

    // workspace of the row-based forward (grown, never shrunk), rows x columns in dt
    int64_t ws_rows = 0;
    torch::Tensor ws_h, ws_x, ws_qkv, ws_o, ws_gu, ws_act;

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
            // With per-head q/k norms the scale goes into q_norm's weight (a norm would undo it
            // on q); RoPE is linear, so either place gives the same scores.
            const double qs = c.qk_norm ? 1.0 : qscale;
            const torch::Tensor qkv = torch::cat({a->q_proj->weight.detach().to(torch::kFloat) * qs,
                                                  a->k_proj->weight.detach().to(torch::kFloat),
                                                  a->v_proj->weight.detach().to(torch::kFloat)}) *
                                      w1.unsqueeze(0);
            LayerW& w = layers[static_cast<std::size_t>(l)];
            w.qkv_t = cvt(qkv.t());
            if (c.qkv_bias)
                w.qkv_b = cvt(torch::cat({a->q_proj->bias.detach().to(torch::kFloat) * qs,
                                          a->k_proj->bias.detach().to(torch::kFloat),
                                          a->v_proj->bias.detach().to(torch::kFloat)}));
            w.o_t = cvt(a->o_proj->weight.t());
            if (c.o_bias) w.o_b = cvt(a->o_proj->bias);
            if (c.qk_norm) {  // kept in fp32: the generic path norms in fp32
                w.qn_w = (a->q_norm->weight.detach().to(torch::kFloat) * qscale).to(opt.device()).contiguous();
                w.kn_w = a->k_norm->weight.detach().to(torch::kFloat).to(opt.device()).contiguous();
            }
            auto& m = ly->mlp;
            w.gu_t = cvt((torch::cat({m->gate_proj->weight.detach().to(torch::kFloat),
                                      m->up_proj->weight.detach().to(torch::kFloat)}) *
                          w2.unsqueeze(0))
                             .t());
            w.down_t = cvt(m->down_proj->weight.t());
        }
        const torch::Tensor head = c.tie_word_embeddings ? bb->embed_tokens->weight : model->lm_head->weight;
        lm_t = cvt((head.detach().to(torch::kFloat) *
                    (bb->norm->weight.detach().to(torch::kFloat) * std::sqrt(static_cast<double>(dm))).unsqueeze(0))
                       .t());
        signature = current_signature();
    }

    void build_tables() {
        // Same frequencies and op order as LlamaModelImpl (rope_inv_freq in fp32, outer product).
        const torch::Tensor inv_freq = rope_inv_freq(c);
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

    /// rms(h) into the workspace x (fast path) or as a new tensor.
    torch::Tensor rms_ws(const torch::Tensor& h) {
        if (!fast) return rms(h);
        const int64_t R = h.size(0);
        torch::Tensor x = ws_x.narrow(0, 0, R);
        decode::rms_rows(h.data_ptr<float>(), x.data_ptr<float>(), R, dm,
                         static_cast<float>(static_cast<double>(dm) * c.rms_norm_eps));
        return x;
    }

    torch::Tensor softmax(const torch::Tensor& s) const {
        if (dt == torch::kFloat) return at::softmax(s, -1);
        return at::softmax(s, -1, torch::kFloat).to(dt);
    }

    Geo geo() const { return Geo{H, KV, G, D, NH, slots, cap}; }

    void ensure_workspace(int64_t R) {
        if (R <= ws_rows) return;
        const int64_t n = std::max(R, 2 * ws_rows);
        ws_h = torch::empty({n, dm}, opt);
        ws_x = torch::empty({n, dm}, opt);
        ws_qkv = torch::empty({n, NH * D}, opt);
        ws_o = torch::empty({n, H * D}, opt);
        ws_gu = torch::empty({n, 2 * F}, opt);
        ws_act = torch::empty({n, F}, opt);
        ws_rows = n;
    }

    /// Runs R rows (row r: token tok[r] into cache slot slot[r] at position pos[r]; the slot
    /// must hold positions 0..pos[r]-1, rows of one slot in position order) through every
    /// layer, storing their k/v. Leaves the final hidden states (before the final norm) in
    /// ws_h[0:R] and returns that view.
    torch::Tensor forward_rows(const int64_t* tok, const int64_t* slot, const int64_t* pos, int64_t R) {
        ensure_workspace(R);
        const auto dev = opt.device();
        const torch::Tensor tok_t = torch::from_blob(const_cast<int64_t*>(tok), {R}, torch::kLong).to(dev);
        const torch::Tensor pos_t = torch::from_blob(const_cast<int64_t*>(pos), {R}, torch::kLong).to(dev);
        torch::Tensor h = ws_h.narrow(0, 0, R);
        at::index_select_out(h, embed, 0, tok_t);
        if (pos_embed.defined()) h.add_(pos_embed.index_select(0, pos_t));

        // Generic path: per-call tensors of the positions (RoPE tables, mask, cache indices).
        torch::Tensor cos, sin, slot_t, mask;
        c10::List<c10::optional<at::Tensor>> where_new;  // cache[:, slot, :, pos]
        bool prefix = true;  // slots are 0..R-1: the cache rows are a narrow(), not a gather
        int64_t S = 0;
        for (int64_t r = 0; r < R; ++r) {
            prefix &= slot[r] == r;
            S = std::max(S, pos[r] + 1);
        }
        if (!fast) {
            slot_t = torch::from_blob(const_cast<int64_t*>(slot), {R}, torch::kLong).to(dev);
            cos = at::where(is_v, 1.0, cos_tab.index_select(0, pos_t).unsqueeze(1));  // [R, NH, D]
            sin = at::where(is_v, 0.0, sin_tab.index_select(0, pos_t).unsqueeze(1));
            mask = torch::zeros({R, S}, opt)
                       .masked_fill_(arange.narrow(0, 0, S).unsqueeze(0) > pos_t.unsqueeze(1),
                                     -std::numeric_limits<float>::infinity());
            where_new.push_back(c10::nullopt);
            where_new.push_back(slot_t);
            where_new.push_back(c10::nullopt);
            where_new.push_back(pos_t);
        }
        const Geo g = geo();
        decode::SgemmFn* sgemm = fast ? decode::blas_sgemm() : nullptr;
        const float deps = static_cast<float>(static_cast<double>(dm) * c.rms_norm_eps);
        const auto qk_eps = static_cast<float>(c.rms_norm_eps);
        for (int64_t l = 0; l < L; ++l) {
            const LayerW& w = layers[static_cast<std::size_t>(l)];
            torch::Tensor& kv = cache[static_cast<std::size_t>(l)];
            if (sgemm != nullptr) {  // fp32 CPU: raw loops and BLAS calls on the workspace
                float *hp = h.data_ptr<float>(), *xp = ws_x.data_ptr<float>(), *qp = ws_qkv.data_ptr<float>();
                float *op = ws_o.data_ptr<float>(), *gup = ws_gu.data_ptr<float>(), *ap = ws_act.data_ptr<float>();
                float* kvp = kv.data_ptr<float>();
                decode::rms_rows(hp, xp, R, dm, deps);
                float beta = 0.0f;
                if (w.qkv_b.defined()) {
                    for (int64_t r = 0; r < R; ++r)
                        std::memcpy(qp + r * NH * D, w.qkv_b.data_ptr<float>(),
                                    static_cast<std::size_t>(NH * D) * sizeof(float));
                    beta = 1.0f;
                }
                decode::gemm_rows(sgemm, xp, w.qkv_t.data_ptr<float>(), qp, R, dm, NH * D, beta);
                if (w.qn_w.defined())
                    decode::head_norm_rows(qp, R, g, w.qn_w.data_ptr<float>(), w.kn_w.data_ptr<float>(), qk_eps);
                decode::rope_rows(qp, pos, R, g, cos_tab.data_ptr<float>(), sin_tab.data_ptr<float>());
                decode::store_rows(qp, kvp, slot, pos, R, g);
                decode::attend_rows(qp, kvp, op, slot, pos, R, g);
                decode::gemm_rows(sgemm, op, w.o_t.data_ptr<float>(), hp, R, H * D, dm, 1.0f);
                if (w.o_b.defined()) h.add_(w.o_b);
                decode::rms_rows(hp, xp, R, dm, deps);
                decode::gemm_rows(sgemm, xp, w.gu_t.data_ptr<float>(), gup, R, dm, 2 * F, 0.0f);
                decode::silu_mul_rows(gup, ap, R, F);
                decode::gemm_rows(sgemm, ap, w.down_t.data_ptr<float>(), hp, R, F, dm, 1.0f);
                continue;
            }
            torch::Tensor qkv = ws_qkv.narrow(0, 0, R);
            const torch::Tensor x = rms_ws(h);
            if (w.qkv_b.defined()) at::addmm_out(qkv, w.qkv_b, x, w.qkv_t);
            else at::mm_out(qkv, x, w.qkv_t);
            torch::Tensor o;
            if (fast) {
                float* qp = qkv.data_ptr<float>();
                if (w.qn_w.defined())
                    decode::head_norm_rows(qp, R, g, w.qn_w.data_ptr<float>(), w.kn_w.data_ptr<float>(), qk_eps);
                decode::rope_rows(qp, pos, R, g, cos_tab.data_ptr<float>(), sin_tab.data_ptr<float>());
                float* kvp = kv.data_ptr<float>();
                decode::store_rows(qp, kvp, slot, pos, R, g);
                o = ws_o.narrow(0, 0, R);
                decode::attend_rows(qp, kvp, o.data_ptr<float>(), slot, pos, R, g);
            } else {
                torch::Tensor r3 = qkv.view({R, NH, D});
                if (w.qn_w.defined()) {  // per-head q/k RMSNorm, in fp32
                    for (const auto& [first, n, nw] :
                         {std::make_tuple(int64_t{0}, H, &w.qn_w), std::make_tuple(H, KV, &w.kn_w)}) {
                        torch::Tensor heads = r3.narrow(1, first, n);
                        const torch::Tensor xf = heads.to(torch::kFloat);
                        heads.copy_(xf * xf.pow(2).mean(-1, /*keepdim=*/true).add_(c.rms_norm_eps).rsqrt_() * *nw);
                    }
                }
                const torch::Tensor flipped = r3.view({R, NH, 2, D / 2}).flip({2}).view({R, NH, D});
                r3.copy_((r3 * cos).addcmul_(flipped, sin));
                kv.index_put_(where_new, r3.narrow(1, H, 2 * KV).view({R, 2, KV, D}));
                const torch::Tensor q = r3.narrow(1, 0, H).reshape({R * KV, G, D});
                torch::Tensor k = kv.select(0, 0), v = kv.select(0, 1);  // [slots, KV, cap, D]
                k = prefix ? k.narrow(0, 0, R) : k.index_select(0, slot_t);
                v = prefix ? v.narrow(0, 0, R) : v.index_select(0, slot_t);
                k = k.narrow(2, 0, S).reshape({R * KV, S, D});
                v = v.narrow(2, 0, S).reshape({R * KV, S, D});
                const torch::Tensor m3 = mask.view({R, 1, S}).expand({R, KV * G, S}).reshape({R * KV, G, S});
                o = at::bmm(softmax(at::baddbmm(m3, q, k.transpose(1, 2))), v).view({R, H * D});
            }
            h.addmm_(o, w.o_t);
            if (w.o_b.defined()) h.add_(w.o_b);
            torch::Tensor gu = ws_gu.narrow(0, 0, R), act = ws_act.narrow(0, 0, R);
            at::mm_out(gu, rms_ws(h), w.gu_t);
            at::silu_out(act, gu.narrow(1, 0, F)).mul_(gu.narrow(1, F, F));
            h.addmm_(act, w.down_t);
        }
        return h;
    }

    /// Rows per forward_rows() call of an extend(): bounds the workspace (fast path) or the
    /// gathered cache rows (generic path: R * KV * S * D elements).
    int64_t chunk_rows(int64_t S) const {
        const int64_t base = std::max<int64_t>(slots, 1024);
        if (fast) return base;
        return std::max<int64_t>(1, std::min<int64_t>(base, (int64_t{1} << 24) / std::max<int64_t>(1, KV * S * D)));
    }

    /// fp32 logits [N, V] of final hidden states h [N, dm] (contiguous).
    torch::Tensor logits(const torch::Tensor& h) const {
        if (!fast) return at::mm(rms(h), lm_t).to(torch::kFloat);
        torch::Tensor x = torch::empty_like(h);
        decode::rms_rows(h.data_ptr<float>(), x.data_ptr<float>(), h.size(0), dm,
                         static_cast<float>(static_cast<double>(dm) * c.rms_norm_eps));
        return at::mm(x, lm_t);
    }
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
    s.fast = s.dt == torch::kFloat && s.opt.device().is_cpu();
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

bool LlamaSlotDecoder::weights_changed() const { return s_->current_signature() != s_->signature; }

torch::Tensor LlamaSlotDecoder::extend(const std::vector<int64_t>& slot_ids,
                                       const std::vector<std::vector<int32_t>>& seqs,
                                       const std::vector<int64_t>& starts) {
    State& s = *s_;
    TORCH_CHECK(slot_ids.size() == seqs.size() && starts.size() == seqs.size(),
                "extend: slots, sequences and starts differ in number");
    const auto m = static_cast<int64_t>(seqs.size());
    TORCH_CHECK(m > 0, "extend: no sequences");
    std::vector<char> used(static_cast<std::size_t>(s.slots), 0);
    int64_t R = 0, S = 0;
    for (int64_t i = 0; i < m; ++i) {
        const auto& q = seqs[static_cast<std::size_t>(i)];
        const int64_t slot = slot_ids[static_cast<std::size_t>(i)], start = starts[static_cast<std::size_t>(i)];
        TORCH_CHECK(!q.empty(), "extend: empty token list");
        TORCH_CHECK(slot >= 0 && slot < s.slots, "extend: slot ", slot, " out of range");
        TORCH_CHECK(!used[static_cast<std::size_t>(slot)], "extend: slot ", slot, " given twice");
        used[static_cast<std::size_t>(slot)] = 1;
        const int64_t end = start + static_cast<int64_t>(q.size());
        TORCH_CHECK(start >= 0 && end <= s.cap, "extend: positions ", start, "..", end - 1,
                    " outside the cache capacity ", s.cap);
        for (int32_t t : q)
            TORCH_CHECK(t >= 0 && t < s.V, "extend: token id ", t, " outside the vocabulary (", s.V, ")");
        R += static_cast<int64_t>(q.size());
        S = std::max(S, end);
    }
    c10::InferenceMode im;
    // Rows: the sequences one after the other, each in position order (no padding).
    std::vector<int64_t> tok(static_cast<std::size_t>(R)), slot(static_cast<std::size_t>(R)),
        pos(static_cast<std::size_t>(R)), last(static_cast<std::size_t>(m));
    int64_t r = 0;
    for (int64_t i = 0; i < m; ++i) {
        const auto& q = seqs[static_cast<std::size_t>(i)];
        for (std::size_t t = 0; t < q.size(); ++t, ++r) {
            tok[static_cast<std::size_t>(r)] = q[t];
            slot[static_cast<std::size_t>(r)] = slot_ids[static_cast<std::size_t>(i)];
            pos[static_cast<std::size_t>(r)] = starts[static_cast<std::size_t>(i)] + static_cast<int64_t>(t);
        }
        last[static_cast<std::size_t>(i)] = r - 1;
    }
    // Chunks of rows in order: a later chunk sees the k/v an earlier one stored.
    const int64_t chunk = s.chunk_rows(S);
    torch::Tensor final_h = torch::empty({m, s.dm}, s.opt);
    std::size_t next = 0;  // first sequence whose last row is not collected yet
    for (int64_t c0 = 0; c0 < R; c0 += chunk) {
        const int64_t n = std::min(chunk, R - c0);
        const torch::Tensor h = s.forward_rows(tok.data() + c0, slot.data() + c0, pos.data() + c0, n);
        std::vector<int64_t> dst, src;
        for (; next < last.size() && last[next] < c0 + n; ++next) {
            dst.push_back(static_cast<int64_t>(next));
            src.push_back(last[next] - c0);
        }
        if (dst.empty()) continue;
        const auto k = static_cast<int64_t>(dst.size());
        const auto dev = s.opt.device();
        final_h.index_copy_(0, torch::from_blob(dst.data(), {k}, torch::kLong).to(dev),
                            h.index_select(0, torch::from_blob(src.data(), {k}, torch::kLong).to(dev)));
    }
    return s.logits(final_h);
}

torch::Tensor LlamaSlotDecoder::prefill(const std::vector<int64_t>& slot_ids,
                                        const std::vector<std::vector<int32_t>>& prompts) {
    return extend(slot_ids, prompts, std::vector<int64_t>(prompts.size(), 0));
}

torch::Tensor LlamaSlotDecoder::decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions) {
    State& s = *s_;
    const auto n = static_cast<int64_t>(tokens.size());
    TORCH_CHECK(n > 0 && tokens.size() == positions.size() && n <= s.slots, "decode: need 1..", s.slots,
                " rows with one position each");
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = tokens[static_cast<std::size_t>(i)], p = positions[static_cast<std::size_t>(i)];
        TORCH_CHECK(t >= 0 && t < s.V, "decode: token id ", t, " outside the vocabulary (", s.V, ")");
        TORCH_CHECK(p >= 0 && p < s.cap, "decode: position ", p, " outside the cache capacity ", s.cap);
    }
    c10::InferenceMode im;
    std::vector<int64_t> rows(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) rows[static_cast<std::size_t>(i)] = i;
    const torch::Tensor h = s.forward_rows(tokens.data(), rows.data(), positions.data(), n);
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
