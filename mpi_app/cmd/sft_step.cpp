// SPDX-License-Identifier: Apache-2.0
// sft_step: see sft_step.hpp.
#include "cmd/sft_step.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include <torch/nn/functional/loss.h>
#include <torch/nn/utils/clip_grad.h>

#include "common/error.hpp"
#include "common/log.hpp"
#include "cmd/gemm_check.hpp"
#include "cmd/train_command.hpp"
#include "model/llama.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/task.hpp"
#include "train/collectives_mpi.hpp"
#include "train/delta_sync.hpp"
#include "train/workers.hpp"

namespace tagflow::cmd {

// Pads `seqs` with `pad` into a Batch; the loss covers the tokens after each prompt (those whose
// `resp_mask` entry is 0 excepted, when given: a multi-turn demonstration's tool tokens).
Batch pack(const std::vector<SftSeq>& seqs, const std::vector<std::vector<uint8_t>>* resp_mask, int32_t pad) {
    size_t longest = 0;
    for (const SftSeq& q : seqs) longest = std::max(longest, q.ids.size());
    Batch b;
    const auto rows = static_cast<int64_t>(seqs.size());
    const auto T = static_cast<int64_t>(longest);
    b.tokens = torch::full({rows, T}, pad, torch::kLong);
    b.mask = torch::zeros({rows, std::max<int64_t>(T - 1, 0)}, torch::kFloat);
    auto tok = b.tokens.accessor<int64_t, 2>();
    auto msk = b.mask.accessor<float, 2>();
    for (size_t r = 0; r < seqs.size(); ++r) {
        const SftSeq& q = seqs[r];
        for (size_t t = 0; t < q.ids.size(); ++t) tok[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = q.ids[t];
        // position t predicts token t+1; response tokens are t+1 >= prompt_len
        for (size_t t = q.prompt_len - 1; t + 1 < q.ids.size(); ++t) {
            if (resp_mask && !(*resp_mask)[r].at(t + 1 - q.prompt_len)) continue;
            msk[static_cast<int64_t>(r)][static_cast<int64_t>(t)] = 1.0f;
            ++b.response_tokens;
        }
    }
    return b;
}

Batch make_batch(const rollout::Task& task, int64_t first, int64_t count, int rank, int size) {
    std::vector<SftSeq> seqs;
    // Multi-turn tasks: the demonstration's tool/environment tokens stay out of the loss.
    const rollout::AgentLoop* loop = rollout::as_agent_loop(task);
    std::vector<std::vector<uint8_t>> resp_mask;
    for (int64_t j = rank; j < count; j += size) {
        SftSeq q;
        q.ids = task.train_prompt(first + j);
        q.prompt_len = q.ids.size();
        if (loop) resp_mask.push_back(loop->demonstration(q.ids).loss_mask);
        const std::vector<int32_t> sol = task.solution(q.ids);
        q.ids.insert(q.ids.end(), sol.begin(), sol.end());
        seqs.push_back(std::move(q));
    }
    return pack(seqs, loop ? &resp_mask : nullptr, task.eos_token());
}

// The logits [N, V] of the positions where `mask` [B, T] is 1, for tokens [B, T]: the decoder as
// LlamaModelImpl::forward runs it, but the output projection only on those positions (a data
// set's prompts are most of each sequence, and a 150k-token vocabulary makes the projection the
// step's main cost).
torch::Tensor masked_logits(model::LlamaModelImpl& m, const torch::Tensor& tokens, const torch::Tensor& mask) {
    return train::policy_logits_rows(m, tokens, mask.reshape({-1}).nonzero().squeeze(1));
}

// Tests only: TAGFLOW_TEST_SFT_NAN_STEPS="3,4" makes rank 0's loss NaN at those (1-based) steps, so
// the all-reduced gradients are NaN on every rank (Hostile.sft_nan).
bool test_poisoned(int64_t step, int rank) {
    static const std::vector<int64_t> steps = [] {
        std::vector<int64_t> v;
        const char* e = std::getenv("TAGFLOW_TEST_SFT_NAN_STEPS");
        std::string cur;
        for (const char* c = e ? e : "";; ++c) {
            if (*c == ',' || *c == '\0') {
                if (!cur.empty()) v.push_back(std::stoll(cur));
                cur.clear();
                if (*c == '\0') break;
            } else if (*c >= '0' && *c <= '9') {
                cur += *c;
            } else {
                throw ConfigError(std::string("TAGFLOW_TEST_SFT_NAN_STEPS='") + e +
                                  "': expected step numbers like 3,4");
            }
        }
        return v;
    }();
    return rank == 0 && std::find(steps.begin(), steps.end(), step) != steps.end();
}

// One optimizer step on this rank's share `b` (collective over MPI_COMM_WORLD): the summed
// response-token cross-entropy and the token count travel with the gradients in one bucketed
// all-reduce; the gradients are divided by the global count. A non-finite global loss or gradient
// norm skips the update (every rank sees the same all-reduced values, so all skip alike).
// `only_masked`: the projection on the response positions only (masked_logits). `poison`: tests.
SftStep sft_step(model::LlamaModelImpl& m, torch::optim::AdamW& opt, train::MpiCollectives& coll,
                 std::vector<at::Tensor>& params, const Batch& b, double lr, double grad_clip, bool only_masked,
                 bool poison) {
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.zero_grad();
    torch::Tensor stats = torch::zeros({2}, torch::kFloat);
    if (only_masked && b.response_tokens > 0) {
        const torch::Tensor logits = masked_logits(m, b.tokens.slice(1, 0, -1), b.mask);  // [N, V]
        const torch::Tensor at = b.mask.reshape({-1}).nonzero().squeeze(1);
        const torch::Tensor target = b.tokens.slice(1, 1).reshape({-1}).index_select(0, at);
        torch::Tensor loss_sum = torch::nn::functional::cross_entropy(
            logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
        if (poison) loss_sum = loss_sum * std::numeric_limits<float>::quiet_NaN();
        loss_sum.backward();
        stats[0] = loss_sum.item<float>();
    } else if (!only_masked && b.tokens.size(0) > 0 && b.tokens.size(1) > 1) {  // no rows (short last batch): zeros
        const torch::Tensor logits = m.forward(b.tokens.slice(1, 0, -1));       // [b, T-1, V]
        const torch::Tensor ce = torch::nn::functional::cross_entropy(
            logits.reshape({-1, logits.size(-1)}), b.tokens.slice(1, 1).reshape({-1}),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
        torch::Tensor loss_sum = (ce * b.mask.reshape({-1})).sum();
        if (poison) loss_sum = loss_sum * std::numeric_limits<float>::quiet_NaN();
        loss_sum.backward();
        stats[0] = loss_sum.item<float>();
    }
    std::vector<at::Tensor> bufs;
    for (auto& p : params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        bufs.push_back(p.grad());
    }
    stats[1] = static_cast<float>(b.response_tokens);
    bufs.push_back(stats);
    coll.allreduce_sum(bufs);
    const double global_tokens = std::max(1.0, stats[1].item<double>());
    {
        torch::NoGradGuard no_grad;
        for (auto& p : params) p.grad().div_(global_tokens);
    }
    SftStep r{stats[0].item<double>(), stats[1].item<double>(), false};
    // The norm of the all-reduced gradients (clipped when --grad-clip > 0; an infinite bound only measures).
    const double norm =
        torch::nn::utils::clip_grad_norm_(params, grad_clip > 0 ? grad_clip : std::numeric_limits<double>::infinity());
    if (!std::isfinite(r.loss_sum) || !std::isfinite(norm)) {
        opt.zero_grad();
        r.skipped = true;
        return r;
    }
    opt.step();
    return r;
}

SharedWeights share_weights(model::LlamaModelImpl& m, train::MpiCollectives& coll, int requested) {
    SharedWeights w;
    w.threads = choose_threads(requested);
    set_compute_threads(w.threads);
    for (auto& p : m.parameters()) {
        w.params.push_back(p);
        w.n_params += p.numel();
    }
    {
        torch::NoGradGuard no_grad;
        coll.broadcast(w.params, 0);
    }
    train::bump_versions(w.params);  // written by MPI, behind the version counters
    return w;
}

void BadSteps::record(bool skipped, int64_t step) {
    if (!skipped) {
        run = 0;
        return;
    }
    ++total;
    ++run;
    print0("warning: step %ld: the loss or gradient norm is NaN/inf; the update is skipped (%d in a row)\n",
           static_cast<long>(step), run);
    if (limit > 0 && run >= limit)
        throw Error("sft: " + std::to_string(run) +
                    " consecutive steps with a NaN/inf loss or gradient norm (last: step " + std::to_string(step) +
                    "); stopping without writing the model (--max-bad-steps " + std::to_string(limit) +
                    "; lower --lr or check the data)");
}

}  // namespace tagflow::cmd
