// SPDX-License-Identifier: Apache-2.0
// reward_command: option parsing (Boost.Program_options), reading and checking every input line
// first, scoring them all through one Scorer, and writing the results in input order. Under
// --reward-error fail a failed sample writes nothing to stdout: one line to stderr, exit 1.
#include "reward/reward_command.hpp"

#include <nlohmann/json.hpp>

#include <boost/program_options.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "reward/scorer.hpp"

namespace po = boost::program_options;
using nlohmann::json;

namespace tagflow::reward {
namespace {

const char kUsage[] =
    "usage: tagflow reward (--reward-fn FILE.py[:NAME] | --reward-url URL) [options] < in.jsonl > out.jsonl\n"
    "\n"
    "Scores samples: each input line is a JSON object with \"solution_str\" (string), \"data_source\"\n"
    "(string, default \"\"), \"ground_truth\" (any JSON; or reward_model.ground_truth) and \"extra_info\"\n"
    "(any JSON). Each output line is {\"line\": N, \"score\": X, \"extras\": {...}} in input order, with\n"
    "an \"error\" under --reward-error zero when the sample's reward failed. Causes name the sample as\n"
    "\"row N\", N being its input line.\n";

std::string json_string_field(const json& j, const char* key, bool required, std::size_t line) {
    if (!j.contains(key)) {
        if (required) throw ConfigError("stdin:" + std::to_string(line) + ": no \"" + key + "\"");
        return "";
    }
    if (!j[key].is_string()) throw ConfigError("stdin:" + std::to_string(line) + ": \"" + key + "\" is not a string");
    return j[key].get<std::string>();
}

}  // namespace

int reward_command(int argc, char** argv) {
    Options opt;
    std::string policy = "fail";
    po::options_description desc("tagflow reward options");
    // clang-format off
    desc.add_options()
        ("help,h", "print this help and exit")
        ("reward-fn", po::value<std::string>(&opt.fn), "Python file and function (default NAME compute_score)")
        ("reward-url", po::value<std::string>(&opt.url), "HTTP(S) endpoint taking POSTed JSON batches")
        ("reward-token-file", po::value<std::string>(&opt.token_file), "bearer token for --reward-url (mode 600)")
        ("reward-timeout", po::value<double>(&opt.timeout_s)->default_value(30.0),
         "seconds per sample (worker) or per request (URL)")
        ("reward-workers", po::value<int>(&opt.workers)->default_value(2), "Python worker processes")
        ("reward-batch", po::value<int>(&opt.batch)->default_value(16), "samples per worker frame / per POST")
        ("reward-retries", po::value<int>(&opt.retries)->default_value(3), "extra tries of a failed POST")
        ("reward-concurrency", po::value<int>(&opt.concurrency)->default_value(2), "POSTs in flight")
        ("reward-error", po::value<std::string>(&policy)->default_value("fail"),
         "fail (exit 1 on a failed reward) or zero (score 0, counted)")
        ("reward-log", po::value<std::string>(&opt.log_path), "file for the workers' stderr (default: stderr)")
        ("python", po::value<std::string>(&opt.python)->default_value("/usr/bin/python3"), "Python for the workers");
    // clang-format on
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw ConfigError(std::string("tagflow reward: ") + e.what());
    }
    if (vm.count("help")) {
        std::ostringstream os;
        os << desc;
        std::printf("%s\n%s", kUsage, os.str().c_str());
        return 0;
    }
    opt.on_error = parse_error_policy(policy);

    // Every line is checked before anything is scored.
    std::vector<Request> reqs;
    std::string text;
    std::size_t line = 0;
    while (std::getline(std::cin, text)) {
        ++line;
        if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
        json j = json::parse(text, nullptr, false);
        if (j.is_discarded()) throw ConfigError("stdin:" + std::to_string(line) + ": not JSON");
        if (!j.is_object()) throw ConfigError("stdin:" + std::to_string(line) + ": not a JSON object");
        Request r;
        r.id = line;
        r.row = static_cast<std::int64_t>(line);
        r.solution_str = json_string_field(j, "solution_str", true, line);
        r.data_source = json_string_field(j, "data_source", false, line);
        if (j.contains("ground_truth")) {
            r.ground_truth = j["ground_truth"].dump(-1, ' ', false, json::error_handler_t::replace);
        } else if (j.contains("reward_model") && j["reward_model"].is_object() &&
                   j["reward_model"].contains("ground_truth")) {
            r.ground_truth = j["reward_model"]["ground_truth"].dump(-1, ' ', false, json::error_handler_t::replace);
        }
        if (j.contains("extra_info"))
            r.extra_info = j["extra_info"].dump(-1, ' ', false, json::error_handler_t::replace);
        reqs.push_back(std::move(r));
    }

    std::unique_ptr<Scorer> scorer = make_scorer(opt);
    const std::size_t n = reqs.size();
    scorer->submit(std::move(reqs));
    std::vector<Result> results;
    scorer->drain(results);
    std::sort(results.begin(), results.end(), [](const Result& a, const Result& b) { return a.id < b.id; });
    for (const Result& r : results) {
        if (scorer->fatal(r)) {
            log_error("%s", r.cause.c_str());
            return 1;
        }
    }
    std::string out;
    std::size_t failed = 0;
    for (const Result& r : results) {
        // The score as the shortest text that reads back as the same float32.
        char num[32];
        const auto end = std::to_chars(num, num + sizeof num, r.score).ptr;
        out += "{\"line\":" + std::to_string(r.id) + ",\"score\":" + std::string(num, end) + ",\"extras\":" + r.extras;
        if (!r.ok) {
            out += ",\"error\":" + json(r.cause).dump(-1, ' ', false, json::error_handler_t::replace);
            ++failed;
            log_warn("%s (scored 0)", r.cause.c_str());
        }
        out += "}\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    if (failed) log_warn("%zu of %zu samples failed; scored 0 (--reward-error zero)", failed, n);
    return 0;
}

}  // namespace tagflow::reward
