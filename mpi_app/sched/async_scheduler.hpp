// SPDX-License-Identifier: Apache-2.0
// async_scheduler: the `disaggregated` and `multiplex` modes (one class, one flag).
//   disaggregated — fixed split: the train group only trains; every other rank tagged rollout
//                   generates continuously and never waits for training.
//   multiplex     — ranks tagged only rollout never stop generating; the train group's ranks
//                   that also carry rollout generate until the coordinator has enough fresh
//                   samples, are then preempted (their in-flight generations pause with their KV
//                   caches; the engine is simply not stepped), train, and resume.
// The coordinator (world rank of train-group rank 0) owns the sample pool, announces every role
// change point-to-point (epoch = training step), sends new weights to the rollout-only ranks
// with non-blocking point-to-point bucket messages (they swap them in at a token boundary),
// and is the only rank that writes the run file. Shares RlTrainer, rollout::InferenceEngine, the flat
// weight buffer and its buckets, the tasks and the run-file schema with `sync`.
// Does not choose tags or create the run file (cmd/train_command.cpp does).
#pragma once
#include <memory>
#include <vector>

#include "sched/scheduler.hpp"  // Scheduler, RunSummary and the forward declarations

namespace tagflow::sched {

/// Throws ConfigError (same on every rank, no communication) when the ranks' tags do not allow
/// opt.mode: disaggregated needs a rank that rolls out and is not in the train group; multiplex
/// needs enough ranks outside the train group to honour --min-rollout-frac; neither mode
/// supports ranks tagged critic (the critic lives on the train group). No-op for sync.
void check_async_roles(const config::Options& opt, const cluster::Roles& roles);

/// The train group of an async mode (world ranks, ascending; the coordinator first):
/// disaggregated: every rank tagged train; multiplex: the same minus the highest multi-tag
/// ranks that must stay in rollout for --min-rollout-frac. Fixed for the whole run.
std::vector<int> async_train_group(const config::Options& opt, const cluster::Roles& roles);

/// Resuming an async checkpoint (manifest `m`): throws ConfigError naming the checkpoint when
/// its generating ranks or train group (manifest keys sched.gens, sched.members) differ from
/// what opt and roles give now. No communication.
void check_async_resume(const config::Options& opt, const cluster::Roles& roles, const ckpt::Manifest& m);

/// The async modes' coordinator and only run-file writer: the train root.
int async_coordinator(const cluster::Roles& roles);

/// The disaggregated / multiplex scheduler. `run` is the run file, open on the coordinator
/// only (created over a communicator of just that rank); nullptr on every other rank.
/// run() is COLLECTIVE over MPI_COMM_WORLD only at its start (version-0 weights) and end (one
/// final barrier and the summary broadcast); the summary is valid on every rank.
/// `ckpt` (nullptr: none): the coordinator alone writes checkpoints (policy, trainer states and
/// the scheduler state: pool of finished-but-untrained samples, dataset cursors, counters) every
/// `every` steps, at step 0, at the end and after a requeue signal any rank received (then every
/// rank's summary has exit_code ckpt::kExitRequeue); with `resume` every rank restores from it.
std::unique_ptr<Scheduler> make_async_scheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile* run,
                                                double t0_unix, std::unique_ptr<rollout::Task> task,
                                                const ckpt::Plan* ckpt = nullptr);

}  // namespace tagflow::sched
