// SPDX-License-Identifier: Apache-2.0
// task_calc: the built-in multi-turn task `calc` — an arithmetic expression of two or three
// operands of up to D digits (TaskParams::digits, default 3) with + - *, e.g.
// `^1234*56+7?`. Products of three-digit numbers are beyond what a small model can know, so
// the way to the reward is the calculator tool: the model writes `<calc>EXPR</calc>` (its turn
// ends there), the agent loop evaluates EXPR with a safe parser (digits and + - * only,
// bounded length) and appends `=VALUE|` as environment tokens (`=error|` for a malformed
// call), and the model writes VALUE and EOS. Reward 1 when the final answer (the tokens after
// the last `|`, before EOS; the whole response if there is no `|`) equals the value, else 0;
// with TaskParams::partial_credit a wrong answer still gets 0.25 when the session holds a
// well-formed call that computes the prompt's value. The task is both a Task and an
// AgentLoop (agent_loop.hpp); its solution is the tool-using session, and its demonstration
// masks the tool's output out of the SFT loss. Does not know about models.
#include "rollout/task_calc.hpp"

#include <algorithm>
#include <map>
#include <string>

#include "common/error.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/task.hpp"
#include "rollout/task_builtin.hpp"

namespace tagflow::rollout {

namespace calc {

std::optional<int64_t> evaluate(const std::vector<int32_t>& tokens) {
    if (tokens.empty() || tokens.size() > kMaxCallTokens) return std::nullopt;
    // sum of signed terms; a term is a product of numbers
    int64_t sum = 0, term = 0;
    int32_t sign = 1;  // of the current term
    bool in_product = false;
    size_t i = 0;
    for (;;) {
        // a number
        int64_t v = 0;
        size_t digits = 0;
        while (i < tokens.size() && tokens[i] >= 0 && tokens[i] <= 9) {
            v = v * 10 + tokens[i++];
            if (++digits > kMaxNumberDigits) return std::nullopt;
        }
        if (digits == 0) return std::nullopt;
        if (in_product) {
            if (__builtin_mul_overflow(term, v, &term)) return std::nullopt;
        } else {
            term = v;
        }
        if (i == tokens.size() || tokens[i] != kTimes) {
            // the term ends
            const int64_t t = sign * term;
            if (__builtin_add_overflow(sum, t, &sum)) return std::nullopt;
        }
        if (i == tokens.size()) return sum;
        const int32_t op = tokens[i++];
        if (op == kTimes) {
            in_product = true;
        } else if (op == kPlus || op == kMinus) {
            in_product = false;
            sign = op == kPlus ? 1 : -1;
        } else {
            return std::nullopt;
        }
        if (i == tokens.size()) return std::nullopt;  // trailing operator
    }
}

std::vector<int32_t> number_tokens(int64_t v) {
    std::vector<int32_t> out;
    const bool neg = v < 0;
    // magnitude as unsigned: -INT64_MIN does not fit int64
    uint64_t m = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
        out.push_back(static_cast<int32_t>(m % 10));
        m /= 10;
    } while (m);
    if (neg) out.push_back(kMinus);
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<int32_t> tool_output(const std::vector<int32_t>& call) {
    std::vector<int32_t> out{kRes};
    if (auto v = evaluate(call)) {
        const auto d = number_tokens(*v);
        out.insert(out.end(), d.begin(), d.end());
    } else {
        out.push_back(kErr);
    }
    out.push_back(kTerm);
    return out;
}

namespace {
const char* spelling(int32_t t) {
    static const char* const names[kVocab] = {"0", "1", "2", "3", "4",      "5",       "6", "7",     "8", "9", "+",
                                              "-", "*", "^", "?", "<calc>", "</calc>", "=", "error", "|", "$"};
    return t >= 0 && t < kVocab ? names[t] : "#";
}
}  // namespace

std::string render(const std::vector<int32_t>& tokens) {
    std::string s;
    for (int32_t t : tokens) s += spelling(t);
    return s;
}

std::vector<int32_t> encode(const std::string& text) {
    std::vector<int32_t> out;
    size_t i = 0;
    while (i < text.size()) {
        int32_t best = -1;
        size_t best_len = 0;
        for (int32_t t = 0; t < kVocab; ++t) {
            const std::string sp = spelling(t);
            if (sp.size() > best_len && text.compare(i, sp.size(), sp) == 0) {
                best = t;
                best_len = sp.size();
            }
        }
        if (best < 0) throw Error("calc: cannot encode '" + text.substr(i, 1) + "' in \"" + text + "\"");
        out.push_back(best);
        i += best_len;
    }
    return out;
}

}  // namespace calc

namespace detail {
namespace {

using namespace calc;

constexpr int32_t kDefaultDigits = 3;
constexpr int32_t kMaxDigits = 6;
constexpr uint64_t kEvalModulo = 8;  // one expression in 8 (by a seeded hash) is held out
constexpr float kPartial = 0.25f;

class CalcTask final : public Task, public AgentLoop {
public:
    CalcTask(uint64_t seed, const TaskParams& p)
        : seed_(seed), digits_(p.digits == 0 ? kDefaultDigits : p.digits), partial_(p.partial_credit) {
        if (digits_ < 2 || digits_ > kMaxDigits)
            throw ConfigError("task calc: digits must be in [2, " + std::to_string(kMaxDigits) + "], got " +
                              std::to_string(digits_));
        limit_ = 1;
        for (int32_t i = 0; i < digits_; ++i) limit_ *= 10;
    }

