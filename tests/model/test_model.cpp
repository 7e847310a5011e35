// SPDX-License-Identifier: Apache-2.0
// test_model: the Llama model's seeded initialisation, the reverse and sort tasks (rewards,
// held-out split, baselines, an untrained model sampled by the rollout engine scores no better
// than random) and the task registry. One file on purpose: every translation unit that
// includes LibTorch costs ~15 s to compile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <torch/torch.h>

#include "common/error.hpp"
#include "fixtures.hpp"
#include "model/hf_config.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"
#include "rollout/task.hpp"

using namespace tagflow;

namespace {

// A small Llama over the tasks' 13 tokens (digits, '^', '=', '$').
model::HfConfig small_config() {
    model::HfConfig c = model::fixtures::shape("llama", 32, 4, 2, 8, 13, 32);
    c.validate("small");
    return c;
}

std::vector<int32_t> tok(const std::string& s) {  // "^123=" style, as Task::render writes
    std::vector<int32_t> t;
    for (char c : s) t.push_back(c == '^' ? 10 : c == '=' ? 11 : c == '$' ? 12 : c - '0');
    return t;
}

}  // namespace

TEST(Llama, SeededInitIsDeterministic) {
    model::LlamaModel a(small_config(), 5), b(small_config(), 5), c(small_config(), 6);
    auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
    ASSERT_EQ(pa.size(), pc.size());
    bool all_equal = true, any_diff = false;
    for (size_t i = 0; i < pa.size(); ++i) {
        all_equal = all_equal && torch::equal(pa[i], pb[i]);
        any_diff = any_diff || !torch::equal(pa[i], pc[i]);
    }
    EXPECT_TRUE(all_equal);
    EXPECT_TRUE(any_diff);
    model::HfConfig bad = small_config();
    bad.num_attention_heads = 3;  // 3 heads do not share 2 key/value heads
    EXPECT_THROW(bad.validate("bad"), ConfigError);
}

TEST(Task, RewardEdgeCases) {
    auto task = rollout::make_task("reverse", 1);
    auto p = tok("^12345=");
    EXPECT_FLOAT_EQ(task->reward(p, {}), 0.0f);
    EXPECT_FLOAT_EQ(task->reward(p, tok("$")), 0.0f);
    EXPECT_FLOAT_EQ(task->reward(p, tok("54321$")), 1.0f);
    EXPECT_FLOAT_EQ(task->reward(p, tok("54321")), 1.0f);            // EOS budget ran out
    EXPECT_FLOAT_EQ(task->reward(p, tok("54321$999")), 1.0f);        // after EOS is ignored
    EXPECT_FLOAT_EQ(task->reward(p, tok("543$")), 3.0f / 5.0f);      // too short
    EXPECT_FLOAT_EQ(task->reward(p, tok("5432199$")), 5.0f / 7.0f);  // too long
    EXPECT_FLOAT_EQ(task->reward(p, tok("12345$")), 1.0f / 5.0f);
    EXPECT_FLOAT_EQ(task->reward(p, tok("5^3=1$")), 3.0f / 5.0f);  // non-digits never match
    EXPECT_EQ(task->render(tok("^12=")), "^12=");
    EXPECT_EQ(task->vocab_size(), 13);
    EXPECT_EQ(task->max_response_tokens(), 6);
    EXPECT_THROW(rollout::make_task("nope", 1), ConfigError);
    rollout::TaskParams bad;
    bad.min_digits = 9;
    EXPECT_THROW(rollout::make_task("reverse", 1, bad), ConfigError);
}

TEST(Task, PromptsAreDeterministicAndHeldOutIsDisjoint) {
    auto a = rollout::make_task("reverse", 7), b = rollout::make_task("reverse", 7);
    auto c = rollout::make_task("reverse", 8);
    std::set<std::vector<int32_t>> eval, train;
    for (int64_t i = 0; i < 2000; ++i) eval.insert(a->eval_prompt(i));
    for (int64_t i = 0; i < 20000; ++i) {
        auto t = a->train_prompt(i);
        ASSERT_EQ(t.size(), 7u);
        EXPECT_EQ(eval.count(t), 0u);
        train.insert(t);
    }
    EXPECT_GT(eval.size(), 1800u);
    EXPECT_EQ(a->train_prompt(123), b->train_prompt(123));
    EXPECT_EQ(a->eval_prompt(5), b->eval_prompt(5));
    EXPECT_NE(a->train_prompt(123), c->train_prompt(123));
    // variable length
    rollout::TaskParams vp;
    vp.digits = 6;
    vp.min_digits = 2;
    auto v = rollout::make_task("reverse", 1, vp);
    std::set<size_t> lens;
    for (int64_t i = 0; i < 500; ++i) lens.insert(v->train_prompt(i).size());
    EXPECT_EQ(lens, (std::set<size_t>{4, 5, 6, 7, 8}));
}

