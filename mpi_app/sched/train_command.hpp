// SPDX-License-Identifier: Apache-2.0
// train_command: `tagflow train` — options, tags and roles, run file, then the scheduler.
#pragma once

namespace tagflow::sched {

/// Runs `tagflow train` (argv[0] = "train"). Returns the process exit code: 0, or 2 for bad
/// usage (reported on stderr, same on every rank, before anything is written). Errors after
/// the run started throw; main() aborts the job on them.
int train_command(int argc, char** argv);

}  // namespace tagflow::sched
