// SPDX-License-Identifier: Apache-2.0
// test_partial_rollout: InferenceEngine::update_weights (partial rollout: weights swapped at a token
// boundary while generations are in flight) and the decoder's extend() it builds on. Checks:
// interrupted generations finish with tokens of two versions and nothing dropped; keep mode with
// unchanged weights reproduces the uninterrupted run exactly (same batch composition) or within
// 1e-4 (another composition); recompute mode continues exactly like a fresh prefill of
// prompt + prefix under the new weights (tokens, and logprobs = the new model's full forward
// within 1e-4), while keep mode does not; extend() on a cached prefix equals a prefill, and a
// windowed recompute keeps the old k/v before the window. Also the scalar (head_dim % 8 != 0)
// attention kernel against the full forward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.hpp"
#include "fixtures.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"

using namespace tagflow;
using namespace tagflow::rollout;
using tagflow::model::HfConfig;
using tagflow::model::LlamaModel;

namespace {

LlamaModel make_model(const HfConfig& c, uint64_t seed) {
    LlamaModel m(c, 0);
    m->reset_parameters(seed, 0.1);
    return m;
}

std::vector<std::vector<int32_t>> prompts_for(int64_t vocab, const std::vector<int>& lengths) {
    std::vector<std::vector<int32_t>> out;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
        std::vector<int32_t> p;
        for (int t = 0; t < lengths[i]; ++t)
            p.push_back(
                static_cast<int32_t>((11 * i + 5 * static_cast<std::size_t>(t) + 2) % static_cast<std::size_t>(vocab)));
        out.push_back(p);
    }
    return out;
}

GenRequest request(int64_t id, const std::vector<int32_t>& prompt, double temperature, int32_t max_tokens) {
    GenRequest r;
    r.id = id;
    r.prompt = prompt;
    r.params.temperature = temperature;
    r.params.max_tokens = max_tokens;
    r.params.seed = derive_seed(7, static_cast<uint64_t>(id));
    return r;
}

/// Runs the requests; after `pause` steps calls `before_update` (e.g. changes the weights) and
/// update_weights(1, mode, window); pause < 0: no update.
std::vector<GenResult> run(LlamaModel& m, int64_t max_batch, const std::vector<GenRequest>& reqs, int pause,
                           ResumeMode mode = ResumeMode::kKeep, int64_t window = 0,
                           const std::function<void()>& before_update = {}, InferenceStats* stats = nullptr) {
    InferenceEngine e(m, InferenceConfig{max_batch, false});
    for (const auto& r : reqs) e.submit(r);
    for (int i = 0; i < pause; ++i) e.step();
    if (pause >= 0) {
        EXPECT_GT(e.active(), 0) << "the update must interrupt generations in flight";
        if (before_update) before_update();
        e.update_weights(1, mode, window);
    }
    auto res = e.run();
    if (stats != nullptr) *stats = e.stats();
    return res;
}

/// Index of the first response token sampled after the update (version 1).
std::size_t first_new(const GenResult& r) {
    return static_cast<std::size_t>(std::find(r.versions.begin(), r.versions.end(), 1) - r.versions.begin());
}

/// Max |engine logprob - log_softmax(full forward)| over response tokens [from, end) (greedy).
double max_logprob_diff(LlamaModel& m, const std::vector<int32_t>& prompt, const GenResult& r, std::size_t from) {
    torch::NoGradGuard ng;
    std::vector<int64_t> seq(prompt.begin(), prompt.end());
    seq.insert(seq.end(), r.response.begin(), r.response.end());
    const torch::Tensor lp =
        torch::log_softmax(m->forward(torch::tensor(seq, torch::kLong).view({1, -1})).squeeze(0), -1);
    double worst = 0;
    for (std::size_t i = from; i < r.response.size(); ++i)
        worst = std::max(worst, std::abs(lp[static_cast<int64_t>(prompt.size() + i) - 1][r.response[i]].item<double>() -
                                         static_cast<double>(r.logprobs[i])));
    return worst;
}

}  // namespace

