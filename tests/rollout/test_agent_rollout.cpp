// SPDX-License-Identifier: Apache-2.0
// test_agent_rollout: the sync scheduler's multi-turn rollout (sched/agent_rollout.hpp) on the
// calc task with a tiny random Llama: RolloutSamples carry the session after the prompt with
// its loss_mask (0 exactly on tool output), logprob 0 there (the trainer masks it), the
// trajectory of every sample, ids/seeds like single-turn samples; the loss_mask survives the
// sample exchange's pack/unpack and reaches the trainer's TrainSeq (count_batch counts only
// model tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <unordered_map>
#include <vector>

#include "config/options.hpp"
#include "fixtures.hpp"
#include "model/llama.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/engine.hpp"
#include "rollout/task.hpp"
#include "rollout/task_calc.hpp"
#include "sched/agent_rollout.hpp"
#include "step/exchange.hpp"
#include "train/engine.hpp"
#include "traj/trajectory_manager.hpp"

using namespace tagflow;

TEST(AgentRollout, SamplesCarryTheToolMaskIntoTheTrainer) {
    auto task = rollout::make_task("calc", 2);
    const rollout::AgentLoop* loop = rollout::as_agent_loop(*task);
    ASSERT_NE(loop, nullptr);
    model::HfConfig c = model::fixtures::shape("llama", 32, 4, 2, 8, task->vocab_size(),
                                               task->max_prompt_tokens() + task->max_response_tokens());
    c.num_hidden_layers = 1;
    model::LlamaModel m(c, 0);
    m->reset_parameters(6, 0.3);
    rollout::InferenceEngine engine(m, rollout::InferenceConfig{});
    config::Options opt;
    opt.group_size = 4;
    opt.temperature = 1.5;
    opt.seed = 3;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> groups;
    for (int64_t g = 10; g < 16; ++g)
        for (int k = 0; k < 4; ++k) {
            prompts.push_back(task->train_prompt(g));
            groups.push_back(g);
        }
    traj::TrajectoryManager tm;
    std::unordered_map<int64_t, traj::NodeId> leaf;
    const auto samples = sched::generate_agent_samples(engine, *task, *loop, opt, prompts, groups,
                                                       task->max_response_tokens(), 7, 1, {}, tm, leaf);
    ASSERT_EQ(samples.size(), prompts.size());
    int64_t env = 0, model_tokens = 0;
    std::vector<train::TrainSeq> seqs;
    for (size_t i = 0; i < samples.size(); ++i) {
        const sched::RolloutSample& s = samples[i];
        EXPECT_EQ(s.id, groups[i] * 4 + static_cast<int64_t>(i % 4));
        EXPECT_EQ(s.prompt, prompts[i]);
        EXPECT_EQ(s.version, 7);
        ASSERT_EQ(s.loss_mask.size(), s.response.size());
        ASSERT_EQ(s.logprobs.size(), s.response.size());
        // The sample is the tree's trajectory after the prompt, mask and versions included.
        const traj::Trajectory t = tm.rebuild(leaf.at(s.id));
        ASSERT_EQ(t.tokens.size(), s.prompt.size() + s.response.size());
        for (size_t k = 0; k < s.response.size(); ++k) {
            ASSERT_EQ(t.tokens[s.prompt.size() + k], s.response[k]);
            ASSERT_EQ(t.loss_mask[s.prompt.size() + k], s.loss_mask[k]);
            if (s.loss_mask[k]) {
                ASSERT_EQ(t.versions[s.prompt.size() + k], 7);
                ASSERT_LT(s.logprobs[k], 0.0f);
            } else {
                ASSERT_EQ(t.versions[s.prompt.size() + k], -1);
                ASSERT_EQ(s.logprobs[k], 0.0f) << "tool tokens: 0, not NaN, in the trainer's sample";
                ++env;
            }
        }
        for (uint8_t b : s.loss_mask) model_tokens += b;
        EXPECT_FLOAT_EQ(s.reward, task->reward(s.prompt, s.response));
        train::TrainSeq q = train::make_train_seq(s.prompt, s.response, s.logprobs);
        q.loss_mask = s.loss_mask;
        seqs.push_back(q);
    }
    EXPECT_GT(env, 0) << "a hot random policy closes a tool call now and then";
    // The exchange keeps the mask; the trainer's normaliser counts only the model's tokens.
    const auto bytes = sched::pack_samples(samples);
    const auto back = sched::unpack_samples(bytes.data(), bytes.size());
    ASSERT_EQ(back.size(), samples.size());
    for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i].loss_mask, samples[i].loss_mask);
    EXPECT_EQ(train::count_batch(seqs).tokens, static_cast<double>(model_tokens));
}
