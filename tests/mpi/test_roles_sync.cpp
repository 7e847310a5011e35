// SPDX-License-Identifier: Apache-2.0
// Multi-rank tests: tags to communicators, bucketed weight broadcast and gradient all-reduce,
// sample exchange. Run at np 1, 2 and 4. No early returns: every rank reaches every collective.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "cluster/roles.hpp"
#include "common/error.hpp"
#include "mpi_test_util.hpp"
#include "step/exchange.hpp"
#include "train/weight_sync_mpi.hpp"

using namespace tagflow;

using tagflow::test::all_ranks;
using tagflow::test::world_rank;
using tagflow::test::world_size;

TEST(Roles, ColocatedDefault) {
    auto t = cluster::resolve_rank_tags(world_rank(), world_size(), "", "", "", "");
    cluster::Roles r = cluster::build_roles(t, "");
    EXPECT_EQ(static_cast<int>(r.rollout_ranks.size()), world_size());
    EXPECT_EQ(static_cast<int>(r.train_ranks.size()), world_size());
    EXPECT_EQ(r.train_root, 0);
    EXPECT_EQ(r.rollout.size(), world_size());
    EXPECT_EQ(r.train.size(), world_size());
    EXPECT_EQ(r.sync.size(), world_size());
    EXPECT_EQ(r.io.size(), world_size());
    EXPECT_EQ(r.hosts.size(), static_cast<size_t>(world_size()));
    // No rank tagged critic: the critic runs with the actor on the train ranks.
    EXPECT_TRUE(r.critic_colocated);
    EXPECT_EQ(r.critic_ranks, r.train_ranks);
    EXPECT_EQ(r.critic.size(), world_size());
}

TEST(Roles, CriticRanksFromTags) {
    // The last rank carries the critic tag (with rollout so that np 1 still has a rollout rank).
    std::string spec;
    for (int i = 0; i < world_size(); ++i)
        spec += std::to_string(i) + "=" + (i == world_size() - 1 ? "rollout,train,critic" : "rollout,train") + ";";
    auto t = cluster::resolve_rank_tags(world_rank(), world_size(), "", "", "", spec);
    cluster::Roles r = cluster::build_roles(t, "");
    EXPECT_FALSE(r.critic_colocated);
    EXPECT_EQ(r.critic_ranks, std::vector<int>{world_size() - 1});
    EXPECT_EQ(r.is_critic(), world_rank() == world_size() - 1);
    EXPECT_EQ(r.critic.is_null(), !r.is_critic());
    if (r.is_critic()) {
        EXPECT_EQ(r.critic.size(), 1);
    }
}

TEST(Roles, SplitByRankTags) {
    // Rank 0 rollout only; odd ranks rollout+train; other even ranks train only.
    std::string spec;
    for (int i = 0; i < world_size(); ++i) {
        spec += std::to_string(i) + "=" + (i == 0 ? "rollout" : (i % 2 ? "rollout,train" : "train")) + ";";
    }
    auto t = cluster::resolve_rank_tags(world_rank(), world_size(), "", "", "", spec);
    if (world_size() == 1) {
        // A single rollout-only rank: no rank can train -> agreed ConfigError on every rank.
        EXPECT_THROW(cluster::build_roles(t, ""), ConfigError);
        return;
    }
    cluster::Roles r = cluster::build_roles(t, "");
    int me = world_rank();
    EXPECT_EQ(r.is_rollout(), me == 0 || me % 2 == 1);
    EXPECT_EQ(r.is_train(), me != 0);
    EXPECT_EQ(r.train_root, 1);
    EXPECT_EQ(r.rollout.is_null(), !r.is_rollout());
    EXPECT_EQ(r.train.is_null(), !r.is_train());
    if (!r.train.is_null()) {
        EXPECT_EQ(r.train.size(), static_cast<int>(r.train_ranks.size()));
    }
    if (!r.rollout.is_null()) {
        EXPECT_EQ(r.rollout.size(), static_cast<int>(r.rollout_ranks.size()));
    }
    // The sync communicator has the train root as its rank 0.
    if (!r.sync.is_null() && r.is_train_root()) {
        EXPECT_EQ(r.sync.rank(), 0);
    }
    EXPECT_EQ(r.sources[static_cast<size_t>(me)], "rank-tags");
}

TEST(Roles, BadTagOnOneRankFailsEveryRank) {
    std::string err = world_rank() == world_size() - 1 ? "TAGFLOW_TAGS 'gpu': unknown tag" : "";
    cluster::RankTags t;
    t.bits = cluster::kRollout | cluster::kTrain;
    t.source = "env";
    EXPECT_THROW(cluster::build_roles(t, err), ConfigError);
}

