// SPDX-License-Identifier: Apache-2.0
// Unit tests of the heartbeat watchdog (mpi_app/health): the record format, the ring of
// watched ranks, the peer bookkeeping with made-up clocks, and real watchdog threads writing
// and reading records in a temporary directory. The job-level behaviour (a killed or stopped
// rank of a real `tagflow train` ends the job) is tested by health_test.py.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "health/heartbeat.hpp"

using namespace tagflow::health;
using Clock = PeerTracker::Clock;

namespace {

Clock::time_point at(double s) {
    return Clock::time_point() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

Record rec(const std::string& run, int64_t seq, bool done = false, const std::string& host = "node2") {
    Record r;
    r.run_id = run;
    r.seq = seq;
    r.done = done;
    r.pid = 42;
    r.host = host;
    return r;
}

std::string temp_dir() {
    char tmpl[] = "/tmp/tagflow-heartbeat-test.XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    return d ? d : "/tmp";
}

}  // namespace

TEST(Record, RoundTrip) {
    Record r = rec("1732900000.5", 17, true, "node3");
    std::string s = format_record(r);
    ASSERT_EQ(s.size(), kRecordBytes);
    Record back;
    ASSERT_TRUE(parse_record(s, &back));
    EXPECT_EQ(back.run_id, "1732900000.5");
    EXPECT_EQ(back.seq, 17);
    EXPECT_TRUE(back.done);
    EXPECT_EQ(back.pid, 42);
    EXPECT_EQ(back.host, "node3");
}

TEST(Record, RejectsTornAndForeign) {
    std::string s = format_record(rec("r", 3));
    Record out;
    EXPECT_FALSE(parse_record("", &out));
    EXPECT_FALSE(parse_record(s.substr(0, 40), &out));  // torn: short
    std::string no_nl = s;
    no_nl.back() = ' ';
    EXPECT_FALSE(parse_record(no_nl, &out));  // torn: no final newline
    std::string other = s;
    other.replace(0, 7, "xxxxxxx");
    EXPECT_FALSE(parse_record(other, &out));  // another format
    std::string bad_state = format_record(rec("r", 3));
    bad_state.replace(bad_state.find(" run "), 5, " zzz ");
    EXPECT_FALSE(parse_record(bad_state, &out));
}

TEST(Ring, WatchedRanks) {
    EXPECT_EQ(watched_ranks(0, 1, 4), std::vector<int>{});
    EXPECT_EQ(watched_ranks(0, 2, 4), std::vector<int>{1});
    EXPECT_EQ(watched_ranks(2, 3, 4), (std::vector<int>{0, 1}));
    EXPECT_EQ(watched_ranks(5, 8, 4), (std::vector<int>{6, 7, 0, 1}));
    // every rank is watched by exactly min(watch, n-1) others
    for (int n : {2, 3, 5, 16}) {
        std::vector<int> by(static_cast<size_t>(n), 0);
        for (int r = 0; r < n; ++r)
            for (int p : watched_ranks(r, n, 4)) ++by[static_cast<size_t>(p)];
        for (int c : by) EXPECT_EQ(c, std::min(4, n - 1)) << "n=" << n;
    }
}

TEST(Message, NamesRankAndHost) {
    EXPECT_EQ(lost_message(3, "node2", 31.2),
              "tagflow: rank 3 (host node2) stopped answering: no heartbeat for 31 s; aborting the job");
    EXPECT_EQ(lost_message(1, "", 6),
              "tagflow: rank 1 (host unknown) stopped answering: no heartbeat for 6 s; aborting the job");
}

TEST(Tracker, SilentPeerIsLostAfterTimeout) {
    PeerTracker t({1, 2}, {"a", "b", "c"}, "run", 5.0, at(0));
    PeerTracker::Lost lost;
    for (int s = 1; s <= 10; ++s) {
        t.tick(at(s));
        t.observe(1, true, rec("run", s), at(s));                              // rank 1 beats every second
        if (s <= 3) t.observe(2, true, rec("run", s, false, "hostc"), at(s));  // rank 2 stops after 3 s
        bool any = t.find_lost(at(s), &lost);
        if (s <= 8) {
            EXPECT_FALSE(any) << "at " << s << " s";
        } else {
            ASSERT_TRUE(any) << "at " << s << " s";
            EXPECT_EQ(lost.rank, 2);
            EXPECT_EQ(lost.host, "hostc");  // the host its record named
            EXPECT_GT(lost.silent_s, 5.0);
        }
    }
}

TEST(Tracker, NeverStartedPeerIsLostWithHostFromList) {
    PeerTracker t({1}, {"a", "nodeB"}, "run", 5.0, at(0));
    PeerTracker::Lost lost;
    for (int s = 1; s <= 5; ++s) {
        t.tick(at(s));
        t.observe(1, false, Record{}, at(s));
        EXPECT_FALSE(t.find_lost(at(s), &lost));
    }
    t.tick(at(6));
    ASSERT_TRUE(t.find_lost(at(6), &lost));
    EXPECT_EQ(lost.rank, 1);
    EXPECT_EQ(lost.host, "nodeB");
}

TEST(Tracker, RecordsOfAnEarlierStartAreNoNews) {
    PeerTracker t({1}, {}, "new", 5.0, at(0));
    PeerTracker::Lost lost;
    for (int s = 1; s <= 6; ++s) {
        t.tick(at(s));
        t.observe(1, true, rec("old", 100 + s, s == 2), at(s));  // a stale file, even one saying done
    }
    ASSERT_TRUE(t.find_lost(at(6), &lost));
    EXPECT_EQ(lost.rank, 1);
}

TEST(Tracker, DonePeerIsNotLost) {
    PeerTracker t({1}, {}, "run", 5.0, at(0));
    PeerTracker::Lost lost;
    t.tick(at(1));
    t.observe(1, true, rec("run", 1, true), at(1));
    EXPECT_EQ(t.active(), 0);
    t.tick(at(100));
    EXPECT_FALSE(t.find_lost(at(100), &lost));
}

TEST(Tracker, OwnSuspensionRestartsEveryClock) {
    PeerTracker t({1}, {}, "run", 5.0, at(0));
    PeerTracker::Lost lost;
    t.tick(at(1));
    t.observe(1, true, rec("run", 1), at(1));
    // this watcher was SIGSTOPped for 60 s: its peers are not to blame
    t.tick(at(61));
    EXPECT_FALSE(t.find_lost(at(61), &lost));
    t.observe(1, true, rec("run", 1), at(61));  // same seq: the peer's beat is not news
    t.tick(at(62));
    EXPECT_FALSE(t.find_lost(at(62), &lost));
    for (int s = 63; s <= 67; ++s) t.tick(at(s));
    EXPECT_TRUE(t.find_lost(at(67), &lost));  // but a silent peer is still caught later
}

// Real threads and files: two live watchdogs never report each other; with rank 1 gone
// (never started, or destroyed without marking done... which writes done) rank 0 reports it.
TEST(Watchdog, LiveRanksAreNotReportedAndMissingOneIs) {
    std::string dir = temp_dir() + "/hb";
    std::atomic<int> reports{0};
    std::atomic<int> lost_rank{-1};
    auto handler = [&](const PeerTracker::Lost& l) {
        lost_rank = l.rank;
        ++reports;
    };
    {
        WatchdogConfig c{dir, 0, 2, {"h0", "h1"}, "run-a", 1.0, 0.05, 4};
        WatchdogConfig d = c;
        d.rank = 1;
        Watchdog w0(c, handler), w1(d, handler);
        std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        EXPECT_EQ(reports.load(), 0);
        w1.mark_done();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    EXPECT_EQ(reports.load(), 0);
    // Both files say done now; a new start (another run id) with rank 1 missing is reported.
    {
        std::ifstream f(dir + "/rank.1");
        std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        Record r;
        ASSERT_TRUE(parse_record(text, &r));
        EXPECT_TRUE(r.done);
        EXPECT_EQ(r.host, "h1");
    }
    WatchdogConfig c{dir, 0, 2, {"h0", "h1"}, "run-b", 1.0, 0.05, 4};
    Watchdog w0(c, handler);
    for (int i = 0; i < 200 && reports.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(reports.load(), 1);
    EXPECT_EQ(lost_rank.load(), 1);
}

TEST(Watchdog, OffCreatesNothing) {
    std::string dir = temp_dir() + "/off";
    WatchdogConfig c{dir, 0, 2, {}, "r", 0.0, 1.0, 4};
    Watchdog w(c);
    struct stat st;
    EXPECT_NE(stat(dir.c_str(), &st), 0);
}
