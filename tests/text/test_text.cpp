// SPDX-License-Identifier: Apache-2.0
// test_text: unit tests of mpi_app/text — UTF-8 validation and lossy repair, the BPE merge order
// (linear scan == Hugging Face's heap order), the Split behaviours, the Oniguruma->PCRE2 rewrite,
// and small tokenizer.json files written here (every value expected below is worked out by hand
// from the file, not produced by the code under test).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "text/bpe.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/regex_split.hpp"
#include "text/utf8.hpp"

using namespace tagflow::text;

TEST(Utf8, ValidAndOffsets) {
    std::size_t off = 99;
    EXPECT_TRUE(utf8_valid("plain ascii"));
    EXPECT_TRUE(utf8_valid("\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x91\x8D"));
    EXPECT_FALSE(utf8_valid("ab\xC3", &off));
    EXPECT_EQ(off, 2u);
    EXPECT_FALSE(utf8_valid("abcdefghij\xED\xA0\x80", &off));  // surrogate U+D800
    EXPECT_EQ(off, 10u);
    EXPECT_FALSE(utf8_valid("\xC0\xAF", &off));  // overlong '/'
    EXPECT_EQ(off, 0u);
    EXPECT_FALSE(utf8_valid("x\xF4\x90\x80\x80", &off));  // above U+10FFFF
    EXPECT_EQ(off, 1u);
}

TEST(Utf8, LossyMaximalSubparts) {
    // Unicode's example (table 3-8): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d
    const std::string r = utf8_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64");
    EXPECT_EQ(r,
              "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
              "b\xEF\xBF\xBD"
              "c\xEF\xBF\xBD\xEF\xBF\xBD"
              "d");
    EXPECT_EQ(utf8_lossy("ok \xC3\xA9"), "ok \xC3\xA9");
}

TEST(ByteLevel, Alphabet) {
    EXPECT_EQ(byte_to_char(' '), U'\u0120');   // 'Ġ'
    EXPECT_EQ(byte_to_char('\n'), U'\u010A');  // 'Ċ'
    EXPECT_EQ(byte_to_char('A'), U'A');
    for (int b = 0; b < 256; ++b) EXPECT_EQ(char_to_byte(byte_to_char(static_cast<unsigned char>(b))), b);
}

TEST(Bpe, LinearOrderEqualsHeapOrder) {
    // random merges over a 6-symbol alphabet; the three algorithms must agree on every word
    std::mt19937 rng(7);
    MergeTable merges;
    int32_t next = 6;
    std::vector<int32_t> alive = {0, 1, 2, 3, 4, 5};
    for (uint32_t r = 0; r < 60; ++r) {
        const int32_t a = alive[rng() % alive.size()], b = alive[rng() % alive.size()];
        merges.put(a, b, BpeMerge{r, next});
        alive.push_back(next++);
    }
    merges.set_monotone(true);  // each merge makes a new token that only later merges use
    for (int w = 0; w < 3000; ++w) {
        std::vector<int32_t> word(1 + rng() % (w < 2000 ? 40 : 400));
        for (auto& x : word) x = static_cast<int32_t>(rng() % 6);
        auto a = word, b = word, c = word;
        bpe_merge(a, merges, 0, 1);  // linear scan
        bpe_merge(b, merges, 0, 2);  // Hugging Face's heap
        bpe_merge(c, merges, 0, 3);  // rank buckets
        ASSERT_EQ(a, b) << "word " << w;
        ASSERT_EQ(a, c) << "word " << w;
    }
}

TEST(Bpe, LowestRankFirstLeftmostOnTies) {
    MergeTable m;
    m.put(0, 0, BpeMerge{0, 5});  // a a -> A (rank 0)
    m.put(5, 0, BpeMerge{1, 6});  // A a -> B (rank 1)
    std::vector<int32_t> w = {0, 0, 0};
    bpe_merge(w, m);
    EXPECT_EQ(w, (std::vector<int32_t>{6}));  // (a a) a -> A a -> B, not a (a a)
    w = {0, 0, 0, 0};
    bpe_merge(w, m);
    EXPECT_EQ(w, (std::vector<int32_t>{5, 5}));  // both rank-0 pairs first
}

