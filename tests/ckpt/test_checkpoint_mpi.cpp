// SPDX-License-Identifier: Apache-2.0
// The collective parts of checkpoints: every rank's files gathered to rank 0 for the manifest,
// the manifest read and verified on rank 0 reaching every rank identically, and a corrupt
// checkpoint becoming the same one-line ConfigError on every rank.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "ckpt/checkpoint_mpi.hpp"
#include "common/error.hpp"
#include "mpi_test_util.hpp"

namespace ck = tagflow::ckpt;

namespace {

// One directory for the whole communicator (rank 0's pid), like a run directory.
std::string shared_dir(const std::string& name) {
    int pid = ::getpid();
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ::testing::TempDir() + "tagflow_ckpt_mpi_" + name + "_" + std::to_string(pid);
}

// Every rank writes rank<r>.bin into the staging dir; rank 0 writes the manifest and commits.
void write_checkpoint(const std::string& out, int step, const std::string& extra_key) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::string tmp = ck::staging_dir(out, step);
    if (rank == 0) {
        ck::make_dirs(out);
        ck::prepare_staging(tmp);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const std::string name = "rank" + std::to_string(rank) + ".bin";
    {
        std::ofstream o(tmp + "/" + name, std::ios::binary);
        o << std::string(static_cast<size_t>(100 + rank), static_cast<char>('a' + rank));
    }
    std::vector<ck::FileEntry> all = ck::gather_files(MPI_COMM_WORLD, 0, {ck::describe_file(tmp, name)});
    if (rank == 0) {
        EXPECT_EQ(static_cast<int>(all.size()), tagflow::test::world_size());
        ck::Manifest m;
        m.set_int("step", step);
        m.set("note", extra_key);
        tagflow::io::TableSizes ts;
        ts.samples = 12;
        ts.tokens = 345;
        ts.tree_tokens = 6;
        ck::put_sizes(m, ts);
        m.files = all;
        ck::write_manifest(tmp, m);
        ck::commit(out, tmp);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

TEST(CheckpointMpi, EveryRankReadsTheVerifiedManifest) {
    const std::string out = shared_dir("ok");
    write_checkpoint(out, 4, "first");
    write_checkpoint(out, 8, "second has spaces");
    ck::Manifest m = ck::read_verified(MPI_COMM_WORLD, 0, ck::checkpoint_dir(out), nullptr);
    EXPECT_EQ(m.get_int("step"), 8);
    EXPECT_EQ(m.get("note"), "second has spaces");
    EXPECT_EQ(static_cast<int>(m.files.size()), tagflow::test::world_size());
    tagflow::io::TableSizes ts = ck::get_sizes(m);
    EXPECT_EQ(ts.samples, 12);
    EXPECT_EQ(ts.tokens, 345);
    EXPECT_EQ(ts.tree_tokens, 6);
    EXPECT_TRUE(tagflow::test::same_everywhere(static_cast<int64_t>(m.files.back().crc32)));
    MPI_Barrier(MPI_COMM_WORLD);
    if (tagflow::test::world_rank() == 0) ck::remove_tree(out);
}

TEST(CheckpointMpi, CorruptFileIsTheSameConfigErrorEverywhere) {
    const std::string out = shared_dir("bad");
    write_checkpoint(out, 3, "x");
    const int last = tagflow::test::world_size() - 1;
    const std::string victim = ck::checkpoint_dir(out) + "/rank" + std::to_string(last) + ".bin";
    if (tagflow::test::world_rank() == 0) {
        std::ofstream o(victim, std::ios::binary | std::ios::trunc);
        o << "short";
    }
    MPI_Barrier(MPI_COMM_WORLD);
    std::string what;
    try {
        ck::read_verified(MPI_COMM_WORLD, 0, ck::checkpoint_dir(out), nullptr);
    } catch (const tagflow::ConfigError& e) {
        what = e.what();
    }
    EXPECT_NE(what.find(victim), std::string::npos) << what;
    EXPECT_NE(what.find("truncated"), std::string::npos) << what;
    // A check of the caller that fails on rank 0 only is also everyone's error.
    std::string what2;
    try {
        ck::check_on_root(MPI_COMM_WORLD, 0, [] { throw tagflow::ConfigError("root says no"); });
    } catch (const tagflow::ConfigError& e) {
        what2 = e.what();
    }
    EXPECT_EQ(what2, "root says no");
    MPI_Barrier(MPI_COMM_WORLD);
    if (tagflow::test::world_rank() == 0) ck::remove_tree(out);
}
