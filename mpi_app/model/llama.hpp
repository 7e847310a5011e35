// SPDX-License-Identifier: Apache-2.0
// llama: a Llama/Qwen2/Qwen3-family decoder (RMSNorm, rotate-half RoPE with rope_theta and
// optional llama3 frequency scaling, grouped-query attention, SwiGLU MLP, optional q/k/v/o
// biases, Qwen3's per-head q/k RMSNorm, tied embeddings) following the Hugging Face
// conventions, with HF parameter names (named_parameters() yields exactly
// "model.layers.0.self_attn.q_proj.weight", ...), a KV-cache path, and safetensors
// load/save of whole checkpoint directories (single file or sharded with an index).
// Computes in fp32 on whatever device the parameters are on. Does not sample (rollout/),
// and does not support other rope_scaling types or sliding-window attention.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace tagflow::model {

// ---- torch glue for safetensors ----

/// Loads every tensor of one safetensors file, converted to `dtype` (fp32 by default).
std::map<std::string, torch::Tensor> load_safetensors(const std::string& path, torch::Dtype dtype = torch::kFloat);
/// Writes named tensors (any device, any float dtype) as `dtype` to one safetensors file.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      st::DType dtype = st::DType::F32,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// ---- model ----

/// RoPE inverse frequencies [head_dim/2] fp32 of `c`, computed as transformers does in fp32:
/// 1 / theta^(arange(0, d, 2) / d), then, for rope_type "llama3", _compute_llama3_parameters:
/// wavelengths 2*pi/f longer than original_max_position_embeddings / low_freq_factor are
/// divided by factor, shorter than original / high_freq_factor kept, and those in between
/// interpolated smoothly. Every RoPE table of the model (training forward, value model, slot
/// decoder) comes from here.
torch::Tensor rope_inv_freq(const HfConfig& c);

/// `x * rsqrt(mean(x^2) + eps) * weight`, computed in fp32.
class RMSNormImpl : public torch::nn::Module {
public:
    RMSNormImpl(int64_t dim, double eps);
    torch::Tensor forward(const torch::Tensor& x);
    torch::Tensor weight;

private:
    double eps_;
};
TORCH_MODULE(RMSNorm);

/// Per-layer key/value cache: k[l], v[l] are [B, kv_heads, len, head_dim] (grown by concat).
struct LlamaKVCache {
    std::vector<torch::Tensor> k, v;
    int64_t len = 0;  ///< positions already in the cache; new tokens get positions len, len+1, ...
};

class LlamaAttentionImpl : public torch::nn::Module {
public:
    explicit LlamaAttentionImpl(const HfConfig& c);
    /// x [B,T,H*D]; cos/sin [T,D] (or [B,1,T,D]: per-row positions); `k_cache`/`v_cache` (may be
    /// undefined) are extended in place. `blocked` (bool [B,1,T,S], true = not visible) replaces the
    /// causal mask when defined (packed rows: see packed_hidden_states).
    torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          torch::Tensor* k_cache, torch::Tensor* v_cache, const torch::Tensor& blocked = {});
    torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
    RMSNorm q_norm{nullptr}, k_norm{nullptr};  ///< [head_dim] per-head norms; null unless HfConfig::qk_norm

private:
    int64_t heads_, kv_heads_, head_dim_;
};
TORCH_MODULE(LlamaAttention);

