// SPDX-License-Identifier: Apache-2.0
// Checkpoint directories without MPI or torch: manifest round trip, CRC-32, the atomic commit
// (first, replacing, crash recovery) and the one-line ConfigErrors of corrupt checkpoints.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "common/error.hpp"
#include "model/safetensors.hpp"

namespace ck = tagflow::ckpt;

namespace {

std::string temp_root(const std::string& name) {
    std::string d = ::testing::TempDir() + "tagflow_ckpt_" + name + "_" + std::to_string(::getpid());
    ck::remove_tree(d);
    ck::make_dirs(d);
    return d;
}

void write(const std::string& path, const std::string& data) {
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    o << data;
}

std::string read(const std::string& path) {
    std::ifstream i(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(i), {});
}

bool exists(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0;
}

// A complete checkpoint staged in out/checkpoint.tmp-<step> holding one data file.
std::string stage(const std::string& out, int step, const std::string& payload) {
    std::string dir = ck::staging_dir(out, step);
    ck::prepare_staging(dir);
    ck::make_dirs(dir + "/policy");
    write(dir + "/policy/data.bin", payload);
    ck::Manifest m;
    m.set_int("step", step);
    m.set_double("reward", 0.1 * step);
    m.files.push_back(ck::describe_file(dir, "policy/data.bin"));
    ck::write_manifest(dir, m);
    return dir;
}

// The message of the ConfigError `f` throws ("" when it throws none).
template <typename F>
std::string config_error(F f) {
    try {
        f();
    } catch (const tagflow::ConfigError& e) {
        std::string w = e.what();
        EXPECT_EQ(w.find('\n'), std::string::npos) << "one line: " << w;
        return w;
    }
    return "";
}

}  // namespace

TEST(Checkpoint, Crc32MatchesZlib) {
    EXPECT_EQ(ck::crc32("123456789", 9), 0xCBF43926u);
    // Chained calls equal one call.
    EXPECT_EQ(ck::crc32("6789", 4, ck::crc32("12345", 5)), 0xCBF43926u);
}

TEST(Checkpoint, ManifestRoundTrip) {
    std::string out = temp_root("manifest");
    std::string dir = stage(out, 7, "abcdef");
    ck::Manifest m = ck::read_manifest(dir);
    EXPECT_EQ(m.format_version, ck::kFormatVersion);
    EXPECT_EQ(m.get_int("step"), 7);
    EXPECT_EQ(m.get_double("reward"), 0.1 * 7);  // exact: hex float
    ASSERT_EQ(m.files.size(), 1u);
    EXPECT_EQ(m.files[0].name, "policy/data.bin");
    EXPECT_EQ(m.files[0].bytes, 6u);
    EXPECT_EQ(m.files[0].crc32, ck::crc32("abcdef", 6));
    EXPECT_NO_THROW(ck::verify_files(dir, m));
    EXPECT_NE(config_error([&] { m.get_int("nope"); }).find("missing key 'nope'"), std::string::npos);
    ck::remove_tree(out);
}

TEST(Checkpoint, CommitReplacesAtomicallyAndCleansUp) {
    std::string out = temp_root("commit");
    EXPECT_FALSE(ck::recover_and_probe(out));
    ck::commit(out, stage(out, 3, "three"));
    EXPECT_TRUE(ck::recover_and_probe(out));
    EXPECT_EQ(ck::read_manifest(ck::checkpoint_dir(out)).get_int("step"), 3);
    // A second commit replaces the first; neither staging dir nor the old one stays behind.
    ck::commit(out, stage(out, 6, "six!!"));
    ck::Manifest m = ck::read_manifest(ck::checkpoint_dir(out));
    EXPECT_EQ(m.get_int("step"), 6);
    EXPECT_EQ(read(ck::checkpoint_dir(out) + "/policy/data.bin"), "six!!");
    EXPECT_NO_THROW(ck::verify_files(ck::checkpoint_dir(out), m));
    EXPECT_FALSE(exists(ck::staging_dir(out, 6)));
    EXPECT_FALSE(exists(ck::staging_dir(out, 3)));
    EXPECT_FALSE(exists(ck::previous_dir(out)));
    // A crash inside the non-atomic fallback left only checkpoint.old: it comes back.
    ASSERT_EQ(std::rename(ck::checkpoint_dir(out).c_str(), ck::previous_dir(out).c_str()), 0);
    EXPECT_TRUE(ck::recover_and_probe(out));
    EXPECT_EQ(ck::read_manifest(ck::checkpoint_dir(out)).get_int("step"), 6);
    // A stale staging dir (a crash while writing) is removed by remove_all, as is the checkpoint.
    stage(out, 9, "nine");
    ck::remove_all(out);
    EXPECT_FALSE(exists(ck::staging_dir(out, 9)));
    EXPECT_FALSE(ck::recover_and_probe(out));
    ck::remove_tree(out);
}

