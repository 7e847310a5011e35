// SPDX-License-Identifier: Apache-2.0
// data_command: option parsing (Boost.Program_options) and the output of `tagflow data check` and
// `tagflow data score` (see data_command.hpp).
#include "data/data_command.hpp"

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "data/dataset.hpp"
#include "data/scorers.hpp"
#include "text/tokenizer.hpp"

namespace po = boost::program_options;

namespace tagflow::data {
namespace {

const char kUsage[] =
    "usage: tagflow data check FILE [--tokenizer PATH] [--chat-template FILE] [--max-prompt-tokens N] [--sft]\n"
    "       tagflow data score --reward builtin:NAME < rows.jsonl > scores.txt\n"
    "check: index a JSON Lines data file (plain or gzip, veRL's row shape: prompt, data_source,\n"
    "reward_model.ground_truth, extra_info, response) and print one JSON object with its rows,\n"
    "skipped rows, data sources and prompt token statistics. A bad row names FILE:LINE, exit 2.\n"
    "score: each stdin line {\"solution\": ..., \"ground_truth\": ..., \"data_source\"?: ..., \"extra_info\"?: ...}\n"
    "-> its score on one line, with the scorer of --reward or the data_source's default.\n"
    "See share/doc/data.md.\n\n";

/// The process's peak resident memory so far (VmHWM), in bytes; 0 if unknown.
int64_t peak_rss() {
    FILE* f = std::fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    std::fclose(f);
    return kb * 1024;
}

po::variables_map parse(int argc, char** argv, const po::options_description& desc,
                        const po::positional_options_description& pos, const std::string& what) {
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw ConfigError("data " + what + ": " + e.what());
    }
    return vm;
}

int check(int argc, char** argv, bool root) {
    std::string file, tokenizer, chat_template;
    int64_t max_tokens = 0, sample_reads = 0;
    bool sft = false;
    po::options_description desc("tagflow data check options");
    // clang-format off
    desc.add_options()
        ("help,h", "print this help and exit")
        ("file", po::value<std::string>(&file), "the data file (positional)")
        ("tokenizer", po::value<std::string>(&tokenizer), "tokenizer.json or a model directory: count prompt tokens")
        ("chat-template", po::value<std::string>(&chat_template),
         "a Jinja chat template file instead of the tokenizer's")
        ("max-prompt-tokens", po::value<int64_t>(&max_tokens),
         "skip (and count) rows whose prompt is longer; needs --tokenizer")
        ("sft", po::bool_switch(&sft), "rows must carry a response (response or extra_info.answer)")
        ("sample-reads", po::value<int64_t>(&sample_reads),
         "also read N random rows (seeded) after indexing and report the mean time per row");
    // clang-format on
    po::positional_options_description pos;
    pos.add("file", 1);
    auto vm = parse(argc, argv, desc, pos, "check");
    if (vm.count("help")) {
        std::ostringstream h;
        h << kUsage << desc;
        print0("%s", h.str().c_str());
        return 0;
    }
    if (file.empty()) throw ConfigError("data check: FILE is required (try `tagflow data check --help`)");
    if (vm.count("max-prompt-tokens") && max_tokens <= 0)
        throw ConfigError("data check: --max-prompt-tokens must be positive, got " + std::to_string(max_tokens));
    if (sample_reads < 0) throw ConfigError("data check: --sample-reads must not be negative");
    if (max_tokens > 0 && tokenizer.empty())
        throw ConfigError("data check: --max-prompt-tokens needs --tokenizer PATH");
    if (!chat_template.empty() && tokenizer.empty())
        throw ConfigError("data check: --chat-template needs --tokenizer PATH");
    // Every rank indexes (under mpirun a bad file is then the same error, exit 2, everywhere); rank 0 prints.

    DatasetOptions o;
    o.max_prompt_tokens = max_tokens;
    o.sft = sft;
    if (!tokenizer.empty()) o.tokenizer = text::load_tokenizer(tokenizer, chat_template);
    const int64_t rss_before = peak_rss();  // the program and the tokenizer, before the index pass
    const auto t0 = std::chrono::steady_clock::now();
    Dataset d = Dataset::open(file, o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!root) return 0;

    nlohmann::ordered_json j;
    j["file"] = file;
    j["gzip"] = d.gzip();
    j["file_bytes"] = d.file_bytes();
    j["uncompressed_bytes"] = d.uncompressed_bytes();
    j["rows"] = d.size();
    j["skipped_over_limit"] = d.skipped_over_limit();
    j["max_prompt_tokens"] = max_tokens > 0 ? nlohmann::ordered_json(max_tokens) : nlohmann::ordered_json(nullptr);
    nlohmann::ordered_json sources = nlohmann::ordered_json::object(), scorers = nlohmann::ordered_json::object();
    for (const auto& [name, n] : d.data_sources()) {
        sources[name] = n;
        ScoreFn f = default_scorer(name);
        scorers[name] = f ? nlohmann::ordered_json(scorer_name(f)) : nlohmann::ordered_json(nullptr);
    }
    j["data_sources"] = sources;
    j["default_scorers"] = scorers;
    if (o.tokenizer) {
        std::vector<uint32_t> t = d.prompt_tokens();
        std::sort(t.begin(), t.end());
        double sum = 0;
        for (uint32_t x : t) sum += x;
        auto pct = [&](double p) {
            return t[std::min(t.size() - 1, static_cast<std::size_t>(p * static_cast<double>(t.size() - 1) + 0.5))];
        };
        j["tokenizer"] = o.tokenizer->name();
        j["prompt_tokens"] = {{"min", t.front()},
                              {"mean", std::round(sum / t.size() * 10) / 10},
                              {"p50", pct(0.5)},
                              {"p95", pct(0.95)},
                              {"max", t.back()}};
    } else {
        j["tokenizer"] = nullptr;
        j["prompt_tokens"] = nullptr;
    }
    j["index_bytes"] = d.index_bytes();
    j["index_seconds"] = std::round(secs * 1000) / 1000;
    j["index_mb_per_s"] = secs > 0 ? std::round(d.uncompressed_bytes() / 1e6 / secs * 10) / 10 : 0.0;
    if (sample_reads > 0) {
        std::mt19937_64 rng(12345);
        const auto r0 = std::chrono::steady_clock::now();
        for (int64_t k = 0; k < sample_reads; ++k) d.row(rng() % d.size());
        const double rs = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
        j["row_read_ms"] = std::round(rs / static_cast<double>(sample_reads) * 1e6) / 1e3;
    }
    j["peak_rss_bytes"] = peak_rss();
    j["peak_rss_before_index_bytes"] = rss_before;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    return 0;
}

int score(int argc, char** argv, bool root) {
    std::string reward;
    po::options_description desc("tagflow data score options");
    // clang-format off
    desc.add_options()
        ("help,h", "print this help and exit")
        ("reward", po::value<std::string>(&reward), "builtin:NAME (exact, gsm8k, math); default: by data_source");
    // clang-format on
    po::positional_options_description pos;
    auto vm = parse(argc, argv, desc, pos, "score");
    if (vm.count("help")) {
        std::ostringstream h;
        h << kUsage << desc;
        print0("%s", h.str().c_str());
        return 0;
    }
    ScoreFn fixed = reward.empty() ? nullptr : parse_reward_spec(reward);
    if (!root) return 0;
    std::ios::sync_with_stdio(false);
    std::string line, out;
    std::size_t n = 0;
    auto flush = [&] {
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::fflush(stdout);
        out.clear();
    };
    while (std::getline(std::cin, line)) {
        ++n;
        const std::string where = "data score: stdin line " + std::to_string(n) + ": ";
        nlohmann::ordered_json j;
        try {
            j = nlohmann::ordered_json::parse(line);
        } catch (const std::exception& e) {
            flush();
            throw ConfigError(where + "not JSON");
        }
        if (!j.is_object() || !j.contains("solution") || !j["solution"].is_string()) {
            flush();
            throw ConfigError(where + "expected an object with a string \"solution\"");
        }
        std::string ds = j.value("data_source", std::string());
        ScoreFn f = fixed ? fixed : default_scorer(ds);
        if (!f) {
            flush();
            throw ConfigError(where + "no built-in scorer for data_source '" + ds + "' (give --reward builtin:NAME)");
        }
        double s = 0;
        try {
            s = f(ds, j["solution"].get_ref<const std::string&>(), j.value("ground_truth", nlohmann::ordered_json()),
                  j.value("extra_info", nlohmann::ordered_json()));
        } catch (const Error& e) {
            flush();
            throw ConfigError(where + e.what());
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g\n", s);
        out += buf;
        if (out.size() > (1u << 16)) flush();
    }
    flush();
    return 0;
}

}  // namespace

int data_command(int argc, char** argv, bool root) {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        if (argc < 2) throw ConfigError("data: missing subcommand: check or score (try `tagflow data --help`)");
        print0("%s", kUsage);
        return 0;
    }
    const std::string sub = argv[1];
    if (sub == "check") return check(argc - 1, argv + 1, root);
    if (sub == "score") return score(argc - 1, argv + 1, root);
    throw ConfigError("data: unknown subcommand '" + sub + "' (check or score)");
}

}  // namespace tagflow::data
