// SPDX-License-Identifier: Apache-2.0
// test_model: policy (KV cache vs full forward, padding), generation (seeding, greedy,
// top-p, logprobs), the reverse task (rewards, held-out split, baselines) and GRPO
// numerics (advantages, clipped loss, gradient normalisation). One file on purpose:
// every translation unit that includes LibTorch costs ~15 s to compile.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "rollout/generate.hpp"
#include "rollout/task.hpp"
#include "train/grpo.hpp"

using namespace tagflow;

namespace {

model::PolicyConfig small_config() {
    model::PolicyConfig c;
    c.vocab = 13;
    c.d_model = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.d_ff = 64;
    c.max_seq = 24;
    return c;
}

at::Generator make_gen(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

std::vector<int32_t> tok(const std::string& s) {  // "^123=" style, as Task::render writes
    std::vector<int32_t> t;
    for (char c : s) t.push_back(c == '^' ? 10 : c == '=' ? 11 : c == '$' ? 12 : c - '0');
    return t;
}

torch::Tensor to_tensor(const std::vector<int32_t>& v) {
    std::vector<int64_t> w(v.begin(), v.end());
    return torch::tensor(w, torch::kInt64).unsqueeze(0);
}

float max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
    return (a - b).abs().max().item<float>();
}

}  // namespace

TEST(Policy, KvCacheMatchesFullForward) {
    torch::NoGradGuard no_grad;
    model::Policy p(small_config(), 1);
    auto gen = make_gen(3);
    auto tokens = torch::randint(0, 13, {3, 12}, gen, torch::kInt64);
    auto full = p->forward(tokens);
    auto cache = p->make_cache(3);
    auto pre = p->forward_cached(tokens.narrow(1, 0, 5), cache);
    EXPECT_LT(max_abs_diff(pre, full.narrow(1, 0, 5)), 1e-4);
    for (int64_t t = 5; t < 12; ++t) {
        auto step = p->forward_cached(tokens.narrow(1, t, 1), cache);
        EXPECT_LT(max_abs_diff(step, full.narrow(1, t, 1)), 1e-4) << "t=" << t;
    }
    EXPECT_EQ(cache.len, 12);
}

TEST(Policy, LeftPaddedRowsMatchUnpadded) {
    torch::NoGradGuard no_grad;
    model::Policy p(small_config(), 2);
    auto a = tok("^12345="), b = tok("^7=");
    auto batch = torch::zeros({2, 7}, torch::kInt64);
    batch[0] = to_tensor(a)[0];
    batch.narrow(1, 4, 3)[1] = to_tensor(b)[0];
    auto cache = p->make_cache(2, torch::tensor({0, 4}, torch::kInt64));
    auto logits = p->forward_cached(batch, cache);
    auto next = p->forward_cached(torch::tensor({{3}, {3}}, torch::kInt64), cache);
    auto ref_b = p->forward(torch::cat({to_tensor(b), torch::tensor({{3}}, torch::kInt64)}, 1));
    EXPECT_LT(max_abs_diff(logits[1].narrow(0, 4, 3), ref_b[0].narrow(0, 0, 3)), 1e-4);
    EXPECT_LT(max_abs_diff(next[1][0], ref_b[0][3]), 1e-4);
    EXPECT_LT(max_abs_diff(logits[0], p->forward(to_tensor(a))[0]), 1e-4);
}

TEST(Policy, SeededInitIsDeterministic) {
    model::Policy a(small_config(), 5), b(small_config(), 5), c(small_config(), 6);
    auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
    bool all_equal = true, any_diff = false;
    for (size_t i = 0; i < pa.size(); ++i) {
        all_equal = all_equal && torch::equal(pa[i], pb[i]);
        any_diff = any_diff || !torch::equal(pa[i], pc[i]);
    }
    EXPECT_TRUE(all_equal);
    EXPECT_TRUE(any_diff);
    EXPECT_GT(a->num_parameters(), 0);
    EXPECT_THROW(model::Policy(model::PolicyConfig{13, 30, 1, 4, 8, 8}, 1), ConfigError);
}

