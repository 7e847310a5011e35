// SPDX-License-Identifier: Apache-2.0
// task_longtail: the built-in `longtail` task — a count-down whose length is heavy-tailed,
// so most responses are short and a few are 10-20x the median (the case that leaves
// pipeline bubbles in synchronous RL). Prompt `^AA>BB=` (two-digit numbers, A >= B); answer:
// every number from A down to B as two digits, then EOS, i.e. 2N+1 tokens with N = A-B+1.
// N is drawn from P(N = n) ∝ (n + 2)^-2 on n = 1..60 (response length: p50 7, p95 55,
// p99 99, max 121 tokens; ~3% of prompts are >= 10x the median), B uniformly from
// [0, 100 - N]. Reward: matching positions / max(target, response length) (1 = exact).
// Ignores TaskParams. Does not know about models.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "common/error.hpp"
#include "rollout/task.hpp"
#include "rollout/task_builtin.hpp"

namespace tagflow::rollout::detail {
namespace {

// Tokens: 0..9 digits, BOS '^', SEP '=', EOS '$', GT '>'.
constexpr int32_t kBos = kDigitBos;
constexpr int32_t kSep = kDigitSep;
constexpr int32_t kEos = kDigitEos;
constexpr int32_t kGt = kDigitOp;
constexpr int32_t kMaxCount = 60;  // longest count-down: 2 * 60 + 1 = 121 response tokens
constexpr double kShift = 2.0;     // P(N = n) ∝ (n + kShift)^-kExponent
constexpr double kExponent = 2.0;
constexpr uint64_t kEvalModulo = 8;  // one (A, B) pair in 8 is held out, by a seeded hash

class LongtailTask final : public DigitAnswerTask {
public:
    explicit LongtailTask(uint64_t seed) : DigitAnswerTask('>'), seed_(seed) {
        double total = 0;
        for (int32_t n = 1; n <= kMaxCount; ++n) total += std::pow(n + kShift, -kExponent);
        double acc = 0;
        for (int32_t n = 1; n <= kMaxCount; ++n) {
            acc += std::pow(n + kShift, -kExponent) / total;
            cdf_[static_cast<size_t>(n - 1)] = acc;
        }
        cdf_.back() = 1.0;
    }

    std::string name() const override { return "longtail"; }
    int32_t max_prompt_tokens() const override { return 7; }
    int32_t max_response_tokens() const override { return 2 * kMaxCount + 1; }

    std::vector<int32_t> train_prompt(int64_t index) const override { return draw(index, false); }
    std::vector<int32_t> eval_prompt(int64_t index) const override { return draw(index, true); }

    float reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const override {
        return positional_credit(answer(prompt), before_eos(response, kEos));
    }

    float best_constant_score(int64_t n_eval) const override {
        if (n_eval <= 0) return 0.0f;
        const std::vector<std::vector<int32_t>> targets = eval_answers(n_eval);
        return best_constant_positional(targets, 2 * kMaxCount);
    }

private:
    // A and B of a prompt this task made; anything else is a caller's bug.
    std::pair<int32_t, int32_t> parse(const std::vector<int32_t>& p) const {
        auto digit = [](int32_t t) { return t >= 0 && t <= 9; };
        if (p.size() != 7 || p[0] != kBos || p[3] != kGt || p[6] != kSep || !digit(p[1]) || !digit(p[2]) ||
            !digit(p[4]) || !digit(p[5]))
            throw Error("task longtail: not a longtail prompt: " + render(p));
        const int32_t a = p[1] * 10 + p[2], b = p[4] * 10 + p[5];
        if (a < b) throw Error("task longtail: not a longtail prompt (A < B): " + render(p));
        return {a, b};
    }

    std::vector<int32_t> answer(const std::vector<int32_t>& prompt) const override {
        auto [a, b] = parse(prompt);
        std::vector<int32_t> out;
        out.reserve(static_cast<size_t>(2 * (a - b + 1)));
        for (int32_t v = a; v >= b; --v) {
            out.push_back(v / 10);
            out.push_back(v % 10);
        }
        return out;
    }

    bool is_eval(int32_t a, int32_t b) const {
        return mix64(mix64(seed_ ^ 0x1a11ULL) ^ static_cast<uint64_t>(a * 100 + b)) % kEvalModulo == 0;
    }

    // N by inverting the CDF, then B uniform; rejection-sampled until (A, B) falls on the
    // wanted side of the split. Deterministic per (seed, stream, index).
    std::vector<int32_t> draw(int64_t index, bool want_eval) const {
        const uint64_t stream = want_eval ? 0xe7a1ULL : 0x7a1eULL;
        uint64_t state = mix64(mix64(seed_ ^ (stream << 48) ^ 0x1a11ULL) ^ static_cast<uint64_t>(index));
        for (;;) {
            state = mix64(state);
            const double u = unit_double(state);
            const int32_t n = 1 + static_cast<int32_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
            const int32_t b = static_cast<int32_t>(mix64(state ^ 0xbULL) % static_cast<uint64_t>(101 - n));
            const int32_t a = b + n - 1;
            if (is_eval(a, b) != want_eval) continue;
            return {kBos, a / 10, a % 10, kGt, b / 10, b % 10, kSep};
        }
    }

    uint64_t seed_;
    std::array<double, kMaxCount> cdf_{};  // cdf_[n-1] = P(N <= n)
};

}  // namespace

std::unique_ptr<Task> make_longtail_task(uint64_t seed, const TaskParams&) {
    return std::make_unique<LongtailTask>(seed);
}

}  // namespace tagflow::rollout::detail
