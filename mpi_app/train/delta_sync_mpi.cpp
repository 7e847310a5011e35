// SPDX-License-Identifier: Apache-2.0
// delta_sync_mpi: the dense and delta weight broadcast protocol, over tensor-aligned buckets
// (FlatView::plan_buckets). Per sync: (1) one MPI_Allreduce(MAX) of 8 int64 — the root's
// version and whether it accepts it, the oldest/newest version the receivers hold, element and
// bucket counts (so every rank detects a mismatch and throws together). Dense: then one
// MPI_Bcast per bucket. Delta: (2) the root records the version in
// its DeltaTracker and picks an encoding per bucket; (3) one MPI_Bcast of the header (encoding
// and count per bucket); (4) one MPI_Bcast per bucket that is not skipped: dense buckets go
// straight from/into the tensors, sparse/bitmask ones through a scratch payload.
#include "train/delta_sync_mpi.hpp"

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <climits>
#include <string>

#include "common/error.hpp"
#include "train/weight_sync_mpi.hpp"

namespace tagflow::train {

WeightSync::WeightSync(Options o) : opt_(o) {
    if (opt_.bucket_bytes < sizeof(float)) throw ConfigError("weight sync: bucket size below 4 bytes");
    if (!(opt_.min_saving >= 0.0 && opt_.min_saving < 1.0))
        throw ConfigError("weight sync: min_saving must be in [0, 1)");
}

void WeightSync::reset() {
    tracker_.clear();
    held_ = -1;
}

WeightSyncStats WeightSync::broadcast(const std::vector<at::Tensor>& tensors, int32_t version, MPI_Comm comm,
                                      int root) {
    double t0 = MPI_Wtime();
    FlatView v(tensors);
    WeightSyncStats s = broadcast_buckets(v, version, comm, root);
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    if (rank != root) bump_versions(tensors);
    held_ = s.version;
    s.seconds = MPI_Wtime() - t0;
    return s;
}

WeightSyncStats WeightSync::broadcast_buckets(const FlatView& v, int32_t version, MPI_Comm comm, int root) {
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    const bool is_root = rank == root;
    const int64_t n = static_cast<int64_t>(v.size());
    const auto buckets = v.plan_buckets(opt_.bucket_bytes);
    const int64_t bb = static_cast<int64_t>(buckets.size());

    // (1) Agreement. MAX of: refused, root's version, -held (-> min held), held, n, -n, and the
    // bucket count (same n and bucket size but other shapes give other buckets).
    enum { kRefused, kVersion, kMinHeld, kMaxHeld, kN, kNegN, kBb, kNegBb, kAgree };
    int64_t a[kAgree];
    if (is_root) {
        bool refuse = version < 0 || (opt_.delta && !tracker_.empty() && version <= tracker_.last_version());
        a[kRefused] = refuse ? 1 : 0;
        a[kVersion] = version;
        a[kMinHeld] = -static_cast<int64_t>(INT32_MAX);  // the root is no receiver
        a[kMaxHeld] = -1;
    } else {
        a[kRefused] = 0;
        a[kVersion] = INT64_MIN;
        a[kMinHeld] = -static_cast<int64_t>(held_);
        a[kMaxHeld] = held_;
    }
    a[kN] = n;
    a[kNegN] = -n;
    a[kBb] = bb;
    a[kNegBb] = -bb;
    TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, a, kAgree, MPI_INT64_T, MPI_MAX, comm));
    if (a[kRefused])
        throw Error("weight sync: the root refused version " + std::to_string(a[kVersion]) +
                    " (versions must be >= 0 and increase from sync to sync)");
    if (a[kN] != -a[kNegN])
        throw Error("weight sync: ranks disagree on the number of weights (" + std::to_string(-a[kNegN]) + " vs " +
                    std::to_string(a[kN]) + ")");
    if (a[kBb] != -a[kNegBb])
        throw Error("weight sync: ranks disagree on the buckets (" + std::to_string(-a[kNegBb]) + " vs " +
                    std::to_string(a[kBb]) + "): different bucket sizes or tensor shapes");
    const int32_t ver = static_cast<int32_t>(a[kVersion]);
    const int32_t since = static_cast<int32_t>(-a[kMinHeld]);  // INT32_MAX: no receivers

    if (!opt_.delta) {  // dense: every bucket, straight from/into the tensors where possible
        WeightSyncStats s;
        for (auto [first, count] : buckets) {
            bcast_flat_range(v, first, count, comm, root, scratch_);
            ++s.buckets;
            ++s.dense_buckets;
        }
        s.bytes = s.dense_bytes = n * static_cast<int64_t>(sizeof(float));
        s.values_sent = n;
        s.control_bytes = static_cast<int64_t>(sizeof a);
        s.version = ver;
        return s;
    }

    // (2) The root records the version and chooses each bucket's encoding.
    std::vector<int32_t> header(2 * buckets.size(), 0);  // per bucket: encoding, elements sent
    if (is_root) {
        // A receiver newer than this root's last record got versions from elsewhere: start over.
        if (!tracker_.empty() && a[kMaxHeld] > tracker_.last_version()) tracker_.clear();
        std::vector<size_t> counts = tracker_.record(v, buckets, ver, since);
        for (size_t b = 0; b < buckets.size(); ++b) {
            DeltaEncoding e = choose_delta_encoding(buckets[b].second, counts[b], opt_.min_saving);
            header[2 * b] = static_cast<int32_t>(e);
            header[2 * b + 1] = static_cast<int32_t>(counts[b]);
        }
    }
    // (3) Header.
    if (!header.empty())
        TAGFLOW_MPI_CHECK(MPI_Bcast(header.data(), static_cast<int>(header.size()), MPI_INT32_T, root, comm));

    // (4) Buckets.
    WeightSyncStats s;
    s.version = ver;
    s.base_version = since == INT32_MAX ? ver : since;
    s.dense_bytes = n * static_cast<int64_t>(sizeof(float));
    s.control_bytes = static_cast<int64_t>(sizeof a + header.size() * sizeof(int32_t));
    for (size_t b = 0; b < buckets.size(); ++b) {
        auto [first, count] = buckets[b];
        auto e = static_cast<DeltaEncoding>(header[2 * b]);
        auto k = static_cast<size_t>(header[2 * b + 1]);
        if (e == DeltaEncoding::kSkip) {
            ++s.skipped_buckets;
            continue;
        }
        if (e == DeltaEncoding::kDense) {
            bcast_flat_range(v, first, count, comm, root, scratch_);
            ++s.dense_buckets;
            s.values_sent += static_cast<int64_t>(count);
            s.bytes += static_cast<int64_t>(count * sizeof(float));
        } else if (e == DeltaEncoding::kSparse || e == DeltaEncoding::kBitmask) {
            size_t words = delta_payload_words(e, count, k);
            buf_.resize(words);
            if (is_root) tracker_.encode(first, count, e, since, k, buf_.data());
            TAGFLOW_MPI_CHECK(MPI_Bcast(buf_.data(), static_cast<int>(words), MPI_UINT32_T, root, comm));
            if (!is_root) apply_delta(v, first, count, e, k, buf_.data());
            ++(e == DeltaEncoding::kSparse ? s.sparse_buckets : s.bitmask_buckets);
            s.values_sent += static_cast<int64_t>(k);
            s.bytes += static_cast<int64_t>(words * sizeof(uint32_t));
        } else {
            throw InternalError("weight sync: unknown bucket encoding " + std::to_string(header[2 * b]));
        }
        ++s.buckets;
    }
    return s;
}

}  // namespace tagflow::train
