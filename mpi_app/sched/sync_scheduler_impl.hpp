// SPDX-License-Identifier: Apache-2.0
// sync_scheduler_impl: the sync scheduler (`--mode sync`) as a class, shared by the three files
// that define it: sync_scheduler.cpp (construction, the step loop, one step, the rows it writes),
// sync_state.cpp (weight sync, checkpoints, resume, clock re-measurement) and sync_rollout.cpp
// (generation, rewards, evaluation and validation). Internal: include it from those files only.
#pragma once

#include "sched/sync_scheduler.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <thread>
#include <unordered_map>

#include "ckpt/checkpoint_mpi.hpp"
#include "ckpt/policy_dir.hpp"
#include "ckpt/signals.hpp"
#include "cluster/roles.hpp"
#include "cluster/tags.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config/options.hpp"
#include "health/status.hpp"
#include "io/run_file.hpp"
#include "model/llama.hpp"
#include "profile/clock_sync.hpp"
#include "profile/timeline.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"
#include "rollout/task.hpp"
#include "sched/agent_rollout.hpp"
#include "step/data_task.hpp"
#include "step/exchange.hpp"
#include "step/rl_trainer.hpp"
#include "step/sample_row.hpp"
#include "step/validation.hpp"
#include "train/delta_sync_mpi.hpp"
#include "traj/tree_file_mpi.hpp"
#include "traj/trajectory_manager.hpp"
#include "tagflow/config.hpp"

namespace tagflow::sched::sync_impl {

using io::SpanKind;

// Values the train root shares with every rank after a step (one MPI_Allreduce SUM where only
// the train root contributes them, plus every rank's idle seconds).
enum StatSlot {
    kLoss,
    kKl,
    kEntropy,
    kClip,
    kLpDiff,
    kTokens,
    kIsMean,  // off-policy correction statistics (TrainReport::is_weight_mean ...), the root's
    kIsMax,
    kRejected,
    kRejectedTokens,
    kTrainReal,   // TrainReport::real_tokens (the train root's: the whole group's)
    kTrainSlots,  // TrainReport::token_slots
    kEval,
    kSyncBytes,
    kSyncT0,
    kSyncT1,
    kIdle,
    kSigTerm,
    kSigUsr1,
    kSigInt,
    kSigHup,   // ranks that received each requeue signal (ckpt/signals.hpp): checkpoint, exit 75
    kSkipped,  // optimiser updates dropped for a NaN/inf loss or gradient (TrainReport::skipped_updates)
    kNumStats
};

class SyncScheduler final : public Scheduler {
public:
    SyncScheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile& run, double t0_unix,
                  std::unique_ptr<rollout::Task> task, const ckpt::Plan* plan);

    RunSummary run() override;

private:
    struct StepOut {
        io::StepRecord row;
        double eval = -1;
        std::string val;           // --val-data: describe() of this step's validation ("" when none)
        std::string val_error;     // --val-data: its reward failed under --reward-error fail (every rank)
        int signal = 0;            // SIGUSR1, SIGTERM, SIGINT or SIGHUP when any rank received one (same on every rank)
        std::string reward_error;  // --data, --reward-error fail: a failed reward stopped the step (every rank)
    };

    // A fresh run: version-0 weights to every rollout rank, the step-0 evaluation. Returns 0.
    int32_t start(RunSummary& sum);

    // ---- checkpoints (mpi_app/ckpt, share/doc/checkpoints.md) ----

    // Constructor, when resuming: every rank loads the policy weights, the trainer ranks their
    // engine states (weights, AdamW moments, step); then the flat weight buffer is rebuilt
    // (LibTorch's archive load gives the actor's parameters new storage).
    void restore_weights();

    // run(), when resuming: the summary so far from the manifest, a full (unrecorded) weight
    // sync so every rank's WeightSync state matches its weights. Returns the first step to run.
    int32_t resume_from(RunSummary& sum, double& total_samples);

    // COLLECTIVE over MPI_COMM_WORLD (and the run file's communicator): new /ranks rows with the
    // clock offsets measured now (profile/clock_sync.hpp), flushed before the checkpoint records sizes.
    void remeasure_clocks();

    // COLLECTIVE over MPI_COMM_WORLD, after a flush of the run file: `done` steps trained. The
    // train root writes the policy (Hugging Face dir) and the trainer states, the first critic
    // rank the critic; rank 0 writes the manifest and swaps the directory in atomically.
    void write_checkpoint(int32_t done, const RunSummary& sum, double total_samples);

