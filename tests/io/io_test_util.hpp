// SPDX-License-Identifier: Apache-2.0
// io_test_util: helpers for the multi-rank io tests: a per-run temp dir (PID of rank 0,
// broadcast), per-test file names, cross-rank agreement, deterministic sample rows, and
// serial read-back through the HDF5 C API. Does not write run files itself.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "io/h5_dataset.hpp"
#include "io/h5_file.hpp"
#include "io/run_file.hpp"

namespace tagflow::io::test {

inline int world_rank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
inline int world_size() {
    int s = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    return s;
}

/// True on every rank iff `ok` is true on every rank (never early-return on one rank).
inline bool all_ranks(bool ok) {
    int v = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
}

/// /tmp/tagflow-io-<pid of rank 0>, created by rank 0; removed at the end of the run.
const std::string& temp_dir();

/// <temp_dir>/<TestSuite>.<Test><suffix>.h5, identical on every rank.
inline std::string test_file(const std::string& suffix = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return temp_dir() + "/" + info->test_suite_name() + "." + info->name() + suffix + ".h5";
}

/// Rows rank `rank` contributes in round `round`: uneven, and the last rank has none in round 0.
inline int rows_of(int rank, int round, int nranks) {
    if (rank == nranks - 1 && round == 0) return 0;
    return (rank + round) % 3 + (rank == 0 ? 1 : 0);
}

/// A deterministic sample: prompt tokens (mask 0, versions -1, logprob NaN), then response.
inline SampleRecord make_sample(int rank, int round, int i) {
    SampleRecord s;
    s.id = rank * 100000 + round * 1000 + i;
    s.group = s.id / 4;
    s.prompt_index = round * 10 + i;
    s.task = "task_r" + std::to_string(rank) + "_" + std::to_string(round);
    s.reward = 0.5f * static_cast<float>(i) - static_cast<float>(rank);
    s.finish_reason = static_cast<FinishReason>((rank + i) % 3);
    s.rank = rank;
    s.version_min = round;
    s.version_max = round + i % 2;
    s.t_done = round + 0.25 * i + 0.001 * rank;
    int len = (rank * 7 + round * 3 + i * 5) % 11;  // 0 is allowed: an empty sample
    int prompt = len / 3;
    for (int j = 0; j < len; ++j) {
        bool gen = j >= prompt;
        s.tokens.push_back(static_cast<int32_t>(s.id * 16 + j));
        s.loss_mask.push_back(gen ? 1 : 0);
        s.logprobs.push_back(gen ? -0.01f * static_cast<float>(j + 1) : std::nanf(""));
        s.versions.push_back(gen ? (j % 2 ? s.version_max : s.version_min) : -1);
    }
    // Text of uneven lengths (some empty), with multi-byte UTF-8 and a NUL byte.
    s.prompt_text = i % 3 == 2 ? "" : "pr\xc3\xa9" + std::to_string(s.id) + std::string(1, '\0') + "<|im_start|>";
    s.response_text = std::string(static_cast<size_t>(len), 'a' + static_cast<char>(i % 26)) + "\xe2\x82\xac";
    return s;
}

/// This rank's samples of one round.
inline std::vector<SampleRecord> samples_of(int rank, int round, int nranks) {
    std::vector<SampleRecord> v;
    for (int i = 0; i < rows_of(rank, round, nranks); ++i) v.push_back(make_sample(rank, round, i));
    return v;
}

/// All samples of rounds [first, last) in file order (round, then rank, then i).
inline std::vector<SampleRecord> expected_samples(int first, int last, int nranks) {
    std::vector<SampleRecord> v;
    for (int round = first; round < last; ++round)
        for (int r = 0; r < nranks; ++r)
            for (const SampleRecord& s : samples_of(r, round, nranks)) v.push_back(s);
    return v;
}

/// Reads dataset `path` of an (already closed) file, serially, as T.
template <class T>
std::vector<T> read_ds(hid_t file, const char* path) {
    Dataset d = open_dataset(file, path);
    return read_all<T>(d.get());
}
inline std::vector<std::string> read_strings(hid_t file, const char* path) {
    Dataset d = open_dataset(file, path);
    return read_all_strings(d.get());
}

/// EXPECTs that `file` holds exactly `want` in /samples (rows, offsets and flat arrays).
void expect_samples(hid_t file, const std::vector<SampleRecord>& want);

}  // namespace tagflow::io::test