TEST(PartialRollout, InterruptedGenerationsFinishWithTwoVersions) {
    const HfConfig c = model::fixtures::qwen2_config();
    for (ResumeMode mode : {ResumeMode::kKeep, ResumeMode::kRecompute}) {
        LlamaModel m = make_model(c, 3);
        const auto prompts = prompts_for(c.vocab_size, {4, 7, 2, 5, 3});
        std::vector<GenRequest> reqs;
        for (std::size_t i = 0; i < prompts.size(); ++i)
            reqs.push_back(request(static_cast<int64_t>(i), prompts[i], 1.0, 10));
        InferenceStats st;
        // max_batch 3: requests 3 and 4 are still waiting at the update.
        const auto res = run(
            m, 3, reqs, 4, mode, 0, [&] { m->reset_parameters(4, 0.1); }, &st);
        ASSERT_EQ(res.size(), prompts.size());  // nothing dropped
        for (std::size_t i = 0; i < res.size(); ++i) {
            EXPECT_EQ(res[i].id, static_cast<int64_t>(i));
            ASSERT_EQ(res[i].response.size(), 10u);  // nothing restarted: one full response each
            ASSERT_EQ(res[i].versions.size(), res[i].response.size());
            EXPECT_TRUE(std::is_sorted(res[i].versions.begin(), res[i].versions.end()));
            for (int32_t v : res[i].versions) EXPECT_TRUE(v == 0 || v == 1);
            const std::size_t k = first_new(res[i]);
            if (i < 3) {  // in flight at the update: old tokens, then new ones
                EXPECT_GT(k, 0u) << "request " << i;
                EXPECT_LT(k, 10u) << "request " << i;
            } else {
                EXPECT_EQ(k, 0u) << "request " << i << " was admitted after the update";
            }
        }
        EXPECT_EQ(st.weight_updates, 1);
        EXPECT_EQ(st.weight_refreshes, 1);
        EXPECT_EQ(st.recomputed_tokens > 0, mode == ResumeMode::kRecompute);
    }
}

TEST(PartialRollout, KeepWithUnchangedWeightsReproducesTheUninterruptedRun) {
    const HfConfig c = model::fixtures::llama_tied_config();
    LlamaModel m = make_model(c, 8);
    const auto prompts = prompts_for(c.vocab_size, {5, 2, 9, 4, 6, 3});
    std::vector<GenRequest> reqs;
    for (std::size_t i = 0; i < prompts.size(); ++i)
        reqs.push_back(request(static_cast<int64_t>(i), prompts[i], i % 2 ? 1.0 : 0.0, 12));
    const auto base = run(m, 4, reqs, -1);
    // Same batch composition: bit for bit.
    InferenceStats st;
    const auto same = run(m, 4, reqs, 5, ResumeMode::kKeep, 0, {}, &st);
    EXPECT_EQ(st.weight_refreshes, 0);
    ASSERT_EQ(same.size(), base.size());
    for (std::size_t i = 0; i < base.size(); ++i) {
        EXPECT_EQ(same[i].response, base[i].response) << "request " << i;
        EXPECT_EQ(same[i].logprobs, base[i].logprobs) << "request " << i;
        EXPECT_EQ(same[i].versions.back(), 1);
    }
    // Another composition (max_batch 2) and the recompute modes: same tokens, logprobs within
    // float rounding of batched GEMMs.
    struct Variant {
        int64_t max_batch;
        ResumeMode mode;
        int64_t window;
    };
    for (const Variant& v : {Variant{2, ResumeMode::kKeep, 0}, Variant{4, ResumeMode::kRecompute, 0},
                             Variant{3, ResumeMode::kRecompute, 3}}) {
        const auto other = run(m, v.max_batch, reqs, 3, v.mode, v.window);
        ASSERT_EQ(other.size(), base.size());
        for (std::size_t i = 0; i < base.size(); ++i) {
            ASSERT_EQ(other[i].response, base[i].response) << "request " << i << " max_batch " << v.max_batch;
            for (std::size_t t = 0; t < base[i].logprobs.size(); ++t)
                EXPECT_NEAR(other[i].logprobs[t], base[i].logprobs[t], 1e-4);
        }
    }
}