TEST(WeightSync, BucketRanges) {
    auto b = train::bucket_ranges(10, 16);  // 4 floats per bucket
    ASSERT_EQ(b.size(), 3u);
    EXPECT_EQ(b[2].first, 8u);
    EXPECT_EQ(b[2].second, 2u);
    EXPECT_TRUE(train::bucket_ranges(0, 16).empty());
}

TEST(WeightSync, BroadcastMakesEveryRankEqualToRoot) {
    const int root = world_size() - 1;
    std::vector<at::Tensor> ts = {at::full({3, 5}, static_cast<float>(world_rank())),
                                  at::arange(1000, at::kFloat) * (world_rank() + 1), at::zeros({1})};
    if (world_rank() == root) ts[2].fill_(42.f);
    auto st = train::broadcast_tensors(ts, MPI_COMM_WORLD, root, /*bucket_bytes=*/512);
    EXPECT_EQ(st.bytes, static_cast<int64_t>((15 + 1000 + 1) * 4));
    EXPECT_EQ(st.buckets, (1016 * 4 + 511) / 512);  // one collective per bucket, not per tensor
    bool ok = ts[0].eq(static_cast<float>(root)).all().item<bool>() &&
              ts[1].equal(at::arange(1000, at::kFloat) * (root + 1)) && ts[2].item<float>() == 42.f;
    EXPECT_TRUE(all_ranks(ok));
}

TEST(WeightSync, AllreduceSums) {
    std::vector<at::Tensor> ts = {at::full({7}, 1.0f), at::arange(300, at::kFloat)};
    train::allreduce_sum(ts, MPI_COMM_WORLD, 100);
    int n = world_size();
    bool ok = ts[0].eq(static_cast<float>(n)).all().item<bool>() && ts[1].allclose(at::arange(300, at::kFloat) * n);
    EXPECT_TRUE(all_ranks(ok));
}

TEST(Exchange, AllgatherSamples) {
    std::vector<sched::RolloutSample> mine;
    for (int i = 0; i <= world_rank(); ++i) {  // uneven: rank r has r+1 samples
        sched::RolloutSample s;
        s.id = world_rank() * 100 + i;
        s.rank = world_rank();
        s.prompt = {1, 2, world_rank()};
        s.response = std::vector<int32_t>(static_cast<size_t>(i), 7);
        s.logprobs = std::vector<float>(static_cast<size_t>(i), -0.5f);
        s.reward = 0.25f * static_cast<float>(i);
        s.hit_eos = i % 2;
        mine.push_back(s);
    }
    auto all = sched::allgather_samples(mine, MPI_COMM_WORLD);
    int n = world_size();
    bool ok = static_cast<int>(all.size()) == n * (n + 1) / 2;
    size_t k = 0;
    for (int r = 0; r < n && ok; ++r)
        for (int i = 0; i <= r; ++i, ++k) {
            const auto& s = all[k];
            ok = ok && s.id == r * 100 + i && s.rank == r && s.prompt.back() == r &&
                 s.response.size() == static_cast<size_t>(i) && s.logprobs.size() == static_cast<size_t>(i) &&
                 s.reward == 0.25f * static_cast<float>(i) && s.hit_eos == (i % 2 == 1);
        }
    EXPECT_TRUE(all_ranks(ok));
}

TEST(Exchange, UnpackRejectsTruncatedBuffers) {
    sched::RolloutSample s;
    s.prompt = {1, 2, 3};
    auto bytes = sched::pack_samples({s});
    EXPECT_THROW(sched::unpack_samples(bytes.data(), bytes.size() - 3), InternalError);
}

TEST(Exchange, AllgatherRowsFillsEveryRow) {
    const int n = world_size(), me = world_rank();
    const size_t rows_n = 11;
    std::vector<std::vector<float>> rows(rows_n);
    std::vector<int> owner(rows_n);
    std::vector<size_t> lengths(rows_n);
    for (size_t i = 0; i < rows_n; ++i) {
        owner[i] = static_cast<int>((i * 7) % static_cast<size_t>(n));  // not in row order
        lengths[i] = i % 4;                                             // includes empty rows
        if (owner[i] == me)
            for (size_t j = 0; j < lengths[i]; ++j) rows[i].push_back(static_cast<float>(i * 100 + j));
    }
    sched::allgather_rows(rows, owner, lengths, MPI_COMM_WORLD);
    bool ok = true;
    for (size_t i = 0; i < rows_n; ++i) {
        ok = ok && rows[i].size() == lengths[i];
        for (size_t j = 0; ok && j < lengths[i]; ++j) ok = rows[i][j] == static_cast<float>(i * 100 + j);
    }
    EXPECT_TRUE(all_ranks(ok));
}
