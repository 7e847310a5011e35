// SPDX-License-Identifier: Apache-2.0
// The Engine and the workers on a tiny Llama: packing, micro-batch invariance of the
// accumulated gradients in every loss-aggregation mode, save/load round trip, on-policy
// sanity (ratio 1), the reference worker, learning sanity of actor and critic, bf16, the
// legacy GPT policy handle, and one-line errors for misuse.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "common/error.hpp"
#include "model/llama.hpp"
#include "model/policy.hpp"
#include "model/value_model.hpp"
#include "tiny.hpp"
#include "train/torch_engine.hpp"
#include "train/workers.hpp"

namespace tagflow::train {
namespace {
using namespace testing;

EngineConfig engine_cfg(int64_t micro = 64, double lr = 1e-2) {
    EngineConfig e;
    e.micro_batch = micro;
    e.optim.lr = lr;
    e.optim.weight_decay = 0.01;
    e.optim.grad_clip = 1.0;
    return e;
}

ActorWorker make_actor(uint64_t seed, const EngineConfig& ec, const ActorConfig& ac = {}) {
    return ActorWorker(make_engine(policy_handle(model::LlamaModel(tiny_config(), seed)), ec), ac);
}

TEST(Pack, LayoutMaskAndBroadcast) {
    std::vector<TrainSeq> b(2);
    b[0].tokens = {1, 2, 3, 4, 5};
    b[0].prompt_len = 2;
    b[0].loss_mask = {1, 0, 1};
    b[0].advantages = {0.5f};
    b[1].tokens = {6, 7, 8};
    b[1].prompt_len = 2;
    b[1].advantages = {2.0f};
    MicroBatch mb = pack_micro_batch(b, 0, 2, torch::kCPU);
    ASSERT_EQ(mb.inputs.sizes(), (std::vector<int64_t>{2, 4}));
    EXPECT_TRUE(torch::equal(mb.inputs[0], torch::tensor({1, 2, 3, 4}, torch::kInt64)));
    EXPECT_TRUE(torch::equal(mb.targets[0], torch::tensor({2, 3, 4, 5}, torch::kInt64)));
    EXPECT_TRUE(torch::equal(mb.mask[0], torch::tensor({0.0f, 1.0f, 0.0f, 1.0f})));
    EXPECT_TRUE(torch::equal(mb.mask[1], torch::tensor({0.0f, 1.0f, 0.0f, 0.0f})));  // right padding
    EXPECT_TRUE(torch::equal(mb.adv[0], torch::tensor({0.0f, 0.5f, 0.5f, 0.5f})));
    EXPECT_FALSE(mb.old_logp.defined());
    std::vector<std::vector<float>> back;
    unpack_response(mb.adv, b, 0, back);
    EXPECT_EQ(back[0], (std::vector<float>{0.5f, 0.5f, 0.5f}));
    EXPECT_EQ(back[1], (std::vector<float>{2.0f}));
    // Counts: 2 + 1 valid tokens, 2 sequences.
    BatchCounts c = count_batch(b);
    EXPECT_EQ(c.tokens, 3);
    EXPECT_EQ(c.seqs, 2);
    // A field present on one row must be on all; lengths must match.
    b[0].old_logprobs = {0, 0, 0};
    EXPECT_THROW(pack_micro_batch(b, 0, 2, torch::kCPU), Error);
    b[1].old_logprobs = {0, 0};
    EXPECT_THROW(pack_micro_batch(b, 0, 2, torch::kCPU), Error);
    b[1].prompt_len = 0;
    EXPECT_THROW(pack_micro_batch(b, 1, 2, torch::kCPU), Error);
}

TEST(Pack, SplitBySequencesAndTokenBudget) {
    auto b = tiny_batch(7);  // lengths 3..7
    auto s = split_micro_batches(b, 3, 0);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0], (std::pair<size_t, size_t>{0, 3}));
    EXPECT_EQ(s[2], (std::pair<size_t, size_t>{6, 7}));
    size_t covered = 0;
    for (auto [bb, e] : split_micro_batches(b, 100, 12)) {
        int64_t longest = 0;
        for (size_t i = bb; i < e; ++i) longest = std::max<int64_t>(longest, static_cast<int64_t>(b[i].tokens.size()) - 1);
        EXPECT_TRUE(e - bb == 1 || static_cast<int64_t>(e - bb) * longest <= 12);
        EXPECT_EQ(bb, covered);
        covered = e;
    }
    EXPECT_EQ(covered, b.size());
}