TEST(PartialRollout, RecomputeContinuesLikeAFreshPrefillUnderTheNewWeights) {
    const HfConfig c = model::fixtures::qwen2_config();
    const auto prompts = prompts_for(c.vocab_size, {3, 8, 5, 6});
    std::vector<GenRequest> reqs;
    for (std::size_t i = 0; i < prompts.size(); ++i)
        reqs.push_back(request(static_cast<int64_t>(i), prompts[i], 0.0, 12));
    std::vector<std::vector<GenResult>> by_mode;
    for (auto [mode, window] :
         {std::pair{ResumeMode::kRecompute, int64_t{0}}, std::pair{ResumeMode::kRecompute, int64_t{1000}},
          std::pair{ResumeMode::kKeep, int64_t{0}}}) {
        LlamaModel m = make_model(c, 3);
        auto res = run(m, 4, reqs, 5, mode, window, [&] { m->reset_parameters(9, 0.1); });
        double keep_worst = 0;
        for (std::size_t i = 0; i < prompts.size(); ++i) {
            const GenResult& r = res[i];
            const std::size_t k = first_new(r);
            ASSERT_GT(k, 0u);
            ASSERT_LT(k, r.response.size());
            const double d = max_logprob_diff(m, prompts[i], r, k);
            if (mode == ResumeMode::kKeep) {
                keep_worst = std::max(keep_worst, d);
                continue;
            }
            // The new tokens are what the new model's full forward says (the trainer's logprobs)...
            EXPECT_LT(d, 1e-4) << "request " << i;
            // ... and what a fresh engine generates from prompt + the old tokens.
            std::vector<int32_t> prefixed = prompts[i];
            prefixed.insert(prefixed.end(), r.response.begin(), r.response.begin() + static_cast<std::ptrdiff_t>(k));
            const auto fresh = generate(m, {prefixed}, reqs[i].params);
            ASSERT_EQ(fresh[0].response.size(), 12u);
            for (std::size_t t = k; t < r.response.size(); ++t) {
                ASSERT_EQ(r.response[t], fresh[0].response[t - k]) << "request " << i << " token " << t;
                EXPECT_NEAR(r.logprobs[t], fresh[0].logprobs[t - k], 1e-4);
            }
        }
        // Keep mode really kept the old k/v: its new tokens are not the new model's full forward.
        if (mode == ResumeMode::kKeep) {
            EXPECT_GT(keep_worst, 1e-3);
        }
        by_mode.push_back(std::move(res));
    }
    // A window longer than every sequence is a full recompute.
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(by_mode[1][i].response, by_mode[0][i].response);
        EXPECT_EQ(by_mode[1][i].logprobs, by_mode[0][i].logprobs);
    }
}

// min_tokens: only the sequences holding at least that many cached tokens are recomputed (the
// seed's threshold for long sequences); the window still bounds each one's recompute.
TEST(PartialRollout, MinTokensRecomputesOnlyTheLongSequences) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 3);
    const auto prompts = prompts_for(c.vocab_size, {2, 9, 3});
    for (int64_t window : {int64_t{0}, int64_t{4}}) {
        InferenceEngine e(m, InferenceConfig{3, false});
        for (std::size_t i = 0; i < prompts.size(); ++i) e.submit(request(static_cast<int64_t>(i), prompts[i], 1.0, 8));
        e.step();  // prefill: each holds its prompt
        e.step();  // one decode: prompt + 1 cached tokens (3, 10, 4)
        e.update_weights(1, ResumeMode::kRecompute, window, 8);
        EXPECT_EQ(e.stats().recomputed_seqs, 1) << "window " << window;
        EXPECT_EQ(e.stats().recomputed_tokens, window > 0 ? window : 10) << "window " << window;
        e.update_weights(2, ResumeMode::kRecompute, window, 100);  // none that long
        EXPECT_EQ(e.stats().recomputed_seqs, 1);
        e.update_weights(3, ResumeMode::kRecompute, 0, 0);  // 0: every sequence, all of it
        EXPECT_EQ(e.stats().recomputed_seqs, 4);
        EXPECT_EQ(e.stats().recomputed_tokens, (window > 0 ? window : 10) + 3 + 10 + 4);
        const auto res = e.run();
        ASSERT_EQ(res.size(), 3u);
        for (const auto& r : res) EXPECT_EQ(r.response.size(), 8u);
    }
    InferenceEngine e(m, InferenceConfig{2, false});
    EXPECT_THROW(e.update_weights(1, ResumeMode::kRecompute, 0, -1), Error);
}

