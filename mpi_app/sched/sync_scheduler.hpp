// SPDX-License-Identifier: Apache-2.0
// sync_scheduler: the `sync` mode (veRL-style baseline). Per step: every rollout rank
// generates its share of the prompt groups, all samples are exchanged, the train group
// computes GRPO advantages and a step with bucketed gradient all-reduce, the train root
// broadcasts the new weights in flat buckets to every rollout rank, and the step's rows go
// to the run file through the io communicator. The Scheduler interface is the seam where
// `disaggregated` and `multiplex` plug in.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace tagflow::config {
struct Options;
}
namespace tagflow::cluster {
struct Roles;
}
namespace tagflow::io {
class RunFile;
}
namespace tagflow::rollout {
class Task;
}
namespace tagflow::ckpt {
struct Plan;
struct Manifest;
}
namespace tagflow::model {
struct HfConfig;
}

namespace tagflow::sched {

/// What the run summary prints.
struct RunSummary {
    double first_reward = 0, last_reward = 0;
    double first_eval = 0, last_eval = 0, best_eval = 0;
    double best_constant = 0;
    double samples_per_s = 0;
    double elapsed = 0;
    long steps = 0;
    int exit_code = 0;  ///< ckpt::kExitRequeue (75) after a checkpoint forced by SIGTERM/SIGUSR1
};

/// The checkpoint manifest keys every mode writes alike (share/doc/checkpoints.md): the run's
/// identity (train_command checks it on resume), `step` and `policy_version`, the sample-seed
/// rule, and the summary so far with the samples trained (`total_samples`).
void put_run_keys(ckpt::Manifest& m, const config::Options& opt, const std::string& task, int world_size,
                  int64_t step, int64_t policy_version, const RunSummary& sum, double total_samples);
/// Rank 0 prints the policy's size and the algorithm (with where the critic lives), every mode alike.
void print_model_and_algorithm(const config::Options& opt, const cluster::Roles& roles, const model::HfConfig& c,
                               int64_t n_params);
/// put_run_keys' summary back: rewards and evals so far into `sum`, the samples trained.
void get_run_summary(const ckpt::Manifest& m, RunSummary& sum, double& total_samples);

class Scheduler {
 public:
    virtual ~Scheduler() = default;
    /// COLLECTIVE over MPI_COMM_WORLD: runs every step; returns the summary (valid on rank 0).
    virtual RunSummary run() = 0;
};

/// The sync scheduler. `t0_unix` is the run's clock origin (same on every rank). `ckpt`: where
/// and how often to checkpoint, and the checkpoint to resume from (nullptr: no checkpoints).
std::unique_ptr<Scheduler> make_sync_scheduler(const config::Options& opt, cluster::Roles& roles,
                                               io::RunFile& run, double t0_unix,
                                               std::unique_ptr<rollout::Task> task,
                                               const ckpt::Plan* ckpt = nullptr);

}  // namespace tagflow::sched
