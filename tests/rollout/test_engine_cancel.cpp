// SPDX-License-Identifier: Apache-2.0
// test_engine_cancel: InferenceEngine::cancel (Serial.engine_cancel.*). A running request cancelled at a
// token boundary leaves its slot at once: the others finish with exactly the tokens of a run
// without it (greedy), the freed slot is refilled by the next waiting request, and the
// cancelled request's on_finish never comes. Also: cancelling a queued request, an unknown or
// finished id (false, nothing changes), cancelling from the token callback, and the stats.
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"

using namespace tagflow;
using namespace tagflow::rollout;
using tagflow::model::HfConfig;
using tagflow::model::LlamaModel;

namespace {

LlamaModel make_model(uint64_t seed) {
    LlamaModel m(model::fixtures::llama_tied_config(), 0);
    m->reset_parameters(seed, 0.1);
    return m;
}

GenRequest request(int64_t id, int64_t vocab, int len, int32_t max_tokens) {
    GenRequest r;
    r.id = id;
    for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>((7 * id + 13 * t + 3) % vocab));
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    return r;
}

std::map<int64_t, GenResult> by_id(const std::vector<GenResult>& v) {
    std::map<int64_t, GenResult> m;
    for (const auto& r : v) m[r.id] = r;
    return m;
}

}  // namespace

TEST(EngineCancel, RunningRequestFreesItsSlotOthersUnchanged) {
    LlamaModel m = make_model(4);
    const int64_t V = m->config().vocab_size;
    // Reference: requests 0, 2, 3, 4, 5 without request 1, 3 slots.
    const std::vector<int64_t> others{0, 2, 3, 4, 5};
    InferenceEngine ref(m, InferenceConfig{3, false});
    for (int64_t id : others) ref.submit(request(id, V, 3 + static_cast<int>(id), 20));
    const auto want = by_id(ref.run());

    // Request 1 (long) in the middle row, between requests 0 and 2; cancelled after 5 of its
    // tokens, so request 2's cache row moves into its slot.
    InferenceEngine e(m, InferenceConfig{3, false});
    e.submit(request(0, V, 3, 20));
    e.submit(request(1, V, 4, 40));
    for (int64_t id : {2, 3, 4, 5}) e.submit(request(id, V, 3 + static_cast<int>(id), 20));
    std::vector<int64_t> finished;
    const auto on_finish = [&](const GenResult& r) { finished.push_back(r.id); };
    for (int k = 0; k < 5; ++k) ASSERT_TRUE(e.step(on_finish));  // 1 prefill + 4 decodes
    ASSERT_EQ(e.active(), 3);
    ASSERT_EQ(e.waiting(), 3);
    GenResult part;
    ASSERT_TRUE(e.cancel(1, &part));
    EXPECT_EQ(part.id, 1);
    EXPECT_EQ(part.finish, FinishReason::kCancelled);
    EXPECT_STREQ(finish_reason_name(part.finish), "cancelled");
    EXPECT_EQ(part.response.size(), 5u);
    EXPECT_EQ(part.num_tokens, 5);
    EXPECT_EQ(part.logprobs.size(), 5u);
    EXPECT_EQ(part.versions.size(), 5u);
    EXPECT_EQ(e.active(), 2);  // the slot is free at once
    EXPECT_EQ(e.stats().cancelled, 1);
    // The next step refills the slot with request 3 while requests 0 and 2 keep decoding.
    const int64_t prefills = e.stats().prefills;
    ASSERT_TRUE(e.step(on_finish));
    EXPECT_EQ(e.active(), 3);
    EXPECT_EQ(e.waiting(), 2);
    EXPECT_EQ(e.stats().prefills, prefills + 1);
    EXPECT_FALSE(e.cancel(1));  // gone already
    const auto got = by_id(e.run(on_finish));
    EXPECT_EQ(std::count(finished.begin(), finished.end(), 1), 0) << "no on_finish for a cancelled request";
    EXPECT_EQ(got.count(1), 0u) << "run() does not return a cancelled request";
    ASSERT_EQ(got.size(), others.size());
    for (int64_t id : others) {
        EXPECT_EQ(got.at(id).response, want.at(id).response) << "request " << id;
        EXPECT_EQ(got.at(id).finish, want.at(id).finish);
    }
    // Its partial tokens are the first tokens of the same request run to its end.
    InferenceEngine solo(m, InferenceConfig{3, false});
    solo.submit(request(1, V, 4, 40));
    const auto full = solo.run();
    ASSERT_EQ(full.size(), 1u);
    EXPECT_TRUE(std::equal(part.response.begin(), part.response.end(), full[0].response.begin()));
}

TEST(EngineCancel, QueuedUnknownAndFinished) {
    LlamaModel m = make_model(7);
    const int64_t V = m->config().vocab_size;
    InferenceEngine e(m, InferenceConfig{1, false});
    for (int64_t id : {10, 11, 12}) e.submit(request(id, V, 3, 4));
    ASSERT_TRUE(e.step());  // 10 admitted; 11, 12 wait
    EXPECT_EQ(e.waiting(), 2);
    GenResult part;
    ASSERT_TRUE(e.cancel(11, &part));  // queued: dropped, nothing generated
    EXPECT_EQ(part.finish, FinishReason::kCancelled);
    EXPECT_TRUE(part.response.empty());
    EXPECT_EQ(part.prompt_tokens, 3);
    EXPECT_EQ(e.waiting(), 1);
    EXPECT_FALSE(e.cancel(99));  // unknown
    const auto res = e.run();
    ASSERT_EQ(res.size(), 2u);
    EXPECT_EQ(res[0].id, 10);
    EXPECT_EQ(res[1].id, 12);
    EXPECT_FALSE(e.cancel(10));  // finished
    EXPECT_EQ(e.stats().cancelled, 1);
    EXPECT_FALSE(e.step());
}

TEST(EngineCancel, FromTheTokenCallbackAndLastRow) {
    // Cancel a request from on_token the moment it samples its 3rd token (a client that
    // disconnects mid-stream); the request that stays keeps its tokens.
    LlamaModel m = make_model(9);
    const int64_t V = m->config().vocab_size;
    InferenceEngine ref(m, InferenceConfig{3, false});
    ref.submit(request(0, V, 5, 12));
    const auto want = ref.run();
    InferenceEngine e(m, InferenceConfig{3, false});
    e.submit(request(0, V, 5, 12));
    e.submit(request(1, V, 2, 30));
    e.submit(request(2, V, 6, 30));
    std::map<int64_t, int> seen;
    std::vector<int64_t> cancelled;
    const auto on_token = [&](const TokenEvent& t) {
        if (++seen[t.id] == 3 && t.id != 0) {
            if (e.cancel(t.id)) cancelled.push_back(t.id);
        }
    };
    while (e.step({}, on_token)) {}
    // Both reach 3 tokens in the same step; events come in row order: 1 (row 1, the last row
    // moves into it), then 2 (now the last row).
    EXPECT_EQ(cancelled, (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(e.stats().cancelled, 2);
    const auto got = e.run();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].response, want[0].response);
}
