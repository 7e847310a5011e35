// SPDX-License-Identifier: Apache-2.0
// task: the built-in digit-string tasks (`reverse`, `sort`: dense per-position reward), the
// helpers every built-in task shares, and the task registry behind make_task() (which also
// lists `addition` and `longtail`, defined in their own files). Prompt streams come from a
// counter-based hash of (seed, index), so any rank can produce any prompt without shared
// state. Does not know about models.
#include "rollout/task.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <random>

#include "common/error.hpp"
#include "rollout/task_builtin.hpp"

namespace tagflow::rollout {

namespace detail {

std::vector<int32_t> before_eos(const std::vector<int32_t>& response, int32_t eos) {
    return {response.begin(), std::find(response.begin(), response.end(), eos)};
}

float positional_credit(const std::vector<int32_t>& target, const std::vector<int32_t>& answer) {
    const size_t denom = std::max(target.size(), answer.size());
    if (denom == 0) return 1.0f;
    size_t correct = 0;
    for (size_t i = 0; i < std::min(target.size(), answer.size()); ++i) correct += answer[i] == target[i];
    return static_cast<float>(correct) / static_cast<float>(denom);
}

float best_constant_positional(const std::vector<std::vector<int32_t>>& targets, int32_t max_len) {
    if (targets.empty()) return 0.0f;
    double best = 0.0;
    for (int32_t L = 1; L <= max_len; ++L) {  // L = 0 is handled below
        double total = 0.0;
        for (int32_t pos = 0; pos < L; ++pos) {
            std::array<double, 10> w{};
            for (const auto& t : targets)
                if (pos < static_cast<int32_t>(t.size()) && t[pos] >= 0 && t[pos] <= 9)
                    w[static_cast<size_t>(t[pos])] +=
                        1.0 / static_cast<double>(std::max<size_t>(t.size(), static_cast<size_t>(L)));
            total += *std::max_element(w.begin(), w.end());
        }
        best = std::max(best, total / static_cast<double>(targets.size()));
    }
    // The empty response: 1 on empty targets, 0 on the others.
    double empty = 0;
    for (const auto& t : targets) empty += t.empty();
    return static_cast<float>(std::max(best, empty / static_cast<double>(targets.size())));
}

std::vector<int32_t> DigitAnswerTask::solution(const std::vector<int32_t>& prompt) const {
    std::vector<int32_t> s = answer(prompt);
    s.push_back(kDigitEos);
    return s;
}

std::string DigitAnswerTask::render(const std::vector<int32_t>& tokens) const {
    std::string s;
    for (int32_t t : tokens) {
        if (t >= 0 && t <= 9) s += static_cast<char>('0' + t);
        else if (t == kDigitBos) s += '^';
        else if (t == kDigitSep) s += '=';
        else if (t == kDigitEos) s += '$';
        else if (t == kDigitOp && op_char_) s += op_char_;
        else s += '?';
    }
    return s;
}

std::vector<std::vector<int32_t>> DigitAnswerTask::eval_answers(int64_t n_eval) const {
    std::vector<std::vector<int32_t>> out;
    for (int64_t i = 0; i < n_eval; ++i) out.push_back(answer(eval_prompt(i)));
    return out;
}

}  // namespace detail

std::vector<int32_t> Task::solution(const std::vector<int32_t>&) const {
    throw Error("task " + name() + " has no reference solution (Task::solution is not implemented)");
}

namespace {

using detail::mix64;

constexpr int32_t kBos = detail::kDigitBos;
constexpr int32_t kSep = detail::kDigitSep;
constexpr int32_t kEos = detail::kDigitEos;

// Tokens: 0..9 digits, then BOS, SEP, EOS (task_builtin.hpp). Prompt = BOS d1..dn SEP;
// answer = dn..d1 EOS.
constexpr int32_t kDefaultDigits = 5;
// One prompt in kEvalModulo (by a seeded hash of its digits) is held out.
constexpr uint64_t kEvalModulo = 8;

// A digit string in, a digit string out: `reverse` answers with the digits reversed, `sort`
// with them in ascending order. Same prompts, tokens, held-out split and reward shape.
class DigitTask final : public detail::DigitAnswerTask {
public:
    enum class Kind { kReverse, kSort };

    DigitTask(Kind kind, uint64_t seed, const TaskParams& p)
        : kind_(kind),
          seed_(seed),
          max_digits_(p.digits == 0 ? kDefaultDigits : p.digits),
          min_digits_(p.min_digits == 0 ? max_digits_ : p.min_digits) {
        const std::string n = "task " + name();
        if (max_digits_ < 1 || max_digits_ > 64)
            throw ConfigError(n + ": digits must be in [1, 64], got " + std::to_string(max_digits_));
        if (min_digits_ < 1 || min_digits_ > max_digits_)
            throw ConfigError(n + ": min_digits must be 0 or in [1, digits], got " + std::to_string(p.min_digits));
        // With very short strings the held-out set could be empty; require a few of each.
        if (max_digits_ < 2) throw ConfigError(n + ": digits must be at least 2 (held-out set)");
    }

    std::string name() const override { return kind_ == Kind::kReverse ? "reverse" : "sort"; }
    int32_t max_prompt_tokens() const override { return max_digits_ + 2; }
    int32_t max_response_tokens() const override { return max_digits_ + 1; }

    std::vector<int32_t> train_prompt(int64_t index) const override { return draw(index, /*want_eval=*/false); }
    std::vector<int32_t> eval_prompt(int64_t index) const override { return draw(index, /*want_eval=*/true); }

    float reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const override {
        return detail::positional_credit(answer(prompt), detail::before_eos(response, kEos));
    }

