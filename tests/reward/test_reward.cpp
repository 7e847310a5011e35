// SPDX-License-Identifier: Apache-2.0
// Serial.reward.*: the --reward-fn worker pool through the Scorer API, with real Python worker
// processes (share/python/tagflow_reward_worker.py) running the reward files of this folder:
// veRL-style scores and extras, every failure mode giving one line naming the row and the cause,
// the --reward-error policies, recovery from crashed and hung workers, start-up checks of the
// file and signature, and a pool whose workers cannot restart. The URL path and the command
// line are tests/reward/reward_tests.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "reward/scorer.hpp"

using namespace tagflow::reward;

namespace {

const std::string kDir = TAGFLOW_REWARD_TEST_DIR;

Options pool(const std::string& fn, int workers = 2, double timeout = 20.0) {
    Options o;
    o.fn = kDir + "/" + fn;
    o.workers = workers;
    o.timeout_s = timeout;
    o.batch = 4;
    o.log_path = ::testing::TempDir() + "reward_workers.log";
    return o;
}

Request req(std::uint64_t id, const std::string& solution, const std::string& gt = "\"72\"",
            const std::string& ds = "openai/gsm8k") {
    Request r;
    r.id = id;
    r.row = static_cast<std::int64_t>(id) + 100;
    r.data_source = ds;
    r.solution_str = solution;
    r.ground_truth = gt;
    return r;
}

std::map<std::uint64_t, Result> run(Scorer& s, std::vector<Request> reqs) {
    s.submit(std::move(reqs));
    std::vector<Result> out;
    s.drain(out);
    std::map<std::uint64_t, Result> m;
    for (Result& r : out) {
        EXPECT_EQ(m.count(r.id), 0u) << "two results for id " << r.id;
        m[r.id] = std::move(r);
    }
    return m;
}

std::string config_error(const Options& o) {
    try {
        make_scorer(o);
    } catch (const tagflow::ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(Reward, Gsm8kScoresAndExtras) {
    auto s = make_scorer(pool("gsm8k_reward.py"));
    auto m = run(*s, {req(1, "so 70 + 2 = 72\n#### 72"), req(2, "#### 71"), req(3, "it is 72"),
                      req(4, "the answer: 72", "\"72\"", "gsm8k/dict"), req(5, "#### 1,234", "\"1234\"")});
    ASSERT_EQ(m.size(), 5u);
    for (auto& [id, r] : m) EXPECT_TRUE(r.ok) << r.cause;
    EXPECT_EQ(m[1].score, 1.0f);
    EXPECT_EQ(m[2].score, 0.1f);  // format score: an answer in the right place, but wrong
    EXPECT_EQ(m[3].score, 0.0f);  // strict: no "####"
    EXPECT_EQ(m[4].score, 1.0f);
    EXPECT_EQ(m[4].extras, R"({"acc":true,"pred":"72"})");
    EXPECT_EQ(m[5].score, 1.0f);
    EXPECT_EQ(m[1].row, 101);
    EXPECT_EQ(s->stats().completed, 5u);
    EXPECT_EQ(s->stats().failed, 0u);
}

TEST(Reward, NamedFunctionAndExtraInfo) {
    Options o = pool("gsm8k_reward.py");
    o.fn += ":length_penalty";
    auto s = make_scorer(o);
    Request a = req(1, std::string(150, 'x'));
    a.extra_info = R"({"max_chars": 100})";
    Request b = req(2, std::string(50, 'x'));
    b.extra_info = R"({"max_chars": 100})";
    auto m = run(*s, {a, b});
    EXPECT_EQ(m[1].score, -0.5f);
    EXPECT_EQ(m[2].score, 0.0f);
}

TEST(Reward, EveryFailureIsOneLineNamingTheRow) {
    auto s = make_scorer(pool("hostile_reward.py", 2, 2.0));
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"raise", {"compute_score raised ZeroDivisionError", "hostile_reward.py:"}},
        {"nan", {"returned nan"}},
        {"inf", {"returned -inf"}},
        {"big", {"1e+39", "not finite in float32"}},
        {"str", {"returned str '0.5', not a number"}},
        {"none", {"NoneType", "not a number"}},
        {"nokey", {"without \"score\"", "acc"}},
        {"dictnan", {"returned nan"}},
        {"sysexit", {"raised SystemExit: 4"}},
        {"exit", {"died (exit status 3)", "restarted"}},
        {"segv", {"died (killed by signal 11"}},
        {"hang", {"timed out after 2 s", "killed and restarted"}},
    };
    std::vector<Request> reqs;
    for (std::size_t i = 0; i < cases.size(); ++i) reqs.push_back(req(i, cases[i].first));
    auto m = run(*s, reqs);
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Result& r = m[i];
        EXPECT_FALSE(r.ok) << cases[i].first;
        EXPECT_EQ(r.score, 0.0f);
        EXPECT_EQ(r.cause.rfind("row " + std::to_string(100 + i) + ": ", 0), 0u) << r.cause;
        EXPECT_EQ(r.cause.find('\n'), std::string::npos) << r.cause;
        for (const std::string& w : cases[i].second)
            EXPECT_NE(r.cause.find(w), std::string::npos) << cases[i].first << ": '" << w << "' not in: " << r.cause;
        EXPECT_TRUE(s->fatal(r));  // the default policy is fail
    }
    const Stats st = s->stats();
    EXPECT_EQ(st.failed, cases.size());
    EXPECT_EQ(st.timeouts, 1u);
    EXPECT_EQ(st.crashes, 2u);
    EXPECT_EQ(st.restarts, 3u);
}

