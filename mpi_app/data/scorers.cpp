// SPDX-License-Identifier: Apache-2.0
// scorers: exact, gsm8k and math (see scorers.hpp). The veRL parts are ports of
// verl/utils/reward_score/gsm8k.py and math.py (Hendrycks' MATH normalisation), including where
// they raise: there veRL's is_equiv falls back to comparing the raw strings, and so does this.
#include "data/scorers.hpp"

#include <cctype>
#include <numeric>

#include "common/error.hpp"

namespace tagflow::data {
namespace {

using ojson = nlohmann::ordered_json;

struct PyRaise {};  // where the Python original raises

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    std::size_t pos = 0;
    while ((pos = s.find(from, pos)) != std::string::npos) {
        s.replace(pos, from.size(), to);
        pos += to.size();
    }
    return s;
}

std::vector<std::string> split(const std::string& s, std::string_view sep) {  // Python str.split(sep)
    std::vector<std::string> out;
    std::size_t start = 0, pos;
    while ((pos = s.find(sep, start)) != std::string::npos) {
        out.push_back(s.substr(start, pos - start));
        start = pos + sep.size();
    }
    out.push_back(s.substr(start));
    return out;
}

std::string trim(std::string_view s) {
    std::size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return std::string(s.substr(b, e - b));
}

// ---- veRL math.py ----

std::string remove_right_units(const std::string& s) {
    if (s.find("\\text{ ") == std::string::npos) return s;
    auto parts = split(s, "\\text{ ");
    if (parts.size() != 2) throw PyRaise{};
    return parts[0];
}

std::string fix_sqrt(const std::string& s) {
    if (s.find("\\sqrt") == std::string::npos) return s;
    auto parts = split(s, "\\sqrt");
    std::string out = parts[0];
    for (std::size_t i = 1; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        if (p.empty()) throw PyRaise{};
        if (p[0] != '{') out += "\\sqrt{" + p.substr(0, 1) + "}" + p.substr(1);
        else out += "\\sqrt" + p;
    }
    return out;
}

std::string fix_fracs(const std::string& s) {
    auto parts = split(s, "\\frac");
    std::string out = parts[0];
    for (std::size_t i = 1; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        out += "\\frac";
        if (p.empty()) throw PyRaise{};
        if (p[0] == '{') {
            out += p;
            continue;
        }
        if (p.size() < 2) return s;
        std::string a = p.substr(0, 1), b = p.substr(1, 1), post = p.substr(2);
        if (b != "{") out += "{" + a + "}{" + b + "}" + post;
        else out += "{" + a + "}" + b + post;
    }
    return out;
}

bool py_int(const std::string& s, long long& v) {  // Python int(s) for the strings that matter here
    std::string t = trim(s);
    std::size_t i = 0;
    if (i < t.size() && (t[i] == '-' || t[i] == '+')) ++i;
    if (i == t.size()) return false;
    for (std::size_t k = i; k < t.size(); ++k)
        if (!std::isdigit(static_cast<unsigned char>(t[k])) && t[k] != '_') return false;
    try {
        v = std::stoll(replace_all(t, "_", ""));
    } catch (...) {
        return false;
    }
    return true;
}

std::string fix_a_slash_b(const std::string& s) {
    auto parts = split(s, "/");
    if (parts.size() != 2) return s;
    long long a = 0, b = 0;
    if (!py_int(parts[0], a) || !py_int(parts[1], b)) throw PyRaise{};  // int() raises ValueError
    if (s != std::to_string(a) + "/" + std::to_string(b)) return s;
    return "\\frac{" + std::to_string(a) + "}{" + std::to_string(b) + "}";
}

std::string strip_string(std::string s) {
    s = replace_all(s, "\n", "");
    s = replace_all(s, "\\!", "");
    s = replace_all(s, "\\\\", "\\");
    s = replace_all(s, "tfrac", "frac");
    s = replace_all(s, "dfrac", "frac");
    s = replace_all(s, "\\left", "");
    s = replace_all(s, "\\right", "");
    s = replace_all(s, "^{\\circ}", "");
    s = replace_all(s, "^\\circ", "");
    s = replace_all(s, "\\$", "");
    s = remove_right_units(s);
    s = replace_all(s, "\\%", "");
    s = replace_all(s, "%", "");
    s = replace_all(s, " .", " 0.");
    s = replace_all(s, "{.", "{0.");
    if (s.empty()) return s;
    if (s[0] == '.') s = "0" + s;
    auto eq = split(s, "=");
    if (eq.size() == 2 && eq[0].size() <= 2) s = eq[1];
    s = fix_sqrt(s);
    s = replace_all(s, " ", "");
    s = fix_fracs(s);
    if (s == "0.5") s = "\\frac{1}{2}";
    s = fix_a_slash_b(s);
    return s;
}

/// The last "\boxed{...}" (or "\fbox{...}") with its braces matched, as veRL's
/// last_boxed_only_string returns it (the whole command), or nullopt.
std::optional<std::string> last_boxed_only(std::string_view sv) {
    std::string s(sv);
    std::size_t idx = s.rfind("\\boxed");
    if (s.find("\\boxed ") != std::string::npos) {
        auto parts = split(s, "\\boxed ");
        return "\\boxed " + split(parts.back(), "$")[0];
    }
    if (idx == std::string::npos) idx = s.rfind("\\fbox");
    if (idx == std::string::npos) return std::nullopt;
    int open = 0;
    for (std::size_t i = idx; i < s.size(); ++i) {
        if (s[i] == '{') ++open;
        if (s[i] == '}') {
            --open;
            if (open == 0) return s.substr(idx, i + 1 - idx);
        }
    }
    return std::nullopt;
}

// ---- numbers ----

using i128 = __int128;
constexpr long long kMax = 999999999999999999LL;  // 18 digits: products stay inside __int128

bool parse_decimal(std::string_view s, i128& num, i128& den) {
    std::size_t i = 0;
    bool neg = false;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
    std::string ip, fp;
    std::size_t dot = s.find('.', i);
    std::string_view whole = s.substr(i, dot == std::string_view::npos ? std::string_view::npos : dot - i);
    if (dot != std::string_view::npos) fp = std::string(s.substr(dot + 1));
    if (whole.find(',') != std::string_view::npos) {  // thousands separators: 1,234,567
        auto groups = split(std::string(whole), ",");
        if (groups[0].empty() || groups[0].size() > 3) return false;
        for (std::size_t g = 1; g < groups.size(); ++g)
            if (groups[g].size() != 3) return false;
        for (auto& g : groups) ip += g;
    } else {
        ip = std::string(whole);
    }
    if (ip.empty() && fp.empty()) return false;
    for (char c : ip + fp)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    while (ip.size() > 1 && ip[0] == '0') ip.erase(0, 1);
    while (!fp.empty() && fp.back() == '0') fp.pop_back();
    if (ip.size() + fp.size() > 18) return false;
    num = 0;
    for (char c : ip + fp) num = num * 10 + (c - '0');
    den = 1;
    for (std::size_t k = 0; k < fp.size(); ++k) den *= 10;
    if (neg) num = -num;
    return true;
}

std::optional<std::pair<long long, long long>> make_fraction(i128 n, i128 d) {
    if (d == 0) return std::nullopt;
    if (d < 0) n = -n, d = -d;
    i128 a = n < 0 ? -n : n, b = d;
    while (b) {
        i128 t = a % b;
        a = b;
        b = t;
    }
    if (a > 1) n /= a, d /= a;
    if (n > kMax || n < -kMax || d > kMax) return std::nullopt;
    return std::make_pair(static_cast<long long>(n), static_cast<long long>(d));
}

/// "{a}{b}" (or "ab", single digits) after \frac.
bool frac_args(std::string_view s, std::string& a, std::string& b) {
    auto group = [&](std::size_t& i, std::string& out) {
        if (i >= s.size()) return false;
        if (s[i] != '{') {
            out = std::string(1, s[i++]);
            return true;
        }
        std::size_t close = s.find('}', i);
        if (close == std::string_view::npos) return false;
        out = std::string(s.substr(i + 1, close - i - 1));
        i = close + 1;
        return true;
    };
    std::size_t i = 0;
    return group(i, a) && group(i, b) && i == s.size();
}

bool is_number_char(char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == ','; }

std::vector<std::string> truths(const ojson& gt) {
    if (gt.is_null()) throw ConfigError("no ground truth to score against (reward_model.ground_truth or ground_truth)");
    std::vector<std::string> out;
    auto one = [&](const ojson& v) {
        if (v.is_string()) out.push_back(v.get<std::string>());
        else if (v.is_number_integer()) out.push_back(v.dump());
        else if (v.is_number_float()) out.push_back(v.dump());
        else out.push_back(v.dump());
    };
    if (gt.is_array()) {
        for (const auto& v : gt) one(v);
    } else {
        one(gt);
    }
    return out;
}

double score_exact(std::string_view, std::string_view solution, const ojson& gt, const ojson&) {
    const std::string s = trim(solution);
    for (const auto& t : truths(gt))
        if (s == trim(t)) return 1.0;
    return 0.0;
}

double score_gsm8k(std::string_view, std::string_view solution, const ojson& gt, const ojson&) {
    auto a = gsm8k_strict_answer(solution);
    if (!a) return 0.0;
    for (const auto& t : truths(gt))
        if (*a == t) return 1.0;
    return 0.0;
}

std::string truth_answer(const std::string& t) {
    if (t.find("\\boxed") != std::string::npos || t.find("\\fbox") != std::string::npos) {
        if (auto b = last_boxed(t)) return *b;
    }
    std::size_t h = t.rfind("####");
    if (h != std::string::npos) return trim(std::string_view(t).substr(h + 4));
    return trim(t);
}

double score_math(std::string_view, std::string_view solution, const ojson& gt, const ojson&) {
    const auto ts = truths(gt);
    for (const auto& t : ts)  // whatever veRL scores 1 scores 1 (by construction, not by argument)
        if (verl_math_score(solution, t) == 1.0) return 1.0;
    auto a = math_answer(solution);
    if (!a) return 0.0;
    for (const auto& t : ts)
        if (math_equiv(*a, truth_answer(t))) return 1.0;
    return 0.0;
}

}  // namespace

