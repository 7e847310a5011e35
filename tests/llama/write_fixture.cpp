// SPDX-License-Identifier: Apache-2.0
// llama_write_fixture <dir> <qwen2|llama>: writes a small random checkpoint directory
// (config.json + safetensors; the qwen2 one sharded with an index) and expected.safetensors
// holding the token ids (as F32), the C++ logits of the full forward ("logits") and of the
// KV-cache path ("logits_cached"), for reference_forward.py to check independently.
#include <cstdio>
#include <exception>
#include <string>

#include <torch/torch.h>

#include "model/llama.hpp"
#include "fixtures.hpp"

using tagflow::model::HfConfig;
using tagflow::model::LlamaModel;
using tagflow::model::LlamaModelImpl;

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s <dir> <qwen2|llama>\n", argv[0]);
        return 2;
    }
    try {
        const std::string dir = argv[1], kind = argv[2];
        HfConfig c;
        int64_t shard_bytes = 0;
        if (kind == "qwen2") {  // GQA 4:2, q/k/v biases, untied, sharded
            c = tagflow::model::fixtures::qwen2_config();
            shard_bytes = 40000;
        } else if (kind == "llama") {  // GQA 6:2, no biases, tied embeddings, single file
            c = tagflow::model::fixtures::llama_tied_config();
        } else {
            std::fprintf(stderr, "unknown kind '%s'\n", kind.c_str());
            return 2;
        }
        c.max_position_embeddings = 64;
        LlamaModel m(c, 0);
        m->reset_parameters(kind == "qwen2" ? 1234 : 99, 0.1);
        m->save_pretrained(dir, shard_bytes);

        // Logits from the re-loaded model, so the load path is part of what is checked.
        auto loaded = LlamaModelImpl::from_pretrained(dir);
        torch::NoGradGuard no_grad;
        const torch::Tensor tokens = torch::tensor({3, 17, 42, 5, 96, 0, 11, 64, 23, 8, 77, 31,
                                                    90, 1, 2, 55, 40, 13, 72, 6, 19, 88, 34, 50},
                                                   torch::kLong)
                                         .view({2, 12});
        const torch::Tensor logits = loaded->forward(tokens);
        auto cache = loaded->make_cache();
        const torch::Tensor cached = torch::cat(
            {loaded->forward_cached(tokens.narrow(1, 0, 5), cache),
             loaded->forward_cached(tokens.narrow(1, 5, 1), cache),
             loaded->forward_cached(tokens.narrow(1, 6, 4), cache),
             loaded->forward_cached(tokens.narrow(1, 10, 1), cache),
             loaded->forward_cached(tokens.narrow(1, 11, 1), cache)},
            1);
        tagflow::model::save_safetensors(dir + "/expected.safetensors",
                                         {{"tokens", tokens.to(torch::kFloat)},
                                          {"logits", logits},
                                          {"logits_cached", cached}});
        std::printf("wrote %s (%s): logits %s, |logits|max %.4f\n", dir.c_str(), kind.c_str(),
                    c10::str(logits.sizes()).c_str(), logits.abs().max().item<double>());
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama_write_fixture: %s\n", e.what());
        return 1;
    }
}
