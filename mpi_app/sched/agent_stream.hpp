// SPDX-License-Identifier: Apache-2.0
// agent_stream: the coordinator's side of multi-turn (agent loop) sessions in the async modes
// (disaggregated, multiplex). Rollout ranks run sessions with rollout::AgentSessions on their
// continuously batched engine and stream each finished session as one RolloutSample (prompt +
// every model turn and tool output, loss_mask 0 on the tool tokens, per-token versions). The
// coordinator alone writes the run file, so it keeps replica trajectory managers, one per
// generating rank, and records every model request of a streamed session there: request k's
// input is the session up to its k-th run of model tokens (loss_mask 1), its output that run.
// (A loop that appended no environment tokens between two turns makes them one request: the
// tree still rebuilds the same sample.) The sample's /samples row is then filled from the tree,
// as in sync mode, so /tree rebuilds it exactly.
//
// Does not run sessions, decide staleness or write anything but /tree rows; no MPI. Request
// times in the tree are the sample's t_done (the rollout rank does not ship per-turn times).
#pragma once
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/sample.hpp"
#include "traj/trajectory_manager.hpp"

namespace tagflow::io {
class RunFile;
struct SampleRecord;
}  // namespace tagflow::io

namespace tagflow::sched {

class AgentTreeRecorder {
public:
    /// Records the model requests of streamed session `r` (a sample with a loss_mask; one
    /// without is ignored). Returns true when `r` is recorded, so that write() fills its row's
    /// token columns (false: no loss_mask, or no model token). Throws InternalError on columns
    /// of different lengths or a model token without a version.
    bool record(const RolloutSample& r);
    /// Appends /tree rows for every request recorded since the last call (the run file's I/O
    /// communicator: the coordinator alone), fills the token columns, version range and
    /// tree_node of the rows in `samples` that are recorded sessions, and forgets the trees once
    /// every recorded session got its row (the scheduler records a sample and queues it for
    /// /samples together, so that is every write). Returns the /tree rows written.
    int64_t write(io::RunFile& f, std::vector<io::SampleRecord>& samples);
    int64_t requests() const { return requests_; }  ///< model requests recorded so far (whole run)
    int64_t sessions() const { return sessions_; }  ///< sessions recorded so far (whole run)

private:
    std::map<int32_t, traj::TrajectoryManager> tms_;                      // generating rank -> replica
    std::unordered_map<int64_t, std::pair<int32_t, traj::NodeId>> leaf_;  // sample id -> (rank, trajectory)
    int64_t requests_ = 0, sessions_ = 0;
};

}  // namespace tagflow::sched
