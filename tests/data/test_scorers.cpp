// SPDX-License-Identifier: Apache-2.0
// Serial.data_scorers.*: the built-in rule scorers. Expected values come from veRL's documented
// behaviour (verl/utils/reward_score/gsm8k.py and math.py: which string each extracts, what
// strip_string makes equal) and from the numeric rules of share/doc/data.md, written by hand.
#include <gtest/gtest.h>

#include "common/error.hpp"
#include "data/scorers.hpp"

using namespace tagflow::data;
using ojson = nlohmann::ordered_json;

namespace {
double score(const char* name, const std::string& solution, const ojson& gt) {
    return builtin_scorer(name)("", solution, gt, nullptr);
}
}  // namespace

TEST(Gsm8k, StrictExtractionAsVerl) {
    EXPECT_EQ(gsm8k_strict_answer("so 3 + 4 = 7\n#### 7"), "7");
    EXPECT_EQ(gsm8k_strict_answer("#### 1,000"), "1000");     // commas removed
    EXPECT_EQ(gsm8k_strict_answer("#### $5"), std::nullopt);  // the regex needs a digit, '-', '.' or ','
    EXPECT_EQ(gsm8k_strict_answer("#### -12.5"), "-12.5");
    EXPECT_EQ(gsm8k_strict_answer("#### 3 then #### 4"), "4");  // the last one
    EXPECT_EQ(gsm8k_strict_answer("####7"), std::nullopt);      // needs "#### " with the space
    EXPECT_EQ(gsm8k_strict_answer("the answer is 7"), std::nullopt);
    EXPECT_EQ(gsm8k_strict_answer("#### 72."), "72.");  // the period is part of the match
    // only the last 300 characters are searched
    EXPECT_EQ(gsm8k_strict_answer("#### 5" + std::string(400, ' ')), std::nullopt);
    EXPECT_EQ(gsm8k_strict_answer(std::string(400, ' ') + "#### 5"), "5");
}

TEST(Gsm8k, ScoreIsStringEquality) {
    EXPECT_EQ(score("gsm8k", "... #### 72", "72"), 1.0);
    EXPECT_EQ(score("gsm8k", "... #### 72", 72), 1.0);      // a number ground truth as its JSON text
    EXPECT_EQ(score("gsm8k", "... #### 72.0", "72"), 0.0);  // veRL compares strings
    EXPECT_EQ(score("gsm8k", "... #### 1,234", "1234"), 1.0);
    EXPECT_EQ(score("gsm8k", "72", "72"), 0.0);  // strict: no ####, no score
}

TEST(Math, VerlBoxedExtraction) {
    EXPECT_EQ(last_boxed("so \\boxed{\\frac{1}{2}}."), "\\frac{1}{2}");
    EXPECT_EQ(last_boxed("\\boxed{1} and then \\boxed{{a}+{b}}"), "{a}+{b}");  // the last, nested braces
    EXPECT_EQ(last_boxed("\\boxed 5$ done"), "5");                             // veRL's "\boxed " form, cut at '$'
    EXPECT_EQ(last_boxed("\\boxed{unclosed"), std::nullopt);
    EXPECT_EQ(last_boxed("\\fbox{7}"), "7");
    EXPECT_EQ(last_boxed("no box"), std::nullopt);
}

TEST(Math, VerlEquivalence) {
    // what veRL's strip_string makes equal
    EXPECT_TRUE(verl_math_equiv("\\dfrac{1}{2}", "\\frac{1}{2}"));
    EXPECT_TRUE(verl_math_equiv("\\frac12", "\\frac{1}{2}"));
    EXPECT_TRUE(verl_math_equiv("0.5", "\\frac{1}{2}"));  // strip_string's special case
    EXPECT_TRUE(verl_math_equiv("1/2", "\\frac{1}{2}"));  // fix_a_slash_b
    EXPECT_TRUE(verl_math_equiv("x = 5", "5"));           // short left side dropped
    EXPECT_TRUE(verl_math_equiv("\\left( 1, 2 \\right)", "(1,2)"));
    EXPECT_TRUE(verl_math_equiv("90^\\circ", "90"));
    EXPECT_TRUE(verl_math_equiv("50\\%", "50"));
    EXPECT_TRUE(verl_math_equiv(".5", "0.5"));
    EXPECT_TRUE(verl_math_equiv("\\sqrt2", "\\sqrt{2}"));
    EXPECT_TRUE(verl_math_equiv("10\\text{ cm}", "10"));
    EXPECT_FALSE(verl_math_equiv("1,000", "1000"));         // veRL: not equal (math: equal)
    EXPECT_FALSE(verl_math_equiv("0.25", "\\frac{1}{4}"));  // veRL: only 0.5 is special
    // where veRL's normalisation raises (int("a") in fix_a_slash_b), it compares raw strings
    EXPECT_TRUE(verl_math_equiv("a/b", "a/b"));
    EXPECT_FALSE(verl_math_equiv("a/b", "a / b"));
}

