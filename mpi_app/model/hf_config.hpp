// SPDX-License-Identifier: Apache-2.0
// hf_config: a Hugging Face `config.json` of the Llama/Qwen2/Qwen3 family -> HfConfig, and
// back. Validates keys, types and consistency (heads divisible by kv heads, even head_dim, ...)
// and throws ConfigError naming the file and key. Does not build a model (see llama.hpp).
// Unsupported features (rope_scaling types other than llama3, sliding window, mlp_bias,
// non-silu activations) are rejected rather than silently ignored. share/doc/models.md lists
// the keys.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace tagflow::model {

struct HfConfig {
    std::string model_type = "llama";  ///< "llama", "qwen2" or "qwen3"
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;  ///< default: num_attention_heads
    int64_t head_dim = 0;             ///< default: hidden_size / num_attention_heads (qwen3: 128)
    int64_t vocab_size = 0;
    int64_t max_position_embeddings = 2048;
    double rms_norm_eps = 1e-6;
    double rope_theta = 10000.0;
    bool tie_word_embeddings = false;
    bool qkv_bias = false;  ///< qwen2: always; llama, qwen3: attention_bias
    bool o_bias = false;    ///< llama, qwen3: attention_bias; qwen2: never
    /// qwen3: RMSNorm over each query and key head (weights "self_attn.q_norm.weight" and
    /// "self_attn.k_norm.weight", [head_dim], eps rms_norm_eps), after the projection and
    /// before RoPE.
    bool qk_norm = false;
    /// RoPE frequency scaling ("rope_scaling" in config.json): "default" (none) or "llama3"
    /// (Llama 3.1's: transformers' _compute_llama3_parameters, see rope_inv_freq() in llama.hpp).
    std::string rope_type = "default";
    double rope_factor = 1.0;                           ///< llama3: "factor"
    double rope_low_freq_factor = 1.0;                  ///< llama3: "low_freq_factor"
    double rope_high_freq_factor = 4.0;                 ///< llama3: "high_freq_factor"
    int64_t rope_original_max_position_embeddings = 0;  ///< llama3: "original_max_position_embeddings"
    std::string torch_dtype = "float32";
    /// tagflow extension ("tagflow_abs_positions" in config.json, absent = false): learned
    /// absolute position embeddings "model.embed_positions.weight" [max_position_embeddings,
    /// hidden] added to the token embeddings, on top of RoPE. RoPE-only decoders of this size
    /// learn the digit tasks (`reverse`: output i copies input n-1-i) far more slowly, since
    /// attention then sees only relative offsets. Hugging Face transformers ignores the key and
    /// reports the extra tensor as unused, so such checkpoints are for tagflow.
    bool abs_positions = false;
    /// Special-token ids ("bos_token_id", "eos_token_id" — an id or a list —, "pad_token_id";
    /// absent or null = none). Not used by the model; kept so a directory tagflow writes names the
    /// same ids as the one it read, and set from --tokenizer for a fresh model (model/hf_export.hpp).
    std::optional<int64_t> bos_token_id;
    std::vector<int64_t> eos_token_ids;
    std::optional<int64_t> pad_token_id;

    /// Throws ConfigError (prefixed with `source`) if the fields are inconsistent.
    void validate(const std::string& source = "config") const;
};

/// Parses config.json text. `source` (a path) is used in messages.
HfConfig parse_hf_config(const std::string& json_text, const std::string& source = "config.json");
/// Reads and parses a config.json file.
HfConfig load_hf_config(const std::string& path);
/// Serialises to config.json text in the Hugging Face layout (with "architectures").
std::string to_hf_json(const HfConfig& c);

}  // namespace tagflow::model
