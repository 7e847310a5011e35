// SPDX-License-Identifier: Apache-2.0
// MPI.np<N>.traj_file: every rank records an agentic request stream in its own
// TrajectoryManager, writes /tree (traj::write_tree) and one /samples row per request
// (traj::fill_sample) over several rounds; then every sample is rebuilt from /tree alone and
// compared with its flat /samples tokens, logprobs, versions and loss_mask. Also: /tree
// structure, storage saved, truncate/open_append of /tree, invalid rows.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "io/h5_dataset.hpp"
#include "io/h5_file.hpp"
#include "io/run_file.hpp"
#include "traj/tree_file_mpi.hpp"
#include "tree_workload.hpp"

using namespace tagflow;
using namespace tagflow::io;
using tagflow::traj::test::Workload;
using tagflow::traj::test::WorkRequest;

namespace {

int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int world_size() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}
bool all_ranks(bool ok) {
    int v = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

std::string test_file() {
    long pid = static_cast<long>(getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const auto dir = std::filesystem::temp_directory_path() / ("tagflow-traj-" + std::to_string(pid));
    if (world_rank() == 0) std::filesystem::create_directories(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return (dir / (std::string(info->name()) + ".h5")).string();
}

struct TempDirCleanup : ::testing::Environment {
    void TearDown() override {
        MPI_Barrier(MPI_COMM_WORLD);
        long pid = static_cast<long>(getpid());
        MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        if (world_rank() == 0 && !getenv("TAGFLOW_KEEP_TEST_FILES"))
            std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                        ("tagflow-traj-" + std::to_string(pid)));
    }
};
[[maybe_unused]] auto* const g_cleanup = ::testing::AddGlobalTestEnvironment(new TempDirCleanup);

RunAttributes attrs() {
    RunAttributes a;
    a.config_json = "{}";
    a.tagflow_version = "0.1.0-test";
    a.world_size = world_size();
    a.t0_unix = 1.7e9;
    return a;
}

/// Inserts one round on every rank (the last rank of >= 3 has none in round 0), writes /tree
/// then /samples; returns this rank's rows.
std::vector<SampleRecord> write_round(RunFile& f, traj::TrajectoryManager& m, Workload& w, int round) {
    const int r = world_rank(), n = world_size();
    const int count = (n >= 3 && r == n - 1 && round == 0) ? 0 : 12 + 3 * r;
    std::vector<traj::NodeId> ids;
    for (const WorkRequest& q : w.round(round, count)) ids.push_back(m.insert(q.view(r, round)).traj);
    traj::write_tree(f, m);
    std::vector<SampleRecord> rows;
    for (traj::NodeId id : ids) {
        SampleRecord s;
        s.id = static_cast<int64_t>(r) * 1000000 + 1000 * round + static_cast<int64_t>(rows.size());
        s.group = s.id / 4;
        s.task = "agentic";
        s.rank = r;
        s.t_done = round + 0.5;
        traj::fill_sample(m, id, s);
        rows.push_back(std::move(s));
    }
    f.append_samples(rows);
    f.flush();
    return rows;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

/// Rebuilds every sample of a closed file from /tree and compares it with its flat columns.
/// Returns the number of samples checked (EXPECTs on mismatches).
int64_t expect_samples_rebuild_from_tree(const std::string& path) {
    File file = open_file_serial(path);
    auto rd = [&](auto tag, const char* p) {
        Dataset d = open_dataset(file.get(), p);
        return read_all<decltype(tag)>(d.get());
    };
    const int64_t i64 = 0;
    const int32_t i32 = 0;
    const auto parent = rd(i64, "/tree/parent"), depth = rd(i64, "/tree/depth");
    const auto start = rd(i64, "/tree/token_start"), end = rd(i64, "/tree/token_end");
    const auto trank = rd(i32, "/tree/rank");
    const auto ttok = rd(i32, "/tree/tokens"), tver = rd(i32, "/tree/versions");
    const auto tlp = rd(0.f, "/tree/logprobs");
    const auto tmask = rd(uint8_t{0}, "/tree/loss_mask");
    const auto node = rd(i64, "/samples/tree_node"), off = rd(i64, "/samples/token_offsets");
    const auto srank = rd(i32, "/samples/rank");
    const auto tok = rd(i32, "/samples/tokens"), ver = rd(i32, "/samples/versions");
    const auto lp = rd(0.f, "/samples/logprobs");
    const auto mask = rd(uint8_t{0}, "/samples/loss_mask");
    const size_t rows = parent.size();
    // Structure: parents are earlier rows of the same rank; ranges tile the token arrays.
    for (size_t i = 0; i < rows; ++i) {
        EXPECT_LT(parent[i], static_cast<int64_t>(i));
        EXPECT_EQ(start[i], i ? end[i - 1] : 0);
        EXPECT_LT(start[i], end[i]);
        if (parent[i] >= 0) {
            const size_t p = static_cast<size_t>(parent[i]);
            EXPECT_EQ(trank[p], trank[i]);
            EXPECT_GE(depth[i], depth[p]);
            EXPECT_LE(depth[i], depth[p] + end[p] - start[p]);
        } else {
            EXPECT_EQ(depth[i], 0);
        }
    }
    EXPECT_EQ(rows ? static_cast<size_t>(end.back()) : 0u, ttok.size());
    const size_t n = node.size();
    for (size_t k = 0; k < n; ++k) {
        const int64_t len = off[k + 1] - off[k];
        if (!(node[k] >= 0 && static_cast<size_t>(node[k]) < rows)) {
            ADD_FAILURE() << "sample row " << k << " has tree_node " << node[k];
            continue;
        }
        EXPECT_EQ(trank[static_cast<size_t>(node[k])], srank[k]);
        int64_t L = len;
        size_t wrong = 0;
        for (int64_t s = node[k]; s >= 0; s = parent[static_cast<size_t>(s)]) {
            const size_t i = static_cast<size_t>(s);
            const int64_t own = L - depth[i];
            if (own < 0 || own > end[i] - start[i]) {
                ADD_FAILURE() << "sample row " << k << ": length does not fit /tree row " << s;
                break;
            }
            for (int64_t j = 0; j < own; ++j) {
                const size_t a = static_cast<size_t>(start[i] + j);
                const size_t b = static_cast<size_t>(off[k] + depth[i] + j);
                wrong += ttok[a] != tok[b] || tver[a] != ver[b] || tmask[a] != mask[b] || !same_float(tlp[a], lp[b]);
            }
            L = depth[i];
        }
        EXPECT_EQ(L, 0) << "sample row " << k;
        EXPECT_EQ(wrong, 0u) << "sample row " << k << ": tokens differ from /tree";
    }
    return static_cast<int64_t>(n);
}

}  // namespace

TEST(TreeFile, EverySampleRebuildsFromTree) {
    const std::string path = test_file();
    int64_t tree_tokens = 0, sample_tokens = 0;
    std::vector<std::vector<int32_t>> mine;  // this rank's sample tokens, from the workload
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        traj::TrajectoryManager m;
        Workload w(world_rank(), 42);
        for (int round = 0; round < 3; ++round)
            for (SampleRecord& s : write_round(f, m, w, round)) mine.push_back(std::move(s.tokens));
        const TableSizes sz = f.sizes();
        tree_tokens = sz.tree_tokens;
        sample_tokens = sz.tokens;
        EXPECT_EQ(f.io_stats().independent_writes, 0);
        const traj::Stats st = m.stats();
        EXPECT_EQ(st.segments, m.exported_segments());
        EXPECT_LT(st.tokens_stored, st.tokens_requests);
        f.close();
    }
    EXPECT_GT(sample_tokens, 0);
    EXPECT_LT(tree_tokens, sample_tokens) << "shared prefixes are stored once";
    // Every rank reads the whole file; compares all samples, and its own against the workload.
    const int64_t n = expect_samples_rebuild_from_tree(path);
    int64_t total = static_cast<int64_t>(mine.size()), all = 0;
    MPI_Allreduce(&total, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(n, all);
    const double saved = 1.0 - static_cast<double>(tree_tokens) / static_cast<double>(sample_tokens);
    if (world_rank() == 0)
        printf("[ traj ] %lld samples, %lld sample tokens, %lld /tree tokens: %.1f%% saved\n",
               static_cast<long long>(n), static_cast<long long>(sample_tokens), static_cast<long long>(tree_tokens),
               100.0 * saved);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(TreeFile, TruncateAndOpenAppendKeepTreeConsistent) {
    const std::string path = test_file();
    TableSizes snap;
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        traj::TrajectoryManager m;
        Workload w(world_rank(), 7);
        write_round(f, m, w, 0);
        write_round(f, m, w, 1);
        snap = f.sizes();
        write_round(f, m, w, 2);  // after the "checkpoint": discarded below
        EXPECT_GT(f.sizes().tree, snap.tree);
    }
    {
        RunFile g = RunFile::open_append(MPI_COMM_WORLD, path);
        EXPECT_GT(g.sizes().tree_tokens, snap.tree_tokens);
        TableSizes bad = snap;
        bad.tree_tokens = snap.tree_tokens + 1;
        EXPECT_THROW(g.truncate(bad), Error);  // every rank, nothing changed
        bad = snap;
        bad.tree = g.sizes().tree + 1;
        EXPECT_THROW(g.truncate(bad), Error);
        TableSizes to = snap;
        to.tree_tokens = -1;
        EXPECT_GT(g.truncate(to), 0);
        EXPECT_EQ(g.sizes().tree, snap.tree);
        EXPECT_EQ(g.sizes().tree_tokens, snap.tree_tokens);
        // After a resume the sessions start afresh: a new manager appends root rows.
        traj::TrajectoryManager m;
        Workload w(world_rank(), 99);
        write_round(g, m, w, 2);
        EXPECT_EQ(g.io_stats().independent_writes, 0);
    }
    expect_samples_rebuild_from_tree(path);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(TreeFile, InvalidRowsThrowOnEveryRankAndLeaveFileUsable) {
    const std::string path = test_file();
    RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
    TreeNodeRecord ok;
    ok.tokens = {1, 2};
    ok.logprobs = {std::nanf(""), -0.5f};
    ok.versions = {-1, 0};
    ok.loss_mask = {0, 1};
    ok.rank = world_rank();
    std::vector<TreeNodeRecord> rows;
    if (world_rank() == 0) {
        TreeNodeRecord b = ok;
        b.parent = 5;  // no such earlier row
        rows.push_back(b);
    }
    EXPECT_THROW(f.append_tree(rows), Error);
    rows.clear();
    if (world_rank() == 0) {
        TreeNodeRecord b = ok;
        b.versions.pop_back();
        rows.push_back(b);
    }
    EXPECT_THROW(f.append_tree(rows), Error);
    TreeNodeRecord child = ok;
    child.parent_in_batch = 0;
    child.depth = 1;
    const int64_t first = f.append_tree({ok, child});
    EXPECT_EQ(first, 2 * world_rank());
    EXPECT_EQ(f.sizes().tree, 2 * world_size());
    EXPECT_EQ(f.append_tree({}), -1);
    f.close();
    File file = open_file_serial(path);
    Dataset d = open_dataset(file.get(), "/tree/parent");
    const auto parent = read_all<int64_t>(d.get());
    for (int r = 0; r < world_size(); ++r) {
        EXPECT_EQ(parent[static_cast<size_t>(2 * r)], -1);
        EXPECT_EQ(parent[static_cast<size_t>(2 * r + 1)], 2 * r);
    }
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}
