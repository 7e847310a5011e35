// SPDX-License-Identifier: Apache-2.0
// test_agent_loop: the multi-turn runner (rollout/agent_loop.hpp) on a real InferenceEngine with a tiny
// random Llama — per-token columns (loss_mask 1 exactly on sampled tokens, NaN/-1 elsewhere),
// environment tokens where the loop put them, turn and token budgets, continuous batching
// across sessions (more sessions than slots), the incremental AgentSessions interleaved with
// other requests across a weight update, each turn equal to an independent request on
// the session so far, and the trajectory manager rebuilding every session from its tree —
// plus the `calc` task: its calculator (precedence, malformed calls, overflow, length
// bound), its tool output, reward, demonstration mask and agent-loop decisions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "fixtures.hpp"
#include "model/llama.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"
#include "rollout/task.hpp"
#include "rollout/task_calc.hpp"
#include "traj/trajectory_manager.hpp"

using namespace tagflow;
using namespace tagflow::rollout;
using Tokens = std::vector<int32_t>;

namespace {

model::LlamaModel tiny_model(int64_t vocab, int64_t positions, uint64_t seed) {
    model::LlamaModel m(model::fixtures::shape("llama", 32, 4, 2, 8, vocab, positions), 0);
    m->reset_parameters(seed, 0.3);
    return m;
}

// Ends a turn at token 7 (or EOS 0 / the budget); appends {1, 2, turn} after a token-7 turn,
// ends the session otherwise. Reward = turns / 10.
class EchoLoop final : public AgentLoop {
public:
    explicit EchoLoop(int32_t turns = 4) : turns_(turns) {}
    std::vector<int32_t> turn_stop_tokens() const override { return {7}; }
    AgentAction on_turn(const AgentSession& s) const override {
        const Tokens t = s.last_turn();
        if (s.turn_stopped && !t.empty() && t.back() == 7) return AgentAction::append({1, 2, s.turns});
        return AgentAction::finish();
    }
    float reward(const AgentSession& s) const override { return static_cast<float>(s.turns) / 10.0f; }
    int32_t max_turns() const override { return turns_; }

private:
    int32_t turns_;
};

// Always wants another turn, with one environment token.
class ForeverLoop final : public AgentLoop {
public:
    std::vector<int32_t> turn_stop_tokens() const override { return {7}; }
    AgentAction on_turn(const AgentSession&) const override { return AgentAction::append({3}); }
    float reward(const AgentSession&) const override { return 0.5f; }
    int32_t max_turns() const override { return 3; }
};

std::vector<AgentJob> jobs_for(int n, int vocab) {
    std::vector<AgentJob> jobs;
    for (int i = 0; i < n; ++i) {
        AgentJob j;
        j.id = 100 + i;
        j.prompt = {static_cast<int32_t>(1 + i % (vocab - 1)), static_cast<int32_t>(1 + (3 * i) % (vocab - 1)), 5};
        j.seed = 1000 + static_cast<uint64_t>(i);
        jobs.push_back(j);
    }
    return jobs;
}

// The per-token invariants every session satisfies.
void check_columns(const AgentResult& r) {
    ASSERT_EQ(r.loss_mask.size(), r.tokens.size());
    ASSERT_EQ(r.logprobs.size(), r.tokens.size());
    ASSERT_EQ(r.versions.size(), r.tokens.size());
    for (size_t t = 0; t < r.tokens.size(); ++t) {
        if (t < static_cast<size_t>(r.prompt_len)) {
            ASSERT_EQ(r.loss_mask[t], 0);
        }
        if (r.loss_mask[t]) {
            ASSERT_FALSE(std::isnan(r.logprobs[t]));
            ASSERT_LE(r.logprobs[t], 0.0f);
            ASSERT_GE(r.versions[t], 0);
        } else {
            ASSERT_TRUE(std::isnan(r.logprobs[t]));
            ASSERT_EQ(r.versions[t], -1);
        }
    }
    ASSERT_EQ(r.loss_mask.back(), 1) << "a session always ends with a model token";
}

}  // namespace

