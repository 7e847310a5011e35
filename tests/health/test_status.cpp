// SPDX-License-Identifier: Apache-2.0
// health/status: the board, the records, and the writer thread against a real directory: the
// coordinator's status.json names every rank, ages a rank whose record stops changing until it
// is stale, ignores a foreign or torn rank record, and says done at the end; a planted link at
// status.json is replaced, never written through.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/safe_file.hpp"
#include "health/status.hpp"

using namespace tagflow::health;
using nlohmann::json;

namespace {
std::string slurp(const std::string& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}
}  // namespace

TEST(Status, RoleNamesFollowSpanKinds) {
    EXPECT_STREQ(role_name(-1), "starting");
    EXPECT_STREQ(role_name(0), "rollout");
    EXPECT_STREQ(role_name(1), "train");
    EXPECT_STREQ(role_name(4), "idle");
    EXPECT_STREQ(role_name(6), "checkpoint");
    EXPECT_STREQ(role_name(7), "unknown");
}

TEST(Status, RankRecordCarriesTheBoard) {
    StatusConfig c;
    c.rank = 1;
    c.hosts = {"a", "b"};
    c.tags = {"train", "rollout"};
    c.run_id = "r1";
    StatusSnapshot s;
    s.role = 0;
    s.step = 7;
    s.policy_version = 6;
    s.engine_active = 3;
    s.engine_waiting = 2;
    json j = rank_record(c, 5, 1000.5, false, s, 123.0);
    EXPECT_EQ(j["format"], kRankStatusFormat);
    EXPECT_EQ(j["rank"], 1);
    EXPECT_EQ(j["host"], "b");
    EXPECT_EQ(j["tags"], "rollout");
    EXPECT_EQ(j["role"], "rollout");
    EXPECT_EQ(j["step"], 7);
    EXPECT_EQ(j["policy_version"], 6);
    EXPECT_EQ(j["engine_slots"], 3);
    EXPECT_EQ(j["engine_waiting"], 2);
    EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 123.0);
    EXPECT_EQ(rank_record(c, 6, 1001, true, s, 0)["role"], "done");
    s.role_s[1] = 2.5;
    j = rank_record(c, 7, 1002, false, s, 0);
    ASSERT_TRUE(j["role_s"].is_object());
    EXPECT_EQ(j["role_s"].size(), static_cast<size_t>(kRoleKinds));
    EXPECT_DOUBLE_EQ(j["role_s"]["train"].get<double>(), 2.5);
    EXPECT_DOUBLE_EQ(j["role_s"]["rollout"].get<double>(), 0.0);
}

// The time in each role adds up: a multiplexed rank that rolled out for an instant between two
// records still shows it (App.status_roles relies on this, not on catching the instant).
TEST(Status, RoleSecondsAccumulatePerRole) {
    StatusBoard& b = status_board();
    b.set_role(4, 0);  // idle
    const StatusSnapshot a = b.snapshot();
    const auto t0 = std::chrono::steady_clock::now();
    b.set_role(0, 1);  // rollout
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    b.set_role(0, 2);  // the same role, next step: one span of time
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b.set_role(1, 2);  // train
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    const StatusSnapshot c = b.snapshot();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(c.role, 1);
    const double roll = c.role_s[0] - a.role_s[0], train = c.role_s[1] - a.role_s[1];
    EXPECT_GE(roll, 0.060);
    EXPECT_GE(train, 0.030);  // the open span counts up to the snapshot
    double sum = 0;
    for (int k = 0; k < kRoleKinds; ++k) {
        EXPECT_GE(c.role_s[k], a.role_s[k]) << role_name(k);
        sum += c.role_s[k] - a.role_s[k];
    }
    EXPECT_LE(sum, wall + 0.005);  // no time counted twice (idle's share is the instant before t0)
    const StatusSnapshot d = b.snapshot();
    EXPECT_GE(d.role_s[1], c.role_s[1]);
}

// One test drives the process-wide writer (it starts once per process).
TEST(Status, WriterAgesASilentRankAndEndsDone) {
    char tmpl[] = "/tmp/tagflow-status-test.XXXXXX";
    const char* d = mkdtemp(tmpl);
    ASSERT_NE(d, nullptr);
    const std::string dir = d;
    ASSERT_EQ(mkdir((dir + "/.status").c_str(), 0755), 0);
    // A planted link where status.json goes: replaced by the record, its target untouched.
    { std::ofstream(dir + "/target") << "keep"; }
    ASSERT_EQ(symlink((dir + "/target").c_str(), (dir + "/status.json").c_str()), 0);
    // Rank 1 wrote one record and then stopped; rank 2's file is another run's.
    StatusConfig c1;
    c1.rank = 1;
    c1.run_id = "run-A";
    tagflow::write_file_replace(dir + "/.status/rank.1.json", rank_record(c1, 1, 0, false, StatusSnapshot{}, 0).dump());
    StatusConfig c2 = c1;
    c2.rank = 2;
    c2.run_id = "run-B";
    tagflow::write_file_replace(dir + "/.status/rank.2.json", rank_record(c2, 9, 0, false, StatusSnapshot{}, 0).dump());

    status_board().set_role(1, 3);
    status_board().step_done(3, 48, 12.5, 0.5, 2);
    status_board().set_engine(4, 1, 1000, 3);
    StatusConfig c;
    c.out = dir;
    c.rank = 0;
    c.world_size = 3;
    c.coordinator = 0;
    c.hosts = {"h0", "h1", "h2"};
    c.tags = {"rollout,train", "rollout", "train"};
    c.run_id = "run-A";
    c.mode = "async";
    c.steps = 10;
    c.interval_s = 0.1;
    c.stale_after_s = 0.5;
    start_status_writer(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    json j = json::parse(slurp(dir + "/status.json"));
    EXPECT_EQ(slurp(dir + "/target"), "keep");
    struct stat st {};
    ASSERT_EQ(lstat((dir + "/status.json").c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(j["format"], kStatusFormat);
    EXPECT_EQ(j["mode"], "async");
    EXPECT_EQ(j["run"]["step"], 3);
    EXPECT_EQ(j["run"]["steps"], 10);
    EXPECT_EQ(j["run"]["stale_dropped"], 2);
    EXPECT_EQ(j["run"]["done"], false);
    ASSERT_EQ(j["ranks"].size(), 3u);
    EXPECT_EQ(j["ranks"][0]["role"], "train");
    EXPECT_EQ(j["ranks"][0]["engine_slots"], 4);
    EXPECT_EQ(j["ranks"][0]["stale"], false);
    EXPECT_EQ(j["ranks"][1]["missing"], false);
    EXPECT_EQ(j["ranks"][1]["stale"], false);   // not yet
    EXPECT_EQ(j["ranks"][2]["missing"], true);  // another run's record is no record
    EXPECT_EQ(j["ranks"][2]["host"], "h2");
    status_board().set_role(0, 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    j = json::parse(slurp(dir + "/status.json"));
    EXPECT_EQ(j["ranks"][0]["role"], "rollout");
    EXPECT_EQ(j["ranks"][0]["stale"], false);
    EXPECT_EQ(j["ranks"][1]["stale"], true);
    EXPECT_GT(j["ranks"][1]["age_s"].get<double>(), 0.5);
    EXPECT_GT(j["ranks"][0]["seq"].get<int64_t>(), 5);
    status_done();
    j = json::parse(slurp(dir + "/status.json"));
    EXPECT_EQ(j["run"]["done"], true);
    EXPECT_EQ(j["ranks"][0]["role"], "done");
    std::string cmd = "rm -rf '" + dir + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
}
