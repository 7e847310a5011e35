// SPDX-License-Identifier: Apache-2.0
#include "train/weight_sync.hpp"

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>

#include "common/error.hpp"

namespace tagflow::train {
namespace {

size_t total_elements(const std::vector<at::Tensor>& ts) {
    size_t n = 0;
    for (const auto& t : ts) {
        TORCH_CHECK(t.scalar_type() == at::kFloat, "weight_sync: fp32 tensors only");
        TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "weight_sync: contiguous CPU tensors only");
        n += static_cast<size_t>(t.numel());
    }
    return n;
}

void pack(const std::vector<at::Tensor>& ts, std::vector<float>& flat) {
    size_t off = 0;
    for (const auto& t : ts) {
        auto n = static_cast<size_t>(t.numel());
        std::memcpy(flat.data() + off, t.data_ptr<float>(), n * sizeof(float));
        off += n;
    }
}

void unpack(const std::vector<float>& flat, const std::vector<at::Tensor>& ts) {
    size_t off = 0;
    for (const auto& t : ts) {
        auto n = static_cast<size_t>(t.numel());
        std::memcpy(t.data_ptr<float>(), flat.data() + off, n * sizeof(float));
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

SyncStats broadcast_tensors(const std::vector<at::Tensor>& tensors, MPI_Comm comm, int root,
                            size_t bucket_bytes) {
    at::NoGradGuard no_grad;
    SyncStats s;
    double t0 = MPI_Wtime();
    size_t n = total_elements(tensors);
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    std::vector<float> flat(n);
    if (rank == root) pack(tensors, flat);
    for (auto [off, cnt] : bucket_ranges(n, bucket_bytes)) {
        TAGFLOW_MPI_CHECK(MPI_Bcast(flat.data() + off, static_cast<int>(cnt), MPI_FLOAT, root, comm));
        ++s.buckets;
    }
    if (rank != root) unpack(flat, tensors);
    s.bytes = static_cast<int64_t>(n * sizeof(float));
    s.seconds = MPI_Wtime() - t0;
    return s;
}

SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors, MPI_Comm comm, size_t bucket_bytes) {
    at::NoGradGuard no_grad;
    SyncStats s;
    double t0 = MPI_Wtime();
    size_t n = total_elements(tensors);
    std::vector<float> flat(n);
    pack(tensors, flat);
    for (auto [off, cnt] : bucket_ranges(n, bucket_bytes)) {
        TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, flat.data() + off, static_cast<int>(cnt),
                                        MPI_FLOAT, MPI_SUM, comm));
        ++s.buckets;
    }
    unpack(flat, tensors);
    s.bytes = static_cast<int64_t>(n * sizeof(float));
    s.seconds = MPI_Wtime() - t0;
    return s;
}

}  // namespace tagflow::train
