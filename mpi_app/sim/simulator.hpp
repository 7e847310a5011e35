// SPDX-License-Identifier: Apache-2.0
// simulator: a discrete-event simulation, in virtual seconds, of the three scheduling modes of
// `tagflow train` on N nodes of given hardware types and tags. The decisions are the real ones
// (sched/sched_policy.hpp: train group, tag checks, sample threshold, staleness rule; the async
// coordinator's sched/sample_pool.hpp: which samples a step trains or drops); the work is a
// cost model (cost_model.hpp): every rollout node runs a continuous-batching engine (one engine
// step = the prefill of the sequences admitted now + one decode step of all active ones;
// finished slots are refilled), a group of group-size samples of one prompt is usable once its
// last sample finished, and a sample's version is the weights' version when it was admitted
// (its oldest token).
//   sync          — the step's prompts go round-robin to the rollout nodes; barrier; the train
//                   group trains; the weights are broadcast to every rollout node.
//   disaggregated — the train group only trains; the other rollout nodes generate forever and
//                   swap in new weights when the broadcast reaches them.
//   multiplex     — the train group's rollout-tagged nodes generate too, until the pool holds
//                   the threshold of usable samples; they are preempted at their next token
//                   boundary, train (their paused sequences keep their slots) and resume.
// Deterministic for a seed (response lengths are a hash of seed and sample id, so every mode
// sees the same samples). Pure C++: no MPI, no LibTorch, no wall-clock time.
// Does not model: I/O and run-file writes, evaluation, memory limits, KV-cache eviction, network
// contention, stragglers or failures (see share/doc/sim.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/mode.hpp"
#include "sim/cost_model.hpp"

namespace tagflow::sim {

/// One entry of --hw: nodes of hardware `hw` with tag bits `tags`, `share` of all nodes.
struct NodeGroup {
    std::string hw;
    uint32_t tags = 0;
    double share = 1.0;
    std::string label;  // "hw:tags"
};

/// "h100:rollout,train:0.5;t4:rollout:0.5" -> groups (shares must sum to 1). Throws ConfigError.
std::vector<NodeGroup> parse_hw(const std::string& spec);
/// Node counts per group for `nodes` nodes (rounded; the last group takes the rest).
std::vector<int> group_counts(const std::vector<NodeGroup>& groups, int nodes);

struct Workload {
    int64_t batch_per_node = 64;  // samples per training step per node (weak scaling), if batch == 0
    int64_t batch = 0;            // fixed samples per training step (strong scaling); 0 = per node
    int32_t group_size = 8;
    int32_t prompt_tokens = 7;
    std::string lengths = "lognormal";  // lognormal (median, p99_ratio), longtail (the task's) or file
    std::vector<int32_t> length_table;  // lengths == "file": measured response lengths, drawn uniformly
    std::string length_file;            // where length_table came from (for the output)
    double median = 32;
    double p99_ratio = 10;
    int32_t max_new = 0;  // cap on response tokens; 0 = 4 x the p99 (lognormal), 121 (longtail)
};

struct SimConfig {
    config::Mode mode;  // default config::Mode::kDefault
    int nodes = 8;
    std::vector<NodeGroup> hw;
    Workload work;
    int64_t steps = 20;
    uint64_t seed = 1;
    int32_t staleness = 1;
    std::string stale = "drop";
    double min_rollout_frac = 0.1;
    double rollout_ahead = 1.0;           ///< as tagflow train --rollout-ahead (multiplex only)
    std::string admission = "staleness";  ///< as tagflow train --admission (async modes): staleness or off
    std::string train_priority;           ///< as tagflow train --train-priority (applied in multiplex only)
    int64_t rebalance_every = 0;          ///< as tagflow train --rebalance-every (applied in multiplex only)
    double late_wait = 0.5;               ///< as tagflow train --late-wait (async modes)
};

enum class Kind : uint8_t { kRollout, kTrain, kWeightSync, kResplit, kIo, kIdle };
const char* kind_name(Kind k);

struct Span {
    Kind kind;
    double t0, t1;
};

struct NodeResult {
    int group = 0;  // index into SimConfig::hw
    uint32_t tags = 0;
    bool in_train_group = false;
    double busy = 0, idle = 0;  // seconds in [0, wall]
    std::vector<Span> spans;    // contiguous, non-overlapping, covering [0, wall]
};

struct ModeResult {
    config::Mode mode;
    int nodes = 0;
    int64_t steps = 0;
    double wall = 0;  // virtual seconds until the last step's weights were sent and its rows written
    int64_t generated = 0, trained = 0, dropped = 0, weighted = 0, leftover = 0, discarded = 0;
    int64_t tokens_trained = 0;  // prompt + response tokens of the trained samples
    double samples_per_s = 0, tokens_per_s = 0;
    double staleness_mean = 0;
    int train_group_size = 0;       // at the end of the run
    int64_t regroups = 0;           // --rebalance-every: train group changes
    int64_t holds = 0;              // --late-wait: steps that waited for late groups
    double held_s = 0;              // --late-wait: virtual seconds they waited
    std::vector<double> idle_frac;  // per SimConfig::hw group (NaN-free: 0 when it has no nodes)
    std::vector<int> group_nodes;   // node count per group
    std::vector<NodeResult> node;
};

/// Response tokens of sample `id` (deterministic in seed and id).
int32_t response_length(const Workload& w, uint64_t seed, int64_t id);
/// Reads measured response lengths (positive integers separated by white space, e.g. one per
/// line as tests/bench/sim_vs_real.sh writes them from a calibration run). Throws ConfigError
/// with one line naming the file and the first bad entry.
std::vector<int32_t> load_lengths(const std::string& path);

/// Runs one mode. Throws ConfigError on a configuration the real modes reject (same messages).
ModeResult simulate(const SimConfig& cfg, const CostModel& cost);

}  // namespace tagflow::sim
