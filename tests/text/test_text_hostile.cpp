// SPDX-License-Identifier: Apache-2.0
// test_text_hostile: hostile tokenizer files and inputs (issue 17, the README's hostile-input
// table): each is refused with ONE line naming the file and the problem, or (a 10 MB string)
// works in linear time. The files are written here from a tiny valid tokenizer.json.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "text/bpe.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/utf8.hpp"

using tagflow::text::HfTokenizer;

namespace {

std::string escape(const std::string& s) {
    std::string e;
    for (char c : s) {
        if (c == '"' || c == '\\') e += '\\';
        e += c;
    }
    return e;
}

// Byte b has id b; "hi" = 256 (merge "h i"); "<s>" = 257, special. `merges`/`extra_vocab`/`split`
// are spliced in to make each hostile variant.
std::string tiny(const std::string& merges = "[\"h i\"]", const std::string& extra_vocab = "",
                 const std::string& split_regex = "\\\\p{L}+|\\\\s+|.") {
    std::string vocab;
    for (int b = 0; b < 256; ++b) {
        std::string c;
        tagflow::text::utf8_append(c, tagflow::text::byte_to_char(static_cast<unsigned char>(b)));
        vocab += "\"" + escape(c) + "\": " + std::to_string(b) + ", ";
    }
    vocab += "\"hi\": 256" + extra_vocab;
    return "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 257, \"content\": \"<s>\", \"special\": true, "
           "\"normalized\": false}], \"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
           "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"" +
           split_regex +
           "\"}, \"behavior\": "
           "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": "
           "false}]}, "
           "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, "
           "\"model\": {\"type\": \"BPE\", \"vocab\": {" +
           vocab + "}, \"merges\": " + merges + "}}";
}

std::string write(const std::string& name, const std::string& text) {
    const std::string p = ::testing::TempDir() + "hostile_" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
}

/// Loads `path`, expects a ConfigError of one line naming `path` and containing `what`.
void expect_refused(const std::string& path, const std::string& what) {
    try {
        HfTokenizer::load(path);
        ADD_FAILURE() << path << ": loaded, expected a refusal containing '" << what << "'";
    } catch (const tagflow::ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(path), std::string::npos) << "does not name the file: " << m;
        EXPECT_NE(m.find(what), std::string::npos) << "does not say '" << what << "': " << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << "more than one line: " << m;
    }
}

}  // namespace

TEST(Hostile, TinyFileIsValid) {  // the base of every variant below loads and works
    const auto tok = HfTokenizer::load(write("valid.json", tiny()));
    EXPECT_EQ(tok.encode("hi<s>"), (std::vector<int32_t>{256, 257}));
}

TEST(Hostile, NotJson) { expect_refused(write("notjson.json", "this is not { JSON"), "not JSON"); }

TEST(Hostile, Truncated) {
    const std::string t = tiny();
    expect_refused(write("truncated.json", t.substr(0, t.size() * 2 / 3)), "truncated JSON");
}

TEST(Hostile, MergeNamesUnknownToken) {
    expect_refused(write("badmerge.json", tiny("[\"h i\", \"q zzz\"]")),
                   "merge 1 (\"q zzz\") names a token not in the vocabulary: \"zzz\"");
    expect_refused(write("badmerge2.json", tiny("[\"h i\", \"a b\"]")),
                   "the merged token \"ab\" is not in the vocabulary");
}

TEST(Hostile, DuplicateVocabularyIds) {
    expect_refused(write("dupids.json", tiny("[\"h i\"]", ", \"xyz\": 256")),
                   "gives id 256 to both \"hi\" and \"xyz\"");
}

TEST(Hostile, RegexDoesNotCompile) {
    // PCRE2's own message and the pattern as written in the file
    expect_refused(write("badregex.json", tiny("[\"h i\"]", "", "(\\\\p{L}+|\\\\s")), "missing closing parenthesis");
    expect_refused(write("badregex2.json", tiny("[\"h i\"]", "", "\\\\p{Nope}")), "(pattern \"\\p{Nope}\")");
}

TEST(Hostile, UnsupportedTypesNamed) {
    std::string uni = tiny();
    uni.replace(uni.find("\"type\": \"BPE\""), 13, "\"type\": \"Unigram\"");
    expect_refused(write("unigram.json", uni), "model type \"Unigram\" is not supported");
    std::string wp = tiny();
    wp.replace(wp.find("\"type\": \"BPE\""), 13, "\"type\": \"WordPiece\"");
    expect_refused(write("wordpiece.json", wp), "model type \"WordPiece\" is not supported");
    std::string lower = tiny();
    lower.replace(lower.find("{\"type\": \"NFC\"}"), 15, "{\"type\": \"Lowercase\"}");
    expect_refused(write("lowercase.json", lower), "normalizer type \"Lowercase\" is not supported");
    std::string meta = tiny();
    const std::string byte_level = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}";
    meta.replace(meta.find(byte_level), byte_level.size(), "{\"type\": \"Metaspace\"}");
    expect_refused(write("metaspace.json", meta), "pre-tokenizer type \"Metaspace\" is not supported");
    expect_refused(write("sp.model", "\x0a\x0b\x0a\x05<unk>"), "SentencePiece .model file is not supported");
}

TEST(Hostile, InvalidUtf8InputNamesOffset) {
    const auto tok = HfTokenizer::load(write("valid2.json", tiny()));
    try {
        tok.encode(std::string("hello \xC3\x28 world"));
        FAIL() << "no throw";
    } catch (const tagflow::Error& e) {
        EXPECT_STREQ(e.what(), "text is not valid UTF-8 (byte offset 6)");
    }
}

// 10 MB strings of one kind each: one 10 MB word, one whitespace run, digits, special tokens
// back to back, mixed text. Each must encode and round-trip; time grows linearly (1 MB vs 10 MB
// within a generous factor: a quadratic path would be ~100x).
TEST(Hostile, TenMegabyteStringsLinear) {
    const auto tok = HfTokenizer::load(write("valid3.json", tiny()));
    const std::vector<std::string> units = {"a", " ", "7", "<s>", "hi there, \xC3\xA9t\xC3\xA9 \xE4\xB8\xAD\t\n"};
    for (const std::string& u : units) {
        double secs[2];
        for (int k = 0; k < 2; ++k) {
            const std::size_t target = k == 0 ? 1000000 : 10000000;
            std::string s;
            s.reserve(target + u.size());
            while (s.size() < target) s += u;
            const auto t0 = std::chrono::steady_clock::now();
            const auto ids = tok.encode(s);
            secs[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            EXPECT_EQ(tok.decode(ids, false), s) << "unit '" << u << "'";
        }
        EXPECT_LT(secs[1], 40 * secs[0] + 0.5)
            << "unit '" << u << "': 1 MB " << secs[0] << " s, 10 MB " << secs[1] << " s";
    }
}
