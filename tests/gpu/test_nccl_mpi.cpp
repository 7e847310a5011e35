// SPDX-License-Identifier: Apache-2.0
// MPI.np<N>.gpu.*: the NCCL backend's bootstrap over MPI (gpu/nccl_collectives_mpi.hpp).
// Without a GPU every rank must get the same clear error (no rank may hang in NCCL's set-up);
// with one GPU per rank, all-reduce and broadcast of CPU tensors over the MPI-made group.
// Each case runs as its own ctest (--gtest_filter) so a skipped case shows as skipped.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "common/error.hpp"
#include "gpu/nccl_collectives_mpi.hpp"
#include "mpi_test_util.hpp"

using tagflow::test::min_over_ranks;
using tagflow::test::world_rank;
using tagflow::test::world_size;

TEST(NcclMpi, NoGpuErrorOnEveryRank) {
    if (min_over_ranks(tagflow::gpu::cuda_device_count()) > 0) GTEST_SKIP() << "every rank sees a GPU";
    std::string what;
    try {
        tagflow::gpu::make_nccl_collectives(MPI_COMM_WORLD, 1 << 16);
    } catch (const tagflow::Error& e) {
        what = e.what();
    }
    EXPECT_NE(what.find("NCCL backend:"), std::string::npos) << "got: '" << what << "'";
    EXPECT_NE(what.find("CUDA device"), std::string::npos) << what;
    // Every rank came back from the bootstrap (none is stuck in NCCL): agree on the outcome.
    int threw = what.empty() ? 0 : 1;
    EXPECT_EQ(min_over_ranks(threw), 1);
}

TEST(NcclMpi, CollectivesOneGpuPerRank) {
    int ndev = tagflow::gpu::cuda_device_count();
    if (min_over_ranks(ndev) < world_size())
        GTEST_SKIP() << "needs one GPU per rank (" << world_size() << " ranks, " << ndev << " GPUs here)";
    auto c = tagflow::gpu::make_nccl_collectives(MPI_COMM_WORLD, 4096);
    ASSERT_EQ(c->rank(), world_rank());
    ASSERT_EQ(c->size(), world_size());
    const int r = c->rank(), n = c->size();
    std::vector<at::Tensor> ts = {at::full({3000}, r + 1.0, at::kFloat), at::full({5}, 2.0 * (r + 1), at::kFloat)};
    auto s = c->allreduce_sum(ts);
    EXPECT_EQ(s.buckets, 3);  // 3005 floats in buckets of 1024
    EXPECT_EQ(s.bytes, 3005 * 4);
    double sum = n * (n + 1) / 2.0;
    EXPECT_TRUE(at::equal(ts[0], at::full({3000}, sum, at::kFloat)));
    EXPECT_TRUE(at::equal(ts[1], at::full({5}, 2 * sum, at::kFloat)));

    std::vector<at::Tensor> b = {at::arange(2500, at::kFloat) * (r + 1)};
    c->broadcast(b, n - 1);
    EXPECT_TRUE(at::equal(b[0], at::arange(2500, at::kFloat) * n));
}