TEST(Reward, ValuesThatAreFine) {
    auto s = make_scorer(pool("hostile_reward.py"));
    auto m = run(*s, {req(1, "print"), req(2, "true"), req(3, "int"), req(4, "extras"), req(5, "abc")});
    for (auto& [id, r] : m) EXPECT_TRUE(r.ok) << r.cause;
    EXPECT_EQ(m[1].score, 0.25f);  // what the function printed did not break the protocol
    EXPECT_EQ(m[2].score, 1.0f);
    EXPECT_EQ(m[3].score, 7.0f);
    EXPECT_EQ(m[4].score, 0.5f);
    EXPECT_NE(m[4].extras.find(R"("acc":true)"), std::string::npos) << m[4].extras;
    EXPECT_NE(m[4].extras.find(R"("1":null)"), std::string::npos) << m[4].extras;  // inf -> null
    EXPECT_NE(m[4].extras.find(R"("o":"<object object at)"), std::string::npos) << m[4].extras;
    EXPECT_EQ(m[5].score, 3.0f);
}

TEST(Reward, ZeroPolicyCountsAndGoesOn) {
    Options o = pool("hostile_reward.py");
    o.on_error = parse_error_policy("zero");
    auto s = make_scorer(o);
    auto m = run(*s, {req(1, "nan"), req(2, "abcd")});
    EXPECT_FALSE(m[1].ok);
    EXPECT_FALSE(s->fatal(m[1]));
    EXPECT_EQ(m[1].score, 0.0f);
    EXPECT_TRUE(m[2].ok);
    EXPECT_EQ(m[2].score, 4.0f);
    EXPECT_EQ(s->stats().failed, 1u);
    EXPECT_THROW(parse_error_policy("ignore"), tagflow::ConfigError);
}

TEST(Reward, CrashAndHangRecoveryKeepsTheRestOfTheBatch) {
    // One worker, so the samples behind the culprit were already sent to the same process.
    auto s = make_scorer(pool("hostile_reward.py", 1, 1.0));
    auto m = run(*s, {req(1, "pid"), req(2, "exit"), req(3, "pid"), req(4, "hang"), req(5, "pid"), req(6, "xy")});
    ASSERT_EQ(m.size(), 6u);
    EXPECT_FALSE(m[2].ok);
    EXPECT_FALSE(m[4].ok);
    for (std::uint64_t id : {1, 3, 5, 6}) EXPECT_TRUE(m[id].ok) << m[id].cause;
    EXPECT_EQ(m[6].score, 2.0f);
    // Three different processes: the first, the one started after the crash, the one after the hang.
    std::set<float> pids = {m[1].score, m[3].score, m[5].score};
    EXPECT_EQ(pids.size(), 3u);
    EXPECT_EQ(s->stats().restarts, 2u);
}

TEST(Reward, SubmitAndPollNeverWaitForTheWorkers) {
    auto s = make_scorer(pool("hostile_reward.py", 2, 60.0));
    std::vector<Request> reqs;
    for (int i = 0; i < 8; ++i) reqs.push_back(req(i, "hang"));
    s->submit(reqs);  // every worker is now stuck for an hour
    std::vector<Result> out;
    EXPECT_EQ(s->poll(out), 0u);
    EXPECT_EQ(s->pending(), 8u);
    s->submit({req(9, "ok")});
    EXPECT_FALSE(s->wait_for(std::chrono::milliseconds(100)));
    EXPECT_EQ(s->pending(), 9u);
    // The destructor kills the hung workers instead of waiting for them.
}

TEST(Reward, BadJsonTextFailsItsRowOnly) {
    auto s = make_scorer(pool("gsm8k_reward.py"));
    Request bad = req(1, "#### 72", "{not json");
    auto m = run(*s, {bad, req(2, "#### 72")});
    EXPECT_FALSE(m[1].ok);
    EXPECT_NE(m[1].cause.find("row 101: ground_truth is not JSON"), std::string::npos) << m[1].cause;
    EXPECT_TRUE(m[2].ok);
}

TEST(Reward, StartupChecksNameTheFileAndTheProblem) {
    struct Case {
        std::string fn;
        std::vector<std::string> words;
    };
    const std::vector<Case> cases = {
        {"bad_import.py",
         {"bad_import.py: does not import", "ModuleNotFoundError", "tagflow_no_such_module", "line 3"}},
        {"bad_syntax.py", {"bad_syntax.py: does not import", "SyntaxError", "line 3"}},
        {"wrong_signature.py",
         {"wrong_signature.py: compute_score(solution_str, ground_truth) cannot be called as", "data_source"}},
        {"wrong_signature.py:not_a_function", {"'not_a_function' is a int, not a function"}},
        {"wrong_signature.py:needs_more", {"needs_more(", "judge"}},
        {"gsm8k_reward.py:nothing_here", {"gsm8k_reward.py: defines no 'nothing_here'"}},
        {"no_such_file.py", {"--reward-fn", "no_such_file.py", "No such file"}},
        {"gsm8k_reward.py:1bad", {"not a Python identifier"}},
    };
    for (const Case& c : cases) {
        const std::string e = config_error(pool(c.fn));
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
        EXPECT_EQ(e.rfind("--reward-fn ", 0), 0u) << e;
        for (const std::string& w : c.words) EXPECT_NE(e.find(w), std::string::npos) << "'" << w << "' not in: " << e;
    }
    Options both = pool("gsm8k_reward.py");
    both.url = "http://127.0.0.1:1/";
    EXPECT_NE(config_error(both).find("not both"), std::string::npos);
    Options none;
    EXPECT_NE(config_error(none).find("no reward"), std::string::npos);
    Options zero_workers = pool("gsm8k_reward.py", 0);
    EXPECT_NE(config_error(zero_workers).find("--reward-workers 0"), std::string::npos);
    Options no_python = pool("gsm8k_reward.py");
    no_python.python = "/nonexistent/python3";
    EXPECT_NE(config_error(no_python).find("/nonexistent/python3"), std::string::npos);
}

TEST(Reward, WorkersThatCannotRestartFailEveryRequest) {
    const std::string copy = ::testing::TempDir() + "reward_restart_" + std::to_string(getpid()) + ".py";
    {
        std::ifstream in(kDir + "/hostile_reward.py");
        std::ofstream out(copy);
        out << in.rdbuf();
    }
    Options o = pool("x", 1, 5.0);
    o.fn = copy;
    auto s = make_scorer(o);
    auto m1 = run(*s, {req(1, "ab")});
    EXPECT_TRUE(m1[1].ok);
    { std::ofstream(copy) << "def broken(:\n"; }  // the next start of a worker fails
    auto m2 = run(*s, {req(2, "exit"), req(3, "ab")});
    EXPECT_FALSE(m2[2].ok);
    EXPECT_FALSE(m2[3].ok);
    EXPECT_NE(m2[3].cause.find("reward workers cannot restart"), std::string::npos) << m2[3].cause;
    EXPECT_NE(m2[3].cause.find("SyntaxError"), std::string::npos) << m2[3].cause;
    auto m3 = run(*s, {req(4, "ab")});
    EXPECT_FALSE(m3[4].ok);
    EXPECT_EQ(m3[4].cause.rfind("row 104: reward workers cannot restart", 0), 0u) << m3[4].cause;
    std::remove(copy.c_str());
}

TEST(Reward, Float32Bounds) {
    EXPECT_TRUE(finite_in_float32(3.4028234663852886e38));
    EXPECT_FALSE(finite_in_float32(3.5e38));
    EXPECT_FALSE(finite_in_float32(1e39));
    EXPECT_FALSE(finite_in_float32(-1e39));
    EXPECT_TRUE(finite_in_float32(-1e-45));
}

TEST(Reward, FunctionScorerChecksWhatItReturns) {
    auto s = make_function_scorer("exact", [](const Request& r, std::string& extras) -> double {
        if (r.solution_str == "throw") throw std::runtime_error("no answer found");
        if (r.solution_str == "big") return 1e39;
        extras = R"({"len":)" + std::to_string(r.solution_str.size()) + "}";
        return r.solution_str == r.ground_truth ? 1.0 : 0.0;
    });
    auto m = run(*s, {req(1, "72", "72"), req(2, "throw"), req(3, "big"), req(4, "7", "72")});
    EXPECT_TRUE(m[1].ok);
    EXPECT_EQ(m[1].score, 1.0f);
    EXPECT_EQ(m[1].extras, R"({"len":2})");
    EXPECT_EQ(m[2].cause, "row 102: exact: no answer found");
    EXPECT_EQ(m[3].cause, "row 103: exact returned 1e+39, not finite in float32");
    EXPECT_TRUE(m[4].ok);
    EXPECT_EQ(m[4].score, 0.0f);
    EXPECT_TRUE(s->fatal(m[2]));
    EXPECT_EQ(s->describe(), "builtin exact");
}

TEST(Reward, LargeSamplesPassThroughTheSocket) {
    // Frames far larger than a socket buffer: written in pieces as the worker reads them.
    auto s = make_scorer(pool("hostile_reward.py", 2));
    std::vector<Request> reqs;
    for (int i = 0; i < 6; ++i) reqs.push_back(req(i, std::string((2u << 20) + i, 'a' + i)));
    auto m = run(*s, reqs);
    ASSERT_EQ(m.size(), 6u);
    for (int i = 0; i < 6; ++i) {
        EXPECT_TRUE(m[i].ok) << m[i].cause;
        EXPECT_EQ(m[i].score, static_cast<float>((2u << 20) + i));
    }
}
