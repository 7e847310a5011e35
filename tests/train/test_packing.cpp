// SPDX-License-Identifier: Apache-2.0
// Packed training (issue 22, TrainEngineConfig::pack): the packing plan (every sequence once, rows
// within the longest sequence, micro-batches within the token budget, a one-line error for a budget
// below the longest sequence), the packed layout (positions restarting per sequence, sequence ids,
// unpacking), the packed forward of the policy and the critic against each sequence run alone, and
// the packed path against the padded one on randomised lengths: actor losses, statistics and the
// gradient of every parameter in every loss aggregation with gradient accumulation over several
// micro-batches, log-probs, reference log-probs, critic values, value losses and gradients, GAE
// advantages from either path's values, and whole PPO updates with epochs and mini-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>

#include <ATen/CPUGeneratorImpl.h>

#include "common/error.hpp"
#include "model/llama.hpp"
#include "model/value_model.hpp"
#include "tiny.hpp"
#include "train/algorithms.hpp"
#include "train/workers.hpp"

namespace tagflow::train {
namespace {
using namespace testing;

constexpr double kTol = 1e-5;

// tiny_config, or with learned absolute positions beside RoPE (as tagflow train's own models):
// RoPE alone is blind to a shift of a whole sequence's positions, absolute positions are not.
model::HfConfig config(bool abs_positions) {
    model::HfConfig c = tiny_config();
    c.abs_positions = abs_positions;
    c.validate("tiny");
    return c;
}

// n sequences with prompt 1..8 and response 1..24 tokens (lognormal-ish: mostly short, some long),
// some tool tokens masked out, sequence weights, token advantages, KL references, IS weights.
std::vector<TrainSeq> random_batch(int n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::lognormal_distribution<double> resp_len(1.3, 0.8);
    std::vector<TrainSeq> out;
    for (int i = 0; i < n; ++i) {
        TrainSeq s;
        const int p = 1 + static_cast<int>(rng() % 8);
        const int r = std::clamp(static_cast<int>(resp_len(rng)), 1, 24);
        for (int t = 0; t < p + r; ++t) s.tokens.push_back(static_cast<int32_t>(rng() % 11));
        s.prompt_len = p;
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (int j = 0; j < r; ++j) {
            s.old_logprobs.push_back(-2.4f + 0.3f * u(rng));
            s.ref_logprobs.push_back(-2.4f + 0.3f * u(rng));
            s.advantages.push_back(u(rng));
            s.returns.push_back(u(rng));
            s.old_values.push_back(0.2f * u(rng));
            s.is_weights.push_back(1.0f + 0.2f * u(rng));
        }
        s.rollout_logprobs = s.old_logprobs;
        if (i % 4 == 1 && r > 1) {  // a tool token out of the loss
            s.loss_mask.assign(static_cast<size_t>(r), 1);
            s.loss_mask[static_cast<size_t>(r) / 2] = 0;
        }
        if (i % 5 == 2) s.weight = 0.5f;
        out.push_back(std::move(s));
    }
    return out;
}

int64_t longest_slots(const std::vector<TrainSeq>& b) {
    int64_t L = 1;
    for (const auto& s : b) L = std::max<int64_t>(L, static_cast<int64_t>(s.tokens.size()) - 1);
    return L;
}

TrainEngineConfig padded_cfg() {
    TrainEngineConfig e;
    e.micro_batch = 3;  // several micro-batches: gradient accumulation
    e.optim.lr = 1e-3;
    return e;
}

TrainEngineConfig packed_cfg(int64_t budget) {
    TrainEngineConfig e = padded_cfg();
    e.pack = true;
    e.micro_batch_tokens = budget;
    return e;
}

std::vector<double> grads_diff(TrainEngine& a, TrainEngine& b, double* scale) {
    std::vector<double> d;
    *scale = 0;
    const auto ga = a.gradients(), gb = b.gradients();
    for (size_t i = 0; i < ga.size(); ++i) {
        d.push_back((ga[i] - gb[i]).abs().max().item<double>());
        *scale = std::max(*scale, ga[i].abs().max().item<double>());
    }
    return d;
}

void expect_rows_near(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                      const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].size(), b[i].size()) << what << " sample " << i;
        for (size_t j = 0; j < a[i].size(); ++j) EXPECT_NEAR(a[i][j], b[i][j], kTol) << what << " " << i << "," << j;
    }
}

