// SPDX-License-Identifier: Apache-2.0
// delta_sync_mpi: WeightSync, the train root -> rollout ranks weight broadcast of a whole run,
// over tensor-aligned buckets (FlatView::plan_buckets; chunks of big tensors move with no copy),
// dense (every value, one MPI_Bcast per bucket) or delta (only the values that changed since
// the oldest version a receiver holds; still at most one MPI_Bcast per bucket, plus one small
// agreement all-reduce and one header broadcast per sync). Receivers end bit-identical to the
// root either way. Keeps the state that needs (root: DeltaTracker; every rank: the version its
// tensors hold). Does not decide when to sync or who the root is (the scheduler does).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/collectives.hpp"
#include "train/delta_sync.hpp"

namespace tagflow::train {

/// One sync as recorded in /syncs (bytes, buckets, seconds and gbps() come from SyncStats).
/// bytes: what the bucket broadcasts moved; buckets: bucket broadcasts issued. The delta
/// protocol's fixed control messages (agreement all-reduce, header) are in control_bytes.
struct WeightSyncStats : SyncStats {
    int64_t control_bytes = 0;  ///< delta: agreement + header bytes (not in bytes)
    int64_t dense_bytes = 0;    ///< what a dense sync of the same tensors moves (4 B per element)
    int64_t values_sent = 0;    ///< elements whose value was sent
    int32_t version = -1;       ///< the version sent (the root's)
    int32_t base_version = -1;  ///< delta: oldest version a receiver held (-1: one held none)
    int32_t skipped_buckets = 0, sparse_buckets = 0, bitmask_buckets = 0, dense_buckets = 0;
    /// bytes / dense_bytes (0 for an empty sync).
    double sent_fraction() const {
        return dense_bytes > 0 ? static_cast<double>(bytes) / static_cast<double>(dense_bytes) : 0.0;
    }
};

/// The weight broadcast with its per-run state; one object per rank for the whole run. The
/// communicator and root are passed per call, so re-split communicators are fine.
///
/// Delta assumptions (also in share/doc/hdf5-schema.md, /syncs): (1) one train
/// root produces every version (its tracker knows nothing of versions sent by another rank;
/// a receiver holding a version newer than the root's last one makes the root start over with
/// a full sync); (2) a receiver's tensors hold exactly the version it reports — a rank whose
/// tensors changed otherwise (it trained, loaded a checkpoint) calls reset() or
/// set_held_version(); a receiver that holds nothing yet (-1) makes that sync full.
class WeightSync {
public:
    struct Options {
        size_t bucket_bytes = size_t{4} << 20;  ///< elements per bucket = bucket_bytes / 4
        bool delta = false;                     ///< send only what changed (off: always dense)
        double min_saving = 0.125;              ///< delta: a bucket goes dense unless it saves this much
    };
    explicit WeightSync(Options o);

    /// COLLECTIVE over `comm`: every rank's tensors get the values of `root`'s tensors, which
    /// are version `version` (>= 0 and, in delta mode, newer than the root's previous one —
    /// else every rank throws tagflow::Error before anything moves). Tensors: fp32, contiguous,
    /// CPU, the same element count on every rank (else every rank throws). The values are
    /// written into the tensors' memory, so on every rank but the root their version counters
    /// are bumped (train::bump_versions) for the decoders that watch them: pass the parameters
    /// themselves, not `p.data()` aliases, whose counters are their own.
    WeightSyncStats broadcast(const std::vector<at::Tensor>& tensors, int32_t version, MPI_Comm comm, int root);

    /// /syncs mode of this object's rows: "mpi_bcast" or "mpi_bcast_delta".
    const char* mode() const { return opt_.delta ? "mpi_bcast_delta" : "mpi_bcast"; }
    /// The version this rank's tensors hold (-1: none yet). Every rank of a sync holds the
    /// sent version after it, the root included.
    int32_t held_version() const { return held_; }
    /// For a rank whose tensors now hold version `v` by other means (e.g. a checkpoint).
    void set_held_version(int32_t v) { held_ = v; }
    /// Forgets everything: as root, the next sync is full; as receiver, it asks for a full one.
    void reset();
    const Options& options() const { return opt_; }

private:
    WeightSyncStats broadcast_buckets(const FlatView& v, int32_t version, MPI_Comm comm, int root);

    Options opt_;
    DeltaTracker tracker_;  // used while this rank is the root
    int32_t held_ = -1;
    std::vector<uint32_t> buf_;   // one bucket's sparse/bitmask payload
    std::vector<float> scratch_;  // a dense bucket that spans tensors, packed
};

}  // namespace tagflow::train