TEST(PartialRollout, UpdateWeightsRejectsANegativeWindowAndWorksWhenIdle) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 1);
    InferenceEngine e(m, InferenceConfig{2, false});
    EXPECT_THROW(e.update_weights(1, ResumeMode::kRecompute, -1), Error);
    e.update_weights(5, ResumeMode::kRecompute);  // nothing in flight, no decoder yet
    EXPECT_EQ(e.policy_version(), 5);
    e.set_policy_version(6);
    e.submit(request(0, {1, 2, 3}, 0.0, 3));
    const auto res = e.run();
    ASSERT_EQ(res.size(), 1u);
    EXPECT_EQ(res[0].versions, std::vector<int32_t>(3, 6));
}

TEST(SlotDecoder, ExtendOnACachedPrefixEqualsPrefill) {
    const HfConfig c = model::fixtures::qwen2_config();
    LlamaModel m = make_model(c, 2);
    const auto seqs = prompts_for(c.vocab_size, {12, 9});
    auto slice = [](const std::vector<int32_t>& v, std::size_t a, std::size_t b) {
        return std::vector<int32_t>(v.begin() + static_cast<std::ptrdiff_t>(a),
                                    v.begin() + static_cast<std::ptrdiff_t>(b));
    };
    model::LlamaSlotDecoder whole(m, 3, 32), parts(m, 3, 32);
    const torch::Tensor want = whole.prefill({0, 2}, seqs);
    parts.prefill({1, 2}, {slice(seqs[0], 0, 5), slice(seqs[1], 0, 3)});
    const torch::Tensor got = parts.extend({1, 2}, {slice(seqs[0], 5, 12), slice(seqs[1], 3, 9)}, {5, 3});
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5);
    EXPECT_THROW(parts.extend({1, 1}, {{1}, {2}}, {0, 0}), c10::Error);  // a slot twice
    EXPECT_THROW(parts.extend({1}, {{1, 2}}, {31}), c10::Error);         // past the capacity

    // Windowed recompute: cache [0, 12) under the old weights, then the new weights over the
    // last 4 positions, equals old weights over [0, 8) plus new weights over [8, 12).
    LlamaModel m2 = make_model(c, 2);
    model::LlamaSlotDecoder a(m2, 1, 32), b(m2, 1, 32);
    a.prefill({0}, {seqs[0]});
    b.prefill({0}, {slice(seqs[0], 0, 8)});
    m2->reset_parameters(6, 0.1);
    EXPECT_TRUE(a.weights_changed());
    EXPECT_TRUE(a.sync_weights());
    EXPECT_TRUE(b.sync_weights());
    EXPECT_FALSE(a.weights_changed());
    const torch::Tensor la = a.extend({0}, {slice(seqs[0], 8, 12)}, {8});
    const torch::Tensor lb = b.extend({0}, {slice(seqs[0], 8, 12)}, {8});
    EXPECT_LT((la - lb).abs().max().item<double>(), 1e-5);  // prefixes of 12 and 8 rows: GEMM rounding
    model::LlamaSlotDecoder fresh(m2, 1, 32);
    EXPECT_GT((la - fresh.prefill({0}, {seqs[0]})).abs().max().item<double>(), 1e-3);  // the old prefix counts
}

TEST(SlotDecoder, ScalarAttentionKernelMatchesTheFullForward) {
    HfConfig c = model::fixtures::llama_tied_config();
    c.hidden_size = 36;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 3;
    c.head_dim = 6;  // not a multiple of 8: the portable kernel
    LlamaModel m = make_model(c, 4);
    const auto prompts = prompts_for(c.vocab_size, {3, 7, 1});
    const auto res = generate(m, prompts, GenParams{0.0, 1.0, 0, 8, {}, 0}, InferenceConfig{2, false});
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_EQ(res[i].response.size(), 8u);
        EXPECT_LT(max_logprob_diff(m, prompts[i], res[i], 0), 1e-4) << "prompt " << i;
        // Greedy: every token is the full forward's argmax.
        torch::NoGradGuard ng;
        std::vector<int64_t> seq(prompts[i].begin(), prompts[i].end());
        seq.insert(seq.end(), res[i].response.begin(), res[i].response.end());
        const torch::Tensor logits = m->forward(torch::tensor(seq, torch::kLong).view({1, -1})).squeeze(0);
        for (std::size_t t = 0; t < 8; ++t)
            EXPECT_EQ(logits[static_cast<int64_t>(prompts[i].size() + t) - 1].argmax().item<int64_t>(),
                      res[i].response[t]);
    }
}