TEST(PackPlan, EverySequenceOnceWithinRowsAndBudget) {
    for (uint32_t seed : {1u, 2u, 3u}) {
        const auto b = random_batch(40, seed);
        const int64_t L = longest_slots(b);
        for (int64_t budget : {L, 2 * L + 1, 5 * L, int64_t{0}}) {
            std::multiset<size_t> seen;
            for (const PackPlan& p : plan_packed_micro_batches(b, 4, budget)) {
                ASSERT_FALSE(p.rows.empty());
                if (budget > 0) EXPECT_LE(static_cast<int64_t>(p.rows.size()) * L, std::max(budget, L));
                else EXPECT_LE(p.rows.size(), 4u);
                for (const auto& row : p.rows) {
                    int64_t fill = 0;
                    for (size_t i : row) {
                        fill += static_cast<int64_t>(b[i].tokens.size()) - 1;
                        seen.insert(i);
                    }
                    EXPECT_LE(fill, L);
                }
            }
            ASSERT_EQ(seen.size(), b.size());
            for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(seen.count(i), 1u);
        }
        // Fewer rows than sequences: the point of packing.
        EXPECT_LT(plan_packed_micro_batches(b, 1, 0).size(), b.size() / 2);
    }
}

TEST(PackPlan, BudgetBelowLongestSequenceIsOneLineError) {
    auto b = random_batch(6, 4);
    b[3].tokens.assign(30, 1);
    try {
        plan_packed_micro_batches(b, 8, 20);
        FAIL() << "no error";
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("--micro-batch-tokens 20"), std::string::npos) << m;
        EXPECT_NE(m.find("sample 3's 29 token slots"), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
}

TEST(PackLayout, PositionsRestartAndUnpackRoundTrips) {
    std::vector<TrainSeq> b(2);
    b[0].tokens = {1, 2, 3, 4, 5};
    b[0].prompt_len = 2;
    b[0].advantages = {0.5f, 0.25f, 0.125f};
    b[0].weight = 0.5f;
    b[1].tokens = {6, 7, 8};
    b[1].prompt_len = 2;
    b[1].advantages = {2.0f};
    PackPlan plan;
    plan.rows = {{1, 0}};
    MicroBatch mb = pack_rows(b, plan, torch::kCPU);
    ASSERT_TRUE(mb.packed);
    ASSERT_EQ(mb.inputs.sizes(), (std::vector<int64_t>{1, 6}));
    EXPECT_TRUE(torch::equal(mb.inputs[0], torch::tensor({6, 7, 1, 2, 3, 4}, torch::kInt64)));
    EXPECT_TRUE(torch::equal(mb.targets[0], torch::tensor({7, 8, 2, 3, 4, 5}, torch::kInt64)));
    EXPECT_TRUE(torch::equal(mb.positions[0], torch::tensor({0, 1, 0, 1, 2, 3}, torch::kInt64)));
    EXPECT_TRUE(torch::equal(mb.seq_id[0], torch::tensor({0, 0, 1, 1, 1, 1}, torch::kInt64)));
    EXPECT_TRUE(torch::equal(mb.mask[0], torch::tensor({0.0f, 1.0f, 0.0f, 1.0f, 1.0f, 1.0f})));
    EXPECT_TRUE(torch::equal(mb.weight[0], torch::tensor({1.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.5f})));
    EXPECT_EQ(mb.real_tokens, 6);
    std::vector<std::vector<float>> back;
    unpack_response(mb.adv, b, mb, back);
    EXPECT_EQ(back[0], b[0].advantages);
    EXPECT_EQ(back[1], b[1].advantages);
}

// The packed forward of several sequences in one row equals each sequence's forward alone; and
// it would not without the block-diagonal mask or with positions running on across a row.
TEST(PackForward, PolicyAndCriticEqualEachSequenceAlone) {
    for (bool abs_pos : {false, true}) {
        auto b = random_batch(9, 5);
        const auto plans = plan_packed_micro_batches(b, 2, 0);
        model::LlamaModel policy(config(abs_pos), 7);
        model::ValueModel critic(config(abs_pos), 8);
        {
            torch::NoGradGuard ng;
            critic->score->weight.normal_(0.0, 0.5);  // a non-zero head
        }
        torch::NoGradGuard ng;
        for (const PackPlan& p : plans) {
            MicroBatch mb = pack_rows(b, p, torch::kCPU);
            const torch::Tensor logits = policy->forward_packed(mb.inputs, mb.positions, mb.seq_id);
            const torch::Tensor values = critic->forward_packed(mb.inputs, mb.positions, mb.seq_id);
            for (size_t k = 0; k < mb.index.size(); ++k) {
                const TrainSeq& s = b[mb.index[k]];
                const int64_t len = static_cast<int64_t>(s.tokens.size()) - 1;
                std::vector<int64_t> toks(s.tokens.begin(), s.tokens.end() - 1);
                const torch::Tensor alone = torch::tensor(toks, torch::kInt64).unsqueeze(0);
                const torch::Tensor want_l = policy->forward(alone)[0];
                const torch::Tensor want_v = critic->forward(alone)[0];
                const torch::Tensor got_l = logits[mb.row[k]].narrow(0, mb.offset[k], len);
                const torch::Tensor got_v = values[mb.row[k]].narrow(0, mb.offset[k], len);
                EXPECT_LT((got_l - want_l).abs().max().item<double>(), kTol) << "sample " << mb.index[k];
                EXPECT_LT((got_v - want_v).abs().max().item<double>(), kTol) << "sample " << mb.index[k];
            }
            if (mb.index.size() < 2) continue;
            const torch::Tensor one_seq = torch::zeros_like(mb.seq_id);  // no mask between sequences
            EXPECT_GT((policy->forward_packed(mb.inputs, mb.positions, one_seq) - logits).abs().max().item<double>(),
                      1e-3);
            if (abs_pos) {  // positions 0..T-1 along the row instead of restarting
                const torch::Tensor run_on = torch::arange(mb.inputs.size(1), torch::kInt64).expand_as(mb.inputs);
                EXPECT_GT((policy->forward_packed(mb.inputs, run_on, mb.seq_id) - logits).abs().max().item<double>(),
                          1e-3);
            }
        }
    }
}

// Actor: loss, statistics and every parameter's gradient of the packed path equal the padded
// path's, in every loss aggregation, with entropy and KL-loss terms, importance weights, masked
// tool tokens and sequence weights, both accumulating over several micro-batches.
TEST(PackEquality, ActorEveryAggregation) {
    for (uint32_t seed : {11u, 12u}) {
        const auto b = random_batch(17, seed);
        const BatchCounts g = count_batch(b);
        const int64_t L = longest_slots(b);
        for (auto mode : {LossAgg::kTokenMean, LossAgg::kSeqMeanTokenSum, LossAgg::kSeqMeanTokenMean,
                          LossAgg::kSeqMeanTokenSumNorm}) {
            ActorConfig ac;
            ac.loss_agg = mode;
            ac.loss_norm_tokens = 24;
            ac.entropy_coef = 0.01;
            ac.kl_loss_coef = 0.1;
            ac.dual_clip = 3.0;
            const model::HfConfig c = config(seed % 2 == 0);
            ActorWorker padded(make_engine(policy_handle(model::LlamaModel(c, seed)), padded_cfg()), ac);
            ActorWorker packed(make_engine(policy_handle(model::LlamaModel(c, seed)), packed_cfg(2 * L)), ac);
            const ActorStats sp = padded.accumulate(b, g), sk = packed.accumulate(b, g);
            const std::string what = to_string(mode) + " seed " + std::to_string(seed);
            EXPECT_NEAR(sk.loss, sp.loss, kTol) << what;
            EXPECT_NEAR(sk.pg_loss, sp.pg_loss, kTol) << what;
            EXPECT_NEAR(sk.entropy, sp.entropy, kTol) << what;
            EXPECT_NEAR(sk.kl, sp.kl, kTol) << what;
            EXPECT_NEAR(sk.clip_frac, sp.clip_frac, 1e-9) << what;
            EXPECT_EQ(sk.tokens, sp.tokens) << what;
            EXPECT_LT(sk.token_slots, sp.token_slots) << what;  // less padding
            EXPECT_EQ(sk.real_tokens, sp.real_tokens) << what;
            double scale = 0;
            const auto d = grads_diff(padded.engine(), packed.engine(), &scale);
            EXPECT_GT(scale, 1e-4) << what;  // gradients that could differ
            for (size_t i = 0; i < d.size(); ++i) EXPECT_LT(d[i], kTol) << what << " parameter " << i;
        }
        // Log-probs and entropies (forward only, micro-batched).
        const model::HfConfig c = config(seed % 2 == 0);
        ActorWorker padded(make_engine(policy_handle(model::LlamaModel(c, seed)), padded_cfg()), {});
        ActorWorker packed(make_engine(policy_handle(model::LlamaModel(c, seed)), packed_cfg(L)), {});
        std::vector<std::vector<float>> ep, ek;
        expect_rows_near(packed.compute_log_probs(b, &ek), padded.compute_log_probs(b, &ep), "log-probs");
        expect_rows_near(ek, ep, "entropy");
        // The reference worker shares the policy forward.
        TrainEngineConfig fp = padded_cfg(), fk = packed_cfg(3 * L);
        fp.trainable = fk.trainable = false;
        ReferenceWorker rp(make_engine(policy_handle(model::LlamaModel(c, seed)), fp), 0.7);
        ReferenceWorker rk(make_engine(policy_handle(model::LlamaModel(c, seed)), fk), 0.7);
        expect_rows_near(rk.compute_ref_log_probs(b), rp.compute_ref_log_probs(b), "reference log-probs");
    }
}

model::ValueModel make_critic(uint64_t seed) {
    model::ValueModel vm(config(true), seed);
    torch::NoGradGuard ng;
    at::Generator gen = at::detail::createCPUGenerator(seed);
    vm->score->weight.normal_(0.0, 0.3, gen);
    vm->score->bias.fill_(0.1);
    return vm;
}

// Critic: values, value loss and gradients in every aggregation, and the GAE advantages and
// returns computed from either path's values.
TEST(PackEquality, CriticValuesLossesAndAdvantages) {
    const uint32_t seed = 21;
    const auto b = random_batch(15, seed);
    const BatchCounts g = count_batch(b);
    const int64_t L = longest_slots(b);
    for (auto mode :
         {LossAgg::kTokenMean, LossAgg::kSeqMeanTokenSum, LossAgg::kSeqMeanTokenMean, LossAgg::kSeqMeanTokenSumNorm}) {
        CriticConfig cc;
        cc.loss_agg = mode;
        cc.loss_norm_tokens = 24;
        cc.clip_range = 0.2;
        CriticWorker padded(make_engine(value_handle(make_critic(seed)), padded_cfg()), cc);
        CriticWorker packed(make_engine(value_handle(make_critic(seed)), packed_cfg(2 * L)), cc);
        const CriticStats sp = padded.accumulate(b, g), sk = packed.accumulate(b, g);
        const std::string what = to_string(mode);
        EXPECT_NEAR(sk.vf_loss, sp.vf_loss, kTol) << what;
        EXPECT_NEAR(sk.vpred_mean, sp.vpred_mean, kTol) << what;
        EXPECT_NEAR(sk.vf_clip_frac, sp.vf_clip_frac, 1e-9) << what;
        double scale = 0;
        const auto d = grads_diff(padded.engine(), packed.engine(), &scale);
        EXPECT_GT(scale, 1e-4) << what;
        for (size_t i = 0; i < d.size(); ++i) EXPECT_LT(d[i], kTol) << what << " parameter " << i;
    }
    CriticWorker padded(make_engine(value_handle(make_critic(seed)), padded_cfg()), {});
    CriticWorker packed(make_engine(value_handle(make_critic(seed)), packed_cfg(L)), {});
    const auto vp = padded.compute_values(b), vk = packed.compute_values(b);
    expect_rows_near(vk, vp, "values");
    AdvConfig cfg;
    cfg.estimator = AdvEstimator::kGae;
    cfg.gamma = 0.99;
    cfg.lam = 0.95;
    std::vector<AdvSample> ap(b.size()), ak(b.size());
    for (size_t i = 0; i < b.size(); ++i) {
        ap[i].group = ak[i].group = static_cast<int64_t>(i / 3);
        ap[i].score = ak[i].score = static_cast<float>(i % 3) - 1.0f;
        ap[i].n_resp = ak[i].n_resp = b[i].n_resp();
        ap[i].mask = ak[i].mask = b[i].loss_mask;
        ap[i].values = vp[i];
        ak[i].values = vk[i];
    }
    const AdvResult rp = compute_advantages(cfg, ap), rk = compute_advantages(cfg, ak);
    expect_rows_near(rk.advantages, rp.advantages, "gae advantages");
    expect_rows_near(rk.returns, rp.returns, "gae returns");
}

// Whole updates: PPO epochs x mini-batches (one optimiser step each), parameters after the update
// and the update's statistics equal.
TEST(PackEquality, UpdatesWithEpochsAndMiniBatches) {
    const uint32_t seed = 31;
    const auto b = random_batch(16, seed);
    const int64_t L = longest_slots(b);
    ActorConfig ac;
    ac.loss_agg = LossAgg::kSeqMeanTokenMean;
    ac.entropy_coef = 0.01;
    UpdateSchedule sched;
    sched.epochs = 2;
    sched.mini_batches = 2;
    ActorWorker padded(make_engine(policy_handle(model::LlamaModel(config(true), seed)), padded_cfg()), ac);
    ActorWorker packed(make_engine(policy_handle(model::LlamaModel(config(true), seed)), packed_cfg(L)), ac);
    const auto before = snapshot(padded.engine().parameters());
    const ActorStats sp = padded.update(b, nullptr, sched), sk = packed.update(b, nullptr, sched);
    EXPECT_EQ(sk.optimizer_steps, 4);
    EXPECT_EQ(sp.optimizer_steps, 4);
    EXPECT_NEAR(sk.loss, sp.loss, kTol);
    EXPECT_NEAR(sk.grad_norm, sp.grad_norm, kTol);
    EXPECT_GT(max_abs_diff(padded.engine().parameters(), before), 1e-4);  // the weights moved
    EXPECT_LT(max_abs_diff(packed.engine().parameters(), snapshot(padded.engine().parameters())), kTol);
}

TEST(PackEngine, HandleWithoutPackedForwardIsOneLineError) {
    ModelHandle h = policy_handle(model::LlamaModel(tiny_config(), 1));
    h.forward_packed = nullptr;
    auto e = make_engine(h, packed_cfg(0));
    const auto b = random_batch(3, 1);
    try {
        e->forward_backward(
            b, [](const MicroBatch&, const torch::Tensor&) { return torch::Tensor(); }, false);
        FAIL() << "no error";
    } catch (const ConfigError& err) {
        EXPECT_NE(std::string(err.what()).find("packed forward"), std::string::npos) << err.what();
    }
}

}  // namespace
}  // namespace tagflow::train