class LlamaMLPImpl : public torch::nn::Module {
public:
    explicit LlamaMLPImpl(const HfConfig& c);
    torch::Tensor forward(const torch::Tensor& x);  ///< down(silu(gate(x)) * up(x))
    torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

class LlamaDecoderLayerImpl : public torch::nn::Module {
public:
    explicit LlamaDecoderLayerImpl(const HfConfig& c);
    torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                          torch::Tensor* k_cache, torch::Tensor* v_cache, const torch::Tensor& blocked = {});
    RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
    LlamaAttention self_attn{nullptr};
    LlamaMLP mlp{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

/// The HF "model." prefix: embed_tokens, (embed_positions,) layers.{i}, norm.
class LlamaBackboneImpl : public torch::nn::Module {
public:
    explicit LlamaBackboneImpl(const HfConfig& c);
    /// Token embeddings of tokens [B,T] at positions start..start+T-1, plus the learned
    /// absolute position embeddings when the config has them (HfConfig::abs_positions).
    torch::Tensor embed(const torch::Tensor& tokens, int64_t start);
    /// The same with an explicit position per token (positions [B,T] int64; packed rows).
    torch::Tensor embed_at(const torch::Tensor& tokens, const torch::Tensor& positions);
    /// Every decoder layer on hidden states h [B,T,hidden] (no KV cache; RoPE tables cos/sin as
    /// the layers take them), checkpointed per layer when activation_checkpointing is on. Before
    /// the final norm.
    torch::Tensor run_layers(const torch::Tensor& h, const torch::Tensor& cos, const torch::Tensor& sin);
    torch::nn::Embedding embed_tokens{nullptr};
    torch::nn::Embedding embed_positions{nullptr};  ///< null unless HfConfig::abs_positions
    torch::nn::ModuleList layers{nullptr};
    RMSNorm norm{nullptr};
    /// Training forwards keep only each layer's input and recompute the layer in the backward
    /// (model/layer_checkpoint.hpp; --activation-checkpointing). A setting of the run, not of
    /// the model: not in config.json. Off by default.
    bool activation_checkpointing = false;
};
TORCH_MODULE(LlamaBackbone);

/// The backbone on PACKED rows (training without padding): tokens, positions, segments [B,T]
/// int64, several sequences concatenated in one row. Slot t attends to the slots s <= t of its own
/// segment only (a block-diagonal causal mask), and RoPE (and absolute position embeddings) take
/// `positions`, which restart at 0 for each sequence; padding slots at a row's end get a segment
/// of their own. Returns the final hidden states [B,T,hidden] (after the last norm): per sequence
/// the same numbers as the padded forward on that sequence alone, within float rounding.
/// Throws c10::Error when a position reaches c.max_position_embeddings.
torch::Tensor packed_hidden_states(LlamaBackboneImpl& m, const HfConfig& c, const torch::Tensor& tokens,
                                   const torch::Tensor& positions, const torch::Tensor& segments);

class LlamaModelImpl : public torch::nn::Module {
public:
    /// Builds the model with parameters drawn by reset_parameters(seed).
    explicit LlamaModelImpl(const HfConfig& cfg, uint64_t seed = 0);

    /// Full causal forward: tokens [B,T] int64 (positions 0..T-1) -> logits [B,T,V] fp32.
    torch::Tensor forward(const torch::Tensor& tokens);
    /// Packed rows (see packed_hidden_states) -> logits [B,T,V] fp32.
    torch::Tensor forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                 const torch::Tensor& segments);
    /// The output head on hidden states (lm_head, or the tied embeddings).
    torch::Tensor head(const torch::Tensor& hidden);
    /// An empty cache for this model.
    LlamaKVCache make_cache() const;
    /// Appends tokens [B,t] at positions cache.len.. and returns their logits [B,t,V];
    /// the same numbers as forward() on the whole sequence (within float rounding).
    torch::Tensor forward_cached(const torch::Tensor& tokens, LlamaKVCache& cache);

    /// Random weights from `seed` (no global RNG): linear/embedding N(0, std), biases
    /// N(0, std), norm weights 1 + N(0, std) so that tests exercise every parameter.
    void reset_parameters(uint64_t seed, double std = 0.02);

    /// Parameters under their Hugging Face names (no lm_head.weight when tied).
    std::vector<std::pair<std::string, torch::Tensor>> hf_state_dict() const;
    /// Copies named tensors into the parameters. Unknown names, wrong shapes and (with
    /// `strict`) missing names throw tagflow::Error. A redundant lm_head.weight of a tied
    /// model and legacy "*.rotary_emb.inv_freq" buffers are ignored.
    void load_hf_state_dict(const std::map<std::string, torch::Tensor>& tensors, bool strict = true);

    /// Reads `dir`/config.json and `dir`/model.safetensors, or the shards listed in
    /// `dir`/model.safetensors.index.json. Weights are converted to fp32.
    static std::shared_ptr<LlamaModelImpl> from_pretrained(const std::string& dir);
    /// Writes config.json plus model.safetensors, or, when the weights exceed `shard_bytes`
    /// (> 0), model-0000k-of-0000n.safetensors shards and model.safetensors.index.json.
    /// `dtype` is the on-disk dtype (config.json's torch_dtype is set to match).
    void save_pretrained(const std::string& dir, int64_t shard_bytes = 0, st::DType dtype = st::DType::F32) const;

    const HfConfig& config() const { return cfg_; }
    LlamaBackbone model{nullptr};
    torch::nn::Linear lm_head{nullptr};  ///< null when tie_word_embeddings

private:
    torch::Tensor run(const torch::Tensor& tokens, LlamaKVCache* cache);
    HfConfig cfg_;
    torch::Tensor inv_freq_;  ///< [head_dim/2] fp32, rope_inv_freq(cfg); not a parameter
};
TORCH_MODULE(LlamaModel);

// ---- batched inference (rollout) ----

/// Inference-only decoding of many sequences at once, for the rollout engine (rollout/engine.hpp).
/// Holds (1) a snapshot of the model's weights rearranged for decoding: q|k|v and gate|up
/// concatenated into one matrix each, the RMSNorm weights folded into the matrix that follows
/// them, 1/sqrt(head_dim) folded into q (into q_norm's weight when the model has per-head q/k
/// norms), optionally in bf16; and (2) a preallocated KV cache per
/// layer, [2, slots, kv_heads, capacity, head_dim], where every slot (row) holds one sequence at
/// its own length. prefill, extend and decode are one row-based forward (a row = one token with
/// its slot and position; no padding); its activations live in a grown-only workspace, so
/// nothing is allocated per token but the returned logits; reserve() grows the cache (one copy).
/// The snapshot is refreshed by sync_weights() when any parameter of the model changed in place
/// (version counters), e.g. after an optimiser step or load_hf_state_dict(). Runs under
/// c10::InferenceMode. Same numbers as LlamaModel::forward within float rounding (the folding
/// changes the rounding, not the maths). Does not sample and does not schedule (see rollout/).
class LlamaSlotDecoder {
public:
    /// `slots` rows of `capacity` positions each (capacity <= max_position_embeddings).
    LlamaSlotDecoder(LlamaModel model, int64_t slots, int64_t capacity, bool bf16 = false);
    ~LlamaSlotDecoder();
    LlamaSlotDecoder(const LlamaSlotDecoder&) = delete;
    LlamaSlotDecoder& operator=(const LlamaSlotDecoder&) = delete;

