// SPDX-License-Identifier: Apache-2.0
// fixtures: the small checkpoint shapes the llama tests, the reference check and the other
// tests that need a small model (model, rollout, agent loop) share.
#pragma once
#include <cstdint>
#include <string>

#include "model/hf_config.hpp"

namespace tagflow::model::fixtures {

/// A two-layer config of the given shape (FFN 2x hidden); the named fixtures below and the
/// task-sized models of other tests start from it and set what they need on top.
inline HfConfig shape(const std::string& model_type, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim,
                      int64_t vocab, int64_t positions) {
    HfConfig c;
    c.model_type = model_type;
    c.hidden_size = hidden;
    c.intermediate_size = 2 * hidden;
    c.num_hidden_layers = 2;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv_heads;
    c.head_dim = head_dim;
    c.vocab_size = vocab;
    c.max_position_embeddings = positions;
    return c;
}

/// Qwen2-style: GQA 4:2, q/k/v biases, untied embeddings, rope_theta 1e6.
inline HfConfig qwen2_config() {
    HfConfig c = shape("qwen2", 64, 4, 2, 16, 97, 64);
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    c.qkv_bias = true;
    return c;
}

/// Llama-style: GQA 6:2, no biases, tied embeddings, rope_theta 5e5.
inline HfConfig llama_tied_config() {
    HfConfig c = shape("llama", 48, 6, 2, 8, 101, 64);
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    c.tie_word_embeddings = true;
    return c;
}

/// Qwen3-style: per-head q/k norms, head_dim 16 != hidden/heads (12), GQA 4:2, no biases,
/// tied embeddings, rope_theta 1e6.
inline HfConfig qwen3_config() {
    HfConfig c = shape("qwen3", 48, 4, 2, 16, 103, 64);
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    c.tie_word_embeddings = true;
    c.qk_norm = true;
    return c;
}

/// Llama 3.1-style rope_scaling (llama3) with a short original context (32) so that short
/// test sequences (up to 128 positions) run far past it. With head_dim 16 and theta 1e4 the
/// wavelengths 2*pi/f are 6.3, 19.9, 62.8, ...: one frequency above high_freq_wavelen (kept),
/// one between (smoothed), six below low_freq_wavelen (divided by factor). GQA 4:2.
inline HfConfig llama3_config(bool tied) {
    HfConfig c = shape("llama", 64, 4, 2, 16, 97, 128);
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.tie_word_embeddings = tied;
    c.rope_type = "llama3";
    c.rope_factor = 8.0;
    c.rope_low_freq_factor = 1.0;
    c.rope_high_freq_factor = 4.0;
    c.rope_original_max_position_embeddings = 32;
    return c;
}

}  // namespace tagflow::model::fixtures
