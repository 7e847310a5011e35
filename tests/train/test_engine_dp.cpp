// SPDX-License-Identifier: Apache-2.0
// Data parallelism over real MPI ranks: each rank trains on its share of a batch through
// MpiCollectives (counts and gradients summed), and the result must equal one engine
// stepping on the whole batch (computed on every rank with no communicator) within 1e-6 —
// for the actor in every loss-aggregation mode and for the critic. Run at np 1 and 2.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

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
        if (comm.rank() == 0) std::printf("np%d %s: max |w_dp - w_single| = %.3g\n", comm.size(), to_string(mode).c_str(), d);
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

}  // namespace
}  // namespace tagflow::train