TEST(Math, Numbers) {
    using P = std::pair<long long, long long>;
    EXPECT_EQ(parse_number("1,000"), P(1000, 1));
    EXPECT_EQ(parse_number("1,000,000.50"), P(2000001, 2));
    EXPECT_EQ(parse_number("0.5"), P(1, 2));
    EXPECT_EQ(parse_number(".5"), P(1, 2));
    EXPECT_EQ(parse_number("1/2"), P(1, 2));
    EXPECT_EQ(parse_number("\\frac{1}{2}"), P(1, 2));
    EXPECT_EQ(parse_number("\\dfrac{3}{6}"), P(1, 2));
    EXPECT_EQ(parse_number("-\\frac{3}{4}"), P(-3, 4));
    EXPECT_EQ(parse_number("\\frac34"), P(3, 4));
    EXPECT_EQ(parse_number("$18"), P(18, 1));
    EXPECT_EQ(parse_number("18."), P(18, 1));
    EXPECT_EQ(parse_number("x = -7"), P(-7, 1));
    EXPECT_EQ(parse_number("007"), P(7, 1));
    EXPECT_EQ(parse_number("2.50"), P(5, 2));
    EXPECT_EQ(parse_number("1,00"), std::nullopt);  // not thousands groups
    EXPECT_EQ(parse_number("12,3456"), std::nullopt);
    EXPECT_EQ(parse_number("1/0"), std::nullopt);
    EXPECT_EQ(parse_number("abc"), std::nullopt);
    EXPECT_EQ(parse_number("1.2.3"), std::nullopt);
    EXPECT_EQ(parse_number("12345678901234567890"), std::nullopt);  // over 18 digits: not compared as a number
}

TEST(Math, AnswerExtractionOrder) {
    EXPECT_EQ(math_answer("#### 5 but \\boxed{6}"), "6");                 // boxed first
    EXPECT_EQ(math_answer("3 apples, 4 pears\n#### 7.\nthanks 9"), "7");  // then ####, to the line end
    EXPECT_EQ(math_answer("I think it is 3, no, -4.5."), "-4.5");         // then the last number
    EXPECT_EQ(math_answer("half: 1/2"), "1/2");
    EXPECT_EQ(math_answer("it costs 1,000 dollars."), "1,000");
    EXPECT_EQ(math_answer("no numbers here"), std::nullopt);
}

TEST(Math, Scores) {
    EXPECT_EQ(score("math", "The answer is \\boxed{\\frac{1}{2}}", "0.5"), 1.0);
    EXPECT_EQ(score("math", "The answer is \\boxed{0.5}", "1/2"), 1.0);
    EXPECT_EQ(score("math", "The answer is 0.50", "\\frac{1}{2}"), 1.0);
    EXPECT_EQ(score("math", "so #### 1,000", "1000"), 1.0);
    EXPECT_EQ(score("math", "\\boxed{1000}", "#### 1,000"), 1.0);  // a gsm8k-style ground truth
    EXPECT_EQ(score("math", "\\boxed{3}", "\\boxed{3}"), 1.0);
    EXPECT_EQ(score("math", "\\boxed{0.25}", "\\frac{1}{4}"), 1.0);
    EXPECT_EQ(score("math", "\\boxed{(1,2)}", "\\left(1, 2\\right)"), 1.0);
    EXPECT_EQ(score("math", "\\boxed{4}", 4), 1.0);
    EXPECT_EQ(score("math", "\\boxed{0.5}", 0.5), 1.0);
    EXPECT_EQ(score("math", "\\boxed{5}", ojson::parse("[\"4\", \"5\"]")), 1.0);  // any of a list
    EXPECT_EQ(score("math", "\\boxed{3}", "4"), 0.0);
    EXPECT_EQ(score("math", "\\boxed{1/3}", "0.33"), 0.0);  // exact fractions, no rounding
    EXPECT_EQ(score("math", "nothing", "4"), 0.0);
    EXPECT_EQ(score("math", "\\boxed{x^2+1}", "x^2 + 1"), 1.0);  // veRL drops spaces
    EXPECT_THROW(score("math", "\\boxed{1}", nullptr), tagflow::ConfigError);
}

TEST(Exact, TrimmedEquality) {
    EXPECT_EQ(score("exact", "  Paris\n", "Paris"), 1.0);
    EXPECT_EQ(score("exact", "paris", "Paris"), 0.0);
    EXPECT_EQ(score("exact", "42", 42), 1.0);
}

TEST(Selection, NamesSpecsAndDefaults) {
    EXPECT_EQ(parse_reward_spec("builtin:math"), builtin_scorer("math"));
    EXPECT_EQ(scorer_name(parse_reward_spec("builtin:exact")), "exact");
    try {
        parse_reward_spec("builtin:nope");
        ADD_FAILURE();
    } catch (const tagflow::ConfigError& e) {
        EXPECT_STREQ(e.what(), "unknown built-in scorer 'nope' (built in: exact, gsm8k, math)");
    }
    EXPECT_THROW(parse_reward_spec("math"), tagflow::ConfigError);
    EXPECT_EQ(default_scorer("openai/gsm8k"), builtin_scorer("gsm8k"));
    EXPECT_EQ(default_scorer("lighteval/MATH"), builtin_scorer("math"));
    EXPECT_EQ(default_scorer("DigitalLearningGmbH/MATH-lighteval"), builtin_scorer("math"));
    EXPECT_EQ(default_scorer("HuggingFaceH4/MATH-500"), builtin_scorer("math"));
    EXPECT_EQ(default_scorer("codecontests"), nullptr);
}
