// SPDX-License-Identifier: Apache-2.0
// train_command: `tagflow train` — options, tags and roles, run file, then the scheduler.
#pragma once
#include <string>

namespace tagflow::sched {

/// mkdir -p for a run directory: every directory it creates is 0750 whatever the umask (a
/// stricter umask still applies); existing ones keep their mode. Throws Error naming the path.
/// Used by `tagflow train` and `tagflow sft` (rank 0 only).
void make_run_dirs(const std::string& path);

/// Runs `tagflow train` (argv[0] = "train"). Returns the process exit code: 0, or 2 for bad
/// usage (reported on stderr, same on every rank, before anything is written). Errors after
/// the run started throw; main() aborts the job on them.
int train_command(int argc, char** argv);

}  // namespace tagflow::sched