    int64_t slots() const;
    int64_t capacity() const;
    bool bf16() const;
    const HfConfig& config() const;
    /// Grows to at least `slots` rows and `capacity` positions, keeping the cached data.
    void reserve(int64_t slots, int64_t capacity);
    /// Re-snapshots the weights if a parameter changed since the last snapshot; true if it did.
    bool sync_weights();
    /// True if a parameter changed since the last snapshot (sync_weights() would re-snapshot).
    bool weights_changed() const;

    /// Runs each prompt (no padding tokens; lengths may differ) into cache row slots[i]
    /// (positions 0..len-1; previous content of those rows is overwritten) and returns the
    /// fp32 logits [m, V] of each prompt's last token.
    torch::Tensor prefill(const std::vector<int64_t>& slots, const std::vector<std::vector<int32_t>>& prompts);
    /// Runs tokens seqs[i] into cache row slots[i] at positions starts[i].. (the row must hold
    /// positions 0..starts[i]-1, e.g. from an earlier prefill; those entries are kept, later ones
    /// overwritten) and returns the fp32 logits [m, V] of each sequence's last token. Slots must
    /// be distinct. prefill() is extend() with every start 0; with start > 0 it recomputes the
    /// k/v of a suffix (e.g. with new weights) on top of the kept prefix.
    torch::Tensor extend(const std::vector<int64_t>& slots, const std::vector<std::vector<int32_t>>& seqs,
                         const std::vector<int64_t>& starts);
    /// One decode step for rows 0..n-1 (n = tokens.size()): row i feeds tokens[i] at position
    /// positions[i] (row i must hold positions 0..positions[i]-1) and gets fp32 logits [n, V].
    torch::Tensor decode(const std::vector<int64_t>& tokens, const std::vector<int64_t>& positions);
    /// Copies the first `len` cached positions of row `from` to row `to` (slot compaction).
    void move_slot(int64_t from, int64_t to, int64_t len);

private:
    struct State;
    std::unique_ptr<State> s_;
};

}  // namespace tagflow::model
