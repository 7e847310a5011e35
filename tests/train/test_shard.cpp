// SPDX-License-Identifier: Apache-2.0
// Sharded AdamW state over real MPI ranks (ZeRO stage 1 and 2, TrainEngineConfig::shard, issue 22
// point 2), run at np 1 to 4:
// - a sharded group trains to the same weights as the replicated one (--shard off) and as one
//   engine on the whole batch, within 1e-6, with buckets that cut the shards unevenly;
// - every rank holds the same weights after each step, and a rank holds its share of the
//   moments only (ZeRO 2: no whole gradients between steps);
// - a poisoned sample on one rank makes every rank skip the update;
// - a checkpoint written by the whole group is resumed by groups of 1 to np ranks, by an
//   unsharded engine, and an unsharded checkpoint by a sharded group: the run continues as if
//   nothing had stopped; missing or foreign shard files are refused with a message.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <unistd.h>

#include "common/error.hpp"
#include "model/llama.hpp"
#include "tiny.hpp"
#include "train/collectives_mpi.hpp"
#include "train/flat_adamw.hpp"
#include "train/workers.hpp"

namespace tagflow::train {
namespace {
using namespace testing;
namespace fs = std::filesystem;

TrainEngineConfig engine_cfg(Shard shard) {
    TrainEngineConfig e;
    e.micro_batch = 2;
    e.optim.lr = 2e-4;  // Adam divides by sqrt(v): see test_engine_dp.cpp
    e.optim.weight_decay = 0.01;
    e.optim.grad_clip = 0.5;  // low enough to clip: the norm's sum over the shards is exercised
    e.shard = shard;
    return e;
}

std::vector<TrainSeq> share(const std::vector<TrainSeq>& all, int rank, int size) {
    std::vector<TrainSeq> out;
    for (size_t i = static_cast<size_t>(rank); i < all.size(); i += static_cast<size_t>(size)) out.push_back(all[i]);
    return out;
}

std::unique_ptr<ActorWorker> actor(Shard shard, Collectives* group) {
    auto w = std::make_unique<ActorWorker>(
        make_engine(policy_handle(model::LlamaModel(tiny_config(), 11)), engine_cfg(shard)), ActorConfig{});
    w->engine().set_group(group);
    return w;
}

// Three updates of two mini-batches, lr changed in between (the shard optimiser must follow).
void train3(ActorWorker& w, const std::vector<TrainSeq>& mine, Collectives* comm, int first = 0) {
    for (int s = first; s < first + 3; ++s) {
        w.engine().set_lr(2e-4 * (1.0 + 0.25 * s));
        w.update(mine, comm, UpdateSchedule{1, 2});
    }
}

// The largest difference between this rank's weights and rank 0's, over every rank of `comm`.
double spread(const std::vector<torch::Tensor>& ps, MPI_Comm comm) {
    double worst = 0;
    for (const auto& p : ps) {
        torch::Tensor r0 = p.detach().clone();
        MPI_Bcast(r0.data_ptr<float>(), static_cast<int>(r0.numel()), MPI_FLOAT, 0, comm);
        worst = std::max(worst, (r0 - p).abs().max().item<double>());
    }
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
    return worst;
}

const char* name(Shard s) { return s == Shard::kOptimizer ? "optimizer" : "gradients"; }

TEST(Shard, EqualsReplicatedAndSingle) {
    const auto batch = tiny_batch(9);
    // 4096 bytes: 1,024 floats; 1,000 bytes: 250, so bucket edges fall inside the shards.
    for (size_t bucket : {size_t{4096}, size_t{1000}}) {
        MpiCollectives comm(MPI_COMM_WORLD, bucket);
        const auto mine = share(batch, comm.rank(), comm.size());
        auto single = actor(Shard::kOff, nullptr);
        train3(*single, batch, nullptr);
        auto off = actor(Shard::kOff, &comm);
        train3(*off, mine, &comm);
        for (Shard s : {Shard::kOptimizer, Shard::kGradients}) {
            auto sh = actor(s, &comm);
            ASSERT_TRUE(sh->engine().sharded());
            const auto [lo, hi] = sh->engine().shard_range();
            train3(*sh, mine, &comm);
            const double d_off = max_abs_diff(sh->engine().parameters(), off->engine().parameters());
            const double d_single = max_abs_diff(sh->engine().parameters(), single->engine().parameters());
            const double d_ranks = spread(sh->engine().parameters(), MPI_COMM_WORLD);
            if (comm.rank() == 0)
                std::printf("np%d shard %s bucket %zu: |w - w_off| %.3g, |w - w_single| %.3g, across ranks %.3g\n",
                            comm.size(), name(s), bucket, d_off, d_single, d_ranks);
            EXPECT_LT(d_off, 1e-6) << name(s);
            EXPECT_LT(d_single, 1e-6) << name(s);
            EXPECT_EQ(d_ranks, 0.0) << name(s) << ": ranks hold different weights after the all-gather";
            EXPECT_EQ(sh->engine().global_step(), 6);
            // This rank's share only: [lo, hi) of the flat vector, the shares tiling it.
            int64_t n = 0;
            for (const auto& p : sh->engine().parameters()) n += p.numel();
            const auto want = shard_bounds(n, comm.size(), comm.rank());
            EXPECT_EQ(lo, want.first);
            EXPECT_EQ(hi, want.second);
            if (s == Shard::kGradients) {
                for (const auto& g : sh->engine().gradients())
                    EXPECT_FALSE(g.defined()) << "ZeRO 2 kept a whole gradient between steps";
            }
        }
    }
}

TEST(Shard, PoisonedUpdateIsSkippedOnEveryRank) {
    MpiCollectives comm(MPI_COMM_WORLD, 1000);
    for (Shard s : {Shard::kOptimizer, Shard::kGradients}) {
        auto sh = actor(s, &comm);
        auto mine = share(tiny_batch(6), comm.rank(), comm.size());
        const std::vector<torch::Tensor> before = snapshot(sh->engine().parameters());
        auto bad = mine;
        if (comm.rank() == comm.size() - 1) bad.back().advantages = {std::numeric_limits<float>::quiet_NaN()};
        ActorStats st = sh->update(bad, &comm, UpdateSchedule{1, 1});
        EXPECT_EQ(st.skipped_steps, 1) << name(s);
        EXPECT_EQ(sh->engine().global_step(), 0) << name(s);
        EXPECT_EQ(max_abs_diff(sh->engine().parameters(), before), 0.0) << name(s);
        ActorStats ok = sh->update(mine, &comm, UpdateSchedule{1, 1});
        EXPECT_EQ(ok.optimizer_steps, 1) << name(s);
        EXPECT_GT(max_abs_diff(sh->engine().parameters(), before), 0.0) << name(s);
    }
}

// A fresh directory seen by every rank (rank 0 makes it).
std::string shared_dir(const std::string& tag) {
    char buf[256] = {0};
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        const std::string d = (fs::temp_directory_path() / ("tagflow_shard_" + tag + "_np" + std::to_string(size) +
                                                            "_" + std::to_string(::getpid())))
                                  .string();
        fs::remove_all(d);
        fs::create_directories(d);
        std::snprintf(buf, sizeof buf, "%s", d.c_str());
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    return buf;
}

void save_all(const TrainEngine& e, const std::string& dir, int rank) {
    if (rank == 0) {
        std::ofstream out(dir + "/actor_state.pt", std::ios::binary);
        e.save(out);
    }
    if (e.sharded()) {
        const auto [lo, hi] = e.shard_range();
        std::ofstream out(dir + "/" + optim_shard_name("actor_optim", lo, hi), std::ios::binary);
        e.save_optim_shard(out);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

void load_all(TrainEngine& e, const std::string& dir) {
    std::ifstream in(dir + "/actor_state.pt", std::ios::binary);
    e.load(in);
    const auto shards = list_optim_shards(dir, "actor_optim");
    if (!shards.empty()) e.load_optim_shards(shards);
}

TEST(Shard, CheckpointResumesOnAnyGroupSize) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const auto batch = tiny_batch(9);
    // The reference: one unsharded engine on the whole batch, 3 + 3 updates without a stop.
    auto ref = actor(Shard::kOff, nullptr);
    train3(*ref, batch, nullptr, 0);
    const std::string off_dir = shared_dir("off");
    save_all(ref->engine(), off_dir, rank);  // an unsharded checkpoint at the same point
    train3(*ref, batch, nullptr, 3);

    for (Shard s : {Shard::kOptimizer, Shard::kGradients}) {
        MpiCollectives world(MPI_COMM_WORLD, 1000);
        auto sh = actor(s, &world);
        train3(*sh, share(batch, rank, size), &world, 0);
        const std::string dir = shared_dir(name(s));
        save_all(sh->engine(), dir, rank);
        EXPECT_EQ(static_cast<int>(list_optim_shards(dir, "actor_optim").size()), size);

        // Resumed by the first k ranks, k = 1 .. size, in both shard modes, and from the unsharded checkpoint.
        for (int k = 1; k <= size; ++k)
            for (Shard resume : {Shard::kOptimizer, Shard::kGradients})
                for (const std::string& from : {dir, off_dir}) {
                    MPI_Comm sub = MPI_COMM_NULL;
                    MPI_Comm_split(MPI_COMM_WORLD, rank < k ? 0 : MPI_UNDEFINED, rank, &sub);
                    if (sub == MPI_COMM_NULL) continue;
                    {
                        MpiCollectives group(sub, 1000);
                        auto r = actor(resume, &group);
                        load_all(r->engine(), from);
                        EXPECT_EQ(r->engine().global_step(), 6);
                        train3(*r, share(batch, group.rank(), group.size()), &group, 3);
                        const double d = max_abs_diff(r->engine().parameters(), ref->engine().parameters());
                        if (group.rank() == 0)
                            std::printf("np%d: %s checkpoint (%s) resumed by %d ranks (%s): |w - w_ref| %.3g\n", size,
                                        from == dir ? name(s) : "off", from == dir ? "sharded" : "whole", k,
                                        name(resume), d);
                        EXPECT_LT(d, 1e-6) << name(s) << " -> " << k << " ranks " << name(resume) << " from " << from;
                    }
                    MPI_Comm_free(&sub);
                }
        // An unsharded engine on one rank reads every shard.
        auto whole = actor(Shard::kOff, nullptr);
        load_all(whole->engine(), dir);
        train3(*whole, batch, nullptr, 3);
        EXPECT_LT(max_abs_diff(whole->engine().parameters(), ref->engine().parameters()), 1e-6) << name(s);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) fs::remove_all(dir);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) fs::remove_all(off_dir);
}

TEST(Shard, MissingOrForeignShardsAreRefused) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MpiCollectives world(MPI_COMM_WORLD, 1000);
    auto sh = actor(Shard::kGradients, &world);
    train3(*sh, share(tiny_batch(9), rank, size), &world, 0);
    const std::string dir = shared_dir("bad");
    save_all(sh->engine(), dir, rank);
    const auto shards = list_optim_shards(dir, "actor_optim");
    ASSERT_EQ(static_cast<int>(shards.size()), size);
    auto expect_error = [&](const std::vector<std::string>& paths, const std::string& says) {
        auto e = actor(Shard::kOff, nullptr);  // reads every shard, so every file matters
        std::ifstream in(dir + "/actor_state.pt", std::ios::binary);
        e->engine().load(in);
        try {
            e->engine().load_optim_shards(paths);
            ADD_FAILURE() << "accepted shards that should say: " << says;
        } catch (const Error& err) {
            EXPECT_NE(std::string(err.what()).find(says), std::string::npos) << err.what();
        }
        // Not loaded: the engine refuses to step instead of starting from zero moments.
        EXPECT_THROW(e->engine().step(), Error);
    };
    std::vector<std::string> missing(shards.begin() + 1, shards.end());
    expect_error(missing, "optimiser shards cover");
    std::vector<std::string> twice = shards;
    twice.push_back(shards.front());
    expect_error(twice, "optimiser shards cover");
    if (rank == 0) {  // a renamed file: its name and its range disagree
        const auto [lo, hi] = sh->engine().shard_range();
        (void)hi;
        const std::string moved = dir + "/x/" + optim_shard_name("actor_optim", lo, lo + 1);
        fs::create_directories(dir + "/x");
        fs::copy_file(shards.front(), moved);
        std::vector<std::string> renamed = {moved};
        expect_error(renamed, "holds another range than its name says");
        std::ofstream(dir + "/x/" + optim_shard_name("actor_optim", 0, 5)) << "not a torch archive";
        expect_error({dir + "/x/" + optim_shard_name("actor_optim", 0, 5)}, "unreadable");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace tagflow::train
