// SPDX-License-Identifier: Apache-2.0
// data_command: `tagflow data check FILE [--tokenizer PATH] [--max-prompt-tokens N] ...` indexes a
// data file and prints one JSON object (rows, skipped, data sources and their default scorers,
// prompt token statistics, index memory and speed); `tagflow data score --reward builtin:NAME`
// scores JSON Lines {data_source?, solution, ground_truth, extra_info?} from stdin, one score a
// line. Bad files or lines are one ConfigError line naming FILE:LINE / the stdin line (exit 2).
// Does NOT: train, or run Python/HTTP rewards (mpi_app/reward).
#pragma once

namespace tagflow::data {

/// argv[0] is "data". `check`: every process indexes (so a bad file is the same ConfigError on
/// every rank), only `root` prints; `score`: only `root` reads stdin. Returns the exit code (0).
int data_command(int argc, char** argv, bool root = true);

}  // namespace tagflow::data
