// SPDX-License-Identifier: Apache-2.0
// generate: prefill + token-by-token decoding over the policy's KV cache, sampling with
// temperature/top-p from an explicit generator, and the greedy evaluation loop.
// Does not shrink the batch as rows finish (rows of one task finish together).
#include "rollout/generate.hpp"

#include <algorithm>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/error.hpp"

namespace tagflow::rollout {

torch::Tensor top_p_filter(const torch::Tensor& probs, double top_p) {
    if (top_p >= 1.0) return probs;
    auto sorted = probs.sort(/*dim=*/-1, /*descending=*/true);
    torch::Tensor vals = std::get<0>(sorted), idx = std::get<1>(sorted);
    // Drop a token when the mass strictly before it already reaches top_p.
    torch::Tensor drop = (vals.cumsum(-1) - vals) >= top_p;
    drop.select(-1, 0).fill_(false);
    return probs.scatter(-1, idx, vals.masked_fill(drop, 0.0));
}

torch::Tensor sample_next(const torch::Tensor& logits, const SamplingParams& params,
                          at::Generator& gen, torch::Tensor& logprobs) {
    torch::Tensor lf = logits.to(torch::kFloat32);
    torch::Tensor tok;
    torch::Tensor lp;
    if (params.temperature <= 0.0) {
        lp = torch::log_softmax(lf, -1);
        tok = lf.argmax(-1);
    } else {
        lp = torch::log_softmax(lf / params.temperature, -1);
        torch::Tensor probs = top_p_filter(lp.exp(), params.top_p);
        tok = torch::multinomial(probs, /*num_samples=*/1, /*replacement=*/false, gen).squeeze(-1);
    }
    logprobs = lp.gather(-1, tok.unsqueeze(-1)).squeeze(-1);
    return tok;
}

std::vector<Completion> generate(model::Policy& policy,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const SamplingParams& params, at::Generator& gen) {
    torch::NoGradGuard no_grad;
    const int64_t B = static_cast<int64_t>(prompts.size());
    std::vector<Completion> out(B);
    if (B == 0 || params.max_tokens <= 0) return out;

    int64_t lmax = 0;
    for (const auto& p : prompts) {
        if (p.empty()) throw Error("generate: empty prompt");
        lmax = std::max<int64_t>(lmax, static_cast<int64_t>(p.size()));
    }
    // The last sampled token is never fed back, hence the - 1.
    const int64_t need = lmax + params.max_tokens - 1;
    if (need > policy->config().max_seq)
        throw Error("generate: prompt (" + std::to_string(lmax) + ") + max_tokens (" +
                    std::to_string(params.max_tokens) + ") exceeds the policy's max_seq (" +
                    std::to_string(policy->config().max_seq) + ")");

    torch::Tensor tokens = torch::zeros({B, lmax}, torch::kInt64);
    torch::Tensor pad = torch::zeros({B}, torch::kInt64);
    auto ta = tokens.accessor<int64_t, 2>();
    auto pa = pad.accessor<int64_t, 1>();
    for (int64_t b = 0; b < B; ++b) {
        const auto& p = prompts[b];
        const int64_t off = lmax - static_cast<int64_t>(p.size());
        pa[b] = off;
        for (size_t i = 0; i < p.size(); ++i) ta[b][off + static_cast<int64_t>(i)] = p[i];
    }

    model::KVCache cache = policy->make_cache(B, pad);
    torch::Tensor logits = policy->forward_cached(tokens, cache).select(1, lmax - 1);
    std::vector<char> done(B, 0);
    int64_t n_done = 0;
    for (int32_t step = 0; step < params.max_tokens; ++step) {
        torch::Tensor lp;
        torch::Tensor tok = sample_next(logits, params, gen, lp);
        auto tacc = tok.accessor<int64_t, 1>();
        auto lacc = lp.accessor<float, 1>();
        for (int64_t b = 0; b < B; ++b) {
            if (done[b]) continue;
            const auto t = static_cast<int32_t>(tacc[b]);
            out[b].response.push_back(t);
            out[b].logprobs.push_back(lacc[b]);
            if (t == params.eos) {
                out[b].hit_eos = true;
                done[b] = 1;
                ++n_done;
            }
        }
        if (n_done == B || step + 1 == params.max_tokens) break;
        logits = policy->forward_cached(tok.view({B, 1}), cache).select(1, 0);
    }
    return out;
}

double evaluate(model::Policy& policy, const Task& task, int64_t n_prompts, int64_t batch_size,
                int64_t first) {
    if (n_prompts <= 0) return 0.0;
    SamplingParams greedy;
    greedy.temperature = 0.0;
    greedy.max_tokens = task.max_response_tokens();
    greedy.eos = task.eos_token();
    at::Generator gen = at::detail::createCPUGenerator(0);  // unused by greedy decoding
    double total = 0.0;
    for (int64_t start = 0; start < n_prompts; start += batch_size) {
        const int64_t n = std::min(batch_size, n_prompts - start);
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t i = 0; i < n; ++i) prompts.push_back(task.eval_prompt(first + start + i));
        auto comps = generate(policy, prompts, greedy, gen);
        for (int64_t i = 0; i < n; ++i) total += task.reward(prompts[i], comps[i].response);
    }
    return total / static_cast<double>(n_prompts);
}

}  // namespace tagflow::rollout