// The accumulated gradient must not depend on how the batch is cut into micro-batches.
TEST(Engine, MicroBatchInvariance) {
    auto batch = tiny_batch(7);
    const BatchCounts g = count_batch(batch);
    for (auto mode : {LossAgg::kTokenMean, LossAgg::kSeqMeanTokenSum, LossAgg::kSeqMeanTokenMean}) {
        ActorConfig ac;
        ac.loss_agg = mode;
        ac.entropy_coef = 0.01;
        ActorWorker whole = make_actor(1, engine_cfg(64), ac);
        ActorStats sw = whole.accumulate(batch, g);
        auto gw = snapshot(whole.engine().gradients());
        for (auto [micro, budget] : {std::pair<int64_t, int64_t>{1, 0}, {3, 0}, {64, 12}}) {
            EngineConfig ec = engine_cfg(micro);
            ec.micro_batch_tokens = budget;
            ActorWorker split = make_actor(1, ec, ac);
            ActorStats ss = split.accumulate(batch, g);
            EXPECT_LT(max_abs_diff(split.engine().gradients(), gw), 1e-6) << to_string(mode) << " micro " << micro;
            EXPECT_NEAR(ss.loss, sw.loss, 1e-6);
            EXPECT_EQ(ss.tokens, sw.tokens);
        }
    }
}

TEST(Engine, SaveLoadRoundTrip) {
    auto b1 = tiny_batch(5, 0), b2 = tiny_batch(5, 1);
    ActorWorker a = make_actor(1, engine_cfg());
    a.update(b1, nullptr);
    a.engine().set_lr(3e-3);
    std::stringstream ss;
    a.engine().save(ss);
    const std::string dir = (std::filesystem::temp_directory_path() / "tagflow_engine_rt").string();
    a.engine().save_dir(dir);

    ActorWorker b = make_actor(2, engine_cfg());  // different weights, fresh optimiser
    ActorWorker c = make_actor(3, engine_cfg());
    EXPECT_GT(max_abs_diff(a.engine().parameters(), b.engine().parameters()), 1e-3);
    b.engine().load(ss);
    c.engine().load_dir(dir);
    EXPECT_EQ(max_abs_diff(a.engine().parameters(), b.engine().parameters()), 0.0);
    EXPECT_EQ(b.engine().global_step(), 1);
    EXPECT_DOUBLE_EQ(b.engine().lr(), 3e-3);
    // One more identical step: identical weights (optimiser moments were restored too).
    a.update(b2, nullptr);
    b.update(b2, nullptr);
    c.update(b2, nullptr);
    EXPECT_EQ(max_abs_diff(a.engine().parameters(), b.engine().parameters()), 0.0);
    EXPECT_EQ(max_abs_diff(a.engine().parameters(), c.engine().parameters()), 0.0);
    // Without the optimiser state the next step differs (so the test above means something).
    ActorWorker d = make_actor(2, engine_cfg());
    {
        std::stringstream s2;
        a.engine().save(s2);
        d.engine().load(s2);
    }
    ActorWorker e = make_actor(2, engine_cfg());
    for (size_t i = 0; i < e.engine().parameters().size(); ++i) {
        torch::NoGradGuard ng;
        e.engine().parameters()[i].copy_(a.engine().parameters()[i]);
    }
    d.update(b1, nullptr);
    e.update(b1, nullptr);
    EXPECT_GT(max_abs_diff(d.engine().parameters(), e.engine().parameters()), 1e-6);
    // A critic's state does not load into a policy engine.
    auto critic = make_engine(value_handle(model::ValueModel(tiny_config(), 1)), engine_cfg());
    std::stringstream cs;
    critic->save(cs);
    EXPECT_THROW(a.engine().load(cs), Error);
    std::filesystem::remove_all(dir);
}

