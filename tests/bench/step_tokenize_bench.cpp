// SPDX-License-Identifier: Apache-2.0
// step_tokenize_bench: what tokenizing one training step's prompts costs next to that step's
// rollout, in one process on one thread. The prompts: the first P strings of a JSON Lines file (a
// chunk of tokenizer_bench.sh's mixed corpus each, cut to --max-bytes at a character boundary:
// a word-problem-sized prompt), each as one user message; tokenizing =
// rendering the tokenizer's chat template and encoding it (Tokenizer::chat_prompt, what a text
// task does per prompt). The rollout: the rollout engine (continuous batching) generating G
// samples of N tokens (sampled at temperature 1, no stop) for each prompt on a fresh random
// Llama of `tagflow train`'s default size (d_model 64, 2 layers, 2 heads, d_ff 256, learned
// positions) whose vocabulary is the tokenizer's. Prints one line:
//   step-tokenize <prompts> <prompt tokens> <tokenize s> <rollout s> <generated tokens> <tokenize/rollout %>
// (tokenize: the fastest of --repeat passes; rollout: one pass after a one-prompt warm-up).
//   step_tokenize_bench --tokenizer PATH --prompts FILE [--prompts-per-step 16] [--group-size 8]
//                       [--new 64] [--max-bytes 600] [--repeat 3] [--threads 1]
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/llama.hpp"
#include "rollout/engine.hpp"
#include "text/tokenizer.hpp"

using namespace tagflow;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    std::string tok_path, prompts_path;
    int prompts_per_step = 16, group = 8, new_tokens = 64, repeat = 3, threads = 1, max_bytes = 600;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--tokenizer") tok_path = argv[i + 1];
        else if (k == "--prompts") prompts_path = argv[i + 1];
        else if (k == "--prompts-per-step") prompts_per_step = std::atoi(argv[i + 1]);
        else if (k == "--group-size") group = std::atoi(argv[i + 1]);
        else if (k == "--new") new_tokens = std::atoi(argv[i + 1]);
        else if (k == "--repeat") repeat = std::atoi(argv[i + 1]);
        else if (k == "--threads") threads = std::atoi(argv[i + 1]);
        else if (k == "--max-bytes") max_bytes = std::atoi(argv[i + 1]);
    }
    if (tok_path.empty() || prompts_path.empty() || prompts_per_step < 1 || group < 1 || new_tokens < 1 || repeat < 1 ||
        threads < 1 || max_bytes < 1) {
        std::fprintf(stderr,
                     "usage: step_tokenize_bench --tokenizer PATH --prompts FILE [--prompts-per-step P] "
                     "[--group-size G] [--new N] [--max-bytes B] [--repeat R] [--threads T]\n");
        return 2;
    }
    try {
        at::set_num_threads(threads);
        using SetThreads = void(int);  // OpenBLAS keeps its own pool (see generate_bench.cpp)
        if (auto* f = reinterpret_cast<SetThreads*>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(threads);
        const auto tok = text::load_tokenizer(tok_path);
        std::vector<std::string> prompts;
        std::ifstream in(prompts_path);
        std::string line;
        while (static_cast<int>(prompts.size()) < prompts_per_step && std::getline(in, line)) {
            std::string p = nlohmann::json::parse(line).get<std::string>();
            if (p.size() > static_cast<size_t>(max_bytes)) {
                size_t n = static_cast<size_t>(max_bytes);
                while (n > 0 && (static_cast<unsigned char>(p[n]) & 0xC0) == 0x80) --n;  // not inside a character
                p.resize(n);
            }
            prompts.push_back(std::move(p));
        }
        if (static_cast<int>(prompts.size()) < prompts_per_step) {
            std::fprintf(stderr, "step_tokenize_bench: %s has fewer than %d prompts\n", prompts_path.c_str(),
                         prompts_per_step);
            return 2;
        }

        // Tokenizing the step's prompts: chat template + encode, the fastest of `repeat` passes.
        std::vector<std::vector<int32_t>> ids;
        double tok_s = 1e30;
        for (int r = 0; r < repeat; ++r) {
            std::vector<std::vector<int32_t>> got;
            const auto t0 = std::chrono::steady_clock::now();
            for (const std::string& p : prompts)
                got.push_back(tok->chat_prompt(nlohmann::ordered_json::array({{{"role", "user"}, {"content", p}}})));
            tok_s = std::min(tok_s, seconds_since(t0));
            ids = std::move(got);
        }
        int64_t prompt_tokens = 0, longest = 0;
        for (const auto& p : ids) {
            prompt_tokens += static_cast<int64_t>(p.size());
            longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
        }

        // The step's rollout on a default-size model with the tokenizer's vocabulary.
        model::HfConfig c;
        c.model_type = "llama";
        c.hidden_size = 64;
        c.num_hidden_layers = 2;
        c.num_attention_heads = c.num_key_value_heads = 2;
        c.head_dim = 32;
        c.intermediate_size = 256;
        c.vocab_size = tok->vocab_size();
        c.max_position_embeddings = longest + new_tokens + 8;
        c.abs_positions = true;
        c.rope_theta = 10000.0;
        c.rms_norm_eps = 1e-5;
        model::LlamaModel m(c, 0);
        m->reset_parameters(1234, 0.1);
        rollout::InferenceConfig ec;
        ec.max_batch = static_cast<int64_t>(prompts_per_step) * group;
        rollout::InferenceEngine engine(m, ec);
        auto submit = [&](int64_t id, const std::vector<int32_t>& p, int32_t n) {
            rollout::GenRequest q;
            q.id = id;
            q.prompt = p;
            q.params.temperature = 1.0;
            q.params.max_tokens = n;
            q.params.seed = static_cast<uint64_t>(id) + 1;
            engine.submit(std::move(q));
        };
        submit(0, ids.front(), 2);  // warm-up (allocations, first GEMMs)
        engine.run();
        const auto t0 = std::chrono::steady_clock::now();
        int64_t id = 0;
        for (const auto& p : ids)
            for (int g = 0; g < group; ++g) submit(id++, p, new_tokens);
        int64_t generated = 0;
        for (const auto& r : engine.run()) generated += r.num_tokens;
        const double roll_s = seconds_since(t0);
        std::printf("step-tokenize %d %lld %.6f %.3f %lld %.3g\n", prompts_per_step,
                    static_cast<long long>(prompt_tokens), tok_s, roll_s, static_cast<long long>(generated),
                    100.0 * tok_s / roll_s);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "step_tokenize_bench: %s\n", e.what());
        return 1;
    }
}
