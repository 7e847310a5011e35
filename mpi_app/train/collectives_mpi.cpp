// SPDX-License-Identifier: Apache-2.0
#include "train/collectives_mpi.hpp"

#include <ATen/core/Tensor.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <climits>
#include <numeric>
#include <string>

#include "common/error.hpp"
#include "train/weight_sync_mpi.hpp"

namespace tagflow::train {

MpiCollectives::MpiCollectives(MPI_Comm comm, size_t bucket_bytes) : comm_(comm), bucket_bytes_(bucket_bytes) {
    if (comm == MPI_COMM_NULL) throw MpiError("MpiCollectives: MPI_COMM_NULL", MPI_ERR_COMM);
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    TAGFLOW_MPI_CHECK(MPI_Comm_size(comm, &size_));
}

SyncStats MpiCollectives::allreduce_sum(const std::vector<at::Tensor>& tensors) {
    return train::allreduce_sum(tensors, comm_, bucket_bytes_);
}

SyncStats MpiCollectives::broadcast(const std::vector<at::Tensor>& tensors, int root) {
    return broadcast_tensors(tensors, comm_, root, bucket_bytes_);
}

namespace {

// MPI counts and displacements of `counts` (each part an int, as MPI wants).
void mpi_counts(const std::vector<int64_t>& counts, int size, std::vector<int>& c, std::vector<int>& d) {
    if (static_cast<int>(counts.size()) != size)
        throw InternalError("collectives: " + std::to_string(counts.size()) + " counts for a group of " +
                            std::to_string(size));
    c.assign(counts.size(), 0);
    d.assign(counts.size(), 0);
    int64_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
        if (counts[r] < 0 || counts[r] > INT_MAX || at > INT_MAX)
            throw InternalError("collectives: a part of " + std::to_string(counts[r]) + " elements");
        c[r] = static_cast<int>(counts[r]);
        d[r] = static_cast<int>(at);
        at += counts[r];
    }
}

// For the health tests (tests/health/health_test.py): TAGFLOW_TEST_SIGNAL_IN_REDUCE_SCATTER=
// R:N:kill|stop makes world rank R send itself SIGKILL (or SIGSTOP) on entering its N-th
// reduce-scatter, while the rest of its group waits in theirs: the job must still end within the
// watchdog's limit. A malformed value is an error, not ignored.
void test_signal_in_reduce_scatter() {
    static const char* spec = std::getenv("TAGFLOW_TEST_SIGNAL_IN_REDUCE_SCATTER");
    static long calls = 0;
    if (spec == nullptr || *spec == '\0') return;
    int rank = 0, who = -1, n = 0, used = 0;
    char what[8] = {0};
    if (std::sscanf(spec, "%d:%d:%7[a-z]%n", &who, &n, what, &used) != 3 || spec[used] != '\0' ||
        (std::string(what) != "kill" && std::string(what) != "stop"))
        throw ConfigError(std::string("TAGFLOW_TEST_SIGNAL_IN_REDUCE_SCATTER='") + spec +
                          "': expected RANK:CALL:kill|stop");
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    if (rank != who || ++calls != n) return;
    std::printf("tagflow test: rank %d raises SIG%s in its reduce-scatter call %d\n", rank,
                what[0] == 'k' ? "KILL" : "STOP", n);
    std::fflush(stdout);
    std::raise(what[0] == 'k' ? SIGKILL : SIGSTOP);
}

// A CPU fp32 contiguous vector of n elements (the MPI path reads and writes its memory).
float* flat_data(const at::Tensor& t, int64_t n, const char* what) {
    if (!t.defined() || t.scalar_type() != at::kFloat || !t.device().is_cpu() || !t.is_contiguous() || t.numel() != n)
        throw InternalError(std::string("collectives: ") + what + " must be a contiguous CPU fp32 vector of " +
                            std::to_string(n) + " elements");
    return t.data_ptr<float>();
}

}  // namespace

SyncStats MpiCollectives::reduce_scatter_sum(const at::Tensor& send, const std::vector<int64_t>& counts,
                                             const at::Tensor& recv) {
    SyncStats s;
    const double t0 = MPI_Wtime();
    std::vector<int> c, d;
    mpi_counts(counts, size_, c, d);
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    float* in = flat_data(send, total, "reduce_scatter_sum's send");
    float* out = flat_data(recv, counts[static_cast<size_t>(rank_)], "reduce_scatter_sum's recv");
    test_signal_in_reduce_scatter();
    TAGFLOW_MPI_CHECK(MPI_Reduce_scatter(in, out, c.data(), MPI_FLOAT, MPI_SUM, comm_));
    s.buckets = 1;
    s.bytes = total * static_cast<int64_t>(sizeof(float));
    s.seconds = MPI_Wtime() - t0;
    return s;
}

SyncStats MpiCollectives::allgather(const at::Tensor& mine, const std::vector<int64_t>& counts, const at::Tensor& out) {
    SyncStats s;
    const double t0 = MPI_Wtime();
    std::vector<int> c, d;
    mpi_counts(counts, size_, c, d);
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    float* in = flat_data(mine, counts[static_cast<size_t>(rank_)], "allgather's part");
    float* all = flat_data(out, total, "allgather's out");
    TAGFLOW_MPI_CHECK(
        MPI_Allgatherv(in, c[static_cast<size_t>(rank_)], MPI_FLOAT, all, c.data(), d.data(), MPI_FLOAT, comm_));
    s.buckets = 1;
    s.bytes = total * static_cast<int64_t>(sizeof(float));
    s.seconds = MPI_Wtime() - t0;
    return s;
}

}  // namespace tagflow::train
