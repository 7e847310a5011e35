// SPDX-License-Identifier: Apache-2.0
// Serial.data.*: data files (mpi_app/data/text_file, dataset): plain and gzip files give the same
// rows; gzip files written by zlib and by the gzip program, with many access points, concatenated
// members, read back at random offsets against the plain bytes; veRL's row shapes; token counting
// and the over-limit rule; the index's byte form; every bad input one ConfigError naming FILE:LINE.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/dataset.hpp"
#include "data/text_file.hpp"
#include "text/tokenizer.hpp"

using tagflow::ConfigError;
using namespace tagflow::data;

namespace {

std::string tmp(const std::string& name) {
    static const std::string dir = [] {
        std::string d = ::testing::TempDir() + "tagflow_data_" + std::to_string(getpid());
        std::string cmd = "mkdir -p '" + d + "'";
        if (std::system(cmd.c_str()) != 0) throw std::runtime_error("mkdir " + d);
        return d;
    }();
    return dir + "/" + name;
}

void write(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f << bytes;
}

std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string gzip_bytes(const std::string& data, int level = 6) {
    std::string path = tmp("gz_tmp.gz");
    gzFile g = gzopen(path.c_str(), ("wb" + std::to_string(level)).c_str());
    gzwrite(g, data.data(), static_cast<unsigned>(data.size()));
    gzclose(g);
    return slurp(path);
}

/// veRL-like rows with varied lengths and shapes (seeded).
std::string make_rows(int n, unsigned seed) {
    std::mt19937 rng(seed);
    std::string out;
    for (int i = 0; i < n; ++i) {
        int len = static_cast<int>(rng() % 400);
        std::string words;
        for (int k = 0; k < len; ++k) words += static_cast<char>('a' + rng() % 26), words += (k % 7 ? "" : " ");
        nlohmann::ordered_json row;
        if (i % 3 == 0) row["prompt"] = "Q" + std::to_string(i) + ": " + words;
        else row["prompt"] = {{{"role", "user"}, {"content", "Q" + std::to_string(i) + " " + words}}};
        row["data_source"] = i % 2 ? "openai/gsm8k" : "lighteval/MATH";
        row["reward_model"] = {{"ground_truth", std::to_string(i)}, {"style", "rule"}};
        row["extra_info"] = {{"index", i}, {"split", "train"}};
        out += row.dump() + "\n";
    }
    return out;
}

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string l;
    while (std::getline(ss, l)) v.push_back(l);
    return v;
}