namespace {
std::vector<std::string> pieces(const std::string& s, const std::string& re, SplitBehavior b, bool invert) {
    auto p = Pattern::regex(re);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    split_pieces(s, *p, b, invert, out);
    std::vector<std::string> r;
    for (auto [x, y] : out) r.push_back(s.substr(x, y - x));
    return r;
}
using V = std::vector<std::string>;
}  // namespace

TEST(Split, Behaviours) {
    // Hugging Face's own examples (normalizer.rs tests): "The-final--countdown" split on '-'
    const std::string s = "The-final--countdown";
    EXPECT_EQ(pieces(s, "-", SplitBehavior::Removed, false), (V{"The", "final", "countdown"}));
    EXPECT_EQ(pieces(s, "-", SplitBehavior::Isolated, false), (V{"The", "-", "final", "-", "-", "countdown"}));
    EXPECT_EQ(pieces(s, "-", SplitBehavior::MergedWithPrevious, false), (V{"The-", "final-", "-", "countdown"}));
    EXPECT_EQ(pieces(s, "-", SplitBehavior::MergedWithNext, false), (V{"The", "-final", "-", "-countdown"}));
    EXPECT_EQ(pieces(s, "-", SplitBehavior::Contiguous, false), (V{"The", "-", "final", "--", "countdown"}));
    EXPECT_EQ(pieces("Hello Hello", "Hello", SplitBehavior::Removed, true), (V{"Hello", "Hello"}));
}

TEST(Split, OnigEscapesRewritten) {
    EXPECT_EQ(onig_to_pcre2("\\s+(?!\\S)"), "[\\s\\x{85}]+(?![^\\s\\x{85}])");
    EXPECT_EQ(onig_to_pcre2("[^\\s\\p{L}]"), "[^\\s\\x{85}\\p{L}]");
    EXPECT_EQ(onig_to_pcre2("[]\\w]"), "[]\\p{L}\\p{M}\\p{Nd}\\p{Pc}]");
    EXPECT_THROW(onig_to_pcre2("[\\S]"), std::runtime_error);
    // NEL (U+0085) is whitespace for Oniguruma's \s
    EXPECT_EQ(pieces("a\xC2\x85"
                     "b",
                     "\\s", SplitBehavior::Isolated, false),
              (V{"a", "\xC2\x85", "b"}));
}

TEST(Split, BadRegexNamesPcre2MessageAndPattern) {
    try {
        Pattern::regex("(?i:'s|'t");
        FAIL() << "no throw";
    } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("missing closing parenthesis"), std::string::npos) << m;
        EXPECT_NE(m.find("(?i:'s|'t"), std::string::npos) << m;
    }
}

namespace {
// A tiny byte-level tokenizer: byte b has id b, "hi" = 256 (merge "h i"), "<s>" = 257 (special).
std::string tiny_json(const std::string& pre_tokenizer) {
    std::string vocab;
    for (int b = 0; b < 256; ++b) {
        std::string c;
        utf8_append(c, byte_to_char(static_cast<unsigned char>(b)));
        std::string esc;
        for (char ch : c) {
            if (ch == '"' || ch == '\\') esc += '\\';
            esc += ch;
        }
        vocab += "\"" + esc + "\": " + std::to_string(b) + ", ";
    }
    vocab += "\"hi\": 256";
    return "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 257, \"content\": \"<s>\", \"single_word\": false, "
           "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}], \"normalizer\": null, "
           "\"pre_tokenizer\": " +
           pre_tokenizer +
           ", \"post_processor\": {\"type\": \"TemplateProcessing\", "
           "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
           "\"type_id\": 0}}], "
           "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [257], \"tokens\": [\"<s>\"]}}}, "
           "\"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {" +
           vocab + "}, \"merges\": [[\"h\", \"i\"]]}}";
}
std::string write_tmp(const std::string& name, const std::string& text) {
    const std::string p = ::testing::TempDir() + name;
    std::ofstream(p) << text;
    return p;
}
}  // namespace