TEST(AgentLoop, EnvironmentTokensAreMaskedAndSessionsRebuildFromTheTree) {
    const int64_t vocab = 12;
    model::LlamaModel m = tiny_model(vocab, 96, 3);
    InferenceConfig ec;
    ec.max_batch = 4;  // fewer slots than sessions: continuations queue behind others
    InferenceEngine engine(m, ec);
    engine.set_policy_version(5);
    EchoLoop loop(4);
    const auto jobs = jobs_for(10, static_cast<int>(vocab));
    AgentRunConfig cfg;
    cfg.stop_ids = {0};
    cfg.max_session_tokens = 60;
    cfg.max_turn_tokens = 12;
    traj::TrajectoryManager tm;
    const auto res = run_agent_sessions(engine, loop, jobs, cfg, &tm);
    ASSERT_EQ(res.size(), jobs.size());
    EXPECT_LE(engine.stats().max_active, 4);
    int64_t turns = 0, multi = 0;
    for (size_t i = 0; i < res.size(); ++i) {
        const AgentResult& r = res[i];
        SCOPED_TRACE(i);
        EXPECT_EQ(r.id, jobs[i].id);
        ASSERT_EQ(Tokens(r.tokens.begin(), r.tokens.begin() + r.prompt_len), jobs[i].prompt);
        check_columns(r);
        for (size_t t = 0; t < r.tokens.size(); ++t)
            if (r.loss_mask[t]) {
                EXPECT_EQ(r.versions[t], 5);
            }
        // Walk the turns: a run of model tokens, then (after a turn ending on 7) {1, 2, turn}.
        size_t t = static_cast<size_t>(r.prompt_len);
        int32_t k = 0;
        int64_t env = 0;
        while (t < r.tokens.size()) {
            const size_t begin = t;
            while (t < r.tokens.size() && r.loss_mask[t]) ++t;
            ASSERT_GT(t, begin) << "each turn samples at least one token";
            ASSERT_LE(t - begin, 12u) << "max_turn_tokens";
            ++k;
            if (t == r.tokens.size()) break;
            ASSERT_EQ(r.tokens[t - 1], 7) << "environment tokens follow only a turn ending on the tool token";
            ASSERT_LE(t + 3, r.tokens.size());
            EXPECT_EQ(Tokens(r.tokens.begin() + static_cast<long>(t), r.tokens.begin() + static_cast<long>(t) + 3),
                      (Tokens{1, 2, k}));
            for (int e = 0; e < 3; ++e) ASSERT_EQ(r.loss_mask[t + static_cast<size_t>(e)], 0);
            t += 3;
            env += 3;
        }
        EXPECT_EQ(k, r.turns);
        EXPECT_EQ(env, r.env_tokens);
        EXPECT_LE(r.turns, 4);
        EXPECT_LE(static_cast<int64_t>(r.tokens.size()), 60);
        EXPECT_FLOAT_EQ(r.reward, static_cast<float>(r.turns) / 10.0f);
        if (r.finish == AgentFinish::kDone) {
            EXPECT_EQ(r.tokens.back(), 0) << "done = the turn ended on EOS";
        }
        if (r.finish == AgentFinish::kTurns) {
            EXPECT_EQ(r.turns, 4);
        }
        turns += r.turns;
        multi += r.turns > 1;
        // The tree holds the whole session at the last request's node, columns included.
        ASSERT_GE(r.traj, 0);
        const traj::Trajectory tr = tm.rebuild(r.traj);
        EXPECT_EQ(tr.tokens, r.tokens);
        EXPECT_EQ(tr.loss_mask, r.loss_mask);
        EXPECT_EQ(tr.versions, r.versions);
        for (size_t u = 0; u < r.tokens.size(); ++u)
            if (r.loss_mask[u]) {
                EXPECT_NEAR(tr.logprobs[u], r.logprobs[u], 1e-5);
            }
    }
    // One request per turn, continuations extend their session's path.
    EXPECT_EQ(static_cast<int64_t>(tm.requests().size()), turns);
    int64_t extends = 0;
    for (const auto& q : tm.requests()) extends += q.kind == traj::InsertKind::kExtend;
    EXPECT_EQ(extends, turns - static_cast<int64_t>(res.size()));
    EXPECT_GT(multi, 0) << "the random model should call the 'tool' (token 7) at least once in 10 sessions";
}

