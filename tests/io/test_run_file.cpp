// SPDX-License-Identifier: Apache-2.0
// test_run_file: RunFile at np 1/2/4: uneven collective appends (a rank with no rows, a
// round with no rows at all), exact serial read-back of every table, attributes and enums,
// collective I/O really used, open_append, truncate, errors raised on every rank.
#include <gtest/gtest.h>

#include <cmath>

#include "io/h5_dataset.hpp"
#include "io/h5_file.hpp"
#include "io/run_file.hpp"
#include "io_test_util.hpp"

namespace tagflow::io::test {
namespace {

const std::string kLongHost = std::string(63, 'h') + "\xc3\xa9";  // 65 bytes; é spans bytes 63-64

RunAttributes attrs(const std::string& job = "4242") {
    RunAttributes a;
    a.config_json = R"({"task":"gsm8k","steps":3})";
    a.tagflow_version = "0.1.0-test";
    a.world_size = world_size();
    a.t0_unix = 1.7e9 + world_rank();  // differs per rank: rank 0's value must win
    a.slurm_job_id = job;
    return a;
}

std::vector<ConsumedRecord> consumed_of(int rank, int round, int n) {
    std::vector<ConsumedRecord> v;
    for (const SampleRecord& s : samples_of(rank, round, n))
        v.push_back({s.id, round, 0.125f * static_cast<float>(s.id % 7), s.id % 5 ? 1.f : 0.f});
    return v;
}
std::vector<StepRecord> steps_of(int rank, int round) {
    if (rank != 0) return {};
    StepRecord s;
    s.step = round;
    s.t_start = 10.0 * round;
    s.t_end = 10.0 * round + 2.5;
    s.policy_version = round + 1;
    s.samples = 8;
    s.tokens = 100 + round;
    s.reward_mean = 0.5f;
    s.loss = -0.25f * static_cast<float>(round);
    s.staleness_max = round;
    s.idle_frac = 0.1f;
    s.stale_dropped = 3 * round + 1;
    s.stale_weighted = round;
    s.skipped_updates = round % 2;
    s.is_weight_mean = 0.5 + round;
    s.is_weight_max = 2.5 * round;
    s.rs_rejected = 2 * round;
    s.rs_rejected_tokens = 9 * round;
    s.train_real_tokens = 100 + round;
    s.train_token_slots = 300 + 2 * round;
    s.train_members = 2 + round;
    s.train_group = "0-" + std::to_string(1 + round);
    s.regroup = static_cast<tagflow::io::Regroup>(round % 4);
    s.predicted_s = 0.25 * round;
    s.predicted_current_s = 0.5 * round;
    s.resplit_s = 0.125 * round;
    s.resplit_bytes = 1000 * round;
    return {s};
}
std::vector<EvalRecord> eval_of(int rank, int round, int n) {
    if (rank != n - 1) return {};
    return {{round, "a_task_name_much_longer_than_thirty_two_bytes_" + std::to_string(round), 0.75f, 16,
             "source/" + std::to_string(round), round % 3}};
}
std::vector<SyncRecord> syncs_of(int rank, int round) {
    if (rank != 0) return {};
    // Even rounds: a dense row with the defaults (dense_bytes = bytes, gbps computed by the
    // writer); odd rounds: a delta row with every field given.
    if (round % 2 == 0) return {{round + 1, 1 << 20, 10.0 * round + 2.5, 10.0 * round + 2.75, "mpi_bcast"}};
    return {{round + 1, 1 << 18, 10.0 * round + 2.5, 10.0 * round + 2.75, "mpi_bcast_delta", 1 << 20, 3, 0.5f}};
}
std::vector<SpanRecord> spans_of(int rank, int round) {
    std::vector<SpanRecord> v;
    for (int i = 0; i < (rank + round) % 2 + rank % 2; ++i)
        v.push_back({rank, static_cast<SpanKind>((rank + i) % 7), round + 0.1 * i, round + 0.1 * i + 0.05, round});
    return v;
}
std::vector<RankRecord> ranks_of(int rank, int round) {
    if (round != 0) return {};
    return {{rank, kLongHost, "rollout,train", "option", rank % 2, 0.001 * rank}};
}

template <class Rec, class F>
std::vector<Rec> all_rows(int first, int last, int n, F per_rank_round) {
    std::vector<Rec> v;
    for (int round = first; round < last; ++round)
        for (int r = 0; r < n; ++r)
            for (const Rec& x : per_rank_round(r, round)) v.push_back(x);
    return v;
}

// Appends rounds [first, last) of every table, flushing after each round.
void write_rounds(RunFile& f, int first, int last) {
    const int r = world_rank(), n = world_size();
    for (int round = first; round < last; ++round) {
        f.append_samples(samples_of(r, round, n));
        f.append_consumed(consumed_of(r, round, n));
        f.append_steps(steps_of(r, round));
        f.append_eval(eval_of(r, round, n));
        f.append_syncs(syncs_of(r, round));
        f.append_timeline(spans_of(r, round));
        f.append_ranks(ranks_of(r, round));
        f.flush();
    }
}

// EXPECTs the exact contents of every table for rounds [0, last).
void expect_tables(const std::string& path, int last) {
    const int n = world_size();
    File file = open_file_serial(path);
    hid_t f = file.get();
    expect_samples(f, expected_samples(0, last, n));

    auto cons = all_rows<ConsumedRecord>(0, last, n, [n](int r, int k) { return consumed_of(r, k, n); });
    EXPECT_EQ(read_ds<int64_t>(f, "/consumed/id").size(), cons.size());
    auto cid = read_ds<int64_t>(f, "/consumed/id");
    auto cadv = read_ds<float>(f, "/consumed/advantage");
    auto cw = read_ds<float>(f, "/consumed/weight");
    auto cstep = read_ds<int32_t>(f, "/consumed/step");
    for (size_t i = 0; i < std::min(cid.size(), cons.size()); ++i) {
        EXPECT_EQ(cid[i], cons[i].id);
        EXPECT_EQ(cstep[i], cons[i].step);
        EXPECT_EQ(cadv[i], cons[i].advantage);
        EXPECT_EQ(cw[i], cons[i].weight);
    }

    auto st = read_ds<int32_t>(f, "/steps/step");
    auto t0 = read_ds<double>(f, "/steps/t_start");
    auto t1 = read_ds<double>(f, "/steps/t_end");
    auto tok = read_ds<int64_t>(f, "/steps/tokens");
    auto loss = read_ds<float>(f, "/steps/loss");
    ASSERT_EQ(st.size(), static_cast<size_t>(last));
    for (int k = 0; k < last; ++k) {
        StepRecord w = steps_of(0, k)[0];
        EXPECT_EQ(st[k], w.step);
        EXPECT_EQ(t0[k], w.t_start);
        EXPECT_EQ(t1[k], w.t_end);
        EXPECT_GE(t1[k], t0[k]);
        EXPECT_EQ(tok[k], w.tokens);
        EXPECT_EQ(loss[k], w.loss);
    }
    EXPECT_EQ(read_ds<float>(f, "/steps/idle_frac").size(), static_cast<size_t>(last));

    auto etask = read_strings(f, "/eval/task");
    ASSERT_EQ(etask.size(), static_cast<size_t>(last));
    for (int k = 0; k < last; ++k) EXPECT_EQ(etask[k], eval_of(n - 1, k, n)[0].task.substr(0, kTaskLen));  // cut to S32
    auto esource = read_strings(f, "/eval/data_source");
    auto ek = read_ds<int32_t>(f, "/eval/k");
    ASSERT_EQ(esource.size(), static_cast<size_t>(last));
    ASSERT_EQ(ek.size(), static_cast<size_t>(last));
    for (int k = 0; k < last; ++k) {
        EXPECT_EQ(esource[k], eval_of(n - 1, k, n)[0].data_source);
        EXPECT_EQ(ek[k], eval_of(n - 1, k, n)[0].k);
    }

    auto smode = read_strings(f, "/syncs/mode");
    auto sbytes = read_ds<int64_t>(f, "/syncs/bytes");
    ASSERT_EQ(smode.size(), static_cast<size_t>(last));
    auto sdense = read_ds<int64_t>(f, "/syncs/dense_bytes");
    auto sbuckets = read_ds<int32_t>(f, "/syncs/buckets");
    auto sgbps = read_ds<float>(f, "/syncs/gbps");
    ASSERT_EQ(sgbps.size(), static_cast<size_t>(last));
    for (int k = 0; k < last; ++k) {
        SyncRecord w = syncs_of(0, k)[0];
        EXPECT_EQ(smode[k], w.mode);
        EXPECT_EQ(sbytes[k], w.bytes);
        EXPECT_EQ(sdense[k], k % 2 ? w.dense_bytes : w.bytes);
        EXPECT_EQ(sbuckets[k], w.buckets);
        float want = k % 2 ? w.gbps : static_cast<float>((1 << 20) / 0.25 / 1e9);
        EXPECT_EQ(sgbps[k], want);
    }

    auto spans = all_rows<SpanRecord>(0, last, n, spans_of);
    auto trank = read_ds<int32_t>(f, "/timeline/rank");
    auto tkind = read_ds<uint8_t>(f, "/timeline/kind");
    auto tts = read_ds<double>(f, "/timeline/t_start");
    ASSERT_EQ(trank.size(), spans.size());
    for (size_t i = 0; i < spans.size(); ++i) {
        EXPECT_EQ(trank[i], spans[i].rank);
        EXPECT_EQ(tkind[i], static_cast<uint8_t>(spans[i].kind));
        EXPECT_EQ(tts[i], spans[i].t_start);
    }

    auto rrank = read_ds<int32_t>(f, "/ranks/rank");
    auto rhost = read_strings(f, "/ranks/host");
    auto rtags = read_strings(f, "/ranks/tags");
    auto rsrc = read_strings(f, "/ranks/tag_source");
    ASSERT_EQ(rrank.size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
        EXPECT_EQ(rrank[r], r);
        EXPECT_EQ(rhost[r], std::string(63, 'h')) << "cut before the 2-byte UTF-8 sequence";
        EXPECT_EQ(rtags[r], "rollout,train");
        EXPECT_EQ(rsrc[r], "option");
    }
}

TEST(RunFile, UnevenCollectiveAppendsReadBackExactly) {
    const std::string path = test_file();
    IoStats stats;
    TableSizes sizes;
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        write_rounds(f, 0, 3);
        sizes = f.sizes();
        stats = f.io_stats();
        f.close();
        EXPECT_FALSE(f.is_open());
        f.close();  // idempotent
    }
    const auto want = expected_samples(0, 3, world_size());
    EXPECT_EQ(sizes.samples, static_cast<int64_t>(want.size()));
    EXPECT_EQ(sizes.steps, 3);
    EXPECT_EQ(sizes.ranks, world_size());
    // Collective I/O really happened, on every rank, for every write.
    EXPECT_EQ(stats.independent_writes, 0);
    EXPECT_GT(stats.collective_writes, 0);
    EXPECT_TRUE(all_ranks(stats.independent_writes == 0));
    expect_tables(path, 3);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(RunFile, RootAttributesDtypesAndEnums) {
    const std::string path = test_file();
    RunAttributes a = attrs();
    a.config_json = "{\"blob\":\"" + std::string(100000, 'x') + "\"}";  // > 64 KiB: dense storage
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, a);
        EXPECT_EQ(f.attributes().t0_unix, 1.7e9);  // rank 0's value, broadcast
    }                                              // the destructor closes (no exception in flight)
    File file = open_file_serial(path);
    hid_t f = file.get();
    EXPECT_EQ(read_string_attr(f, "format"), "tagflow");
    EXPECT_EQ(read_int_attr(f, "format_version"), 1);
    EXPECT_EQ(read_string_attr(f, "config"), a.config_json);
    EXPECT_EQ(read_string_attr(f, "tagflow_version"), "0.1.0-test");
    EXPECT_EQ(read_int_attr(f, "world_size"), world_size());
    EXPECT_EQ(read_double_attr(f, "t0_unix"), 1.7e9);
    EXPECT_EQ(read_string_attr(f, "slurm_job_id"), "4242");
    {
        Attribute fv(H5Aopen(f, "format_version", H5P_DEFAULT), "format_version");
        Datatype t(H5Aget_type(fv.get()), "type");
        EXPECT_EQ(H5Tget_class(t.get()), H5T_INTEGER);
        EXPECT_EQ(H5Tget_size(t.get()), 4u);
    }
    Dataset fr = open_dataset(f, "/samples/finish_reason");
    EXPECT_EQ(read_string_attr(fr.get(), "enum_names"), "stop,length,abort");
    Dataset kind = open_dataset(f, "/timeline/kind");
    EXPECT_EQ(read_string_attr(kind.get(), "enum_names"), "rollout,train,weight_sync,resplit,idle,io,checkpoint");
    Dataset ts = open_dataset(f, "/steps/t_start");
    EXPECT_EQ(read_string_attr(ts.get(), "units"), "s since t0_unix");
    Dataset gbps = open_dataset(f, "/syncs/gbps");
    EXPECT_EQ(read_string_attr(gbps.get(), "units"), "GB/s");
    // Fixed-length null-padded strings, chunked unlimited 1-D datasets, created empty.
    const std::pair<const char*, size_t> strings[] = {
        {"/samples/task", 32}, {"/eval/task", 32},  {"/eval/data_source", 64}, {"/syncs/mode", 16},
        {"/ranks/host", 64},   {"/ranks/tags", 32}, {"/ranks/tag_source", 16}};
    for (auto [name, len] : strings) {
        Dataset d = open_dataset(f, name);
        Datatype t(H5Dget_type(d.get()), name);
        EXPECT_EQ(H5Tget_class(t.get()), H5T_STRING) << name;
        EXPECT_EQ(H5Tis_variable_str(t.get()), 0) << name;
        EXPECT_EQ(H5Tget_size(t.get()), len) << name;
        EXPECT_EQ(H5Tget_strpad(t.get()), H5T_STR_NULLPAD) << name;
    }
    for (const char* name : {"/samples/tokens", "/samples/id", "/resumes/t", "/consumed/weight"}) {
        Dataset d = open_dataset(f, name);
        Dataspace s(H5Dget_space(d.get()), name);
        hsize_t dims = 1, maxdims = 0;
        EXPECT_EQ(H5Sget_simple_extent_dims(s.get(), &dims, &maxdims), 1) << name;
        EXPECT_EQ(dims, 0u) << name;
        EXPECT_EQ(maxdims, H5S_UNLIMITED) << name;
        PropList dcpl(H5Dget_create_plist(d.get()), name);
        EXPECT_EQ(H5Pget_layout(dcpl.get()), H5D_CHUNKED) << name;
    }
    EXPECT_EQ(read_ds<int64_t>(f, "/samples/token_offsets"), std::vector<int64_t>{0});
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(RunFile, NoJobIdMeansNoAttribute) {
    const std::string path = test_file();
    RunFile::create(MPI_COMM_WORLD, path, attrs("")).close();
    File file = open_file_serial(path);
    EXPECT_FALSE(has_attr(file.get(), "slurm_job_id"));
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(RunFile, OpenAppendContinuesWhereItStopped) {
    const std::string path = test_file();
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        write_rounds(f, 0, 2);
        f.close();
    }
    {
        RunFile f = RunFile::open_append(MPI_COMM_WORLD, path);
        EXPECT_EQ(f.attributes().slurm_job_id, "4242");
        EXPECT_EQ(f.attributes().t0_unix, 1.7e9);
        TableSizes s = f.sizes();
        EXPECT_EQ(s.samples, static_cast<int64_t>(expected_samples(0, 2, world_size()).size()));
        EXPECT_EQ(s.steps, 2);
        write_rounds(f, 2, 3);
        f.append_resumes(world_rank() == 0 ? std::vector<ResumeRecord>{{1, 12.5, 0}} : std::vector<ResumeRecord>{});
        EXPECT_EQ(f.io_stats().independent_writes, 0);
        f.close();
    }
    expect_tables(path, 3);
    File file = open_file_serial(path);
    EXPECT_EQ(read_ds<int32_t>(file.get(), "/resumes/from_step"), std::vector<int32_t>{1});
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/stale_dropped"), (std::vector<int64_t>{1, 4, 7}));
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/stale_weighted"), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(read_ds<int32_t>(file.get(), "/steps/skipped_updates"), (std::vector<int32_t>{0, 1, 0}));
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

// A run started by a tagflow before /steps/stale_dropped, stale_weighted, skipped_updates and the
// off-policy columns (is_weight_mean, is_weight_max, rs_rejected, rs_rejected_tokens) and the train token columns
// (train_real_tokens, train_token_slots) and the train group columns (train_members, train_group,
// regroup, predicted_s, predicted_current_s, resplit_s, resplit_bytes) existed resumes: open_append
// adds them, -1 ("not recorded"; "" and 0 = none for the string and the enum) in the rows written
// before, and appends go on.
TEST(RunFile, OpenAppendAddsColumnsAnOlderFileLacks) {
    const std::string path = test_file();
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        write_rounds(f, 0, 2);
    }
    {
        File f = open_file(MPI_COMM_WORLD, path, true);
        for (const char* name :
             {"/steps/stale_dropped", "/steps/stale_weighted", "/steps/skipped_updates", "/steps/is_weight_mean",
              "/steps/is_weight_max", "/steps/rs_rejected", "/steps/rs_rejected_tokens", "/steps/train_real_tokens",
              "/steps/train_token_slots", "/steps/train_members", "/steps/train_group", "/steps/regroup",
              "/steps/predicted_s", "/steps/predicted_current_s", "/steps/resplit_s", "/steps/resplit_bytes"})
            ASSERT_GE(H5Ldelete(f.get(), name, H5P_DEFAULT), 0);
    }
    {
        RunFile f = RunFile::open_append(MPI_COMM_WORLD, path);
        EXPECT_EQ(f.sizes().steps, 2);
        write_rounds(f, 2, 4);
    }
    expect_tables(path, 4);
    File file = open_file_serial(path);
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/stale_dropped"), (std::vector<int64_t>{-1, -1, 7, 10}));
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/stale_weighted"), (std::vector<int64_t>{-1, -1, 2, 3}));
    EXPECT_EQ(read_ds<int32_t>(file.get(), "/steps/skipped_updates"), (std::vector<int32_t>{-1, -1, 0, 1}));
    EXPECT_EQ(read_ds<double>(file.get(), "/steps/is_weight_mean"), (std::vector<double>{-1, -1, 2.5, 3.5}));
    EXPECT_EQ(read_ds<double>(file.get(), "/steps/is_weight_max"), (std::vector<double>{-1, -1, 5.0, 7.5}));
    EXPECT_EQ(read_ds<int32_t>(file.get(), "/steps/rs_rejected"), (std::vector<int32_t>{-1, -1, 4, 6}));
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/rs_rejected_tokens"), (std::vector<int64_t>{-1, -1, 18, 27}));
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/train_real_tokens"), (std::vector<int64_t>{-1, -1, 102, 103}));
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/train_token_slots"), (std::vector<int64_t>{-1, -1, 304, 306}));
    EXPECT_EQ(read_ds<int32_t>(file.get(), "/steps/train_members"), (std::vector<int32_t>{-1, -1, 4, 5}));
    EXPECT_EQ(read_strings(file.get(), "/steps/train_group"), (std::vector<std::string>{"", "", "0-3", "0-4"}));
    EXPECT_EQ(read_ds<uint8_t>(file.get(), "/steps/regroup"), (std::vector<uint8_t>{0, 0, 2, 3}));
    EXPECT_EQ(read_string_attr(open_dataset(file.get(), "/steps/regroup").get(), "enum_names"),
              "none,kept,moved,forced");
    EXPECT_EQ(read_ds<double>(file.get(), "/steps/predicted_s"), (std::vector<double>{-1, -1, 0.5, 0.75}));
    EXPECT_EQ(read_ds<double>(file.get(), "/steps/predicted_current_s"), (std::vector<double>{-1, -1, 1.0, 1.5}));
    EXPECT_EQ(read_ds<double>(file.get(), "/steps/resplit_s"), (std::vector<double>{-1, -1, 0.25, 0.375}));
    EXPECT_EQ(read_ds<int64_t>(file.get(), "/steps/resplit_bytes"), (std::vector<int64_t>{-1, -1, 2000, 3000}));
    EXPECT_EQ(read_string_attr(open_dataset(file.get(), "/steps/stale_dropped").get(), "units"), "samples");
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

// A run started before /eval had data_source and k resumes: open_append adds them ("" and -1 in
// the rows written before, which were greedy task evaluations), and later rows carry theirs.
TEST(RunFile, OpenAppendAddsTheEvalColumnsAnOlderFileLacks) {
    const std::string path = test_file();
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        write_rounds(f, 0, 2);
    }
    {
        File f = open_file(MPI_COMM_WORLD, path, true);
        for (const char* name : {"/eval/data_source", "/eval/k"}) ASSERT_GE(H5Ldelete(f.get(), name, H5P_DEFAULT), 0);
    }
    {
        RunFile f = RunFile::open_append(MPI_COMM_WORLD, path);
        EXPECT_EQ(f.sizes().eval, 2);
        write_rounds(f, 2, 4);
    }
    File file = open_file_serial(path);
    EXPECT_EQ(read_strings(file.get(), "/eval/data_source"),
              (std::vector<std::string>{"", "", "source/2", "source/3"}));
    EXPECT_EQ(read_ds<int32_t>(file.get(), "/eval/k"), (std::vector<int32_t>{-1, -1, 2, 0}));
    EXPECT_EQ(read_ds<float>(file.get(), "/eval/score").size(), 4u);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

// A run started before /samples had text (no text_start, response_text_start, text_end, text)
// resumes: open_append adds them (-1 offsets in the rows written before, an empty text array),
// later rows' text starts at byte 0, and truncate() back into the old rows empties the text.
TEST(RunFile, OpenAppendAddsTheTextColumnsAnOlderFileLacks) {
    const std::string path = test_file();
    const int n = world_size();
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        write_rounds(f, 0, 2);
    }
    {
        File f = open_file(MPI_COMM_WORLD, path, true);
        for (const char* name :
             {"/samples/text_start", "/samples/response_text_start", "/samples/text_end", "/samples/text"})
            ASSERT_GE(H5Ldelete(f.get(), name, H5P_DEFAULT), 0);
    }
    const size_t old = expected_samples(0, 2, n).size();
    TableSizes before;
    {
        RunFile f = RunFile::open_append(MPI_COMM_WORLD, path);
        EXPECT_EQ(f.sizes().samples, static_cast<int64_t>(old));
        EXPECT_EQ(f.sizes().text, 0);
        before = f.sizes();
        write_rounds(f, 2, 3);
        EXPECT_GT(f.sizes().text, 0);
    }
    auto check = [&](size_t rows_with_text) {
        File file = open_file_serial(path);
        auto ts = read_ds<int64_t>(file.get(), "/samples/text_start");
        auto rs = read_ds<int64_t>(file.get(), "/samples/response_text_start");
        auto te = read_ds<int64_t>(file.get(), "/samples/text_end");
        auto text = read_ds<uint8_t>(file.get(), "/samples/text");
        ASSERT_EQ(ts.size(), old + rows_with_text);
        for (size_t k = 0; k < old; ++k) EXPECT_TRUE(ts[k] == -1 && rs[k] == -1 && te[k] == -1) << "row " << k;
        const auto want = expected_samples(2, 3, n);
        int64_t at = 0;
        for (size_t k = 0; k < rows_with_text; ++k) {
            const SampleRecord& w = want[k];
            EXPECT_EQ(ts[old + k], at);
            ASSERT_EQ(te[old + k], at + static_cast<int64_t>(w.prompt_text.size() + w.response_text.size()));
            EXPECT_EQ(std::string(text.begin() + at, text.begin() + te[old + k]), w.prompt_text + w.response_text);
            EXPECT_EQ(rs[old + k] - at, static_cast<int64_t>(w.prompt_text.size()));
            at = te[old + k];
        }
        EXPECT_EQ(static_cast<int64_t>(text.size()), at);
    };
    check(expected_samples(2, 3, n).size());
    {
        RunFile f = RunFile::open_append(MPI_COMM_WORLD, path);
        TableSizes to = before;
        to.samples -= 1;
        to.tokens = -1;
        f.truncate(to);
        EXPECT_EQ(f.sizes().text, 0);
        f.truncate(to);  // idempotent
    }
    {
        File file = open_file_serial(path);
        EXPECT_EQ(read_ds<uint8_t>(file.get(), "/samples/text").size(), 0u);
        EXPECT_EQ(read_ds<int64_t>(file.get(), "/samples/text_end").size(), old - 1);
    }
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(RunFile, OpenAppendRepairsColumnsOfUnequalLength) {
    const std::string path = test_file();
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        write_rounds(f, 0, 2);
    }
    {  // as if a crash left /steps/loss and /samples/tokens one element longer
        File f = open_file(MPI_COMM_WORLD, path, true);
        PropList dxpl = mpio_dxpl(true);
        const float loss = 9.f;
        const int32_t token = -7;
        const std::pair<const char*, std::pair<hid_t, const void*>> extra[] = {
            {"/steps/loss", {H5T_NATIVE_FLOAT, &loss}}, {"/samples/tokens", {H5T_NATIVE_INT32, &token}}};
        for (const auto& [name, value] : extra) {
            Dataset d = open_dataset(f.get(), name);
            hsize_t n = extent_of(d.get());
            write_slab(d.get(), dxpl.get(), value.first, n + 1, n, world_rank() == 0 ? 1 : 0, value.second);
        }
    }
    {
        RunFile f = RunFile::open_append(MPI_COMM_WORLD, path);
        EXPECT_EQ(f.sizes().steps, 2);
        EXPECT_EQ(f.sizes().samples, static_cast<int64_t>(expected_samples(0, 2, world_size()).size()));
        write_rounds(f, 2, 3);
    }
    expect_tables(path, 3);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(RunFile, TruncateCutsEveryTableBackToASnapshot) {
    const std::string path = test_file();
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        write_rounds(f, 0, 2);
        const TableSizes snap = f.sizes();
        write_rounds(f, 2, 3);  // "after the checkpoint": to be discarded
        f.close();
        RunFile g = RunFile::open_append(MPI_COMM_WORLD, path);
        TableSizes bad = snap;
        bad.steps = 99;
        EXPECT_THROW(g.truncate(bad), Error);  // on every rank, nothing changed
        bad = snap;
        bad.tokens = snap.tokens + 1;
        EXPECT_THROW(g.truncate(bad), Error);
        TableSizes to = snap;
        to.tokens = -1;
        int64_t discarded = g.truncate(to);
        EXPECT_GT(discarded, 0);
        EXPECT_EQ(g.sizes().tokens, snap.tokens);
        g.append_resumes(world_rank() == 0 ? std::vector<ResumeRecord>{{1, 30.0, discarded}}
                                           : std::vector<ResumeRecord>{});
        write_rounds(g, 2, 3);  // the same rows again: one consistent lineage
        g.close();
    }
    expect_tables(path, 3);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(RunFile, InvalidSamplesThrowOnEveryRankAndLeaveFileUsable) {
    const std::string path = test_file();
    const int r = world_rank(), n = world_size();
    {
        RunFile f = RunFile::create(MPI_COMM_WORLD, path, attrs());
        std::vector<SampleRecord> rows = samples_of(r, 1, n);
        if (r == n - 1) {
            rows.push_back(make_sample(r, 1, 7));
            rows.back().versions.push_back(3);  // one entry too many
        }
        EXPECT_THROW(f.append_samples(rows), Error);
        f.append_samples(samples_of(r, 1, n));
        f.close();
    }
    File file = open_file_serial(path);
    expect_samples(file.get(), expected_samples(1, 2, n));
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

TEST(RunFile, OpenAppendRejectsAForeignFile) {
    const std::string path = test_file();
    {
        File f = create_file(MPI_COMM_WORLD, path);
        write_attr(f.get(), "format", "not-tagflow");
    }
    EXPECT_THROW(RunFile::open_append(MPI_COMM_WORLD, path), Error);
    EXPECT_THROW(RunFile::open_append(MPI_COMM_WORLD, path + ".missing"), H5Error);
    EXPECT_TRUE(all_ranks(!::testing::Test::HasFailure()));
}

}  // namespace
}  // namespace tagflow::io::test
