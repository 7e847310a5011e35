// SPDX-License-Identifier: Apache-2.0
// sample_pool: the async modes' pool of finished samples, what the coordinator trains from and
// what `tagflow sim` (sim/simulator.cpp) runs the same way. Owns admission (a sample joins its
// prompt group; a group is trainable once complete), staleness (a sample's age is the trained
// policy version minus its oldest token's version; --staleness/--stale give its weight through
// sched_policy::stale_weight) and batch selection (complete groups, oldest first, until the threshold;
// too-stale samples dropped, older ones weighted; with whole_groups, as a --data run needs, a group
// is dropped whole when its oldest sample is too stale, so a data row is trained with all of its
// samples or none). Pure C++ (no MPI, no LibTorch). Does not
// decide when to train (the caller compares usable() with its threshold), deduplicate samples
// generated again after a resume, or write anything.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "sched/sample.hpp"

namespace tagflow::config {
struct Options;
}

namespace tagflow::sched {

/// What take_batch took from the pool.
struct PoolBatch {
    std::vector<RolloutSample> samples;   ///< to train, sorted by id; weight < 1 on weighted ones
    std::vector<int64_t> dropped_ids;     ///< too stale (weight 0), in the order they were taken
    std::vector<int64_t> groups;          ///< every group taken (trained or dropped), oldest first
    std::vector<int64_t> dropped_groups;  ///< groups none of whose samples is trained (whole_groups: dropped whole)
    int64_t weighted = 0;                 ///< samples among `samples` with weight < 1
    double age_sum = 0;                   ///< sum of the trained samples' ages
    int64_t age_max = 0;                  ///< the oldest trained sample's age (0 when none)
};

class SamplePool {
public:
    /// `opt` gives group_size and the staleness rule; it must outlive the pool.
    explicit SamplePool(const config::Options& opt);

    /// Whole groups (a --data run): a ready group's staleness is its oldest sample's, and a group
    /// too stale is dropped whole (every sample weight 0). Set before anything is added.
    void set_whole_groups(bool on) { whole_ = on; }

    /// A finished sample joins its group (RolloutSample::group); the group becomes ready (can
    /// be trained) when it holds group_size samples. The sample's age is counted from
    /// RolloutSample::version.
    void add(RolloutSample s);
    /// A whole group at once (e.g. the gateway's rewarded sessions), ready now whatever its
    /// size; it replaces anything pooled under the same group. An empty vector is ignored.
    void add_group(std::vector<RolloutSample> g);

    /// Samples in ready groups whose staleness weight at policy `version` is above 0.
    int64_t usable(int64_t version) const;
    /// The batch for a training step at policy `version`: ready groups until `threshold` samples
    /// are kept (a group is taken whole, so a batch may exceed it), first those the next step would
    /// drop (on their last chance, or too stale already), then the rest, each in the order they
    /// became ready. Every taken sample leaves the pool.
    PoolBatch take_batch(int64_t threshold, int64_t version);
    /// Takes every ready group whose staleness weight at `version` is 0 out of the pool (their
    /// samples can never be trained): the groups, oldest first; their sample ids go to `ids`.
    std::vector<int64_t> take_stale(int64_t version, std::vector<int64_t>& ids);

    /// Incomplete groups a step at `version` could still train but the next one would drop
    /// (their last chance): the coordinator may hold a step for them (--late-wait).
    int64_t late_groups(int64_t version) const;

    /// Every pooled sample by group (ready or not), and the ready groups in order (checkpoints).
    const std::map<int64_t, std::vector<RolloutSample>>& groups() const { return pool_; }
    const std::deque<int64_t>& ready() const { return ready_; }
    /// Groups not ready yet (still waiting for samples; a group add_group() gave is ready at
    /// any size), and their samples (--admission counts those as started and not consumed).
    int64_t partial_groups() const;
    int64_t partial_samples() const;
    /// A checkpoint's pool back (resume): `samples` join their groups, `ready` lists the ready
    /// groups in order (as ready() gave them). The pool must be empty.
    void restore(std::vector<RolloutSample> samples, const std::vector<int64_t>& ready);

private:
    void mark_ready(int64_t group);
    // The version a ready sample is counted under: its own, or (whole_) its group's oldest.
    int64_t key_of(const RolloutSample& r) const;
    void unmark(const RolloutSample& r);
    // The next step (at version + 1) drops some of the group's samples (whole_: the group);
    // trainable_now: only samples a step at `version` could still train count (a last chance).
    bool dropped_next(const std::vector<RolloutSample>& g, int64_t version, bool trainable_now) const;
    // Calls f(samples) for every group not ready yet.
    template <class F>
    void each_partial(F&& f) const;

    const config::Options& opt_;
    std::map<int64_t, std::vector<RolloutSample>> pool_;  // group -> its finished samples
    std::deque<int64_t> ready_;                           // complete groups, in completion order
    std::map<int64_t, int64_t> ready_by_version_;         // samples in ready groups, by version (key_of)
    std::map<int64_t, int64_t> group_min_;                // whole_: ready group -> its oldest sample's version
    bool whole_ = false;
};

}  // namespace tagflow::sched
