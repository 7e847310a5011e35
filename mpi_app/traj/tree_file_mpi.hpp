// SPDX-License-Identifier: Apache-2.0
// tree_file_mpi: header-only bridge from traj::TrajectoryManager to the run file: writes the
// segments not yet written as /tree rows (collective) and fills a /samples row from a
// trajectory (tokens, logprobs, versions, loss_mask, version_min/max, tree_node).
// Header-only so that tagflow_traj itself needs neither MPI nor HDF5: a target including this
// links tagflow_io too. Does not decide when to write (the scheduler does, e.g. per step).
#pragma once
#include <utility>
#include <vector>

#include "io/run_file.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::traj {

/// COLLECTIVE over the run file's I/O communicator (every rank calls it, each with its own
/// manager, possibly with nothing new): appends segments [m.exported_segments(), m.segments())
/// to /tree and records their file rows in `m`. Returns the number of rows this rank wrote.
/// Write a trajectory's segments (this) before the /samples row that names them.
inline int64_t write_tree(io::RunFile& f, TrajectoryManager& m) {
    const int64_t first = m.exported_segments();
    const SegmentExport e = m.export_segments(first);
    std::vector<io::TreeNodeRecord> rows(e.size());
    for (size_t i = 0; i < e.size(); ++i) {
        io::TreeNodeRecord& r = rows[i];
        const int64_t p = e.parent[i];
        if (p >= first) r.parent_in_batch = p - first;
        else if (p >= 0) r.parent = m.segment_row(p);
        r.depth = e.depth[i];
        r.rank = e.rank[i];
        r.t_start = e.t_start[i];
        r.t_end = e.t_end[i];
        const auto a = static_cast<std::ptrdiff_t>(e.token_start[i] - e.token_base);
        const auto b = static_cast<std::ptrdiff_t>(e.token_end[i] - e.token_base);
        r.tokens.assign(e.tokens.begin() + a, e.tokens.begin() + b);
        r.logprobs.assign(e.logprobs.begin() + a, e.logprobs.begin() + b);
        r.versions.assign(e.versions.begin() + a, e.versions.begin() + b);
        r.loss_mask.assign(e.loss_mask.begin() + a, e.loss_mask.begin() + b);
    }
    const int64_t first_row = f.append_tree(rows);
    m.mark_exported(first_row);
    return static_cast<int64_t>(rows.size());
}

/// Fills the per-token columns of a /samples row from trajectory `traj`, plus version_min/max
/// (-1/-1 when it has no generated token) and tree_node (the /tree row holding its last token,
/// -1 if write_tree has not covered it yet). The other fields are the caller's.
inline void fill_sample(const TrajectoryManager& m, NodeId traj, io::SampleRecord& s) {
    Trajectory t = m.rebuild(traj);
    s.tokens = std::move(t.tokens);
    s.logprobs = std::move(t.logprobs);
    s.versions = std::move(t.versions);
    s.loss_mask = std::move(t.loss_mask);
    s.version_min = t.version_min;
    s.version_max = t.version_max;
    s.tree_node = m.segment_row(m.segment_of(traj));
}

}  // namespace tagflow::traj