    // ---- Task ----
    std::string name() const override { return "calc"; }
    int32_t vocab_size() const override { return kVocab; }
    int32_t eos_token() const override { return kEos; }
    // ^ + three operands + two operators + ?
    int32_t max_prompt_tokens() const override { return 3 * digits_ + 4; }
    // <calc> EXPR </calc> = VALUE | VALUE $ with |EXPR| <= 3D+2 and |VALUE| <= 3D+1 (sign).
    int32_t max_response_tokens() const override { return 9 * digits_ + 9; }

    std::vector<int32_t> train_prompt(int64_t index) const override { return draw(index, false); }
    std::vector<int32_t> eval_prompt(int64_t index) const override { return draw(index, true); }

    // `response`: everything after the prompt (model turns and tool outputs).
    float reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const override {
        const int64_t v = value(prompt);
        const std::vector<int32_t> r = before_eos(response, kEos);
        const auto term = std::find(r.rbegin(), r.rend(), kTerm);
        const std::vector<int32_t> answer(term.base(), r.end());
        if (answer == number_tokens(v)) return 1.0f;
        if (partial_ && has_good_call(r, v)) return kPartial;
        return 0.0f;
    }

    std::vector<int32_t> solution(const std::vector<int32_t>& prompt) const override {
        return demonstration(prompt).tokens;
    }

    std::string render(const std::vector<int32_t>& tokens) const override { return calc::render(tokens); }

    // Exact: a fixed response scores 1 where its final answer is the value; with partial
    // credit it may also hold a call computing a second value (0.25 there).
    float best_constant_score(int64_t n_eval) const override {
        if (n_eval <= 0) return 0.0f;
        std::map<int64_t, int64_t> count;
        for (int64_t i = 0; i < n_eval; ++i) ++count[value(eval_prompt(i))];
        std::vector<int64_t> c;
        for (const auto& [v, k] : count) c.push_back(k);
        std::sort(c.rbegin(), c.rend());
        double best = static_cast<double>(c[0]);
        if (partial_ && c.size() > 1) best += kPartial * static_cast<double>(c[1]);
        return static_cast<float>(best / static_cast<double>(n_eval));
    }

    // ---- AgentLoop ----
    std::vector<int32_t> turn_stop_tokens() const override { return {kEnd}; }

    AgentAction on_turn(const AgentSession& s) const override {
        const std::vector<int32_t> turn = s.last_turn();
        if (!s.turn_stopped || turn.empty() || turn.back() != kEnd) return AgentAction::finish();
        // the call: between the turn's last <calc> and the closing </calc>
        const auto open = std::find(turn.rbegin() + 1, turn.rend(), kCall);
        if (open == turn.rend()) return AgentAction::append({kRes, kErr, kTerm});
        return AgentAction::append(tool_output(std::vector<int32_t>(open.base(), turn.end() - 1)));
    }