const std::vector<BuiltinScorer>& builtin_scorers() {
    static const std::vector<BuiltinScorer> k = {
        {"exact", score_exact, "the trimmed solution equals the trimmed ground truth"},
        {"gsm8k", score_gsm8k, "veRL's gsm8k (strict): the last '#### <number>', commas and $ removed, as a string"},
        {"math", score_math,
         "the final answer (last \\boxed{}, else after '####', else the last number) equal to the ground truth "
         "after veRL's MATH normalisation or as a number (1,000 = 1000, 0.5 = 1/2 = \\frac{1}{2})"},
    };
    return k;
}

ScoreFn builtin_scorer(std::string_view name) {
    std::string names;
    for (const auto& s : builtin_scorers()) {
        if (name == s.name) return s.fn;
        names += names.empty() ? "" : ", ";
        names += s.name;
    }
    throw ConfigError("unknown built-in scorer '" + std::string(name) + "' (built in: " + names + ")");
}

ScoreFn parse_reward_spec(std::string_view spec) {
    constexpr std::string_view kPrefix = "builtin:";
    if (spec.substr(0, kPrefix.size()) != kPrefix)
        throw ConfigError("--reward '" + std::string(spec) + "': expected builtin:NAME (exact, gsm8k, math)");
    return builtin_scorer(spec.substr(kPrefix.size()));
}

