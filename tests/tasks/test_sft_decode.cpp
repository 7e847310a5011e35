// SPDX-License-Identifier: Apache-2.0
// Serial.sft_decode.*: the greedy decoder of `tagflow sft` against a naive loop that runs the
// full (uncached) forward over the whole sequence for every new token; and score_greedy's
// exact-match count on a model that cannot be right vs. the task's own reward.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "model/llama.hpp"
#include "rollout/task.hpp"
#include "cmd/sft_command.hpp"

namespace model = tagflow::model;
namespace rollout = tagflow::rollout;

namespace {

model::HfConfig small_config(int64_t vocab) {
    model::HfConfig c;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.vocab_size = vocab;
    c.max_position_embeddings = 64;
    return c;
}

std::vector<int32_t> naive_greedy(model::LlamaModelImpl& m, std::vector<int32_t> seq, int32_t max_tokens, int32_t eos) {
    torch::NoGradGuard g;
    std::vector<int32_t> out;
    for (int32_t i = 0; i < max_tokens; ++i) {
        std::vector<int64_t> s(seq.begin(), seq.end());
        auto t = torch::tensor(s, torch::kLong).unsqueeze(0);
        const auto next = static_cast<int32_t>(m.forward(t).select(1, -1).argmax(-1).item<int64_t>());
        out.push_back(next);
        seq.push_back(next);
        if (next == eos) break;
    }
    return out;
}

}  // namespace

TEST(SftDecode, GreedyMatchesFullForwardLoop) {
    // Large init so the random model's argmax varies from token to token.
    model::LlamaModelImpl m(small_config(7), 3);
    m.reset_parameters(3, 0.5);
    m.eval();
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 9; ++i) {
        std::vector<int32_t> p;
        for (int k = 0; k < 2 + i % 4; ++k) p.push_back((i * 5 + k * 3) % 7);
        prompts.push_back(p);
    }
    int stopped_early = 0;  // rows that ended at EOS before the budget (the stop path is exercised)
    for (int32_t eos : {-1, 0, 3}) {
        const auto got = tagflow::cmd::greedy_decode(m, prompts, 12, eos, /*batch_size=*/2);
        ASSERT_EQ(got.size(), prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i) {
            EXPECT_EQ(got[i], naive_greedy(m, prompts[i], 12, eos)) << "prompt " << i << " eos " << eos;
            ASSERT_TRUE(got[i].size() == 12 || (!got[i].empty() && got[i].back() == eos)) << "prompt " << i;
            stopped_early += got[i].size() < 12;
        }
    }
    EXPECT_GT(stopped_early, 0);
}

TEST(SftDecode, ScoreGreedyCountsExactMatches) {
    auto task = rollout::make_task("addition", 1);
    model::LlamaModelImpl m(small_config(task->vocab_size()), 5);
    m.eval();
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < 40; ++i) idx.push_back(i);
    const auto s = tagflow::cmd::score_greedy(m, *task, idx);
    EXPECT_EQ(s.n, 40);
    // An untrained model: its answers are (almost surely) wrong, and the exact count is the
    // reward sum (addition's reward is exact match).
    EXPECT_LE(s.exact, 1);
    EXPECT_DOUBLE_EQ(static_cast<double>(s.exact), s.reward_sum);
}
