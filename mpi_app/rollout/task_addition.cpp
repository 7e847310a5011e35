// SPDX-License-Identifier: Apache-2.0
// task_addition: the built-in `addition` task — `^aaa+bbb=` answered with the D+1 digits of
// the sum, then EOS; every number is zero-padded and written least-significant digit first
// (`^321+989=2111$` is 123 + 989 = 1112). Then answer digit i sits at a fixed distance from
// the two addend digits i it depends on, and the carry comes from the tokens just before
// it, which small decoders with relative positions learn quickly. Reward: exact match (1 or 0), or with
// TaskParams::partial_credit the fraction of correct answer digits. Sparse for a random
// policy: warm-start with `tagflow sft`. Does not know about models.
#include <algorithm>
#include <map>
#include <string>

#include "common/error.hpp"
#include "rollout/task.hpp"
#include "rollout/task_builtin.hpp"

namespace tagflow::rollout::detail {
namespace {

// Tokens: 0..9 digits, BOS '^', SEP '=', EOS '$', PLUS '+'.
constexpr int32_t kBos = kDigitBos;
constexpr int32_t kSep = kDigitSep;
constexpr int32_t kEos = kDigitEos;
constexpr int32_t kPlus = kDigitOp;
constexpr int32_t kDefaultDigits = 3;
constexpr int32_t kMaxDigits = 12;
// One unordered pair {a, b} in kEvalModulo (by a seeded hash) is held out, so b+a is held
// out whenever a+b is.
constexpr uint64_t kEvalModulo = 8;

class AdditionTask final : public DigitAnswerTask {
public:
    AdditionTask(uint64_t seed, const TaskParams& p)
        : DigitAnswerTask('+'),
          seed_(seed),
          digits_(p.digits == 0 ? kDefaultDigits : p.digits),
          partial_(p.partial_credit) {
        // Two digits at least: with one, the 55 unordered pairs could leave the held-out set empty.
        if (digits_ < 2 || digits_ > kMaxDigits)
            throw ConfigError("task addition: digits must be in [2, " + std::to_string(kMaxDigits) + "], got " +
                              std::to_string(digits_));
        limit_ = 1;
        for (int32_t i = 0; i < digits_; ++i) limit_ *= 10;
    }

    std::string name() const override { return "addition"; }
    int32_t max_prompt_tokens() const override { return 2 * digits_ + 3; }
    int32_t max_response_tokens() const override { return digits_ + 2; }

    std::vector<int32_t> train_prompt(int64_t index) const override { return draw(index, false); }
    std::vector<int32_t> eval_prompt(int64_t index) const override { return draw(index, true); }

    float reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const override {
        const std::vector<int32_t> target = answer(prompt);
        const std::vector<int32_t> got = before_eos(response, kEos);
        if (partial_) return positional_credit(target, got);
        return got == target ? 1.0f : 0.0f;
    }

    // Exact: one fixed response scores 1 on the prompts whose sum it spells and 0 elsewhere,
    // so the best is the most frequent sum. With partial credit every target has D+1 digits
    // and the per-position majority is optimal.
    float best_constant_score(int64_t n_eval) const override {
        if (n_eval <= 0) return 0.0f;
        const std::vector<std::vector<int32_t>> targets = eval_answers(n_eval);
        if (partial_) return best_constant_positional(targets, digits_ + 1);
        std::map<std::vector<int32_t>, int64_t> count;
        int64_t best = 0;
        for (const auto& t : targets) best = std::max(best, ++count[t]);
        return static_cast<float>(best) / static_cast<float>(n_eval);
    }

private:
    // The two addends of a prompt this task made (digits least significant first); anything
    // else is a caller's bug.
    std::pair<int64_t, int64_t> parse(const std::vector<int32_t>& prompt) const {
        const size_t n = static_cast<size_t>(digits_);
        if (prompt.size() != 2 * n + 3 || prompt[0] != kBos || prompt[n + 1] != kPlus || prompt[2 * n + 2] != kSep)
            throw Error("task addition: not an addition prompt: " + render(prompt));
        int64_t a = 0, b = 0;
        for (size_t i = n; i-- > 0;) {
            const int32_t da = prompt[1 + i], db = prompt[n + 2 + i];
            if (da < 0 || da > 9 || db < 0 || db > 9)
                throw Error("task addition: not an addition prompt: " + render(prompt));
            a = a * 10 + da;
            b = b * 10 + db;
        }
        return {a, b};
    }

    // The D+1 digits of a+b, least significant first (no EOS).
    std::vector<int32_t> answer(const std::vector<int32_t>& prompt) const override {
        auto [a, b] = parse(prompt);
        int64_t sum = a + b;
        std::vector<int32_t> out;
        for (int32_t i = 0; i <= digits_; ++i, sum /= 10) out.push_back(static_cast<int32_t>(sum % 10));
        return out;
    }

    bool is_eval(int64_t a, int64_t b) const {
        const uint64_t lo = static_cast<uint64_t>(std::min(a, b)), hi = static_cast<uint64_t>(std::max(a, b));
        return mix64(mix64(mix64(seed_ ^ 0xadd5eedULL) ^ lo) ^ hi) % kEvalModulo == 0;
    }

    // Rejection-sample (a, b) from a per-(seed, stream, index) counter until the pair falls on
    // the wanted side of the split (~8 tries for held-out prompts). `% limit_` of a 64-bit hash
    // has a bias below 1e-7: negligible.
    std::vector<int32_t> draw(int64_t index, bool want_eval) const {
        const uint64_t stream = want_eval ? 0xe7a1ULL : 0x7a1eULL;
        uint64_t state = mix64(mix64(seed_ ^ (stream << 48) ^ 0xaddULL) ^ static_cast<uint64_t>(index));
        for (;;) {
            state = mix64(state);
            const int64_t a = static_cast<int64_t>(state % static_cast<uint64_t>(limit_));
            const int64_t b = static_cast<int64_t>(mix64(state ^ 0xbULL) % static_cast<uint64_t>(limit_));
            if (is_eval(a, b) != want_eval) continue;
            std::vector<int32_t> prompt(static_cast<size_t>(2 * digits_ + 3));
            prompt[0] = kBos;
            prompt[static_cast<size_t>(digits_ + 1)] = kPlus;
            prompt.back() = kSep;
            int64_t x = a, y = b;
            for (int32_t i = 1; i <= digits_; ++i, x /= 10, y /= 10) {
                prompt[static_cast<size_t>(i)] = static_cast<int32_t>(x % 10);
                prompt[static_cast<size_t>(digits_ + 1 + i)] = static_cast<int32_t>(y % 10);
            }
            return prompt;
        }
    }

    uint64_t seed_;
    int32_t digits_;
    bool partial_;
    int64_t limit_ = 1;  // 10^digits
};

}  // namespace

std::unique_ptr<Task> make_addition_task(uint64_t seed, const TaskParams& params) {
    return std::make_unique<AdditionTask>(seed, params);
}

}  // namespace tagflow::rollout::detail