TEST(AgentLoop, EachTurnIsTheRequestOnTheSessionSoFar) {
    // Turn t of a session samples with stream derive_seed(seed, t) on the whole session so far:
    // rerunning that request alone on a fresh engine gives the same tokens and logprobs.
    const int64_t vocab = 12;
    model::LlamaModel m = tiny_model(vocab, 96, 4);
    InferenceEngine engine(m, InferenceConfig{});
    EchoLoop loop(3);
    const auto jobs = jobs_for(6, static_cast<int>(vocab));
    AgentRunConfig cfg;
    cfg.stop_ids = {0};
    cfg.max_session_tokens = 50;
    cfg.max_turn_tokens = 10;
    const auto res = run_agent_sessions(engine, loop, jobs, cfg);
    int64_t checked = 0;
    for (size_t i = 0; i < res.size(); ++i) {
        const AgentResult& r = res[i];
        size_t t = static_cast<size_t>(r.prompt_len);
        for (int32_t k = 0; t < r.tokens.size(); ++k) {
            size_t end = t;
            while (end < r.tokens.size() && r.loss_mask[end]) ++end;
            InferenceEngine fresh(m, InferenceConfig{});
            GenRequest rq;
            rq.prompt.assign(r.tokens.begin(), r.tokens.begin() + static_cast<long>(t));
            rq.params.max_tokens = static_cast<int32_t>(std::min<int64_t>(10, 50 - static_cast<int64_t>(t)));
            rq.params.stop_ids = {0, 7};
            rq.params.seed = derive_seed(jobs[i].seed, static_cast<uint64_t>(k));
            fresh.submit(rq);
            const auto g = fresh.run();
            ASSERT_EQ(g.size(), 1u);
            EXPECT_EQ(g[0].response,
                      Tokens(r.tokens.begin() + static_cast<long>(t), r.tokens.begin() + static_cast<long>(end)));
            for (size_t u = 0; u < g[0].logprobs.size() && t + u < end; ++u)
                EXPECT_NEAR(g[0].logprobs[u], r.logprobs[t + u], 1e-4);
            ++checked;
            t = end;
            while (t < r.tokens.size() && !r.loss_mask[t]) ++t;
        }
    }
    EXPECT_GT(checked, static_cast<int64_t>(res.size()));
}

TEST(AgentLoop, TurnAndTokenBudgets) {
    const int64_t vocab = 12;
    model::LlamaModel m = tiny_model(vocab, 96, 5);
    InferenceEngine engine(m, InferenceConfig{});
    ForeverLoop loop;
    AgentRunConfig cfg;
    cfg.stop_ids = {0};
    cfg.max_session_tokens = 90;
    cfg.max_turn_tokens = 3;
    const auto res = run_agent_sessions(engine, loop, jobs_for(5, static_cast<int>(vocab)), cfg);
    for (const auto& r : res) {
        check_columns(r);
        EXPECT_EQ(r.turns, 3);
        EXPECT_EQ(r.finish, AgentFinish::kTurns);
        EXPECT_EQ(r.env_tokens, 2);
        EXPECT_FLOAT_EQ(r.reward, 0.5f);
    }
    // A tight session budget: every session stops at it, never beyond.
    cfg.max_session_tokens = 7;
    cfg.max_turn_tokens = 0;
    const auto tight = run_agent_sessions(engine, loop, jobs_for(5, static_cast<int>(vocab)), cfg);
    for (const auto& r : tight) {
        check_columns(r);
        EXPECT_LE(r.tokens.size(), 7u);
        EXPECT_EQ(r.finish, AgentFinish::kLength);
    }
    // Bad input: a prompt that leaves no room, an empty prompt.
    auto bad = jobs_for(1, static_cast<int>(vocab));
    cfg.max_session_tokens = 3;
    EXPECT_THROW(run_agent_sessions(engine, loop, bad, cfg), Error);
    bad[0].prompt.clear();
    cfg.max_session_tokens = 30;
    EXPECT_THROW(run_agent_sessions(engine, loop, bad, cfg), Error);
}