namespace tagflow::train {
namespace {

// The rows packing fills (train::first_fit_rows, shared with the simulator): longest first, each
// into the first row it fits, rows as long as the longest; packed_slots counts rows x that length.
TEST(PackRows, FirstFitByDecreasingLength) {
    EXPECT_EQ(first_fit_rows({5, 3, 2, 4, 1}), (std::vector<std::vector<size_t>>{{0}, {3, 4}, {1, 2}}));
    EXPECT_EQ(packed_slots({5, 3, 2, 4, 1}), 15);
    EXPECT_EQ(packed_slots({4, 4, 4}), 12);  // equal lengths: no padding
    EXPECT_EQ(packed_slots({}), 0);
    // The trainer's plan is these rows.
    const std::vector<int64_t> lens{9, 2, 30, 14, 7, 7, 21, 3};
    std::vector<TrainSeq> b;
    for (int64_t n : lens)
        b.push_back(make_train_seq({1}, std::vector<int32_t>(static_cast<size_t>(n), 2),
                                   std::vector<float>(static_cast<size_t>(n), -1.f)));
    std::vector<std::vector<size_t>> planned;
    for (const PackPlan& p : plan_packed_micro_batches(b, 1 << 20, 0))
        for (const auto& r : p.rows) planned.push_back(r);
    EXPECT_EQ(planned, first_fit_rows(lens));  // prompt 1 + response n - 1 = n slots
}

// The step's sequences over the train ranks (train::balance_by_slots): longest first to the rank
// holding the fewest slots, so the shares differ by at most one sequence's slots.
TEST(Balance, LongestFirstToTheLightestRank) {
    EXPECT_EQ(balance_by_slots({10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 2),
              (std::vector<int>{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(balance_by_slots({5, 5, 4, 3, 3}, 2), (std::vector<int>{0, 1, 0, 1, 1}));  // 9 and 11
    EXPECT_EQ(balance_by_slots({3, 7, 2}, 1), (std::vector<int>{0, 0, 0}));
    EXPECT_TRUE(balance_by_slots({}, 3).empty());
    EXPECT_THROW(balance_by_slots({1}, 0), ConfigError);
    std::mt19937 rng(7);
    std::vector<int64_t> slots(200);
    for (auto& x : slots) x = 1 + static_cast<int64_t>(rng() % 300);
    for (int n : {2, 3, 4}) {
        const std::vector<int> owner = balance_by_slots(slots, n);
        std::vector<int64_t> load(static_cast<size_t>(n), 0);
        for (size_t i = 0; i < slots.size(); ++i) {
            ASSERT_GE(owner[i], 0);
            ASSERT_LT(owner[i], n);
            load[static_cast<size_t>(owner[i])] += slots[i];
        }
        const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
        EXPECT_LE(*hi - *lo, *std::max_element(slots.begin(), slots.end())) << n << " ranks";
        EXPECT_EQ(balance_by_slots(slots, n), owner);  // deterministic
    }
}

}  // namespace
}  // namespace tagflow::train