    // COLLECTIVE (sync communicator): train root -> every rollout rank, flat buckets (only the
    // changed weights with --sync-delta). Version v = the weights after v training steps.
    // Waiting for the train root to finish training is idle time (added to *idle), not sync:
    // members first meet in a non-blocking barrier, tested with short sleeps, in an idle span.
    train::WeightSyncStats sync_weights(int32_t version, double* idle = nullptr);

    io::SyncRecord sync_record(int32_t version, const train::WeightSyncStats& st) const;

    // The parameters themselves (WeightSync bumps their version counters when it writes them).
    std::vector<at::Tensor> params() { return policy_->parameters(); }

    // Held-out greedy evaluation is generation, so it runs on a rollout rank (the first one,
    // which holds the newest weights right after the sync); -1 on every other rank.
    bool is_eval_rank() const { return roles_.world_rank == roles_.rollout_ranks.front(); }
    double evaluate_local(int32_t step);

    // --val-data, COLLECTIVE over MPI_COMM_WORLD: every rollout rank answers its rows with the
    // newest weights (step/validation.hpp), the sums are added on every rank; the eval rank adds
    // the /eval rows of `step` to *evals. A reward that fails under --reward-error fail: nullopt on
    // every rank and reward_error_ holds the lowest rank's cause.
    std::optional<ValResult> validate_data(int32_t step, std::vector<io::EvalRecord>* evals);

    std::vector<RolloutSample> generate(int32_t s);

    // --data: a ticket's prompt group is epoch x rows + row (unique: a ticket trains once).
    int64_t group_of(const data::Ticket& t) const { return data_group(t, data_->dataset().size(), 0); }
    uint64_t row_of(int64_t group) const { return data_row(group, data_->dataset().size()); }

    // --data: waits for this rank's rewards (submitted as the samples finished). A failed one is
    // scored 0 (--reward-error zero, counted) or kept in reward_error_ (fail).
    void collect_rewards(std::vector<RolloutSample>& mine);

    // COLLECTIVE: the lowest rank's reward_error_, on every rank ("" when none failed).
    std::string agree_reward_error();

    StepOut step(int32_t s);

    // COLLECTIVE (io communicator): one step's rows of every table, then a flush, so a crash
    // leaves the file readable up to here.
    void write_rows(const std::vector<io::SampleRecord>& samples, const std::vector<io::ConsumedRecord>& consumed,
                    const std::vector<io::StepRecord>& steps, const std::vector<io::EvalRecord>& evals,
                    const std::vector<io::SyncRecord>& syncs);

    const config::Options& opt_;
    cluster::Roles& roles_;
    io::RunFile& run_;
    profile::Clock clock_;
    profile::Timeline timeline_;
    std::unique_ptr<rollout::Task> task_;
    model::LlamaModel policy_{nullptr};
    std::unique_ptr<RlTrainer> trainer_;
    std::unique_ptr<rollout::InferenceEngine> engine_;  // rollout ranks only
    std::unique_ptr<train::WeightSync> wsync_;
    traj::TrajectoryManager traj_;                         // this rank's requests of the current step
    std::unordered_map<int64_t, traj::NodeId> traj_leaf_;  // sample id -> its trajectory
    train::WeightSyncStats last_sync_;
    int32_t max_new_ = 0;
    double last_sync_t0_ = 0, last_sync_t1_ = 0;
    DataTask* data_ = nullptr;                   // --data: task_ as the data set, else null
    std::optional<data::EpochSampler> sampler_;  // --data: which rows, replicated on every rank
    std::vector<data::Ticket> tickets_;          // --data: this step's (prompt group j of the step: tickets_[j])
    std::vector<data::Row> val_rows_;            // --val-data: this rollout rank's share of the rows
    std::string reward_error_;                   // --data: first failed reward under --reward-error fail
    uint64_t rewards_failed_ = 0;                // --data: rewards scored 0 under --reward-error zero
    ckpt::Plan ckpt_;                            // where and how often to checkpoint; what to resume from
    bool have_ckpt_ = false;                     // false: no checkpoints (a scheduler built without a plan)
    BadSteps bad_steps_{opt_.max_bad_steps};     // --max-bad-steps: NaN/inf updates in a row stop the run
};

}  // namespace tagflow::sched::sync_impl