TEST(AgentSessions, InterleaveWithOtherRequestsAndSpanAWeightUpdate) {
    // The async scheduler's use: sessions under request ids of the caller's choosing share the
    // engine with plain requests; a weight update (same weights, new version) lands mid-run.
    // Sessions equal run_agent_sessions' (same seeds, same weights), their model tokens carry
    // version 0 before the update and 1 after it (never back), and the tree rebuilds them.
    const int64_t vocab = 12;
    model::LlamaModel m = tiny_model(vocab, 96, 3);
    EchoLoop loop(4);
    const auto jobs = jobs_for(8, static_cast<int>(vocab));
    AgentRunConfig cfg;
    cfg.stop_ids = {0};
    cfg.max_session_tokens = 60;
    cfg.max_turn_tokens = 12;
    InferenceEngine ref_engine(m, InferenceConfig{});
    const auto ref = run_agent_sessions(ref_engine, loop, jobs, cfg);

    InferenceConfig ec;
    ec.max_batch = 4;
    InferenceEngine engine(m, ec);
    traj::TrajectoryManager tm;
    AgentSessions sessions(loop, cfg, &tm);
    for (size_t i = 0; i < jobs.size(); ++i) sessions.start(engine, 5000 + static_cast<int64_t>(i), jobs[i]);
    EXPECT_THROW(sessions.start(engine, 5000, jobs[0]), Error) << "a request id in use";
    for (int64_t k = 0; k < 3; ++k) {
        GenRequest rq;
        rq.id = k;
        rq.prompt = {1, 2, 3};
        rq.params.max_tokens = 9;
        rq.params.seed = 77 + static_cast<uint64_t>(k);
        engine.submit(rq);
    }
    EXPECT_EQ(sessions.live(), jobs.size());
    std::vector<AgentResult> done, got;
    int64_t plain = 0, steps = 0;
    while (engine.step([&](const GenResult& g) {
        done.clear();
        if (sessions.on_result(engine, g, done)) {
            for (auto& r : done) got.push_back(std::move(r));
        } else {
            EXPECT_LT(g.id, 3);
            ++plain;
        }
    })) {
        if (++steps == 6) engine.update_weights(1);
    }
    EXPECT_EQ(plain, 3);
    EXPECT_EQ(sessions.live(), 0u);
    ASSERT_EQ(got.size(), jobs.size());
    int64_t spanning = 0;
    for (const AgentResult& r : got) {
        SCOPED_TRACE(r.id);
        const size_t i = static_cast<size_t>(r.id - 100);
        ASSERT_LT(i, ref.size());
        EXPECT_FALSE(sessions.owns(5000 + static_cast<int64_t>(i)));
        check_columns(r);
        EXPECT_EQ(r.tokens, ref[i].tokens);
        EXPECT_EQ(r.loss_mask, ref[i].loss_mask);
        EXPECT_EQ(r.turns, ref[i].turns);
        EXPECT_EQ(r.finish, ref[i].finish);
        EXPECT_FLOAT_EQ(r.reward, ref[i].reward);
        int32_t last = 0;
        std::set<int32_t> seen;
        for (size_t t = 0; t < r.tokens.size(); ++t) {
            if (!r.loss_mask[t]) continue;
            EXPECT_GE(r.versions[t], last) << "versions never go back along a session";
            last = r.versions[t];
            seen.insert(r.versions[t]);
        }
        spanning += seen.size() == 2;
        const traj::Trajectory tr = tm.rebuild(r.traj);
        EXPECT_EQ(tr.tokens, r.tokens);
        EXPECT_EQ(tr.versions, r.versions);
        EXPECT_EQ(tr.loss_mask, r.loss_mask);
    }
    EXPECT_GT(spanning, 0) << "some session's tokens carry both versions";
}

TEST(CalcTool, EvaluatesDigitsAndPlusMinusTimesOnly) {
    using calc::encode;
    using calc::evaluate;
    EXPECT_EQ(evaluate(encode("12*34")), 408);
    EXPECT_EQ(evaluate(encode("2+3*4")), 14);
    EXPECT_EQ(evaluate(encode("10-2*3-1")), 3);
    EXPECT_EQ(evaluate(encode("5-7")), -2);
    EXPECT_EQ(evaluate(encode("007")), 7);
    EXPECT_EQ(evaluate(encode("999*999*999")), 997002999);
    for (const char* bad : {"", "+1", "1+", "1++2", "12*", "*3", "1-+2", "1$2", "1<calc>2", "?", "1=2"})
        EXPECT_FALSE(evaluate(encode(bad)).has_value()) << bad;
    EXPECT_FALSE(evaluate(encode("1234567890123")).has_value()) << "13-digit number";
    EXPECT_EQ(evaluate(encode("123456789012")), 123456789012LL);
    EXPECT_FALSE(evaluate(encode("999999999999*999999999999")).has_value()) << "int64 overflow";
    std::string longest = "1";
    while (longest.size() + 2 <= calc::kMaxCallTokens) longest += "+1";
    EXPECT_EQ(evaluate(encode(longest)), static_cast<int64_t>(longest.size() / 2 + 1));
    EXPECT_FALSE(evaluate(encode(longest + "+1")).has_value()) << "over kMaxCallTokens";
    EXPECT_FALSE(evaluate({3, 99}).has_value()) << "token outside the vocabulary";
    EXPECT_EQ(calc::render(calc::tool_output(encode("12*34"))), "=408|");
    EXPECT_EQ(calc::render(calc::tool_output(encode("3-40"))), "=-37|");
    EXPECT_EQ(calc::render(calc::tool_output(encode("3-"))), "=error|");
    EXPECT_EQ(calc::render(encode("^12*34?<calc>12*34</calc>=408|408$")), "^12*34?<calc>12*34</calc>=408|408$");
    EXPECT_THROW(encode("12/3"), Error);
}

