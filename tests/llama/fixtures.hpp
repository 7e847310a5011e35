// SPDX-License-Identifier: Apache-2.0
// fixtures: the small checkpoint shapes the llama tests and the reference check share.
#pragma once
#include "model/hf_config.hpp"

namespace tagflow::model::fixtures {

/// Qwen2-style: GQA 4:2, q/k/v biases, untied embeddings, rope_theta 1e6.
inline HfConfig qwen2_config() {
    HfConfig c;
    c.model_type = "qwen2";
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 97;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 1e6;
    c.qkv_bias = true;
    return c;
}

/// Llama-style: GQA 6:2, no biases, tied embeddings, rope_theta 5e5.
inline HfConfig llama_tied_config() {
    HfConfig c;
    c.model_type = "llama";
    c.hidden_size = 48;
    c.intermediate_size = 96;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.vocab_size = 101;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    c.tie_word_embeddings = true;
    return c;
}

/// Qwen3-style: per-head q/k norms, head_dim 16 != hidden/heads (12), GQA 4:2, no biases,
/// tied embeddings, rope_theta 1e6.
inline HfConfig qwen3_config() {
    HfConfig c;
    c.model_type = "qwen3";
    c.hidden_size = 48;
    c.intermediate_size = 96;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 103;
    c.max_position_embeddings = 64;
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
    HfConfig c;
    c.model_type = "llama";
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 97;
    c.max_position_embeddings = 128;
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
