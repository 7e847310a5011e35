// SPDX-License-Identifier: Apache-2.0
// Serial.tasks.*: the built-in tasks without any model — reference solutions score 1 and
// typical wrong answers less, prompts are deterministic with a disjoint held-out set, the
// `addition` answers and held-out split, and the `longtail` length distribution.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "rollout/task.hpp"
#include "rollout/task_builtin.hpp"

namespace rollout = tagflow::rollout;
using Tokens = std::vector<int32_t>;

namespace {

const char* const kBuiltins[] = {"reverse", "sort", "addition", "longtail"};

// Tokens of a rendered string, for the tasks' shared alphabet (digits ^ = $ + >).
Tokens tok(const std::string& s) {
    Tokens t;
    for (char c : s) {
        if (c >= '0' && c <= '9') t.push_back(c - '0');
        else if (c == '^') t.push_back(10);
        else if (c == '=') t.push_back(11);
        else if (c == '$') t.push_back(12);
        else t.push_back(13);  // '+' (addition) or '>' (longtail)
    }
    return t;
}

double percentile(std::vector<int> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

TEST(Tasks, SolutionScoresOneAndIsWellFormed) {
    for (const char* name : kBuiltins) {
        SCOPED_TRACE(name);
        auto task = rollout::make_task(name, 11);
        const int32_t eos = task->eos_token();
        for (int64_t i = 0; i < 3000; ++i) {
            for (const Tokens& p : {task->train_prompt(i), task->eval_prompt(i % 500)}) {
                ASSERT_LE(static_cast<int32_t>(p.size()), task->max_prompt_tokens());
                const Tokens s = task->solution(p);
                ASSERT_FALSE(s.empty());
                ASSERT_EQ(s.back(), eos) << task->render(s);
                ASSERT_EQ(std::count(s.begin(), s.end(), eos), 1);
                ASSERT_LE(static_cast<int32_t>(s.size()), task->max_response_tokens());
                for (int32_t t : p) ASSERT_TRUE(t >= 0 && t < task->vocab_size());
                for (int32_t t : s) ASSERT_TRUE(t >= 0 && t < task->vocab_size());
                ASSERT_FLOAT_EQ(task->reward(p, s), 1.0f) << task->render(p) << " " << task->render(s);
                // Tokens after EOS are ignored; a missing EOS at the end is not penalised.
                Tokens extra = s;
                extra.push_back(3);
                ASSERT_FLOAT_EQ(task->reward(p, extra), 1.0f);
                ASSERT_FLOAT_EQ(task->reward(p, Tokens(s.begin(), s.end() - 1)), 1.0f);
            }
        }
    }
}

TEST(Tasks, WrongAnswersScoreLess) {
    for (const char* name : kBuiltins) {
        SCOPED_TRACE(name);
        auto task = rollout::make_task(name, 5);
        const int32_t eos = task->eos_token();
        for (int64_t i = 0; i < 500; ++i) {
            const Tokens p = task->train_prompt(i);
            const Tokens s = task->solution(p);
            const Tokens body(s.begin(), s.end() - 1);
            std::vector<Tokens> wrong;
            wrong.push_back({eos});  // empty answer
            Tokens flip = body;      // one digit changed
            flip[static_cast<size_t>(i) % flip.size()] = (flip[static_cast<size_t>(i) % flip.size()] + 1) % 10;
            wrong.push_back(flip);
            wrong.push_back(Tokens(body.begin(), body.end() - 1));  // one digit short
            Tokens longer = body;                                   // one digit too many
            longer.push_back(7);
            wrong.push_back(longer);
            Tokens shifted = body;  // answer shifted by one
            shifted.insert(shifted.begin(), 0);
            shifted.pop_back();
            if (shifted != body) wrong.push_back(shifted);
            for (const Tokens& w : wrong) {
                const float r = task->reward(p, w);
                ASSERT_GE(r, 0.0f);
                ASSERT_LT(r, 1.0f) << task->render(p) << " " << task->render(w);
            }
        }
    }
}

TEST(Tasks, PromptsAreDeterministicAndHeldOutIsDisjoint) {
    for (const char* name : kBuiltins) {
        SCOPED_TRACE(name);
        auto a = rollout::make_task(name, 7), b = rollout::make_task(name, 7), c = rollout::make_task(name, 8);
        std::set<Tokens> eval;
        for (int64_t i = 0; i < 400; ++i) eval.insert(a->eval_prompt(i));
        for (int64_t i = 0; i < 20000; ++i) ASSERT_EQ(eval.count(a->train_prompt(i)), 0u) << i;
        int same = 0;
        for (int64_t i = 0; i < 50; ++i) {
            ASSERT_EQ(a->train_prompt(i), b->train_prompt(i));
            ASSERT_EQ(a->eval_prompt(i), b->eval_prompt(i));
            same += a->train_prompt(i) == c->train_prompt(i);
        }
        EXPECT_LT(same, 25) << "another seed should give another prompt order";
    }
}

TEST(Tasks, DefaultSolutionThrowsForUserTasks) {
    struct NoSolution final : rollout::Task {
        std::string name() const override { return "nosolution"; }
        int32_t vocab_size() const override { return 2; }
        int32_t eos_token() const override { return 1; }
        int32_t max_prompt_tokens() const override { return 1; }
        int32_t max_response_tokens() const override { return 1; }
        Tokens train_prompt(int64_t) const override { return {0}; }
        Tokens eval_prompt(int64_t) const override { return {0}; }
        float reward(const Tokens&, const Tokens&) const override { return 0; }
        std::string render(const Tokens&) const override { return ""; }
        float best_constant_score(int64_t) const override { return 0; }
    } t;
    try {
        t.solution({0});
        FAIL();
    } catch (const tagflow::Error& e) {
        EXPECT_NE(std::string(e.what()).find("nosolution"), std::string::npos) << e.what();
    }
}

TEST(Tasks, AdditionAnswersLeastSignificantFirst) {
    auto task = rollout::make_task("addition", 1);  // default: 3 digits
    EXPECT_EQ(task->vocab_size(), 14);
    EXPECT_EQ(task->max_prompt_tokens(), 9);
    EXPECT_EQ(task->max_response_tokens(), 5);
    // Every number least-significant digit first: 123 + 989 = 1112.
    EXPECT_EQ(task->render(task->solution(tok("^321+989="))), "2111$");
    EXPECT_EQ(task->render(task->solution(tok("^700+500="))), "2100$");  // 7 + 5 = 12
    EXPECT_EQ(task->render(task->solution(tok("^999+999="))), "8991$");  // 1998
    EXPECT_EQ(task->render(task->solution(tok("^100+000="))), "1000$");  // 1 + 0
    EXPECT_FLOAT_EQ(task->reward(tok("^321+989="), tok("2111$")), 1.0f);
    EXPECT_FLOAT_EQ(task->reward(tok("^321+989="), tok("2110$")), 0.0f);  // exact match only
    EXPECT_FLOAT_EQ(task->reward(tok("^321+989="), tok("1112$")), 0.0f);  // most significant first
    EXPECT_THROW(task->solution(tok("^12+3=")), tagflow::Error);
    for (int64_t i = 0; i < 200; ++i) {
        const Tokens p = task->train_prompt(i);
        ASSERT_EQ(task->render(p).substr(4, 1), "+");
    }

    rollout::TaskParams partial;
    partial.partial_credit = true;
    partial.digits = 4;
    auto pt = rollout::make_task("addition", 1, partial);
    EXPECT_EQ(pt->max_prompt_tokens(), 11);
    EXPECT_EQ(pt->render(pt->solution(tok("^0005+0005="))), "00001$");  // 5000 + 5000
    EXPECT_FLOAT_EQ(pt->reward(tok("^0005+0005="), tok("00000$")), 0.8f);
    EXPECT_FLOAT_EQ(pt->reward(tok("^0005+0005="), tok("00001$")), 1.0f);

    for (int32_t bad : {1, 13, -2}) {
        rollout::TaskParams p;
        p.digits = bad;
        EXPECT_THROW(rollout::make_task("addition", 1, p), tagflow::ConfigError) << bad;
    }
}

TEST(Tasks, AdditionHoldsOutBothOrders) {
    rollout::TaskParams p;
    p.digits = 2;
    auto task = rollout::make_task("addition", 3, p);
    auto swap = [](const Tokens& t) { return Tokens{t[0], t[4], t[5], t[3], t[1], t[2], t[6]}; };
    std::set<Tokens> train;
    for (int64_t i = 0; i < 60000; ++i) train.insert(task->train_prompt(i));
    EXPECT_GT(train.size(), 8500u);  // nearly all of the ~8750 training pairs of 2-digit numbers
    EXPECT_LT(train.size(), 9300u);  // ... and none of the ~1250 held-out ones
    for (int64_t i = 0; i < 500; ++i) {
        const Tokens e = task->eval_prompt(i);
        ASSERT_EQ(train.count(e), 0u);
        ASSERT_EQ(train.count(swap(e)), 0u) << "b+a of a held-out a+b was trained on";
    }
}

TEST(Tasks, LongtailLengthsAreLongTailed) {
    auto task = rollout::make_task("longtail", 2);
    EXPECT_EQ(task->max_response_tokens(), 121);
    EXPECT_EQ(task->render(task->solution(tok("^12>09="))), "12111009$");
    EXPECT_EQ(task->render(task->solution(tok("^05>05="))), "05$");
    EXPECT_FLOAT_EQ(task->reward(tok("^12>09="), tok("121110$")), 0.75f);  // stopped early
    for (bool eval : {false, true}) {
        SCOPED_TRACE(eval ? "eval" : "train");
        const int64_t n = eval ? 5000 : 40000;
        std::vector<int> len;
        for (int64_t i = 0; i < n; ++i) {
            const Tokens p = eval ? task->eval_prompt(i) : task->train_prompt(i);
            len.push_back(static_cast<int>(task->solution(p).size()));
        }
        const double p50 = percentile(len, 0.5), p95 = percentile(len, 0.95), p99 = percentile(len, 0.99);
        const int mx = *std::max_element(len.begin(), len.end());
        double tail = 0;
        for (int l : len) tail += l >= 10 * p50;
        tail /= static_cast<double>(n);
        std::printf("longtail %s: p50 %.0f p95 %.0f p99 %.0f max %d max/p50 %.1f, %.1f%% of prompts >= 10x p50\n",
                    eval ? "eval" : "train", p50, p95, p99, mx, mx / p50, 100 * tail);
        EXPECT_LE(p50, 11);
        EXPECT_GE(p95, 4 * p50);
        EXPECT_GE(mx / p50, 10.0);
        EXPECT_LE(mx, 121);
        EXPECT_GE(tail, 0.01);
        EXPECT_LE(tail, 0.10);
    }
}

TEST(Tasks, BestConstantBeatsEveryFixedResponseTried) {
    for (const char* name : kBuiltins) {
        SCOPED_TRACE(name);
        auto task = rollout::make_task(name, 9);
        const int64_t n = 200;
        const float best = task->best_constant_score(n);
        const float random = rollout::random_policy_score(*task, n, 1);
        std::printf("%s: best constant %.3f, random policy %.3f\n", name, best, random);
        EXPECT_GE(best, random - 0.02f);
        EXPECT_LT(best, 0.5f);
        // Every held-out solution, used as a fixed answer for all prompts, scores at most `best`.
        for (int64_t j = 0; j < 40; ++j) {
            const Tokens fixed = task->solution(task->eval_prompt(j));
            double mean = 0;
            for (int64_t i = 0; i < n; ++i) mean += task->reward(task->eval_prompt(i), fixed);
            ASSERT_LE(mean / n, best + 1e-5) << task->render(fixed);
        }
    }
}

TEST(Tasks, BestConstantPositionalMatchesBruteForce) {
    // Small targets over digits 0..2, lengths 0..3; every response of up to 4 digits 0..3.
    std::vector<Tokens> targets;
    uint64_t h = 42;
    for (int i = 0; i < 25; ++i) {
        h = rollout::detail::mix64(h);
        Tokens t(h % 4);
        for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<int32_t>((h >> (8 + 2 * k)) % 3);
        targets.push_back(t);
    }
    double brute = 0;
    for (int len = 0; len <= 4; ++len) {
        int combos = 1;
        for (int k = 0; k < len; ++k) combos *= 4;
        for (int c = 0; c < combos; ++c) {
            Tokens r;
            for (int k = 0, x = c; k < len; ++k, x /= 4) r.push_back(x % 4);
            double s = 0;
            for (const auto& t : targets) s += rollout::detail::positional_credit(t, r);
            brute = std::max(brute, s / static_cast<double>(targets.size()));
        }
    }
    EXPECT_NEAR(rollout::detail::best_constant_positional(targets, 4), brute, 1e-6);
}
