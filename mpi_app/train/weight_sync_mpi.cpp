// SPDX-License-Identifier: Apache-2.0
// weight_sync_mpi: bucketed broadcast (zero-copy) and all-reduce of fp32 CPU tensors over MPI.
#include "train/weight_sync_mpi.hpp"

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"
#include "train/delta_sync.hpp"

namespace tagflow::train {
namespace {

void pack(const std::vector<at::Tensor>& ts, std::vector<float>& flat) {
    size_t off = 0;
    for (const auto& t : ts) {
        auto n = static_cast<size_t>(t.numel());
        if (n) std::memcpy(flat.data() + off, t.data_ptr<float>(), n * sizeof(float));
        off += n;
    }
}

void unpack(const std::vector<float>& flat, const std::vector<at::Tensor>& ts) {
    size_t off = 0;
    for (const auto& t : ts) {
        auto n = static_cast<size_t>(t.numel());
        if (n) std::memcpy(t.data_ptr<float>(), flat.data() + off, n * sizeof(float));
        off += n;
    }
}

}  // namespace

std::vector<std::pair<size_t, size_t>> bucket_ranges(size_t total_elems, size_t bucket_bytes) {
    size_t per = std::max<size_t>(1, bucket_bytes / sizeof(float));
    per = std::min<size_t>(per, size_t{1} << 30);  // MPI counts are int
    std::vector<std::pair<size_t, size_t>> r;
    for (size_t b = 0; b < total_elems; b += per) r.emplace_back(b, std::min(per, total_elems - b));
    return r;
}

void bcast_flat_range(const FlatView& v, size_t first, size_t count, MPI_Comm comm, int root,
                      std::vector<float>& scratch) {
    std::vector<FlatView::Piece> ps = v.pieces(first, count);
    if (ps.empty()) return;
    if (ps.size() == 1) {
        TAGFLOW_MPI_CHECK(MPI_Bcast(ps[0].data, static_cast<int>(ps[0].count), MPI_FLOAT, root, comm));
        return;
    }
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    scratch.resize(count);
    if (rank == root) v.gather(first, count, scratch.data());
    TAGFLOW_MPI_CHECK(MPI_Bcast(scratch.data(), static_cast<int>(count), MPI_FLOAT, root, comm));
    if (rank != root) v.scatter(first, count, scratch.data());
}

SyncStats broadcast_tensors(const std::vector<at::Tensor>& tensors, MPI_Comm comm, int root, size_t bucket_bytes) {
    SyncStats s;
    double t0 = MPI_Wtime();
    FlatView v(tensors);
    std::vector<float> scratch;
    for (auto [off, cnt] : bucket_ranges(v.size(), bucket_bytes)) {
        bcast_flat_range(v, off, cnt, comm, root, scratch);
        ++s.buckets;
    }
    s.bytes = static_cast<int64_t>(v.size() * sizeof(float));
    s.seconds = MPI_Wtime() - t0;
    return s;
}

SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors, MPI_Comm comm, size_t bucket_bytes) {
    SyncStats s;
    double t0 = MPI_Wtime();
    FlatView v(tensors);  // checks dtype/device/contiguity
    size_t n = v.size();
    std::vector<float> flat(n);
    pack(tensors, flat);
    for (auto [off, cnt] : bucket_ranges(n, bucket_bytes)) {
        TAGFLOW_MPI_CHECK(
            MPI_Allreduce(MPI_IN_PLACE, flat.data() + off, static_cast<int>(cnt), MPI_FLOAT, MPI_SUM, comm));
        ++s.buckets;
    }
    unpack(flat, tensors);
    s.bytes = static_cast<int64_t>(n * sizeof(float));
    s.seconds = MPI_Wtime() - t0;
    return s;
}

}  // namespace tagflow::train
