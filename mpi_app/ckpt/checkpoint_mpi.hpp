// SPDX-License-Identifier: Apache-2.0
// checkpoint_mpi: the collective parts of writing and reading a checkpoint: gathering the files
// each rank wrote to the rank that writes the manifest, the run-file TableSizes as manifest
// keys, and a verdict found on one rank made the same ConfigError on every rank.
// Does not decide what is saved (the schedulers and step/rl_trainer do).
#pragma once
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "io/run_file.hpp"

namespace tagflow::ckpt {

/// COLLECTIVE over `comm`: every rank's entries, concatenated in rank order, on `root` (empty
/// elsewhere).
std::vector<FileEntry> gather_files(MPI_Comm comm, int root, const std::vector<FileEntry>& mine);

/// TableSizes as manifest keys `rows.<table>`.
void put_sizes(Manifest& m, const io::TableSizes& s);
io::TableSizes get_sizes(const Manifest& m);

/// COLLECTIVE over `comm`: `s` as given on `root`, on every rank.
std::string bcast_string(MPI_Comm comm, int root, const std::string& s);

/// COLLECTIVE over `comm`: runs `check` on `root` only; a ConfigError it throws becomes the same
/// ConfigError on every rank (its message broadcast), any other exception too (as ConfigError).
void check_on_root(MPI_Comm comm, int root, const std::function<void()>& check);

/// COLLECTIVE over `comm`: the manifest as read on `root` (read_manifest, verify_files and the
/// extra `check`), on every rank; a problem is the same ConfigError everywhere.
Manifest read_verified(MPI_Comm comm, int root, const std::string& dir,
                       const std::function<void(const Manifest&)>& check);

}  // namespace tagflow::ckpt