TEST(CalcTask, RewardDemonstrationAndLoopDecisions) {
    using calc::encode;
    auto task = make_task("calc", 7);
    const AgentLoop* loop = as_agent_loop(*task);
    ASSERT_NE(loop, nullptr);
    EXPECT_EQ(as_agent_loop(*make_task("addition", 7)), nullptr);
    EXPECT_EQ(task->vocab_size(), calc::kVocab);
    std::set<Tokens> train;
    int64_t three_operands = 0;
    for (int64_t i = 0; i < 2000; ++i) {
        const Tokens p = task->train_prompt(i);
        ASSERT_LE(static_cast<int32_t>(p.size()), task->max_prompt_tokens());
        train.insert(p);
        const AgentDemo d = loop->demonstration(p);
        ASSERT_EQ(d.tokens, task->solution(p));
        ASSERT_LE(static_cast<int32_t>(d.tokens.size()), task->max_response_tokens());
        ASSERT_FLOAT_EQ(task->reward(p, d.tokens), 1.0f) << task->render(p) << task->render(d.tokens);
        // Mask 0 exactly on the tool output `=VALUE|`.
        const std::string s = task->render(d.tokens);
        const size_t eq = s.find("</calc>") + 7;
        Tokens masked;
        for (size_t t = 0; t < d.tokens.size(); ++t)
            if (!d.loss_mask[t]) masked.push_back(d.tokens[t]);
        const Tokens expr(p.begin() + 1, p.end() - 1);
        ASSERT_EQ(masked, calc::tool_output(expr)) << s;
        ASSERT_EQ(task->render(Tokens(d.tokens.begin(), d.tokens.begin() + static_cast<long>(expr.size()) + 2)),
                  "<calc>" + task->render(expr) + "</calc>");
        (void)eq;
        three_operands += std::count_if(expr.begin(), expr.end(), [](int32_t t) { return t >= 10; }) == 2;
    }
    EXPECT_GT(three_operands, 500);
    EXPECT_LT(three_operands, 1500);
    for (int64_t i = 0; i < 300; ++i) EXPECT_EQ(train.count(task->eval_prompt(i)), 0u);

    const Tokens p = encode("^12*34+5?");
    EXPECT_FLOAT_EQ(task->reward(p, encode("<calc>12*34+5</calc>=413|413$")), 1.0f);
    EXPECT_FLOAT_EQ(task->reward(p, encode("<calc>12*34+5</calc>=413|412$")), 0.0f);
    EXPECT_FLOAT_EQ(task->reward(p, encode("413$")), 1.0f) << "knowing the answer counts";
    EXPECT_FLOAT_EQ(task->reward(p, encode("<calc>1+1</calc>=2|2$")), 0.0f);
    EXPECT_FLOAT_EQ(task->reward(p, encode("<calc>12*34+5</calc>=413|")), 0.0f) << "no answer";
    TaskParams pc;
    pc.partial_credit = true;
    auto partial = make_task("calc", 7, pc);
    EXPECT_FLOAT_EQ(partial->reward(p, encode("<calc>12*34+5</calc>=413|412$")), 0.25f);
    EXPECT_FLOAT_EQ(partial->reward(p, encode("<calc>1+1</calc>=2|2$")), 0.0f);
    EXPECT_FLOAT_EQ(partial->reward(p, encode("<calc>12*34+5</calc>=413|413$")), 1.0f);
    EXPECT_GE(partial->best_constant_score(200), task->best_constant_score(200));
    EXPECT_LT(task->best_constant_score(200), 0.1f);
    EXPECT_THROW(make_task("calc", 7, TaskParams{1}), ConfigError);

    // The loop: a turn ending in </calc> gets the tool's output; EOS or a truncated turn ends it.
    AgentSession s;
    s.prompt = p;
    s.tokens = p;
    s.turn_begin = s.tokens.size();
    const Tokens call = encode("<calc>12*34+5</calc>");
    s.tokens.insert(s.tokens.end(), call.begin(), call.end());
    s.turn_stopped = true;
    s.turns = 1;
    AgentAction a = loop->on_turn(s);
    ASSERT_FALSE(a.done);
    EXPECT_EQ(task->render(a.env_tokens), "=413|");
    s.tokens.resize(s.turn_begin);
    for (int32_t t : encode("7*<calc>1+</calc>")) s.tokens.push_back(t);
    a = loop->on_turn(s);
    ASSERT_FALSE(a.done);
    EXPECT_EQ(task->render(a.env_tokens), "=error|");
    s.tokens.resize(s.turn_begin);
    for (int32_t t : encode("12</calc>")) s.tokens.push_back(t);
    EXPECT_EQ(task->render(loop->on_turn(s).env_tokens), "=error|") << "no <calc> in the turn";
    s.tokens.resize(s.turn_begin);
    for (int32_t t : encode("413$")) s.tokens.push_back(t);
    EXPECT_TRUE(loop->on_turn(s).done);
    EXPECT_FLOAT_EQ(loop->reward(s), 1.0f);
    s.tokens.resize(s.turn_begin);
    for (int32_t t : encode("<calc>12")) s.tokens.push_back(t);
    s.turn_stopped = false;
    EXPECT_TRUE(loop->on_turn(s).done);
    EXPECT_FLOAT_EQ(loop->reward(s), 0.0f);
    EXPECT_THROW(task->reward(encode("^1+?"), encode("1$")), Error);
}