TEST(Workers, OnPolicyRatioIsOneAndReferenceMatches) {
    auto batch = tiny_batch(6);
    model::LlamaModel policy(tiny_config(), 4);
    EngineConfig frozen = engine_cfg();
    frozen.trainable = false;
    ReferenceWorker ref(make_engine(policy_handle(clone_llama(policy)), frozen), 1.0);
    ActorConfig ac;
    ac.kl_loss_coef = 0.1;
    ActorWorker actor(make_engine(policy_handle(policy), engine_cfg()), ac);
    std::vector<std::vector<float>> ent;
    auto lp = actor.compute_log_probs(batch, &ent);
    auto rl = ref.compute_ref_log_probs(batch);
    ASSERT_EQ(lp.size(), batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
        ASSERT_EQ(lp[i].size(), batch[i].n_resp());
        for (size_t j = 0; j < lp[i].size(); ++j) {
            EXPECT_NEAR(lp[i][j], rl[i][j], 1e-6);
            EXPECT_LT(lp[i][j], 0.0f);
            EXPECT_GT(ent[i][j], 0.0f);
            EXPECT_LE(ent[i][j], std::log(11.0f) + 1e-5f);
        }
        batch[i].old_logprobs = lp[i];
        batch[i].rollout_logprobs = lp[i];
        batch[i].ref_logprobs = rl[i];
    }
    ActorStats st = actor.update(batch, nullptr);
    EXPECT_EQ(st.clip_frac, 0.0);
    EXPECT_LT(st.logprob_diff_mean, 1e-6);
    EXPECT_NEAR(st.kl, 0.0, 1e-9);
    EXPECT_EQ(st.optimizer_steps, 1);
    EXPECT_GT(st.grad_norm, 0.0);
    // The reference stays frozen; the policy moved, so the KL is now positive.
    auto rl2 = ref.compute_ref_log_probs(batch);
    EXPECT_EQ(rl2, rl);
    ActorStats st2 = actor.update(batch, nullptr);
    EXPECT_GT(st2.kl, 0.0);
    EXPECT_GT(st2.logprob_diff_mean, 0.0);
    // Two mini-batches x two epochs = four optimiser steps.
    ActorStats st3 = actor.update(batch, nullptr, UpdateSchedule{2, 2});
    EXPECT_EQ(st3.optimizer_steps, 4);
    EXPECT_EQ(st3.tokens, static_cast<int64_t>(count_batch(batch).tokens));
    EXPECT_THROW(ref.engine().step(), Error);
}

double seq_logprob(ActorWorker& a, const TrainSeq& s) {
    const auto lp = a.compute_log_probs({s});
    double sum = 0;
    for (float v : lp[0]) sum += v;
    return sum;
}

// GRPO on a fixed prompt with one rewarded and one unrewarded response: a few steps raise
// the log-prob of the rewarded response and lower the other.
TEST(Workers, ActorLearnsRewardedSequence) {
    ActorWorker actor = make_actor(5, engine_cfg(64, 2e-2));
    TrainSeq good = make_train_seq({1, 2}, {3, 4, 5}, {}), bad = make_train_seq({1, 2}, {6, 7, 8}, {});
    const double good0 = seq_logprob(actor, good), bad0 = seq_logprob(actor, bad);
    AdvConfig adv;
    adv.estimator = AdvEstimator::kGrpo;
    for (int step = 0; step < 5; ++step) {
        std::vector<TrainSeq> batch;
        std::vector<AdvSample> as;
        for (int k = 0; k < 4; ++k) {
            TrainSeq s = k % 2 == 0 ? good : bad;
            AdvSample a;
            a.group = 0;
            a.score = k % 2 == 0 ? 1.0f : 0.0f;
            a.n_resp = s.n_resp();
            as.push_back(a);
            batch.push_back(s);
        }
        auto lp = actor.compute_log_probs(batch);  // on-policy behaviour log-probs
        AdvResult r = compute_advantages(adv, as);
        for (size_t i = 0; i < batch.size(); ++i) {
            batch[i].old_logprobs = lp[i];
            batch[i].advantages = r.advantages[i];
        }
        actor.update(batch, nullptr);
    }
    const double good1 = seq_logprob(actor, good), bad1 = seq_logprob(actor, bad);
    std::printf("rewarded log-prob %.3f -> %.3f, unrewarded %.3f -> %.3f\n", good0, good1, bad0, bad1);
    EXPECT_GT(good1, good0 + 1.0) << good0 << " -> " << good1;
    EXPECT_LT(bad1, bad0 - 1.0) << bad0 << " -> " << bad1;
}

