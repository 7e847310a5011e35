// SPDX-License-Identifier: Apache-2.0
// Data parallelism over real MPI ranks: each rank trains on its share of a batch through
// MpiCollectives (counts and gradients summed), and the result must equal one engine
// stepping on the whole batch (computed on every rank with no communicator) within 1e-6 —
// for the actor in every loss-aggregation mode and for the critic. Run at np 1 and 2.
// Also: a poisoned sample (NaN or float32-overflowing advantage, NaN return) on ONE rank makes
// every rank skip that update (weights, AdamW state and step counter unchanged), and an engine
// refuses to save non-finite weights.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "common/error.hpp"

#include "model/llama.hpp"
#include "model/value_model.hpp"
#include "tiny.hpp"
#include "train/collectives_mpi.hpp"
#include "train/workers.hpp"

namespace tagflow::train {
namespace {
using namespace testing;

TrainEngineConfig engine_cfg(int64_t micro) {
    TrainEngineConfig e;
    e.micro_batch = micro;
    // Adam divides by sqrt(v): float-rounding differences of the summed gradients grow with
    // lr; at 2e-4 four steps stay well inside 1e-6.
    e.optim.lr = 2e-4;
    e.optim.weight_decay = 0.01;
    e.optim.grad_clip = 1.0;
    return e;
}

// Rank r takes samples r, r + size, ... (a rank may get none at larger np).
std::vector<TrainSeq> share(const std::vector<TrainSeq>& all, int rank, int size) {
    std::vector<TrainSeq> out;
    for (size_t i = static_cast<size_t>(rank); i < all.size(); i += static_cast<size_t>(size)) out.push_back(all[i]);
    return out;
}

bool all_finite_on_every_rank(const std::vector<torch::Tensor>& ps) {
    int ok = 1;
    for (const auto& p : ps) ok = ok && torch::isfinite(p).all().item<bool>();
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok == 1;
}

TEST(DataParallel, ActorMatchesSingleRank) {
    MpiCollectives comm(MPI_COMM_WORLD, /*bucket_bytes=*/4096);  // several buckets
    auto batch = tiny_batch(7);
    for (auto mode : {LossAgg::kTokenMean, LossAgg::kSeqMeanTokenSum, LossAgg::kSeqMeanTokenMean}) {
        ActorConfig ac;
        ac.loss_agg = mode;
        ac.entropy_coef = 0.01;
        ActorWorker single(make_engine(policy_handle(model::LlamaModel(tiny_config(), 11)), engine_cfg(64)), ac);
        ActorWorker dp(make_engine(policy_handle(model::LlamaModel(tiny_config(), 11)), engine_cfg(2)), ac);
        auto mine = share(batch, comm.rank(), comm.size());

        // Gradients after the all-reduce equal the whole-batch gradients.
        single.accumulate(batch, count_batch(batch));
        dp.accumulate(mine, allreduce_counts(count_batch(mine), &comm));
        dp.engine().allreduce_grads(&comm);
        EXPECT_LT(max_abs_diff(dp.engine().gradients(), single.engine().gradients()), 1e-6) << to_string(mode);
        single.engine().zero_grad();
        dp.engine().zero_grad();

        // Two full updates (two epochs each): the same weights and statistics.
        for (int s = 0; s < 2; ++s) {
            ActorStats a = single.update(batch, nullptr, UpdateSchedule{1, 2});
            ActorStats b = dp.update(mine, &comm, UpdateSchedule{1, 2});
            EXPECT_NEAR(a.loss, b.loss, 1e-5);
            EXPECT_NEAR(a.entropy, b.entropy, 1e-5);
            EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5);
            EXPECT_EQ(a.tokens, b.tokens);
        }
        const double d = max_abs_diff(dp.engine().parameters(), single.engine().parameters());
        if (comm.rank() == 0)
            std::printf("np%d %s: max |w_dp - w_single| = %.3g\n", comm.size(), to_string(mode).c_str(), d);
        EXPECT_LT(d, 1e-6) << to_string(mode);
    }
}

TEST(DataParallel, CriticMatchesSingleRank) {
    MpiCollectives comm(MPI_COMM_WORLD, 4096);
    auto batch = tiny_batch(5, 3);
    CriticConfig cc;  // value clipping on
    CriticWorker single(make_engine(value_handle(model::ValueModel(tiny_config(), 12)), engine_cfg(64)), cc);
    CriticWorker dp(make_engine(value_handle(model::ValueModel(tiny_config(), 12)), engine_cfg(1)), cc);
    auto mine = share(batch, comm.rank(), comm.size());
    for (int s = 0; s < 3; ++s) {
        CriticStats a = single.update(batch, nullptr);
        CriticStats b = dp.update(mine, &comm);
        EXPECT_NEAR(a.vf_loss, b.vf_loss, 1e-5);
        EXPECT_NEAR(a.vf_clip_frac, b.vf_clip_frac, 1e-6);
    }
    EXPECT_LT(max_abs_diff(dp.engine().parameters(), single.engine().parameters()), 1e-6);
}

// The last rank's share holds the poisoned sample (rank 0's when np = 1): the decision to skip
// must still be the same on every rank, since it is taken on all-reduced numbers.
TEST(DataParallel, PoisonedUpdateIsSkippedOnEveryRank) {
    MpiCollectives comm(MPI_COMM_WORLD, 4096);
    const float poisons[] = {std::numeric_limits<float>::quiet_NaN(), 3e38f, -std::numeric_limits<float>::infinity()};
    for (float poison : poisons) {
        ActorWorker dp(make_engine(policy_handle(model::LlamaModel(tiny_config(), 11)), engine_cfg(2)), ActorConfig{});
        auto mine = share(tiny_batch(6), comm.rank(), comm.size());
        const std::vector<torch::Tensor> before = snapshot(dp.engine().parameters());
        auto bad = mine;
        if (comm.rank() == comm.size() - 1) bad.back().advantages = {poison};
        ActorStats st = dp.update(bad, &comm, UpdateSchedule{1, 1});
        EXPECT_EQ(st.skipped_steps, 1) << poison;
        EXPECT_EQ(st.optimizer_steps, 0) << poison;
        EXPECT_EQ(dp.engine().global_step(), 0) << poison;
        EXPECT_EQ(max_abs_diff(dp.engine().parameters(), before), 0.0) << "weights moved after poison " << poison;
        // The next, clean update trains normally: the skip left no NaN in gradients or AdamW moments.
        ActorStats ok = dp.update(mine, &comm, UpdateSchedule{1, 1});
        EXPECT_EQ(ok.skipped_steps, 0);
        EXPECT_EQ(ok.optimizer_steps, 1);
        EXPECT_EQ(dp.engine().global_step(), 1);
        EXPECT_GT(max_abs_diff(dp.engine().parameters(), before), 0.0);
        for (const auto& p : dp.engine().parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
    }
    // Two mini-batches, only the second poisoned (on the last rank): one step applied, one skipped.
    ActorWorker two(make_engine(policy_handle(model::LlamaModel(tiny_config(), 11)), engine_cfg(2)), ActorConfig{});
    std::vector<TrainSeq> mine = share(tiny_batch(8), comm.rank(), comm.size());
    if (comm.rank() == comm.size() - 1) mine.back().advantages = {std::numeric_limits<float>::quiet_NaN()};
    ActorStats st = two.update(mine, &comm, UpdateSchedule{2, 1});
    EXPECT_EQ(st.optimizer_steps, 1);
    EXPECT_EQ(st.skipped_steps, 1);
    EXPECT_TRUE(all_finite_on_every_rank(two.engine().parameters()));
}

TEST(DataParallel, PoisonedCriticUpdateIsSkipped) {
    MpiCollectives comm(MPI_COMM_WORLD, 4096);
    CriticWorker dp(make_engine(value_handle(model::ValueModel(tiny_config(), 12)), engine_cfg(1)), CriticConfig{});
    auto mine = share(tiny_batch(5, 3), comm.rank(), comm.size());
    const std::vector<torch::Tensor> before = snapshot(dp.engine().parameters());
    if (comm.rank() == comm.size() - 1) mine.back().returns.back() = std::numeric_limits<float>::quiet_NaN();
    CriticStats st = dp.update(mine, &comm);
    EXPECT_EQ(st.skipped_steps, 1);
    EXPECT_EQ(st.optimizer_steps, 0);
    EXPECT_EQ(max_abs_diff(dp.engine().parameters(), before), 0.0);
}

TEST(Checkpoint, NonFiniteWeightsAreNotSaved) {
    auto engine = make_engine(policy_handle(model::LlamaModel(tiny_config(), 11)), engine_cfg(2));
    std::ostringstream good(std::ios::binary);
    engine->save(good);
    EXPECT_GT(good.str().size(), 0u);
    {
        torch::NoGradGuard ng;
        engine->parameters()[1].view(-1)[0] = std::numeric_limits<float>::infinity();
    }
    std::ostringstream out(std::ios::binary);
    try {
        engine->save(out);
        ADD_FAILURE() << "save() wrote non-finite weights";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("NaN or inf"), std::string::npos) << e.what();
    }
    EXPECT_EQ(out.str().size(), 0u) << "bytes were written before the refusal";
}

}  // namespace
}  // namespace tagflow::train