TEST(Generate, SameSeedSameCompletions) {
    model::Policy p(small_config(), 1);
    std::vector<std::vector<int32_t>> prompts = {tok("^123="), tok("^45678="), tok("^9=")};
    rollout::SamplingParams sp;
    sp.max_tokens = 8;
    sp.eos = 12;
    auto g1 = make_gen(42), g2 = make_gen(42), g3 = make_gen(43);
    auto a = rollout::generate(p, prompts, sp, g1);
    auto b = rollout::generate(p, prompts, sp, g2);
    auto c = rollout::generate(p, prompts, sp, g3);
    bool differs = false;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].response, b[i].response);
        EXPECT_EQ(a[i].logprobs, b[i].logprobs);
        EXPECT_EQ(a[i].response.size(), a[i].logprobs.size());
        EXPECT_EQ(a[i].hit_eos, !a[i].response.empty() && a[i].response.back() == 12);
        differs = differs || a[i].response != c[i].response;
    }
    EXPECT_TRUE(differs);
}

TEST(Generate, GreedyIsArgmaxAndLogprobsMatchForward) {
    model::Policy p(small_config(), 3);
    std::vector<std::vector<int32_t>> prompts = {tok("^31415="), tok("^27=")};
    for (double temp : {0.0, 0.7}) {
        rollout::SamplingParams sp;
        sp.temperature = temp;
        sp.max_tokens = 6;
        auto gen = make_gen(7);
        auto comps = rollout::generate(p, prompts, sp, gen);
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < prompts.size(); ++i) {
            ASSERT_EQ(comps[i].response.size(), 6u);  // eos = -1: never stops early
            auto seq = prompts[i];
            seq.insert(seq.end(), comps[i].response.begin(), comps[i].response.end());
            auto logits = p->forward(to_tensor(seq))[0];
            const double t = temp > 0 ? temp : 1.0;
            auto lp = torch::log_softmax(logits / t, -1);
            for (size_t j = 0; j < comps[i].response.size(); ++j) {
                const int64_t pos = static_cast<int64_t>(prompts[i].size() + j) - 1;
                if (temp == 0.0) {
                    EXPECT_EQ(logits[pos].argmax().item<int64_t>(), comps[i].response[j]);
                }
                EXPECT_NEAR(lp[pos][comps[i].response[j]].item<float>(), comps[i].logprobs[j], 1e-4);
            }
        }
    }
}

TEST(Generate, TopPFilterKeepsSmallestNucleus) {
    auto probs = torch::tensor({{0.05f, 0.5f, 0.15f, 0.3f}});
    auto k07 = rollout::top_p_filter(probs, 0.7);
    EXPECT_TRUE(torch::allclose(k07, torch::tensor({{0.0f, 0.5f, 0.0f, 0.3f}})));
    auto k05 = rollout::top_p_filter(probs, 0.5);
    EXPECT_TRUE(torch::allclose(k05, torch::tensor({{0.0f, 0.5f, 0.0f, 0.0f}})));
    auto k09 = rollout::top_p_filter(probs, 0.9);
    EXPECT_TRUE(torch::allclose(k09, torch::tensor({{0.0f, 0.5f, 0.15f, 0.3f}})));
    EXPECT_TRUE(torch::equal(rollout::top_p_filter(probs, 1.0), probs));
    auto tiny = rollout::top_p_filter(probs, 1e-6);  // the top token always survives
    EXPECT_TRUE(torch::allclose(tiny, torch::tensor({{0.0f, 0.5f, 0.0f, 0.0f}})));

    // Sampling with top_p = 0.7 only ever draws tokens 1 and 3.
    auto logits = probs.log().expand({4000, 4}).contiguous();
    rollout::SamplingParams sp;
    sp.top_p = 0.7;
    auto gen = make_gen(1);
    torch::Tensor lp;
    auto t = rollout::sample_next(logits, sp, gen, lp);
    auto n1 = (t == 1).sum().item<int64_t>(), n3 = (t == 3).sum().item<int64_t>();
    EXPECT_EQ(n1 + n3, 4000);
    EXPECT_NEAR(static_cast<double>(n1) / 4000.0, 0.5 / 0.8, 0.03);
    // logprobs are the unfiltered policy's (see Completion::logprobs)
    EXPECT_NEAR(lp[0].item<float>(), std::log(t[0].item<int64_t>() == 1 ? 0.5f : 0.3f), 1e-5);
}

