// SPDX-License-Identifier: Apache-2.0
// llama_write_fixture <dir> <kind>: writes a small random checkpoint directory (config.json +
// safetensors; the qwen2 one sharded with an index) and expected.safetensors holding the token
// ids (as F32) and the C++ logits of three paths over the same tokens: the full forward
// ("logits"), LlamaModel's KV-cache path fed in uneven chunks ("logits_cached"), and the
// rollout engine's LlamaSlotDecoder ("logits_engine": a prefill of two rows of different
// lengths, an extend of one, then decode steps; NaN at the positions whose logits those calls
// do not return), for reference_forward.py to check independently.
// Kinds: qwen2 (untied), qwen2_tied, llama (tied), qwen3 (q/k norms, head_dim != hidden/heads,
// tied), llama3 and llama3_untied (rope_scaling llama3, sequences 3.75x past the original
// context). Does not compare anything itself.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/llama.hpp"
#include "fixtures.hpp"

using tagflow::model::HfConfig;
using tagflow::model::LlamaModel;
using tagflow::model::LlamaModelImpl;
using tagflow::model::LlamaSlotDecoder;

namespace {

/// InferenceEngine logits [2, T, V] of `tokens` [2, T] as described above (NaN where not produced).
torch::Tensor engine_logits(LlamaModel m, const torch::Tensor& tokens) {
    const int64_t T = tokens.size(1), V = m->config().vocab_size;
    torch::Tensor out = torch::full({2, T, V}, std::numeric_limits<float>::quiet_NaN());
    auto ids = [&](int64_t row, int64_t from, int64_t to) {
        std::vector<int32_t> v;
        for (int64_t t = from; t < to; ++t) v.push_back(static_cast<int32_t>(tokens[row][t].item<int64_t>()));
        return v;
    };
    LlamaSlotDecoder dec(m, 2, T);
    const int64_t p0 = std::max<int64_t>(2, T / 4), p1 = T / 3 + 1, e = std::max<int64_t>(2, T / 6);
    const torch::Tensor pre = dec.prefill({0, 1}, {ids(0, 0, p0), ids(1, 0, p1)});
    out[0][p0 - 1] = pre[0];
    out[1][p1 - 1] = pre[1];
    out[1][p1 + e - 1] = dec.extend({1}, {ids(1, p1, p1 + e)}, {p1})[0];
    TORCH_CHECK(p0 <= p1 + e, "row 0 must be the one behind");
    for (int64_t pos0 = p0, pos1 = p1 + e; pos0 < T; ++pos0, ++pos1) {
        std::vector<int64_t> tok{tokens[0][pos0].item<int64_t>()}, pos{pos0};
        if (pos1 < T) {
            tok.push_back(tokens[1][pos1].item<int64_t>());
            pos.push_back(pos1);
        }
        const torch::Tensor l = dec.decode(tok, pos);
        out[0][pos0] = l[0];
        if (pos1 < T) out[1][pos1] = l[1];
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s <dir> <qwen2|qwen2_tied|llama|qwen3|llama3|llama3_untied>\n", argv[0]);
        return 2;
    }
    try {
        namespace fx = tagflow::model::fixtures;
        const std::string dir = argv[1], kind = argv[2];
        HfConfig c;
        int64_t shard_bytes = 0, T = 12;
        uint64_t seed = 99;
        if (kind == "qwen2" || kind == "qwen2_tied") {  // GQA 4:2, q/k/v biases; the untied one sharded
            c = fx::qwen2_config();
            c.tie_word_embeddings = kind == "qwen2_tied";
            shard_bytes = kind == "qwen2" ? 40000 : 0;
            seed = 1234;
        } else if (kind == "llama") {  // GQA 6:2, no biases, tied embeddings, single file
            c = fx::llama_tied_config();
        } else if (kind == "qwen3") {
            c = fx::qwen3_config();
            T = 40;
            seed = 31;
        } else if (kind == "llama3" || kind == "llama3_untied") {
            c = fx::llama3_config(kind == "llama3");
            T = 120;  // 3.75 x original_max_position_embeddings (32)
            seed = 57;
        } else {
            std::fprintf(stderr, "unknown kind '%s'\n", kind.c_str());
            return 2;
        }
        c.max_position_embeddings = std::max<int64_t>(64, T);
        LlamaModel m(c, 0);
        m->reset_parameters(seed, 0.1);
        m->save_pretrained(dir, shard_bytes);

        // Logits from the re-loaded model, so the load path is part of what is checked.
        LlamaModel loaded(LlamaModelImpl::from_pretrained(dir));
        torch::NoGradGuard no_grad;
        torch::Tensor tokens;
        if (T == 12) {
            tokens =
                torch::tensor({3, 17, 42, 5, 96, 0, 11, 64, 23, 8, 77, 31, 90, 1, 2, 55, 40, 13, 72, 6, 19, 88, 34, 50},
                              torch::kLong)
                    .view({2, 12});
        } else {
            tokens = (torch::arange(0, 2 * T, torch::kLong) * 37 + 11).remainder(c.vocab_size).view({2, T});
            tokens[1] = tokens[1].flip(0);
        }
        const torch::Tensor logits = loaded->forward(tokens);
        // KV-cache chunks: 5,1,4,1,1 for T = 12; T/3,1,T/3,1,rest,1,1 otherwise.
        std::vector<int64_t> chunks = {5, 1, 4, 1, 1};
        if (T != 12) chunks = {T / 3, 1, T / 3, 1, T - 2 * (T / 3) - 4, 1, 1};
        auto cache = loaded->make_cache();
        std::vector<torch::Tensor> parts;
        int64_t at = 0;
        for (int64_t n : chunks) {
            parts.push_back(loaded->forward_cached(tokens.narrow(1, at, n), cache));
            at += n;
        }
        TORCH_CHECK(at == T, "chunks cover ", at, " of ", T, " positions");
        const torch::Tensor cached = torch::cat(parts, 1);
        const torch::Tensor engine = engine_logits(loaded, tokens);
        tagflow::model::save_safetensors(dir + "/expected.safetensors", {{"tokens", tokens.to(torch::kFloat)},
                                                                         {"logits", logits},
                                                                         {"logits_cached", cached},
                                                                         {"logits_engine", engine}});
        std::printf("wrote %s (%s): logits %s, |logits|max %.4f\n", dir.c_str(), kind.c_str(),
                    c10::str(logits.sizes()).c_str(), logits.abs().max().item<double>());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_write_fixture: %s\n", e.what());
        return 1;
    }
}