TEST(Task, BaselinesRandomAndConstant) {
    auto task = rollout::make_task("reverse", 1);
    const float random = rollout::random_policy_score(*task, 2000, 3);
    EXPECT_LE(random, 0.1f);
    const float best_const = task->best_constant_score(512);
    EXPECT_GT(best_const, 0.1f);
    EXPECT_LT(best_const, 0.2f);

    // Brute force on 2 digits: every constant response of up to 3 digits.
    rollout::TaskParams tp;
    tp.digits = 2;
    auto t2 = rollout::make_task("reverse", 3, tp);
    const int64_t n = 60;
    double best = 0;
    for (int len = 0; len <= 3; ++len) {
        int combos = 1;
        for (int i = 0; i < len; ++i) combos *= 10;
        for (int c = 0; c < combos; ++c) {
            std::vector<int32_t> resp;
            for (int i = 0, x = c; i < len; ++i, x /= 10) resp.push_back(x % 10);
            double s = 0;
            for (int64_t i = 0; i < n; ++i) s += t2->reward(t2->eval_prompt(i), resp);
            best = std::max(best, s / n);
        }
    }
    EXPECT_NEAR(t2->best_constant_score(n), best, 1e-5);

    // An untrained model, sampled by the rollout engine, is no better than random.
    model::LlamaModel m(small_config(), 1);
    rollout::GenParams gp;
    gp.max_tokens = task->max_response_tokens();
    gp.stop_ids = {task->eos_token()};
    gp.seed = 11;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < 500; ++i) prompts.push_back(task->eval_prompt(i));
    auto comps = rollout::generate(m, prompts, gp);
    ASSERT_EQ(comps.size(), prompts.size());
    double s = 0;
    for (size_t i = 0; i < comps.size(); ++i) s += task->reward(prompts[i], comps[i].response);
    EXPECT_LE(s / 500.0, 0.1);
}

// ---- task registry and the sort task ----
TEST(Task, SortTaskRewardsSortedDigits) {
    auto task = rollout::make_task("sort", 1);
    EXPECT_EQ(task->name(), "sort");
    auto p = task->train_prompt(0);
    std::vector<int32_t> digits(p.begin() + 1, p.end() - 1);
    std::sort(digits.begin(), digits.end());
    auto perfect = digits;
    perfect.push_back(task->eos_token());
    EXPECT_FLOAT_EQ(task->reward(p, perfect), 1.0f);
    std::reverse(digits.begin(), digits.end());
    EXPECT_LE(task->reward(p, digits), 1.0f);
    EXPECT_LE(rollout::random_policy_score(*task, 256, 3), 0.1f);
    // Held-out prompts never appear among training prompts.
    std::set<std::vector<int32_t>> train;
    for (int i = 0; i < 4000; ++i) train.insert(task->train_prompt(i));
    for (int i = 0; i < 300; ++i) EXPECT_EQ(train.count(task->eval_prompt(i)), 0u);
}

TEST(Task, RegistryAcceptsUserTasksAndRejectsDuplicates) {
    auto names = rollout::task_names();
    EXPECT_NE(std::find(names.begin(), names.end(), "reverse"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "sort"), names.end());
    rollout::register_task("my-reverse", "a user's task", [](uint64_t seed, const rollout::TaskParams& p) {
        return rollout::make_task("reverse", seed, p);
    });
    EXPECT_EQ(rollout::make_task("my-reverse", 3)->name(), "reverse");
    EXPECT_THROW(
        rollout::register_task("sort", "again",
                               [](uint64_t, const rollout::TaskParams&) { return std::unique_ptr<rollout::Task>(); }),
        tagflow::Error);
    try {
        rollout::make_task("nope", 1);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("my-reverse"), std::string::npos) << e.what();
    }
}