TEST(Task, RewardEdgeCases) {
    auto task = rollout::make_task("reverse", 1);
    auto p = tok("^12345=");
    EXPECT_FLOAT_EQ(task->reward(p, {}), 0.0f);
    EXPECT_FLOAT_EQ(task->reward(p, tok("$")), 0.0f);
    EXPECT_FLOAT_EQ(task->reward(p, tok("54321$")), 1.0f);
    EXPECT_FLOAT_EQ(task->reward(p, tok("54321")), 1.0f);         // EOS budget ran out
    EXPECT_FLOAT_EQ(task->reward(p, tok("54321$999")), 1.0f);     // after EOS is ignored
    EXPECT_FLOAT_EQ(task->reward(p, tok("543$")), 3.0f / 5.0f);    // too short
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

    // An untrained policy, sampled, is no better than random.
    model::PolicyConfig pc;
    model::Policy p(pc, 1);
    rollout::SamplingParams sp;
    sp.max_tokens = task->max_response_tokens();
    sp.eos = task->eos_token();
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < 500; ++i) prompts.push_back(task->eval_prompt(i));
    auto gen = make_gen(11);
    auto comps = rollout::generate(p, prompts, sp, gen);
    double s = 0;
    for (size_t i = 0; i < comps.size(); ++i) s += task->reward(prompts[i], comps[i].response);
    EXPECT_LE(s / 500.0, 0.1);
}

TEST(Grpo, GroupAdvantages) {
    auto a = train::group_advantages({1, 2, 3, 5}, 2, false);
    EXPECT_EQ(a, (std::vector<float>{-0.5f, 0.5f, -1.0f, 1.0f}));
    auto b = train::group_advantages({0, 1, 0.25f, 0.25f, 0.25f, 0.25f}, 2, true);
    EXPECT_NEAR(b[0], -1.0f, 1e-5);  // (0 - 0.5) / (0.5 + 1e-6)
    EXPECT_NEAR(b[1], 1.0f, 1e-5);
    for (int i = 2; i < 6; ++i) EXPECT_EQ(b[i], 0.0f);
    auto c = train::group_advantages({0.3f, 0.3f, 0.3f}, 3, true);
    for (float x : c) EXPECT_EQ(x, 0.0f);
    auto d = train::group_advantages({1, 2, 6}, 3, true);  // mean 3, pop. std sqrt(14/3)
    EXPECT_NEAR(d[2], 3.0 / std::sqrt(14.0 / 3.0), 1e-5);
    EXPECT_THROW(train::group_advantages({1, 2, 3}, 2, true), Error);
}

TEST(Grpo, ClippedLossHandValues) {
    const float l15 = std::log(1.5f), l05 = std::log(0.5f);
    auto logp = torch::tensor({l15, l15, l05, l05, 0.0f});
    auto old = torch::zeros({5});
    auto adv = torch::tensor({1.0f, -1.0f, 1.0f, -1.0f, 2.0f});
    torch::Tensor clipped;
    auto loss = train::clipped_pg_loss(logp, old, adv, 0.2, &clipped);
    EXPECT_TRUE(torch::allclose(loss, torch::tensor({-1.2f, 1.5f, -0.5f, 0.8f, -2.0f}), 1e-5, 1e-6));
    EXPECT_TRUE(torch::equal(clipped, torch::tensor({1.0f, 0.0f, 0.0f, 1.0f, 0.0f})));
}