TEST(CalcTask, SessionsOnTheEngineFollowTheToolProtocol) {
    // A random policy on the calc vocabulary: whatever it samples, every environment segment
    // is the tool's output for the call just before it, masked out, and rewards are the task's.
    auto task = make_task("calc", 3);
    const AgentLoop& loop = *as_agent_loop(*task);
    const int32_t budget = task->max_prompt_tokens() + task->max_response_tokens();
    model::LlamaModel m = tiny_model(calc::kVocab, budget, 9);
    InferenceConfig ec;
    ec.max_batch = 8;
    InferenceEngine engine(m, ec);
    std::vector<AgentJob> jobs;
    for (int i = 0; i < 40; ++i) jobs.push_back({i, task->train_prompt(i), static_cast<uint64_t>(77 + i)});
    AgentRunConfig cfg;
    cfg.stop_ids = {task->eos_token()};
    cfg.max_session_tokens = budget;
    cfg.temperature = 1.5;
    const auto res = run_agent_sessions(engine, loop, jobs, cfg);
    int64_t calls = 0;
    for (const auto& r : res) {
        check_columns(r);
        size_t t = static_cast<size_t>(r.prompt_len);
        while (t < r.tokens.size()) {
            if (r.loss_mask[t]) {
                ++t;
                continue;
            }
            // environment segment after a turn that ended on </calc>
            ASSERT_EQ(r.tokens[t - 1], calc::kEnd);
            size_t open = t - 1;
            while (open > static_cast<size_t>(r.prompt_len) && r.loss_mask[open - 1] &&
                   r.tokens[open - 1] != calc::kCall)
                --open;
            Tokens expected;
            if (open > static_cast<size_t>(r.prompt_len) && r.tokens[open - 1] == calc::kCall)
                expected = calc::tool_output(
                    Tokens(r.tokens.begin() + static_cast<long>(open), r.tokens.begin() + static_cast<long>(t) - 1));
            else expected = {calc::kRes, calc::kErr, calc::kTerm};
            size_t e = t;
            while (e < r.tokens.size() && !r.loss_mask[e]) ++e;
            EXPECT_EQ(Tokens(r.tokens.begin() + static_cast<long>(t), r.tokens.begin() + static_cast<long>(e)),
                      expected);
            ++calls;
            t = e;
        }
        EXPECT_LE(r.turns, loop.max_turns());
        EXPECT_FLOAT_EQ(r.reward, task->reward(jobs[static_cast<size_t>(r.id)].prompt,
                                               Tokens(r.tokens.begin() + r.prompt_len, r.tokens.end())));
    }
    EXPECT_GT(calls, 0) << "a hot random policy should close a call now and then";
    // Greedy evaluation runs too (an untrained model solves nothing).
    const AgentEval ev = evaluate_agent(engine, *task, loop, 16);
    EXPECT_EQ(ev.n, 16);
    EXPECT_LT(ev.solved, 0.5);
}
