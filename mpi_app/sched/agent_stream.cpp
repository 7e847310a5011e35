// SPDX-License-Identifier: Apache-2.0
// agent_stream: replica trajectory managers of streamed agent sessions (see agent_stream.hpp).
#include "sched/agent_stream.hpp"

#include <string>

#include "common/error.hpp"
#include "io/run_file.hpp"
#include "traj/tree_file_mpi.hpp"

namespace tagflow::sched {

bool AgentTreeRecorder::record(const RolloutSample& r) {
    if (r.loss_mask.empty()) return false;
    const size_t n = r.response.size();
    if (r.loss_mask.size() != n || r.logprobs.size() != n || r.versions.size() != n)
        throw InternalError("agent sample " + std::to_string(r.id) + ": response columns of different lengths");
    std::vector<int32_t> seq = r.prompt;
    seq.insert(seq.end(), r.response.begin(), r.response.end());
    const size_t P = r.prompt.size();
    traj::TrajectoryManager& tm = tms_[r.rank];
    traj::NodeId last = -1;
    for (size_t k = 0; k < n;) {
        if (!r.loss_mask[k]) {
            ++k;
            continue;
        }
        size_t e = k;
        while (e < n && r.loss_mask[e]) {
            if (r.versions[e] < 0)
                throw InternalError("agent sample " + std::to_string(r.id) + ": a model token without a version");
            ++e;
        }
        traj::Request q;
        q.input = traj::Span<int32_t>(seq.data(), P + k);
        q.output = traj::Span<int32_t>(seq.data() + P + k, e - k);
        q.logprobs = traj::Span<float>(r.logprobs.data() + k, e - k);
        q.versions = traj::Span<int32_t>(r.versions.data() + k, e - k);
        q.rank = r.rank;
        q.t_start = q.t_end = r.t_done;
        // Through this sample's own earlier turn, not a group sibling's same tokens.
        const traj::Span<traj::NodeId> own(&last, last < 0 ? 0 : 1);
        last = tm.insert(q, own).traj;
        ++requests_;
        k = e;
    }
    if (last < 0) return false;  // no model token: nothing the tree could name
    leaf_[r.id] = {r.rank, last};
    ++sessions_;
    return true;
}

int64_t AgentTreeRecorder::write(io::RunFile& f, std::vector<io::SampleRecord>& samples) {
    int64_t rows = 0;
    for (auto& [rank, tm] : tms_) rows += traj::write_tree(f, tm);
    for (io::SampleRecord& rec : samples) {
        auto it = leaf_.find(rec.id);
        if (it == leaf_.end()) continue;
        traj::fill_sample(tms_.at(it->second.first), it->second.second, rec);
        leaf_.erase(it);
    }
    // Every recorded session has its row: the trees start afresh (bounded memory; a later
    // session never continues an earlier one, so no /tree row refers back across a write).
    // A session still waiting for its row keeps them (it is filled at a later write).
    if (leaf_.empty())
        for (auto& [rank, tm] : tms_) tm.clear();
    return rows;
}

}  // namespace tagflow::sched