std::string error_of(const std::string& path, const DatasetOptions& o = {}) {
    try {
        Dataset::open(path, o);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(TextFile, GzipRandomReadsMatchPlainBytes) {
    std::string plain = make_rows(6000, 1);
    ASSERT_GT(plain.size(), 1u << 20);
    write(tmp("r.jsonl.gz"), gzip_bytes(plain));
    TextFile f = TextFile::open(tmp("r.jsonl.gz"), 1 << 16);
    ASSERT_TRUE(f.gzip());
    std::string scanned;
    f.scan([&](const char* p, std::size_t n) { scanned.append(p, n); });
    ASSERT_EQ(scanned, plain);
    EXPECT_EQ(f.uncompressed_bytes(), plain.size());
    EXPECT_GT(f.points().size(), 10u);  // many access points at a 64 KiB span
    std::mt19937_64 rng(7);
    for (int k = 0; k < 300; ++k) {
        uint64_t a = rng() % plain.size(), b = a + rng() % 200000;
        if (b > plain.size()) b = plain.size();
        ASSERT_EQ(f.read(a, b), plain.substr(a, b - a)) << "[" << a << ", " << b << ")";
    }
    EXPECT_EQ(f.read(plain.size() - 5, plain.size()), plain.substr(plain.size() - 5));
}

TEST(TextFile, ConcatenatedMembersAndTheGzipProgram) {
    std::string a = make_rows(2000, 2), b = make_rows(2500, 3);
    write(tmp("m.jsonl.gz"), gzip_bytes(a, 1) + gzip_bytes(b, 9));
    TextFile f = TextFile::open(tmp("m.jsonl.gz"), 1 << 16);
    std::string all;
    f.scan([&](const char* p, std::size_t n) { all.append(p, n); });
    ASSERT_EQ(all, a + b);
    // a read across the member boundary, from a point inside the first member
    EXPECT_EQ(f.read(a.size() - 1000, a.size() + 1000), (a + b).substr(a.size() - 1000, 2000));
    EXPECT_EQ(f.read(a.size() + 10, a.size() + 90000), (a + b).substr(a.size() + 10, 89990));
    // the gzip program's output (with a file name in its header), named without .gz
    write(tmp("prog.jsonl"), a);
    ASSERT_EQ(std::system(("gzip -c -9 '" + tmp("prog.jsonl") + "' > '" + tmp("prog_no_suffix") + "'").c_str()), 0);
    Dataset d = Dataset::open(tmp("prog_no_suffix"));
    EXPECT_TRUE(d.gzip());
    EXPECT_EQ(d.size(), 2000u);
    auto ls = lines_of(a);
    for (uint64_t i : {0ul, 1ul, 999ul, 1999ul})
        EXPECT_EQ(d.row(i).prompt, nlohmann::ordered_json::parse(ls[i])["prompt"]);
}

TEST(Dataset, PlainAndGzipGiveTheSameRows) {
    std::string plain = make_rows(3000, 4);
    write(tmp("s.jsonl"), plain);
    write(tmp("s.jsonl.gz"), gzip_bytes(plain));
    DatasetOptions o;
    o.gzip_span = 1 << 16;
    Dataset p = Dataset::open(tmp("s.jsonl"), o), g = Dataset::open(tmp("s.jsonl.gz"), o);
    ASSERT_EQ(p.size(), 3000u);
    ASSERT_EQ(g.size(), 3000u);
    EXPECT_FALSE(p.gzip());
    EXPECT_TRUE(g.gzip());
    auto ls = lines_of(plain);
    std::mt19937 rng(5);
    for (int k = 0; k < 500; ++k) {
        uint64_t i = rng() % 3000;
        Row a = p.row(i), b = g.row(i);
        auto want = nlohmann::ordered_json::parse(ls[i]);
        EXPECT_EQ(a.prompt, want["prompt"]);
        EXPECT_EQ(b.prompt, want["prompt"]);
        EXPECT_EQ(b.ground_truth, want["reward_model"]["ground_truth"]);
        EXPECT_EQ(b.extra_info, want["extra_info"]);
        EXPECT_EQ(b.data_source, want["data_source"].get<std::string>());
        EXPECT_EQ(a.line, i + 1);
        EXPECT_EQ(b.index, i);
    }
    EXPECT_EQ(p.data_sources().at("openai/gsm8k"), 1500u);
    EXPECT_EQ(g.data_sources().at("lighteval/MATH"), 1500u);
    // at the default span (1 MiB) the index is a small part of the data
    Dataset big = Dataset::open(tmp("s.jsonl.gz"));
    EXPECT_LT(big.index_bytes(), big.uncompressed_bytes() / 8);
}

TEST(Dataset, ConcurrentReadsOfAGzipFile) {
    std::string plain = make_rows(3000, 21);
    write(tmp("conc.jsonl.gz"), gzip_bytes(plain));
    DatasetOptions o;
    o.gzip_span = 1 << 16;
    const Dataset d = Dataset::open(tmp("conc.jsonl.gz"), o);
    const auto ls = lines_of(plain);
    std::vector<int> wrong(4, 0);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
        ts.emplace_back([&, t] {
            std::mt19937 rng(static_cast<unsigned>(t));
            for (int k = 0; k < 300; ++k) {
                uint64_t i = rng() % d.size();
                if (d.row(i).prompt != nlohmann::ordered_json::parse(ls[i])["prompt"]) ++wrong[t];
            }
        });
    for (auto& t : ts) t.join();
    for (int w : wrong) EXPECT_EQ(w, 0);
}

TEST(Dataset, RowShapes) {
    // top-level ground_truth, extra_info.answer as the sft response, unknown keys ignored,
    // CRLF line ends, blank lines, no final newline, a BOM-less UTF-8 prompt with escapes
    write(tmp("shapes.jsonl"),
          "{\"prompt\": \"2+2=\", \"ground_truth\": 4, \"ability\": \"math\"}\r\n"
          "\n"
          "   \n"
          "{\"prompt\": [{\"role\": \"system\", \"content\": \"be brief\"}, {\"role\": \"user\", \"content\": "
          "\"caf\\u00e9\"}],"
          " \"extra_info\": {\"answer\": \"ok\", \"deep\": [1, {\"x\": null}]}, \"data_source\": null}\n"
          "{\"prompt\": \"p\", \"response\": \"r\", \"reward_model\": {\"ground_truth\": [\"a\", \"b\"]}}");
    DatasetOptions o;
    o.sft = true;
    EXPECT_NE(error_of(tmp("shapes.jsonl"), o).find("shapes.jsonl:1: sft needs"), std::string::npos);
    Dataset d = Dataset::open(tmp("shapes.jsonl"));
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(d.line(0), 1u);
    EXPECT_EQ(d.line(1), 4u);
    EXPECT_EQ(d.line(2), 5u);
    Row r0 = d.row(0), r1 = d.row(1), r2 = d.row(2);
    EXPECT_EQ(r0.ground_truth, 4);
    EXPECT_FALSE(r0.has_response);
    EXPECT_EQ(r1.prompt[1]["content"], "caf\xc3\xa9");
    EXPECT_TRUE(r1.has_response);
    EXPECT_EQ(r1.response, "ok");
    EXPECT_EQ(r1.extra_info.dump(), "{\"answer\":\"ok\",\"deep\":[1,{\"x\":null}]}");  // verbatim, key order kept
    EXPECT_EQ(r1.data_source, "");
    EXPECT_EQ(r2.response, "r");
    EXPECT_EQ(r2.ground_truth, nlohmann::ordered_json::parse("[\"a\",\"b\"]"));
    EXPECT_EQ(d.data_sources().at(""), 3u);
}

TEST(Dataset, TokensAndTheLimit) {
    auto tok = tagflow::text::byte_level_tokenizer();
    // the byte-level tokenizer: one id per byte; a chat prompt adds the ChatML frame
    write(tmp("lim.jsonl"),
          "{\"prompt\": \"aaaaaaaaaa\"}\n"                 // 10 tokens
          "{\"prompt\": \"aaaaaaaaaaaaaaaaaaaaaaaaa\"}\n"  // 25
          "{\"prompt\": \"aaaaa\"}\n"                      // 5
          "{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
    DatasetOptions o;
    o.tokenizer = tok;
    Dataset all = Dataset::open(tmp("lim.jsonl"), o);
    ASSERT_EQ(all.prompt_tokens().size(), 4u);
    EXPECT_EQ(all.prompt_tokens()[0], 10u);
    EXPECT_EQ(all.prompt_tokens()[1], 25u);
    EXPECT_EQ(all.prompt_tokens()[3],
              tok->chat_prompt(nlohmann::ordered_json::parse("[{\"role\": \"user\", \"content\": \"hi\"}]")).size());
    o.max_prompt_tokens = 12;
    Dataset d = Dataset::open(tmp("lim.jsonl"), o);
    EXPECT_EQ(d.skipped_over_limit(), all.prompt_tokens()[3] > 12 ? 2u : 1u);
    EXPECT_EQ(d.size(), 4u - d.skipped_over_limit());
    EXPECT_EQ(d.line(1), 3u);  // line 2 skipped
    EXPECT_EQ(d.row(1).prompt, "aaaaa");
    o.over_limit_is_error = true;
    EXPECT_EQ(error_of(tmp("lim.jsonl"), o),
              tmp("lim.jsonl") + ":2: prompt has 25 tokens, over --max-prompt-tokens 12");
    o.over_limit_is_error = false;
    o.max_prompt_tokens = 3;
    EXPECT_NE(
        error_of(tmp("lim.jsonl"), o).find("every row's prompt is over --max-prompt-tokens 3 (the shortest has 5"),
        std::string::npos);
    DatasetOptions no_tok;
    no_tok.max_prompt_tokens = 3;
    EXPECT_NE(error_of(tmp("lim.jsonl"), no_tok).find("needs a tokenizer"), std::string::npos);
}

TEST(Dataset, IndexBytesRoundTrip) {
    std::string plain = make_rows(2000, 6);
    write(tmp("ix.jsonl.gz"), gzip_bytes(plain));
    DatasetOptions o;
    o.gzip_span = 1 << 16;
    o.tokenizer = tagflow::text::byte_level_tokenizer();
    o.max_prompt_tokens = 300;
    Dataset a = Dataset::open(tmp("ix.jsonl.gz"), o);
    ASSERT_GT(a.skipped_over_limit(), 0u);
    Dataset b = Dataset::from_bytes(tmp("ix.jsonl.gz"), a.to_bytes());
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(a.prompt_tokens(), b.prompt_tokens());
    EXPECT_EQ(a.data_sources(), b.data_sources());
    for (uint64_t i = 0; i < a.size(); i += 37) {
        EXPECT_EQ(a.line(i), b.line(i));
        EXPECT_EQ(a.row(i).prompt, b.row(i).prompt);
    }
    write(tmp("ix2.jsonl.gz"), gzip_bytes(plain + plain));
    try {
        Dataset::from_bytes(tmp("ix2.jsonl.gz"), a.to_bytes());
        ADD_FAILURE() << "a changed file was accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("the file changed"), std::string::npos) << e.what();
    }
}

TEST(Dataset, BadInputIsOneLineNamingFileAndLine) {
    struct Case {
        const char* name;
        std::string bytes;
        std::string want;  // expected after "PATH"
    };
    const std::string good = "{\"prompt\": \"ok\"}\n";
    std::vector<Case> cases = {
        {"notjson", good + "{\"prompt\": \"x\",}\n", ":2: not JSON: parse error at line 1, column 16"},
        {"garbage", good + good + "\x01\x02\xff\n", ":3: not JSON:"},
        {"truncated_row", good + "{\"prompt\": \"unterminated", ":2: not JSON:"},
        {"missing_prompt", good + "{\"question\": \"x\"}\n", ":2: no \"prompt\""},
        {"prompt_number", "{\"prompt\": 7}\n",
         ":1: \"prompt\" must be a string or a list of {role, content} messages, not a number"},
        {"prompt_object", "{\"prompt\": {\"role\": \"user\"}}\n", ":1: \"prompt\" must be a string or a list"},
        {"message_not_object", "{\"prompt\": [\"hi\"]}\n",
         ":1: \"prompt\"[0] must be a {role, content} object, not a string"},
        {"message_no_role", "{\"prompt\": [{\"content\": \"hi\"}]}\n", ":1: \"prompt\"[0] needs a string \"role\""},
        {"message_content_list", "{\"prompt\": [{\"role\": \"user\", \"content\": [1]}]}\n",
         ":1: \"prompt\"[0] needs a string \"content\", not a list"},
        {"empty_prompt", "{\"prompt\": \"\"}\n", ":1: \"prompt\" is an empty string"},
        {"empty_messages", "{\"prompt\": []}\n", ":1: \"prompt\" is an empty list of messages"},
        {"row_array", "[1, 2]\n", ":1: a row must be a JSON object, not a list"},
        {"row_string", "\"just text\"\n", ":1: a row must be a JSON object, not a string"},
        {"data_source_number", "{\"prompt\": \"p\", \"data_source\": 3}\n",
         ":1: \"data_source\" must be a string, not a number"},
        {"reward_model_string", "{\"prompt\": \"p\", \"reward_model\": \"x\"}\n",
         ":1: \"reward_model\" must be an object"},
        {"response_number", "{\"prompt\": \"p\", \"response\": 1}\n",
         ":1: \"response\" must be a string, not a number"},
        {"deep", "{\"prompt\": \"p\", \"extra_info\": " + std::string(100000, '[') + "}\n",
         ":1: JSON nested more than 128 levels"},
        {"two_rows_one_line", "{\"prompt\": \"a\"} {\"prompt\": \"b\"}\n", ":1: not JSON:"},
        {"empty", "", ": empty file, no rows"},
        {"blank", "\n  \n\r\n", ": no rows (only blank lines)"},
    };
    for (const auto& c : cases) {
        std::string path = tmp(std::string("bad_") + c.name + ".jsonl");
        write(path, c.bytes);
        std::string err = error_of(path);
        EXPECT_EQ(err.rfind(path + c.want, 0), 0u) << c.name << ": " << err;
        EXPECT_EQ(err.find('\n'), std::string::npos) << c.name << ": " << err;
        EXPECT_LT(err.size(), 400u) << c.name << ": " << err;
        // the same rows gzip-compressed give the same message
        if (!c.bytes.empty()) {
            write(path + ".gz", gzip_bytes(c.bytes));
            std::string gz = error_of(path + ".gz");
            EXPECT_EQ(gz.rfind(path + ".gz" + c.want, 0), 0u) << c.name << " (gzip): " << gz;
        }
    }
    // gzip cut short, at several places; corrupt gzip; gzip followed by garbage
    std::string gz = gzip_bytes(make_rows(3000, 8));
    for (std::size_t cut : {std::size_t{5}, std::size_t{30}, gz.size() / 2, gz.size() - 4}) {
        write(tmp("cut.jsonl.gz"), gz.substr(0, cut));
        std::string err = error_of(tmp("cut.jsonl.gz"));
        EXPECT_EQ(err.rfind(tmp("cut.jsonl.gz") + ": gzip data ends early, cut short after", 0), 0u)
            << cut << ": " << err;
    }
    std::string bad = gz;
    bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x55);
    bad[bad.size() / 2 + 1] = static_cast<char>(bad[bad.size() / 2 + 1] ^ 0x55);
    write(tmp("corrupt.jsonl.gz"), bad);
    std::string err = error_of(tmp("corrupt.jsonl.gz"));
    EXPECT_EQ(err.rfind(tmp("corrupt.jsonl.gz") + ": ", 0), 0u) << err;
    EXPECT_TRUE(err.find("corrupt gzip data") != std::string::npos || err.find("not JSON") != std::string::npos) << err;
    write(tmp("trailing.jsonl.gz"), gz + "garbage!");
    err = error_of(tmp("trailing.jsonl.gz"));
    EXPECT_NE(err.find("corrupt gzip data in the member starting at compressed byte " + std::to_string(gz.size())),
              std::string::npos)
        << err;
    // not a file
    EXPECT_NE(error_of(::testing::TempDir()).find("is a directory"), std::string::npos);
    EXPECT_NE(error_of(tmp("does_not_exist.jsonl")).find("cannot open: No such file"), std::string::npos);
}

namespace {
std::string outcome(bool fast, const std::string& line, bool sft) {
    try {
        if (fast) return "ok " + check_row(line, "F", 9, sft);
        return "ok " + parse_row(line, "F", 9, sft).data_source;
    } catch (const ConfigError& e) {
        return e.what();
    }
}
}  // namespace

// The index pass checks rows with check_row (SAX) when it renders no prompt, and parse_row
// otherwise: both must say the same about every line.
TEST(Dataset, CheckRowSaysWhatParseRowSays) {
    std::vector<std::string> lines = {
        R"({"prompt": "p", "data_source": "d"})",
        R"({"prompt": 1, "prompt": "later wins"})",
        R"({"prompt": "x", "prompt": 1})",
        R"({"data_source": 5, "prompt": 3})",
        R"({"prompt": [{"role": "user", "content": "a"}, 4, {"role": 1}]})",
        R"({"prompt": [{"role": "user", "content": "a"}, {"content": "b"}]})",
        R"({"prompt": [{"role": "user", "content": "a", "content": null}]})",
        R"({"prompt": [{"role": "user", "content": {"nested": [1, {"role": 2}]}}]})",
        R"({"prompt": [[{"role": "user", "content": "a"}]]})",
        R"({"prompt": "p", "extra_info": {"answer": "a"}})",
        R"({"prompt": "p", "extra_info": {"answer": {"x": "y"}}})",
        R"({"prompt": "p", "extra_info": {"other": {"answer": "deep"}}})",
        R"({"prompt": "p", "extra_info": [{"answer": "a"}]})",
        R"({"prompt": "p", "response": null, "extra_info": {"answer": ""}})",
        R"({"prompt": "p", "response": ""})",
        R"({"prompt": "p", "reward_model": null, "data_source": null})",
        R"({"prompt": "p", "reward_model": [1]})",
        R"({"prompt": ""})",
        R"({"prompt": []})",
        R"([{"prompt": "p"}])",
        R"(null)",
        R"({"prompt": "p"} x)",
        R"({"prompt": "p")",
        R"({"prompt": "\ud800"})",
        R"({"prompt": "p", "data_source": "a", "data_source": "b"})",
    };
    std::mt19937 rng(99);
    const std::string base =
        make_rows(40, 12) +
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"x\"}], \"response\": \"r\", "
        "\"extra_info\": {\"answer\": \"a\", \"k\": [1, {\"answer\": 2}]}, \"data_source\": \"s\"}\n";
    auto good = lines_of(base);
    const std::string alphabet = "{}[]\",:0123456789 nulltruefalse\\promptrolecontentanswerresponsedata_source";
    for (int k = 0; k < 20000; ++k) {  // random edits of good rows
        std::string l = good[rng() % good.size()];
        int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits && !l.empty(); ++e) {
            std::size_t at = rng() % l.size();
            switch (rng() % 3) {
                case 0: l.erase(at, 1 + rng() % 8); break;
                case 1: l.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
                default: l[at] = alphabet[rng() % alphabet.size()];
            }
        }
        lines.push_back(l);
    }
    int differ = 0, bad = 0;
    for (const auto& l : lines)
        for (bool sft : {false, true}) {
            std::string a = outcome(true, l, sft), b = outcome(false, l, sft);
            if (a.rfind("ok ", 0) != 0) ++bad;
            if (a != b && ++differ <= 10) ADD_FAILURE() << l << "\n  check_row: " << a << "\n  parse_row: " << b;
        }
    EXPECT_EQ(differ, 0);
    EXPECT_GT(bad, 10000);  // the edits made plenty of bad rows
}