TEST(HfTokenizer, TinyFileByHand) {
    const auto tok = HfTokenizer::load(write_tmp(
        "tiny.json", tiny_json("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}")));
    EXPECT_EQ(tok.vocab_size(), 258);
    // "hi" | " hi" (GPT-2 regex) | "<s>" (added token) ; ' ' is byte 32 -> id 32
    EXPECT_EQ(tok.encode("hi hi<s>"), (std::vector<int32_t>{256, 32, 256, 257}));
    EXPECT_EQ(tok.encode("hi", true), (std::vector<int32_t>{257, 256}));
    EXPECT_EQ(tok.decode({256, 32, 256, 257}, true), "hi hi");
    EXPECT_EQ(tok.decode({256, 32, 256, 257}, false), "hi hi<s>");
    EXPECT_EQ(tok.decode({0xC3}, false), "\xEF\xBF\xBD");  // a lone lead byte decodes to U+FFFD
    EXPECT_TRUE(tok.is_special(257));
    EXPECT_FALSE(tok.is_special(256));
    EXPECT_EQ(tok.token_to_id("hi"), 256);
    EXPECT_EQ(tok.id_to_token(32), "\xC4\xA0");  // 'Ġ'
    EXPECT_THROW(tok.decode({258}), tagflow::Error);
    try {
        tok.encode("ok\xFF");
        FAIL() << "no throw";
    } catch (const tagflow::Error& e) {
        EXPECT_NE(std::string(e.what()).find("byte offset 2"), std::string::npos) << e.what();
    }
}

TEST(HfTokenizer, PrefixSpaceWithoutRegex) {
    const auto tok = HfTokenizer::load(write_tmp(
        "tiny2.json", tiny_json("{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": false}")));
    // one word " hi hi": ' ' h i ' ' h i -> 32, 256, 32, 256
    EXPECT_EQ(tok.encode("hi hi"), (std::vector<int32_t>{32, 256, 32, 256}));
}

TEST(HfTokenizer, ConcurrentEncodeEqualsSerial) {
    // encode is const and shared by gateway threads: 4 threads over the same strings (sharing the
    // word cache) must give what one thread gives
    const auto tok = HfTokenizer::load(write_tmp(
        "tiny3.json", tiny_json("{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}")));
    std::mt19937 rng(3);
    const char* parts[] = {"hi", " hi", "<s>", " ", "h", "i", "ih", "\xC3\xA9", "\n", "x"};
    std::vector<std::string> texts(400);
    for (auto& t : texts)
        for (int k = 0, n = 1 + static_cast<int>(rng() % 60); k < n; ++k) t += parts[rng() % 10];
    std::vector<std::vector<int32_t>> serial;
    for (const auto& t : texts) serial.push_back(tok.encode(t));
    std::vector<int> bad(4, 0);
    std::vector<std::thread> th;
    for (int w = 0; w < 4; ++w)
        th.emplace_back([&, w] {
            for (int rep = 0; rep < 5; ++rep)
                for (std::size_t i = 0; i < texts.size(); ++i)
                    if (tok.encode(texts[(i + static_cast<std::size_t>(w) * 97) % texts.size()]) !=
                        serial[(i + static_cast<std::size_t>(w) * 97) % texts.size()])
                        ++bad[static_cast<std::size_t>(w)];
        });
    for (auto& t : th) t.join();
    EXPECT_EQ(bad, (std::vector<int>{0, 0, 0, 0}));
}