TEST(Grpo, GradientsNormaliseAcrossRanksAndMicroBatches) {
    auto task = rollout::make_task("reverse", 1);
    model::PolicyConfig pc;
    pc.d_model = 32;
    pc.d_ff = 64;
    model::Policy p(pc, 1);
    rollout::SamplingParams sp;
    sp.max_tokens = task->max_response_tokens();
    sp.eos = task->eos_token();
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < 12; ++i) prompts.push_back(task->train_prompt(i / 4));
    auto gen = make_gen(5);
    auto comps = rollout::generate(p, prompts, sp, gen);
    std::vector<float> rewards;
    for (size_t i = 0; i < comps.size(); ++i) rewards.push_back(task->reward(prompts[i], comps[i].response));
    rewards[0] += 0.5f;  // make sure some group has a signal
    auto adv = train::group_advantages(rewards, 4, true);
    std::vector<train::TrainSample> batch;
    double ntok = 0;
    for (size_t i = 0; i < comps.size(); ++i) {
        batch.push_back(train::make_train_sample(prompts[i], comps[i], adv[i]));
        ntok += static_cast<double>(comps[i].response.size());
    }
    auto grads_of = [&](const train::GrpoConfig& cfg, bool split) {
        model::Policy q(pc, 1);
        train::GrpoLearner learner(q, cfg);
        train::StepStats st;
        if (split) {  // two "ranks": each its half, same global norm, gradients summed
            std::vector<train::TrainSample> h1(batch.begin(), batch.begin() + 5), h2(batch.begin() + 5, batch.end());
            learner.accumulate(h1, ntok);
            st = learner.accumulate(h2, ntok);
        } else {
            st = learner.accumulate(batch, ntok);
        }
        EXPECT_LT(st.logprob_diff_mean, 1e-4);  // on-policy: trainer == rollout logprobs
        EXPECT_EQ(st.clip_frac, 0.0);
        std::vector<torch::Tensor> g;
        for (auto& t : learner.gradients()) g.push_back(t.clone());
        return g;
    };
    train::GrpoConfig cfg;
    auto g_full = grads_of(cfg, false);
    auto g_split = grads_of(cfg, true);
    cfg.micro_batch = 3;
    auto g_micro = grads_of(cfg, false);
    double norm = 0;
    for (size_t i = 0; i < g_full.size(); ++i) {
        EXPECT_LT(max_abs_diff(g_full[i], g_split[i]), 1e-6);
        EXPECT_LT(max_abs_diff(g_full[i], g_micro[i]), 1e-6);
        norm += g_full[i].pow(2).sum().item<double>();
    }
    EXPECT_GT(norm, 0.0);

    // KL to the frozen reference starts at 0; a step changes the weights; bf16 runs.
    cfg.kl_coef = 0.1;
    cfg.bf16 = true;
    model::Policy q(pc, 1);
    train::GrpoLearner learner(q, cfg);
    auto before = q->parameters()[0].clone();
    auto st = learner.accumulate(batch, ntok);
    EXPECT_TRUE(std::isfinite(st.loss));
    EXPECT_LT(std::abs(st.kl), 1e-3);
    EXPECT_GT(st.entropy, 0.0);
    EXPECT_GT(learner.step(), 0.0);
    EXPECT_FALSE(torch::equal(before, q->parameters()[0]));
    for (auto& g : learner.gradients()) EXPECT_EQ(g.abs().sum().item<float>(), 0.0f);
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
    EXPECT_THROW(rollout::register_task("sort", "again", [](uint64_t, const rollout::TaskParams&) {
                     return std::unique_ptr<rollout::Task>();
                 }),
                 tagflow::Error);
    try {
        rollout::make_task("nope", 1);
        FAIL();
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("my-reverse"), std::string::npos) << e.what();
    }
}