TEST(Workers, CriticValueLossDrops) {
    model::ValueModel vm(tiny_config(), 6);
    CriticConfig cc;
    cc.clip_range = 0.0;
    CriticWorker critic(make_engine(value_handle(vm), engine_cfg(64, 1e-2)), cc);
    auto batch = tiny_batch(6);
    auto v0 = critic.compute_values(batch);
    for (const auto& v : v0)
        for (float x : v) EXPECT_EQ(x, 0.0f);  // zero head
    CriticStats first = critic.update(batch, nullptr), last;
    for (int i = 0; i < 30; ++i) last = critic.update(batch, nullptr);
    std::printf("vf_loss %.4f -> %.4f, explained var %.3f -> %.3f\n", first.vf_loss, last.vf_loss,
                first.vf_explained_var, last.vf_explained_var);
    EXPECT_GT(first.vf_loss, 0.05);
    EXPECT_LT(last.vf_loss, 0.2 * first.vf_loss) << first.vf_loss << " -> " << last.vf_loss;
    EXPECT_GT(last.vf_explained_var, first.vf_explained_var);
    // With clipping on, old_values are required.
    CriticWorker clipped(make_engine(value_handle(model::ValueModel(tiny_config(), 6)), engine_cfg()), CriticConfig{});
    for (auto& s : batch) s.old_values.clear();
    EXPECT_THROW(clipped.update(batch, nullptr), Error);
}

TEST(ValueModel, InitFromPolicyAndShapes) {
    model::LlamaModel policy(tiny_config(), 7);
    model::ValueModel vm(tiny_config(), 8);
    vm->init_from_policy(*policy);
    auto ps = policy->hf_state_dict();
    std::map<std::string, torch::Tensor> vs;
    for (auto& [n, t] : vm->hf_state_dict()) vs[n] = t;
    for (auto& [n, t] : ps) {
        if (n.rfind("model.", 0) == 0) {
            EXPECT_TRUE(torch::equal(t, vs.at(n))) << n;
        }
    }
    EXPECT_TRUE(vs.count("score.weight") && vs.count("score.bias"));
    torch::Tensor v = vm->forward(torch::randint(0, 11, {3, 5}, torch::kInt64));
    EXPECT_EQ(v.sizes(), (std::vector<int64_t>{3, 5}));
    model::HfConfig other = tiny_config();
    other.num_hidden_layers = 1;
    model::ValueModel small(other, 0);
    EXPECT_THROW(small->init_from_policy(*policy), Error);
}

TEST(Engine, Bf16AutocastCloseToFp32) {
    auto batch = tiny_batch(4);
    EngineConfig bf = engine_cfg();
    bf.bf16 = true;
    ActorWorker a32 = make_actor(9, engine_cfg()), a16 = make_actor(9, bf);
    auto l32 = a32.compute_log_probs(batch), l16 = a16.compute_log_probs(batch);
    for (size_t i = 0; i < batch.size(); ++i)
        for (size_t j = 0; j < l32[i].size(); ++j) EXPECT_NEAR(l16[i][j], l32[i][j], 0.05);
    ActorStats st = a16.update(batch, nullptr);
    EXPECT_TRUE(std::isfinite(st.loss));
    for (const auto& p : a16.engine().parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat32);
}

TEST(Engine, LegacyPolicyHandle) {
    model::PolicyConfig pc;
    pc.vocab = 11;
    pc.d_model = 16;
    pc.n_layers = 1;
    pc.n_heads = 2;
    pc.d_ff = 32;
    pc.max_seq = 16;
    model::Policy p(pc, 1);
    ActorWorker a(make_engine(policy_handle(p), engine_cfg()), ActorConfig{});
    auto before = snapshot(a.engine().parameters());
    ActorStats st = a.update(tiny_batch(4), nullptr);
    EXPECT_GT(st.tokens, 0);
    EXPECT_GT(max_abs_diff(before, p->parameters()), 0.0);  // trained in place
}

TEST(Engine, ConfigErrors) {
    EngineConfig bad = engine_cfg(0);
    EXPECT_THROW(make_engine(policy_handle(model::LlamaModel(tiny_config(), 1)), bad), ConfigError);
    EngineConfig dev = engine_cfg();
    dev.device = "nonsense";
    EXPECT_THROW(make_engine(policy_handle(model::LlamaModel(tiny_config(), 1)), dev), ConfigError);
    EngineConfig frozen = engine_cfg();
    frozen.trainable = false;
    EXPECT_THROW(ActorWorker(make_engine(policy_handle(model::LlamaModel(tiny_config(), 1)), frozen), ActorConfig{}),
                 ConfigError);
    ActorWorker a = make_actor(1, engine_cfg());
    auto batch = tiny_batch(3);
    batch[1].advantages.clear();
    EXPECT_THROW(a.update(batch, nullptr), Error);
}

}  // namespace
}  // namespace tagflow::train
