// SPDX-License-Identifier: Apache-2.0
// io_test_util: temp dir life cycle and the /samples read-back check.
#include "io_test_util.hpp"

#include <cstring>

namespace tagflow::io::test {
namespace {

std::string make_temp_dir() {
    long pid = static_cast<long>(getpid());
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    std::string dir = (std::filesystem::temp_directory_path() / ("tagflow-io-" + std::to_string(pid))).string();
    if (world_rank() == 0) std::filesystem::create_directories(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    return dir;
}

// Removes the temp dir after the last test (rank 0, after every rank is done).
struct TempDirCleanup : ::testing::Environment {
    void TearDown() override {
        MPI_Barrier(MPI_COMM_WORLD);
        if (world_rank() == 0 && !getenv("TAGFLOW_KEEP_TEST_FILES")) std::filesystem::remove_all(temp_dir());
    }
};
[[maybe_unused]] auto* const g_cleanup = ::testing::AddGlobalTestEnvironment(new TempDirCleanup);

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

const std::string& temp_dir() {
    static const std::string dir = make_temp_dir();
    return dir;
}

void expect_samples(hid_t file, const std::vector<SampleRecord>& want) {
    auto id = read_ds<int64_t>(file, "/samples/id");
    auto group = read_ds<int64_t>(file, "/samples/group");
    auto pidx = read_ds<int64_t>(file, "/samples/prompt_index");
    auto task = read_strings(file, "/samples/task");
    auto reward = read_ds<float>(file, "/samples/reward");
    auto fr = read_ds<uint8_t>(file, "/samples/finish_reason");
    auto rank = read_ds<int32_t>(file, "/samples/rank");
    auto vmin = read_ds<int32_t>(file, "/samples/version_min");
    auto vmax = read_ds<int32_t>(file, "/samples/version_max");
    auto tdone = read_ds<double>(file, "/samples/t_done");
    auto off = read_ds<int64_t>(file, "/samples/token_offsets");
    auto tokens = read_ds<int32_t>(file, "/samples/tokens");
    auto lp = read_ds<float>(file, "/samples/logprobs");
    auto ver = read_ds<int32_t>(file, "/samples/versions");
    auto mask = read_ds<uint8_t>(file, "/samples/loss_mask");
    auto text_start = read_ds<int64_t>(file, "/samples/text_start");
    auto response_start = read_ds<int64_t>(file, "/samples/response_text_start");
    auto text_end = read_ds<int64_t>(file, "/samples/text_end");
    auto text = read_ds<uint8_t>(file, "/samples/text");

    const size_t n = want.size();
    ASSERT_EQ(id.size(), n);  // ASSERT is fine here: no collective follows inside this helper
    for (auto sz : {group.size(), pidx.size(), task.size(), reward.size(), fr.size(), rank.size(), vmin.size(),
                    vmax.size(), tdone.size(), text_start.size(), response_start.size(), text_end.size()})
        EXPECT_EQ(sz, n);
    ASSERT_EQ(off.size(), n + 1);
    EXPECT_EQ(static_cast<size_t>(n ? text_end.back() : 0), text.size());
    EXPECT_EQ(off.front(), 0);
    EXPECT_EQ(static_cast<size_t>(off.back()), tokens.size());
    EXPECT_EQ(lp.size(), tokens.size());
    EXPECT_EQ(ver.size(), tokens.size());
    EXPECT_EQ(mask.size(), tokens.size());
    for (size_t k = 0; k + 1 < off.size(); ++k) EXPECT_LE(off[k], off[k + 1]) << "row " << k;
    if (lp.size() != tokens.size() || ver.size() != tokens.size() || mask.size() != tokens.size()) return;
    for (size_t k = 0; k < n; ++k) {
        const SampleRecord& w = want[k];
        EXPECT_EQ(id[k], w.id) << "row " << k;
        EXPECT_EQ(group[k], w.group);
        EXPECT_EQ(pidx[k], w.prompt_index);
        EXPECT_EQ(task[k], w.task.substr(0, kTaskLen));
        EXPECT_EQ(reward[k], w.reward);
        EXPECT_EQ(fr[k], static_cast<uint8_t>(w.finish_reason));
        EXPECT_EQ(rank[k], w.rank);
        EXPECT_EQ(vmin[k], w.version_min);
        EXPECT_EQ(vmax[k], w.version_max);
        EXPECT_EQ(tdone[k], w.t_done);
        // Text: contiguous in row order from 0, the prompt's then the response's bytes.
        EXPECT_EQ(text_start[k], k ? text_end[k - 1] : 0) << "row " << k;
        EXPECT_EQ(response_start[k] - text_start[k], static_cast<int64_t>(w.prompt_text.size())) << "row " << k;
        EXPECT_EQ(text_end[k] - response_start[k], static_cast<int64_t>(w.response_text.size())) << "row " << k;
        if (text_end[k] <= static_cast<int64_t>(text.size()) && text_start[k] >= 0 &&
            response_start[k] >= text_start[k] && text_end[k] >= response_start[k]) {
            EXPECT_EQ(std::string(text.begin() + text_start[k], text.begin() + response_start[k]), w.prompt_text);
            EXPECT_EQ(std::string(text.begin() + response_start[k], text.begin() + text_end[k]), w.response_text);
        }
        ASSERT_EQ(static_cast<size_t>(off[k + 1] - off[k]), w.tokens.size()) << "row " << k;
        for (size_t j = 0; j < w.tokens.size(); ++j) {
            size_t g = static_cast<size_t>(off[k]) + j;
            EXPECT_EQ(tokens[g], w.tokens[j]);
            EXPECT_TRUE(same_float(lp[g], w.logprobs[j])) << "token " << g;
            EXPECT_EQ(ver[g], w.versions[j]);
            EXPECT_EQ(mask[g], w.loss_mask[j]);
            EXPECT_EQ(std::isnan(lp[g]), mask[g] == 0) << "NaN exactly where loss_mask is 0";
        }
    }
}

}  // namespace tagflow::io::test