    float reward(const AgentSession& s) const override {
        return reward(s.prompt, std::vector<int32_t>(s.tokens.begin() + static_cast<std::ptrdiff_t>(s.prompt.size()),
                                                     s.tokens.end()));
    }

    int32_t max_turns() const override { return 3; }

    AgentDemo demonstration(const std::vector<int32_t>& prompt) const override {
        const int64_t v = value(prompt);
        AgentDemo d;
        auto add = [&](const std::vector<int32_t>& t, uint8_t m) {
            d.tokens.insert(d.tokens.end(), t.begin(), t.end());
            d.loss_mask.insert(d.loss_mask.end(), t.size(), m);
        };
        const std::vector<int32_t> expr(prompt.begin() + 1, prompt.end() - 1);
        add({kCall}, 1);
        add(expr, 1);
        add({kEnd}, 1);
        add(tool_output(expr), 0);
        add(number_tokens(v), 1);
        add({kEos}, 1);
        return d;
    }

private:
    // The value of a prompt this task made; anything else is a caller's bug.
    int64_t value(const std::vector<int32_t>& prompt) const {
        if (prompt.size() < 3 || prompt.front() != kBos || prompt.back() != kAsk)
            throw Error("task calc: not a calc prompt: " + calc::render(prompt));
        auto v = evaluate(std::vector<int32_t>(prompt.begin() + 1, prompt.end() - 1));
        if (!v) throw Error("task calc: not a calc prompt: " + calc::render(prompt));
        return *v;
    }

    // A <calc>...</calc> in `r` whose content evaluates to v.
    static bool has_good_call(const std::vector<int32_t>& r, int64_t v) {
        for (size_t i = 0; i < r.size(); ++i) {
            if (r[i] != kCall) continue;
            const auto end = std::find(r.begin() + static_cast<std::ptrdiff_t>(i) + 1, r.end(), kEnd);
            if (end == r.end()) return false;
            auto got = evaluate(std::vector<int32_t>(r.begin() + static_cast<std::ptrdiff_t>(i) + 1, end));
            if (got && *got == v) return true;
        }
        return false;
    }

    bool is_eval(const std::vector<int32_t>& expr) const {
        uint64_t h = mix64(seed_ ^ 0xca1cULL);
        for (int32_t t : expr) h = mix64(h ^ static_cast<uint64_t>(t + 1));
        return h % kEvalModulo == 0;
    }

    // Two or three operands uniform in [0, 10^D), operators uniform in + - *; rejection-sampled
    // onto the wanted side of the held-out split.
    std::vector<int32_t> draw(int64_t index, bool want_eval) const {
        const uint64_t stream = want_eval ? 0xe7a1ULL : 0x7a1eULL;
        uint64_t state = mix64(mix64(seed_ ^ (stream << 48) ^ 0xca1cULL) ^ static_cast<uint64_t>(index));
        for (;;) {
            state = mix64(state);
            const int n_ops = 1 + static_cast<int>(state % 2);
            std::vector<int32_t> p{kBos};
            for (int k = 0; k <= n_ops; ++k) {
                const auto operand = static_cast<int64_t>(
                    mix64(state ^ (uint64_t{0x0b} << 40) ^ static_cast<uint64_t>(k)) % static_cast<uint64_t>(limit_));
                const auto d = number_tokens(operand);
                p.insert(p.end(), d.begin(), d.end());
                if (k < n_ops) {
                    static constexpr int32_t ops[3] = {kPlus, kMinus, kTimes};
                    p.push_back(ops[mix64(state ^ (uint64_t{0x0c} << 40) ^ static_cast<uint64_t>(k)) % 3]);
                }
            }
            p.push_back(kAsk);
            if (is_eval(std::vector<int32_t>(p.begin() + 1, p.end() - 1)) == want_eval) return p;
        }
    }

    uint64_t seed_;
    int32_t digits_;
    bool partial_;
    int64_t limit_ = 1;  // 10^digits
};

}  // namespace

std::unique_ptr<Task> make_calc_task(uint64_t seed, const TaskParams& params) {
    return std::make_unique<CalcTask>(seed, params);
}

}  // namespace detail
}  // namespace tagflow::rollout