ScoreFn default_scorer(std::string_view ds) {
    // verl/utils/reward_score/__init__.py default_compute_score, the rule-scored sources.
    if (ds == "openai/gsm8k") return score_gsm8k;
    if (ds == "lighteval/MATH" || ds == "DigitalLearningGmbH/MATH-lighteval" || ds == "HuggingFaceH4/MATH-500")
        return score_math;
    return nullptr;
}

std::string scorer_name(ScoreFn fn) {
    for (const auto& s : builtin_scorers())
        if (s.fn == fn) return s.name;
    return "";
}

std::optional<std::string> gsm8k_strict_answer(std::string_view solution) {
    // re.findall("#### (\-?[0-9\.\,]+)", solution_str[-300:]), the last match.
    if (solution.size() > 300) solution = solution.substr(solution.size() - 300);
    std::optional<std::string> last;
    for (std::size_t pos = solution.find("#### "); pos != std::string_view::npos;
         pos = solution.find("#### ", pos + 1)) {
        std::size_t i = pos + 5, j = i;
        if (j < solution.size() && solution[j] == '-') ++j;
        std::size_t k = j;
        while (k < solution.size() && is_number_char(solution[k])) ++k;
        if (k == j) continue;  // "-" alone or no number: no match here
        std::string m(solution.substr(i, k - i));
        last = replace_all(replace_all(m, ",", ""), "$", "");
        pos = k - 1;  // findall does not overlap matches
    }
    return last;
}

std::optional<std::string> last_boxed(std::string_view s) {
    auto b = last_boxed_only(s);
    if (!b) return std::nullopt;
    const std::string& x = *b;
    if (x.rfind("\\boxed ", 0) == 0) return x.substr(7);
    if (x.rfind("\\boxed{", 0) == 0 && x.back() == '}') return x.substr(7, x.size() - 8);
    if (x.rfind("\\fbox{", 0) == 0 && x.back() == '}') return x.substr(6, x.size() - 7);  // veRL: 0
    return std::nullopt;
}

