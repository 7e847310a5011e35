// SPDX-License-Identifier: Apache-2.0
// Unit tests of sched::GatewayRecorder (Serial.gateway_recorder.*): the records the gateway rank
// sends (serve/gateway_link.hpp) turned into trainable samples, without MPI or a model.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serve/gateway_link.hpp"
#include "serve/gateway_router.hpp"

using namespace tagflow;
using namespace tagflow::sched;

namespace {

struct Turn {
    std::vector<int32_t> input, output, versions;
    std::vector<float> logprobs;
};

Turn turn(std::vector<int32_t> input, std::vector<int32_t> output, int32_t version, float lp) {
    Turn t{std::move(input), std::move(output), {}, {}};
    t.versions.assign(t.output.size(), version);
    t.logprobs.assign(t.output.size(), lp);
    return t;
}

void ingest_turn(GatewayRecorder& rec, const std::string& session, const std::string& cid, const Turn& t,
                 std::vector<std::vector<RolloutSample>>& groups) {
    traj::Request r;
    r.input = t.input;
    r.output = t.output;
    r.logprobs = t.logprobs;
    r.versions = t.versions;
    r.rank = 0;
    r.t_start = 1.0;
    r.t_end = 2.0;
    const std::vector<char> b = gw::request_record(session, cid, r, gw::kFinStop);
    rec.ingest(b.data(), b.size(), groups);
}

void ingest_reward(GatewayRecorder& rec, const std::string& session, const std::string& group, double reward,
                   std::vector<std::vector<RolloutSample>>& groups) {
    gateway::RewardReport r;
    r.session = session;
    r.group = group;
    r.reward = reward;
    const std::vector<char> b = gw::reward_record(r, 3.0);
    rec.ingest(b.data(), b.size(), groups);
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

}  // namespace

// A group of two two-turn sessions on one question whose first answers are the same tokens at
// different policy versions (the weights changed between them), as the reverse task's agent
// produces now and then. Each session is one sample: its own first answer (its version and
// logprobs) trained, the environment's second question masked inside, its second answer trained.
// Before the recorder named each session's own trajectories to the tree, the second session's
// second turn went down the first session's path, and its first turn became a sample of its own.
TEST(GatewayRecorder, TwoTurnSessionsWithTheSameAnswerAtDifferentVersionsAreOneSampleEach) {
    GatewayRecorder rec(2);
    std::vector<std::vector<RolloutSample>> groups;
    const std::vector<int32_t> q{10, 1, 2, 3, 11}, a{3, 2, 1, 12};
    const int32_t ver[2] = {1, 2};
    const float lp[2] = {-0.5f, -0.25f};
    for (int k = 0; k < 2; ++k) {
        const std::string s = "agent-0-" + std::to_string(k);
        ingest_turn(rec, s, s + "-t1", turn(q, a, ver[k], lp[k]), groups);
        ingest_turn(rec, s, s + "-t2", turn(cat(cat(q, a), q), {3, 2, 12 - k}, ver[k], lp[k]), groups);
        ingest_reward(rec, s, "agent-0", 0.5 * k, groups);
    }
    ASSERT_EQ(groups.size(), 1u);
    ASSERT_EQ(groups[0].size(), 2u) << "one sample per session";
    for (int k = 0; k < 2; ++k) {
        const RolloutSample& x = groups[0][static_cast<size_t>(k)];
        EXPECT_FLOAT_EQ(x.reward, 0.5f * static_cast<float>(k));
        EXPECT_EQ(x.prompt, q);
        const std::vector<int32_t> resp = cat(cat(a, q), {3, 2, 12 - k});
        EXPECT_EQ(x.response, resp);
        const std::vector<uint8_t> mask{1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1};
        EXPECT_EQ(x.loss_mask, mask);
        for (size_t i = 0; i < resp.size(); ++i) {
            if (!mask[i]) continue;
            EXPECT_EQ(x.versions[i], ver[k]) << "session " << k << " token " << i;
            EXPECT_FLOAT_EQ(x.logprobs[i], lp[k]) << "session " << k << " token " << i;
        }
    }
}
