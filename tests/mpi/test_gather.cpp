// SPDX-License-Identifier: Apache-2.0
// common/mpi_gather: allgather_bytes gives every rank every rank's bytes, in rank order, with
// uneven sizes and an empty rank (rank 1 sends nothing); a second call on the same communicator
// gets its own bytes, not the first's. Run at np 1, 2 and 3.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "common/mpi_gather.hpp"
#include "mpi_test_util.hpp"

using tagflow::test::world_rank;
using tagflow::test::world_size;

namespace {
std::string payload(int r, int round) {
    if (r == 1) return "";  // an empty part between non-empty ones
    return std::string(static_cast<size_t>(3 + 1000 * r), static_cast<char>('a' + r + round)) + std::to_string(r);
}
}  // namespace

TEST(Gather, EveryRanksBytesInRankOrder) {
    for (int round = 0; round < 2; ++round) {
        const std::string mine = payload(world_rank(), round);
        const tagflow::GatheredBytes g = tagflow::allgather_bytes(mine.data(), mine.size(), MPI_COMM_WORLD, "test");
        ASSERT_EQ(g.ranks(), world_size());
        size_t at = 0;
        for (int r = 0; r < world_size(); ++r) {
            const std::string want = payload(r, round);
            EXPECT_EQ(g.offset[static_cast<size_t>(r)], at) << "rank " << r;
            EXPECT_EQ(std::string(g.part(r)), want) << "round " << round << ", rank " << r;
            at += want.size();
        }
        EXPECT_EQ(g.all.size(), at);
    }
}
