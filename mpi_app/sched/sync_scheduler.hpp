// SPDX-License-Identifier: Apache-2.0
// sync_scheduler: the `sync` mode (veRL-style baseline). Per step: every rollout rank
// generates its share of the prompt groups, all samples are exchanged, the train group
// computes GRPO advantages and a step with bucketed gradient all-reduce, the train root
// broadcasts the new weights in flat buckets to every rollout rank, and the step's rows go
// to the run file through the io communicator. Implements sched/scheduler.hpp's Scheduler, as
// the async modes do (async_scheduler.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "sched/scheduler.hpp"  // Scheduler and the forward declarations

namespace tagflow::sched {

/// The sync scheduler. `t0_unix` is the run's clock origin (same on every rank). `ckpt`: where
/// and how often to checkpoint, and the checkpoint to resume from (nullptr: no checkpoints).
std::unique_ptr<Scheduler> make_sync_scheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile& run,
                                               double t0_unix, std::unique_ptr<rollout::Task> task,
                                               const ckpt::Plan* ckpt = nullptr);

}  // namespace tagflow::sched
