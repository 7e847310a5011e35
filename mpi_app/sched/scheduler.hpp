// SPDX-License-Identifier: Apache-2.0
// scheduler: the interface every scheduling mode implements (sync: sync_scheduler.hpp;
// disaggregated and multiplex: async_scheduler.hpp), the run summary it returns, and the
// pieces every mode shares: the checkpoint manifest's run keys and the model/algorithm lines
// of the log. Does not pick a mode (cmd/train_command.cpp does) and knows no LibTorch.
#pragma once
#include <cstdint>
#include <string>

// The forward declarations every scheduler header needs (sync_scheduler.hpp and
// async_scheduler.hpp include this header and declare no others).
namespace tagflow::config {
struct Options;
}
namespace tagflow::cluster {
struct Roles;
}
namespace tagflow::ckpt {
struct Manifest;
struct Plan;
}  // namespace tagflow::ckpt
namespace tagflow::model {
struct HfConfig;
}
namespace tagflow::io {
class RunFile;
}
namespace tagflow::rollout {
class Task;
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

class Scheduler {
public:
    virtual ~Scheduler() = default;
    /// COLLECTIVE over MPI_COMM_WORLD: runs every step; returns the summary (valid on rank 0).
    virtual RunSummary run() = 0;
};

/// The checkpoint manifest keys every mode writes alike (share/doc/checkpoints.md): the run's
/// identity (train_command checks it on resume), `step` and `policy_version`, the sample-seed
/// rule, and the summary so far with the samples trained (`total_samples`).
void put_run_keys(ckpt::Manifest& m, const config::Options& opt, const std::string& task, int world_size, int64_t step,
                  int64_t policy_version, const RunSummary& sum, double total_samples);
/// Rank 0 prints the policy's size and the algorithm (with where the critic lives), every mode alike.
void print_model_and_algorithm(const config::Options& opt, const cluster::Roles& roles, const model::HfConfig& c,
                               int64_t n_params);
/// put_run_keys' summary back: rewards and evals so far into `sum`, the samples trained.
void get_run_summary(const ckpt::Manifest& m, RunSummary& sum, double& total_samples);

/// Exit status of a run stopped by --max-bad-steps (after its checkpoint).
inline constexpr int kExitBadSteps = 1;

/// Steps whose update was dropped for a NaN/inf loss or gradient norm (/steps skipped_updates),
/// every mode alike: the one warning line per such step, and the verdict that --max-bad-steps of
/// them in a row stop the run. Sync mode calls record() with the same numbers on every rank.
class BadSteps {
public:
    explicit BadSteps(int32_t max_in_a_row) : max_(max_in_a_row) {}
    /// Step `step` (1-based, as printed) dropped `skipped` updates; when it did, *warning gets the
    /// line to print. True: stop the run now (checkpoint, then stop_message(), exit kExitBadSteps).
    bool record(int32_t step, int64_t skipped, std::string* warning);
    /// The one error line of a stopped run.
    std::string stop_message() const;

private:
    int32_t max_;
    int32_t in_a_row_ = 0;
    int32_t last_step_ = 0;
};

}  // namespace tagflow::sched