std::optional<std::string> math_answer(std::string_view solution) {
    if (auto b = last_boxed(solution)) return trim(*b);
    std::size_t h = solution.rfind("####");
    if (h != std::string_view::npos) {
        std::string_view rest = solution.substr(h + 4);
        std::string a = trim(rest.substr(0, rest.find('\n')));
        while (!a.empty() && a.back() == '.') a.pop_back();
        if (!a.empty()) return a;
    }
    // The last number: [0-9.,]+ holding a digit, a '-' just before it kept, "a/b" kept whole.
    std::optional<std::string> last;
    std::size_t i = 0;
    while (i < solution.size()) {
        if (!is_number_char(solution[i])) {
            ++i;
            continue;
        }
        std::size_t j = i;
        while (j < solution.size() && is_number_char(solution[j])) ++j;
        std::string tok(solution.substr(i, j - i));
        while (!tok.empty() && (tok.back() == '.' || tok.back() == ',')) tok.pop_back();
        while (!tok.empty() && (tok.front() == ',' || tok.front() == '.')) {
            if (tok.front() == '.' && tok.size() > 1 && std::isdigit(static_cast<unsigned char>(tok[1]))) break;
            tok.erase(0, 1);
        }
        bool digit = false;
        for (char c : tok) digit = digit || std::isdigit(static_cast<unsigned char>(c));
        if (digit) {
            if (i > 0 && solution[i - 1] == '-') tok = "-" + tok;
            // "3/4": a fraction when a number and '/' come just before
            if (last && i >= 2 && solution[i - 1] == '/' && is_number_char(solution[i - 2])) tok = *last + "/" + tok;
            last = tok;
        }
        i = j;
    }
    return last;
}

double verl_math_score(std::string_view solution, std::string_view ground_truth) {
    auto b = last_boxed_only(solution);
    if (!b) return 0.0;
    const std::string& x = *b;
    std::string answer;
    if (x.find("\\boxed ") != std::string::npos) {  // remove_boxed: asserts, which veRL's caller turns into 0
        if (x.rfind("\\boxed ", 0) != 0) return 0.0;
        answer = x.substr(7);
    } else {
        if (x.rfind("\\boxed{", 0) != 0 || x.back() != '}') return 0.0;
        answer = x.substr(7, x.size() - 8);
    }
    return verl_math_equiv(answer, ground_truth) ? 1.0 : 0.0;
}

bool verl_math_equiv(std::string_view a, std::string_view b) {
    try {
        return strip_string(std::string(a)) == strip_string(std::string(b));
    } catch (const PyRaise&) {
        return a == b;
    }
}

std::optional<std::pair<long long, long long>> parse_number(std::string_view in) {
    std::string s(in);
    for (const char* junk : {"\\!", "\\,", "\\;", "\\$", "$", "\\left", "\\right", "^{\\circ}", "^\\circ", "\\%", "%"})
        s = replace_all(s, junk, "");
    std::string t;
    for (char c : s)
        if (!std::isspace(static_cast<unsigned char>(c))) t += c;
    auto eq = split(t, "=");
    if (eq.size() == 2 && eq[0].size() <= 2) t = eq[1];
    while (!t.empty() && t.back() == '.') t.pop_back();
    if (t.size() > 2 && t.front() == '{' && t.back() == '}') t = t.substr(1, t.size() - 2);
    if (t.empty()) return std::nullopt;
    bool neg = false;
    std::string body = t;
    if (body[0] == '-' || body[0] == '+') {
        neg = body[0] == '-';
        body.erase(0, 1);
    }
    for (const char* f : {"\\frac", "\\dfrac", "\\tfrac"}) {
        std::string_view fv(f);
        if (body.rfind(fv, 0) == 0) {
            std::string a, b;
            if (!frac_args(std::string_view(body).substr(fv.size()), a, b)) return std::nullopt;
            i128 n1, d1, n2, d2;
            if (!parse_decimal(a, n1, d1) || !parse_decimal(b, n2, d2)) return std::nullopt;
            return make_fraction((neg ? -1 : 1) * n1 * d2, d1 * n2);
        }
    }
    auto slash = split(body, "/");
    if (slash.size() == 2) {
        i128 n1, d1, n2, d2;
        if (!parse_decimal(slash[0], n1, d1) || !parse_decimal(slash[1], n2, d2)) return std::nullopt;
        return make_fraction((neg ? -1 : 1) * n1 * d2, d1 * n2);
    }
    if (slash.size() != 1) return std::nullopt;
    i128 n, d;
    if (!parse_decimal(body, n, d)) return std::nullopt;
    return make_fraction(neg ? -n : n, d);
}

bool math_equiv(std::string_view answer, std::string_view truth) {
    if (verl_math_equiv(answer, truth)) return true;
    auto x = parse_number(answer), y = parse_number(truth);
    return x && y && *x == *y;
}

}  // namespace tagflow::data
