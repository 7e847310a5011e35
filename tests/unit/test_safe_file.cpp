// SPDX-License-Identifier: Apache-2.0
// Serial.safe_file: files tagflow writes into a run directory never follow a planted link,
// a write that runs out of space is one line naming the path, and a run directory others can
// write to is refused.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "common/error.hpp"
#include "common/safe_file.hpp"

namespace fs = std::filesystem;
using tagflow::ConfigError;
using tagflow::Error;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        std::string t = (fs::temp_directory_path() / "tagflow-safe-file-XXXXXX").string();
        path = ::mkdtemp(t.data());
        fs::permissions(path, fs::perms::owner_all);
    }
    ~TempDir() { fs::remove_all(path); }
};

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

std::string thrown(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "(nothing thrown)";
}

}  // namespace

TEST(SafeFile, ReplaceWritesContentAndMode) {
    TempDir d;
    const auto p = (d.path / "membership.json").string();
    tagflow::write_file_replace(p, "first", 0600);
    tagflow::write_file_replace(p, "second\n", 0640);
    EXPECT_EQ(slurp(p), "second\n");
    EXPECT_EQ(fs::status(p).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
    EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1) << "a temporary was left";
}

TEST(SafeFile, ReplaceDoesNotWriteThroughAPlantedLink) {
    TempDir d;
    const auto target = d.path / "victim";
    { std::ofstream(target) << "precious"; }
    const auto link = d.path / "gateway.url";
    fs::create_symlink(target, link);
    tagflow::write_file_replace(link.string(), "http://x\n");
    EXPECT_EQ(slurp(target), "precious");
    EXPECT_FALSE(fs::is_symlink(link));
    EXPECT_EQ(slurp(link), "http://x\n");
}

TEST(SafeFile, CreateNewRefusesAnyExistingEntry) {
    TempDir d;
    const auto target = d.path / "victim";
    { std::ofstream(target) << "precious"; }
    const auto link = d.path / "rank.0";
    fs::create_symlink(target, link);
    const std::string msg = thrown([&] { tagflow::create_new_file(link.string()); });
    EXPECT_NE(msg.find(link.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("exists"), std::string::npos) << msg;
    EXPECT_EQ(slurp(target), "precious");
    const int fd = tagflow::create_new_file((d.path / "fresh").string());
    ASSERT_GE(fd, 0);
    ::close(fd);
}

TEST(SafeFile, OpenForWriteRefusesLinksAndNonFiles) {
    TempDir d;
    const auto target = d.path / "victim";
    { std::ofstream(target) << "precious"; }
    const auto link = d.path / "rank.1";
    fs::create_symlink(target, link);
    std::string msg = thrown([&] { tagflow::open_for_write_nofollow(link.string()); });
    EXPECT_NE(msg.find("symbolic link"), std::string::npos) << msg;
    EXPECT_EQ(slurp(target), "precious");
    fs::create_directory(d.path / "adir");
    msg = thrown([&] { tagflow::open_for_write_nofollow((d.path / "adir").string()); });
    EXPECT_NE(msg.find("adir"), std::string::npos) << msg;
    // Missing: created; existing regular file: opened without truncation.
    int fd = tagflow::open_for_write_nofollow((d.path / "new").string());
    ASSERT_GE(fd, 0);
    ::close(fd);
    fd = tagflow::open_for_write_nofollow(target.string());
    ASSERT_GE(fd, 0);
    ::close(fd);
    EXPECT_EQ(slurp(target), "precious");
}

TEST(SafeFile, FullDeviceIsOneLineNamingThePath) {
    const int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << "/dev/full is needed for this test";
    const std::string msg = thrown([&] { tagflow::write_all(fd, std::string(4096, 'x'), "/run/x/tagflow.h5"); });
    ::close(fd);
    EXPECT_EQ(msg, "/run/x/tagflow.h5: No space left on device");
}

TEST(SafeFile, RunDirWritableByOthersIsRefused) {
    TempDir d;
    const auto run = d.path / "run";
    tagflow::check_run_dir(run.string(), false);  // missing: fine, tagflow creates it
    fs::create_directory(run);
    fs::permissions(run, fs::perms::owner_all);
    tagflow::check_run_dir(run.string(), false);
    fs::permissions(run, fs::perms::all);
    std::string msg;
    try {
        tagflow::check_run_dir(run.string(), false);
    } catch (const ConfigError& e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find("writable by others (mode 0777)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--allow-shared-dir"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    tagflow::check_run_dir(run.string(), true);
    // World-writable with the sticky bit (like /tmp): others cannot rename or remove our files.
    ASSERT_EQ(::chmod(run.c_str(), 01777), 0);
    tagflow::check_run_dir(run.string(), false);
    { std::ofstream(d.path / "file") << "x"; }
    EXPECT_THROW(tagflow::check_run_dir((d.path / "file").string(), false), ConfigError);
}

// A directory another user owns: its owner can plant links there whatever the mode. Needs root
// (chown), as the full-disk tests do.
TEST(SafeFile, RunDirOfAnotherUserIsRefused) {
    TempDir d;
    const auto run = d.path / "run";
    fs::create_directory(run);
    ASSERT_EQ(::chmod(run.c_str(), 0755), 0);
    ASSERT_EQ(::chown(run.c_str(), 65534, 65534), 0) << "this test chowns a directory: run it as root";
    std::string msg;
    try {
        tagflow::check_run_dir(run.string(), false);
    } catch (const ConfigError& e) {
        msg = e.what();
    }
    EXPECT_NE(msg.find("belongs to user id 65534"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--allow-shared-dir"), std::string::npos) << msg;
    tagflow::check_run_dir(run.string(), true);
}

TEST(SafeFile, AppendNeverFollowsALink) {
    TempDir d;
    const auto victim = d.path / "victim", log = d.path / "hdf5-errors.log";
    { std::ofstream(victim) << "precious"; }
    fs::create_symlink(victim, log);
    const std::string msg = thrown([&] { tagflow::append_file_nofollow(log.string(), "stack\n"); });
    EXPECT_NE(msg.find("symbolic link"), std::string::npos) << msg;
    EXPECT_EQ(slurp(victim), "precious");
    fs::remove(log);
    tagflow::append_file_nofollow(log.string(), "one\n");
    tagflow::append_file_nofollow(log.string(), "two\n");
    EXPECT_EQ(slurp(log), "one\ntwo\n");
}
