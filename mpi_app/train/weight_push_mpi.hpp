// SPDX-License-Identifier: Apache-2.0
// weight_push_mpi: the point-to-point weight sync of the asynchronous modes: the train root
// pushes every new version to each receiver with non-blocking sends and goes on training; a
// receiver keeps a receive posted and takes a version in when it has fully arrived, at a moment
// it chooses (a token boundary). Dense (every value) or delta (--sync-delta): per receiver, only
// the values changed since the version that receiver holds. The root knows that version without
// asking, because a receiver applies every version it is sent, in the order sent; one it knows
// nothing of (-1) gets a full version (every bucket dense). New values are sent, never float
// differences (train/delta_sync.hpp's DeltaTracker and encodings), so receivers end bit-identical
// to the root either way. The collective counterpart (sync mode, the async start) is
// train::WeightSync (delta_sync_mpi.hpp). Does not decide when to push or to whom (the scheduler).
//
// Messages on `comm`, root -> each receiver, per version: a header (tag `tag`; int32 version,
// base version (-1: full), bucket count B, then per bucket its encoding and elements sent), then
// one message per bucket not skipped (tag `tag` + 1 + b): dense = `count` floats,
// sparse/bitmask = delta_payload_words() uint32 words. A posted receive takes the next header
// sent on (comm, tag), whoever sent it: one WeightPush/WeightPull pair per tag at a time, and a
// receiver cancel()s before the root may push on that tag from a new pair.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "train/delta_sync.hpp"
#include "train/delta_sync_mpi.hpp"

namespace tagflow::train {

struct PushOptions {
    bool delta = false;         ///< send only what changed since each receiver's version
    double min_saving = 0.125;  ///< delta: a bucket goes dense unless it saves this much (WeightSync's rule)
};

/// The root's side. One object for the run; receivers and versions are passed per call.
class WeightPush {
public:
    /// `buckets`: FlatView::plan_buckets() of the weights (the same on every receiver).
    WeightPush(PushOptions o, std::vector<std::pair<size_t, size_t>> buckets, MPI_Comm comm, int tag);
    ~WeightPush();
    WeightPush(const WeightPush&) = delete;
    WeightPush& operator=(const WeightPush&) = delete;

    /// Every rank in `receivers` holds `version`, whose values `v` holds now (the start's
    /// collective broadcast, a checkpoint every rank loaded): the next push to them is a delta
    /// from it. Delta mode records the values (8 bytes per weight); dense mode only the versions.
    void hold(const FlatView& v, int32_t version, const std::vector<int>& receivers);
    /// Rank `r` holds `version`, the last version pushed or held (a rank that trained it and now
    /// leaves the train group, --rebalance-every): the next push to it is a delta from there.
    /// InternalError for any other version.
    void set_held(int r, int32_t version);
    /// Starts pushing `version` (the values `v` holds now: copied, so `v` may change at once) to
    /// every rank in `receivers`; never waits. The previous push must have completed (done()),
    /// and `version` must be newer than the last one pushed or held, else InternalError.
    /// Returns the push's figures per receiver (their mean where receivers got different
    /// deltas; `seconds` is 0: the caller times the push until done()).
    WeightSyncStats start(const FlatView& v, int32_t version, const std::vector<int>& receivers);
    /// True when every send of the last push has completed (tests them; never waits).
    bool done();
    /// The version rank `r` holds as far as this root knows (-1: none).
    int32_t held(int r) const;
    /// /syncs mode of this object's rows: "mpi_isend" or "mpi_isend_delta".
    const char* mode() const { return opt_.delta ? "mpi_isend_delta" : "mpi_isend"; }
    const PushOptions& options() const { return opt_; }

private:
    PushOptions opt_;
    std::vector<std::pair<size_t, size_t>> buckets_;
    MPI_Comm comm_;
    int tag_;
    int32_t last_ = -1;  // the last version pushed or held
    std::map<int, int32_t> held_;
    DeltaTracker tracker_;                        // delta: the values of version last_ and their stamps
    std::vector<float> dense_;                    // dense: the values of version last_
    std::vector<std::vector<int32_t>> headers_;   // per distinct base of the last push
    std::vector<std::vector<uint32_t>> payload_;  // per (base, bucket) sparse/bitmask payload
    std::vector<MPI_Request> reqs_;
};

/// A receiver's side: receives into its own buffers while the weights in use stay untouched,
/// then writes the version into them at once (apply()).
class WeightPull {
public:
    /// `buckets`: the root's plan (the same weights); `root`: the pushing rank in `comm`.
    WeightPull(std::vector<std::pair<size_t, size_t>> buckets, MPI_Comm comm, int root, int tag);
    ~WeightPull();
    WeightPull(const WeightPull&) = delete;
    WeightPull& operator=(const WeightPull&) = delete;

    /// Posts the receive of the next version (call once; apply() posts the next one itself).
    void post();
    /// True when the posted version has fully arrived (tests the receives; never waits).
    bool ready();
    /// Writes the arrived version into `v` (the weights; bit-identical to the root's after it),
    /// posts the next receive and returns the version. Call only when ready(). Throws
    /// InternalError on a header that does not fit (another bucket plan, a delta whose base is
    /// not the version this rank holds).
    int32_t apply(const FlatView& v);
    /// The version that arrived (valid when ready()).
    int32_t incoming() const { return header_.empty() ? -1 : header_[0]; }
    /// Cancels the posted receives (end of run).
    void cancel();
    /// The version this rank's weights hold (-1: none yet; set_held() for a start or a checkpoint).
    int32_t held() const { return held_; }
    void set_held(int32_t v) { held_ = v; }

private:
    void post_buckets();

    std::vector<std::pair<size_t, size_t>> buckets_;
    MPI_Comm comm_;
    int root_, tag_;
    int32_t held_ = -1;
    bool have_header_ = false;
    std::vector<int32_t> header_;
    std::vector<float> dense_;                    // dense buckets, at their flat offsets
    std::vector<std::vector<uint32_t>> payload_;  // per bucket: sparse/bitmask payload
    std::vector<MPI_Request> reqs_;
};

}  // namespace tagflow::train
