// SPDX-License-Identifier: Apache-2.0
// generate_command: option parsing (Boost.Program_options), checkpoint loading and one
// engine run for `tagflow generate`. See generate_command.hpp.
#include "rollout/generate_command.hpp"

#include <ATen/Parallel.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"
#include "model/hf_config.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"

namespace po = boost::program_options;

namespace tagflow::rollout {
namespace {

/// "1,2, 3" -> {1, 2, 3}; empty string -> {} (allowed only when `allow_empty`).
std::vector<int32_t> parse_ids(const std::string& flag, const std::string& text, bool allow_empty) {
    std::vector<int32_t> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
        if (b == std::string::npos) throw ConfigError("generate: " + flag + " '" + text + "': empty item (expected ids like 1,2,3)");
        item = item.substr(b, e - b + 1);
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (end == item.c_str() || *end != '\0' || errno != 0 || v < 0 || v > 2147483647L)
            throw ConfigError("generate: " + flag + " '" + text + "': '" + item + "' is not a token id (a non-negative integer)");
        out.push_back(static_cast<int32_t>(v));
    }
    if (out.empty() && !allow_empty) throw ConfigError("generate: " + flag + ": missing token ids (e.g. " + flag + " 1,2,3)");
    return out;
}

}  // namespace

int generate_command(int argc, char** argv) {
    std::string model_dir, prompt_ids, stop_ids;
    GenParams p;
    p.temperature = 0.0;
    int64_t seed = 0;
    int threads = 0;
    bool bf16 = false, logprobs = false;
    po::options_description desc("tagflow generate options");
    desc.add_options()
        ("help,h", "print this help and exit")
        ("model", po::value<std::string>(&model_dir), "Hugging Face checkpoint directory (config.json + safetensors); required")
        ("prompt-ids", po::value<std::string>(&prompt_ids), "prompt token ids, comma-separated (e.g. 1,2,3); required")
        ("max-tokens", po::value<int32_t>(&p.max_tokens)->default_value(16), "most tokens to generate (stop token included)")
        ("temperature", po::value<double>(&p.temperature)->default_value(0.0), "sampling temperature; 0 = greedy")
        ("top-p", po::value<double>(&p.top_p)->default_value(1.0), "nucleus sampling mass in (0, 1]")
        ("top-k", po::value<int32_t>(&p.top_k)->default_value(0), "keep the k most likely tokens (0 = all)")
        ("seed", po::value<int64_t>(&seed)->default_value(0), "random stream of the request (sampling only)")
        ("stop-ids", po::value<std::string>(&stop_ids)->default_value(""), "stop token ids, comma-separated")
        ("bf16", po::bool_switch(&bf16), "compute in bf16")
        ("logprobs", po::bool_switch(&logprobs), "print a second line with each token's log-probability")
        ("threads", po::value<int>(&threads)->default_value(0), "torch threads (0 = LibTorch's default)");
    po::variables_map vm;
    try {
        po::parsed_options parsed = po::command_line_parser(argc, argv).options(desc).run();
        for (const auto& o : parsed.options)
            if (o.position_key >= 0)
                throw ConfigError("generate: unexpected argument '" + o.value.at(0) + "' (options start with --)");
        po::store(parsed, vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw ConfigError(std::string("generate: ") + e.what());
    }
    if (vm.count("help")) {
        std::ostringstream h;
        h << "usage: tagflow generate --model DIR --prompt-ids 1,2,3 [options]\n"
          << "Generates one completion and prints its token ids on one line (rank 0).\n\n"
          << desc;
        print0("%s", h.str().c_str());
        return 0;
    }
    if (model_dir.empty()) throw ConfigError("generate: --model DIR is required (a checkpoint directory)");
    if (!vm.count("prompt-ids")) throw ConfigError("generate: --prompt-ids is required (e.g. --prompt-ids 1,2,3)");
    GenRequest req;
    req.prompt = parse_ids("--prompt-ids", prompt_ids, false);
    p.stop_ids = parse_ids("--stop-ids", stop_ids, true);
    if (p.max_tokens < 1) throw ConfigError("generate: --max-tokens " + std::to_string(p.max_tokens) + ": must be >= 1");
    if (!std::isfinite(p.temperature) || p.temperature < 0)
        throw ConfigError("generate: --temperature must be >= 0");
    if (!(p.top_p > 0.0 && p.top_p <= 1.0)) throw ConfigError("generate: --top-p must be in (0, 1]");
    if (p.top_k < 0) throw ConfigError("generate: --top-k must be >= 0");
    if (threads < 0) throw ConfigError("generate: --threads must be >= 0");
    p.seed = static_cast<uint64_t>(seed);

    const std::filesystem::path cfg_path = std::filesystem::path(model_dir) / "config.json";
    if (!std::filesystem::exists(cfg_path))
        throw ConfigError("generate: --model " + model_dir + ": no config.json there (not a checkpoint directory)");
    const model::HfConfig cfg = model::load_hf_config(cfg_path.string());
    for (int32_t t : req.prompt)
        if (t >= cfg.vocab_size)
            throw ConfigError("generate: --prompt-ids: token id " + std::to_string(t) + " outside the vocabulary [0, " +
                              std::to_string(cfg.vocab_size) + ")");
    if (static_cast<int64_t>(req.prompt.size()) + p.max_tokens - 1 > cfg.max_position_embeddings)
        throw ConfigError("generate: prompt (" + std::to_string(req.prompt.size()) + " tokens) + --max-tokens " +
                          std::to_string(p.max_tokens) + " exceeds the model's max_position_embeddings (" +
                          std::to_string(cfg.max_position_embeddings) + ") + 1");

    if (log_rank() != 0) return 0;  // the same work on every rank would only be repeated
    if (threads > 0) at::set_num_threads(threads);
    model::LlamaModel model(model::LlamaModelImpl::from_pretrained(model_dir));
    EngineConfig ec;
    ec.max_batch = 1;
    ec.bf16 = bf16;
    Engine engine(model, ec);
    req.params = p;
    engine.submit(req);
    const GenResult r = engine.run().at(0);
    std::string line;
    for (std::size_t i = 0; i < r.response.size(); ++i) line += (i ? " " : "") + std::to_string(r.response[i]);
    print0("%s\n", line.c_str());
    if (logprobs) {
        std::string lp;
        char b[32];
        for (std::size_t i = 0; i < r.logprobs.size(); ++i) {
            std::snprintf(b, sizeof b, "%s%.6f", i ? " " : "", static_cast<double>(r.logprobs[i]));
            lp += b;
        }
        print0("%s\n", lp.c_str());
    }
    return 0;
}

}  // namespace tagflow::rollout
