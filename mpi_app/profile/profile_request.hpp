// SPDX-License-Identifier: Apache-2.0
// profile_request: asking a running job for an on-demand profile and reading what its ranks
// answered (on_demand.hpp has the file formats), shared by `tagflow profile` and the gateway's
// POST /v1/profile. File I/O only: no MPI, no LibTorch, no JSON types in this header.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "profile/on_demand.hpp"

namespace tagflow::profile {

/// Checks `dir` is the directory of a running job (its live status record: world size, not done),
/// parses `ranks` ("0,2,5-7" or "all") against its world size, and replaces DIR/profile.request
/// (atomically, never through a link) with a new request. Throws ConfigError with one line
/// naming the problem (bad ranks, steps out of [1, kProfileMaxSteps], a finished run, no status
/// record, a link or file where DIR/profiles should be, the request not writable).
ProfileRequest submit_profile_request(const std::string& dir, const std::string& ranks, int64_t steps,
                                      bool record_shapes, bool profile_memory);

/// What one asked rank has answered so far.
struct ProfileResult {
    int rank = 0;
    std::string status = "pending";  // pending (no record yet), done or failed
    std::string reason;              // failed: why; done: a note (e.g. the run ended early), may be ""
    std::string trace;               // done: the trace file's name inside DIR/profiles
    int64_t first_step = -1, last_step = -1, events = 0;
};

/// The result records of request `id` for `ranks` in DIR/profiles (pending where none is readable).
std::vector<ProfileResult> read_profile_results(const std::string& dir, const std::string& id,
                                                const std::vector<int>& ranks);

}  // namespace tagflow::profile