    // Exact: for a response of L digits the score of prompt p is matches / max(n_p, L),
    // and positions are independent given L, so the best digit per position is the one
    // with the largest weighted count. Non-digit tokens never match, so they never help.
    float best_constant_score(int64_t n_eval) const override {
        if (n_eval <= 0) return 0.0f;
        return detail::best_constant_positional(eval_answers(n_eval), max_digits_);
    }

private:
    std::vector<int32_t> answer(const std::vector<int32_t>& prompt) const override {
        std::vector<int32_t> digits;
        for (int32_t t : prompt)
            if (t >= 0 && t <= 9) digits.push_back(t);
        if (kind_ == Kind::kReverse) std::reverse(digits.begin(), digits.end());
        else std::sort(digits.begin(), digits.end());
        return digits;
    }

    // What the held-out split hashes: the answer for `reverse` (one answer per prompt), the
    // prompt's digits for `sort` (many prompts share a sorted answer; all would fall together).
    std::vector<int32_t> split_key(const std::vector<int32_t>& prompt) const {
        if (kind_ == Kind::kReverse) return answer(prompt);
        std::vector<int32_t> d;
        for (int32_t t : prompt)
            if (t >= 0 && t <= 9) d.push_back(t);
        return d;
    }

    bool is_eval(const std::vector<int32_t>& digits) const {
        uint64_t h = mix64(seed_ ^ 0x5eedULL);
        for (int32_t d : digits) h = mix64(h ^ static_cast<uint64_t>(d + 1));
        h = mix64(h ^ digits.size());
        return h % kEvalModulo == 0;
    }

    // Rejection-sample from a per-(seed, stream, index) counter until the string falls on
    // the wanted side of the held-out split. Deterministic; ~8 tries for eval prompts.
    // (`% 10` of a 64-bit hash has a bias of ~1e-19: negligible.)
    std::vector<int32_t> draw(int64_t index, bool want_eval) const {
        const uint64_t stream = want_eval ? 0xe7a1ULL : 0x7a1eULL;
        uint64_t state = mix64(mix64(seed_ ^ (stream << 48)) ^ static_cast<uint64_t>(index));
        const uint64_t span = static_cast<uint64_t>(max_digits_ - min_digits_ + 1);
        for (;;) {
            state = mix64(state);
            const int32_t n = min_digits_ + static_cast<int32_t>(state % span);
            std::vector<int32_t> prompt;
            prompt.reserve(n + 2);
            prompt.push_back(kBos);
            for (int32_t i = 0; i < n; ++i)
                prompt.push_back(static_cast<int32_t>(mix64(state ^ (0xd1ULL << 32) ^ i) % 10));
            prompt.push_back(kSep);
            if (is_eval(split_key(prompt)) == want_eval) return prompt;
        }
    }

    Kind kind_;
    uint64_t seed_;
    int32_t max_digits_;
    int32_t min_digits_;
};

struct Registered {
    std::string description;
    TaskFactory factory;
};

// The registry, with the built-ins in it from the first use on.
std::map<std::string, Registered>& registry() {
    static std::map<std::string, Registered> r = [] {
        std::map<std::string, Registered> m;
        m["reverse"] = {"reverse a digit string; reward = fraction of correct positions",
                        [](uint64_t seed, const TaskParams& p) {
                            return std::make_unique<DigitTask>(DigitTask::Kind::kReverse, seed, p);
                        }};
        m["sort"] = {"sort a digit string ascending; reward = fraction of correct positions",
                     [](uint64_t seed, const TaskParams& p) {
                         return std::make_unique<DigitTask>(DigitTask::Kind::kSort, seed, p);
                     }};
        m["addition"] = {"a+b, the sum's digits least-significant first; reward = exact match",
                         detail::make_addition_task};
        m["longtail"] = {"count down from A to B: long-tailed response lengths (p50 7, max 121 tokens)",
                         detail::make_longtail_task};
        m["calc"] = {"multi-turn: compute an expression with the <calc> tool; reward = exact final answer",
                     detail::make_calc_task};
        return m;
    }();
    return r;
}
std::mutex g_registry_mutex;

}  // namespace

void register_task(const std::string& name, const std::string& description, TaskFactory factory) {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    if (name.empty() || !factory) throw Error("register_task: empty name or factory");
    if (!registry().emplace(name, Registered{description, std::move(factory)}).second)
        throw Error("register_task: a task named '" + name + "' is already registered");
}

std::vector<std::string> task_names() {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    std::vector<std::string> names;
    for (const auto& [n, r] : registry()) names.push_back(n);
    return names;
}

std::unique_ptr<Task> make_task(const std::string& name, uint64_t seed, const TaskParams& params) {
    TaskFactory factory;
    {
        std::lock_guard<std::mutex> lock(g_registry_mutex);
        auto it = registry().find(name);
        if (it != registry().end()) factory = it->second.factory;
    }
    if (!factory) {
        std::string known;
        for (const auto& n : task_names()) known += (known.empty() ? "" : ", ") + n;
        throw ConfigError("unknown task '" + name + "' (known: " + known + ")");
    }
    return factory(seed, params);
}

float random_policy_score(const Task& task, int64_t n_eval, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> tok(0, task.vocab_size() - 1);
    double total = 0.0;
    for (int64_t i = 0; i < n_eval; ++i) {
        std::vector<int32_t> resp;
        while (static_cast<int32_t>(resp.size()) < task.max_response_tokens()) {
            resp.push_back(tok(rng));
            if (resp.back() == task.eos_token()) break;
        }
        total += task.reward(task.eval_prompt(i), resp);
    }
    return n_eval > 0 ? static_cast<float>(total / static_cast<double>(n_eval)) : 0.0f;
}

}  // namespace tagflow::rollout
