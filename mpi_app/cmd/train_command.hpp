// SPDX-License-Identifier: Apache-2.0
// train_command: `tagflow train` — options, tags and roles, run file, then the scheduler.
#pragma once
#include <string>

#include "model/hf_config.hpp"

namespace tagflow::cmd {

/// mkdir -p for a run directory: every directory it creates is 0750 whatever the umask (a
/// stricter umask still applies); existing ones keep their mode. Throws Error naming the path.
/// Used by `tagflow train` and `tagflow sft` (rank 0 only).
void make_run_dirs(const std::string& path);

/// Torch threads for this rank (COLLECTIVE over MPI_COMM_WORLD): `requested` when > 0, else
/// SLURM_CPUS_PER_TASK if set, else the cores this rank may run on divided among the ranks of its
/// node. Used by `tagflow train` and `tagflow sft`.
int choose_threads(int requested);

/// model::check_pretrained(dir, option) on every rank of MPI_COMM_WORLD (collective): returns
/// the config, or throws the same ConfigError on every rank (the lowest failing rank's
/// message). Used by `tagflow train --model` and `tagflow sft --init` before anything is written.
model::HfConfig check_pretrained_on_every_rank(const std::string& dir, const std::string& option);

/// Runs `tagflow train` (argv[0] = "train"). Returns the process exit code: 0, or 2 for bad
/// usage (reported on stderr, same on every rank, before anything is written). Errors after
/// the run started throw; main() aborts the job on them.
int train_command(int argc, char** argv);

}  // namespace tagflow::cmd
