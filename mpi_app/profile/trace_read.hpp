// SPDX-License-Identifier: Apache-2.0
// trace_read: reads what `tagflow trace` needs from a run file (/timeline, /ranks, /steps, /syncs
// and the root attributes), serially (sec2 driver), checking every column's length and the
// format version. Writes nothing; trace_command.cpp turns the result into Chrome trace JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tagflow::profile::trace {

/// The first line of an error text (HDF5's messages run over several).
std::string first_line(const char* what);

struct RankInfo {
    std::string host = "?", tags = "?", tag_source = "?";
    int32_t gpus = 0;
    double clock_offset = 0;
};

/// One metric of /steps: column name and values (as double; NaN where not finite).
using Metric = std::pair<std::string, std::vector<double>>;

struct RunData {
    std::string tagflow_version, slurm_job_id;
    int64_t world_size = 0;
    double t0_unix = 0;
    // /timeline
    std::vector<int32_t> rank, step;
    std::vector<uint8_t> kind;
    std::vector<double> t_start, t_end;
    std::vector<std::string> kind_names;
    // /ranks (plus every rank that has spans but no /ranks row)
    std::map<int32_t, RankInfo> ranks;
    // /steps
    std::vector<int32_t> step_no;
    std::vector<double> step_start, step_end;
    std::vector<Metric> metrics;
    std::vector<std::string> step_group;    // train_group ("" when not recorded)
    std::vector<std::string> step_regroup;  // regroup's name (none, kept, moved, forced)
    // /syncs
    std::vector<int32_t> sync_version;
    std::vector<int64_t> sync_bytes;
    std::vector<double> sync_start, sync_end;
    std::vector<std::string> sync_mode;
};

// /steps columns written into each step's args; the first kCounterMetrics also become counters.
extern const char* const kStepMetrics[];
extern const std::size_t kStepMetricCount;
constexpr std::size_t kCounterMetrics = 10;

/// The run file at `path`; throws tagflow::Error naming the file and the problem (missing, not
/// HDF5, not a tagflow run file, another format version, a corrupt table).
RunData read_run(const std::string& path);

}  // namespace tagflow::profile::trace