TEST(Checkpoint, CorruptCheckpointsAreOneLineConfigErrors) {
    std::string out = temp_root("corrupt");
    ck::commit(out, stage(out, 2, "0123456789"));
    const std::string dir = ck::checkpoint_dir(out), data = dir + "/policy/data.bin", man = dir + "/manifest.txt";
    const ck::Manifest good = ck::read_manifest(dir);

    write(data, "01234");  // truncated
    std::string e = config_error([&] { ck::verify_files(dir, good); });
    EXPECT_NE(e.find(data), std::string::npos) << e;
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;

    write(data, "0123456780");  // same size, one byte changed
    e = config_error([&] { ck::verify_files(dir, good); });
    EXPECT_NE(e.find(data), std::string::npos) << e;
    EXPECT_NE(e.find("corrupt"), std::string::npos) << e;

    ::unlink(data.c_str());
    e = config_error([&] { ck::verify_files(dir, good); });
    EXPECT_NE(e.find("missing"), std::string::npos) << e;

    const std::string text = read(man);
    write(man, "tagflow-checkpoint 99\nend\n");
    e = config_error([&] { ck::read_manifest(dir); });
    EXPECT_NE(e.find(man), std::string::npos) << e;
    EXPECT_NE(e.find("format version 99"), std::string::npos) << e;

    write(man, text.substr(0, text.size() / 2));  // cut short: no 'end' line
    e = config_error([&] { ck::read_manifest(dir); });
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;

    write(man, "{\"format\": \"something else\"}\n");
    e = config_error([&] { ck::read_manifest(dir); });
    EXPECT_NE(e.find("not a tagflow checkpoint"), std::string::npos) << e;

    write(man, "tagflow-checkpoint 1\nfile ../../etc/passwd 3 00000000\nend\n");
    e = config_error([&] { ck::read_manifest(dir); });
    EXPECT_NE(e.find("malformed file line"), std::string::npos) << e;

    ::unlink(man.c_str());
    e = config_error([&] { ck::read_manifest(dir); });
    EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
    ck::remove_tree(out);
}

TEST(Checkpoint, ShapeMismatchNamesTensor) {
    std::string out = temp_root("shapes");
    std::vector<float> w(6, 1.f);
    tagflow::model::st::TensorView t;
    t.name = "model.norm.weight";
    t.shape = {6};
    t.data = w.data();
    t.nbytes = w.size() * sizeof(float);
    tagflow::model::st::write_file(out + "/m.safetensors", {t});
    EXPECT_NO_THROW(ck::verify_shapes(out, "m.safetensors", {{"model.norm.weight", {6}}}));
    std::string e = config_error([&] { ck::verify_shapes(out, "m.safetensors", {{"model.norm.weight", {8}}}); });
    EXPECT_NE(e.find("model.norm.weight has shape [6], the model needs [8]"), std::string::npos) << e;
    e = config_error([&] {
        ck::verify_shapes(out, "m.safetensors", {{"model.norm.weight", {6}}, {"lm_head.weight", {6, 2}}});
    });
    EXPECT_NE(e.find("no tensor lm_head.weight"), std::string::npos) << e;
    // Truncated data: the safetensors reader's own check, as a ConfigError naming the file.
    std::string bytes = read(out + "/m.safetensors");
    write(out + "/m.safetensors", bytes.substr(0, bytes.size() - 5));
    e = config_error([&] { ck::verify_shapes(out, "m.safetensors", {{"model.norm.weight", {6}}}); });
    EXPECT_NE(e.find(out + "/m.safetensors"), std::string::npos) << e;
    ck::remove_tree(out);
}
