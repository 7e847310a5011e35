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
#include "text/tokenizer.hpp"

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
        if (b == std::string::npos)
            throw ConfigError("generate: " + flag + " '" + text + "': empty item (expected ids like 1,2,3)");
        item = item.substr(b, e - b + 1);
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(item.c_str(), &end, 10);
        if (end == item.c_str() || *end != '\0' || errno != 0 || v < 0 || v > 2147483647L)
            throw ConfigError("generate: " + flag + " '" + text + "': '" + item +
                              "' is not a token id (a non-negative integer)");
        out.push_back(static_cast<int32_t>(v));
    }
    if (out.empty() && !allow_empty)
        throw ConfigError("generate: " + flag + ": missing token ids (e.g. " + flag + " 1,2,3)");
    return out;
}

}  // namespace

int generate_command(int argc, char** argv) {
    std::string model_dir, prompt_ids, stop_ids, prompt_text, chat_text, system_text, chat_template;
    GenParams p;
    p.temperature = 0.0;
    int64_t seed = 0;
    int threads = 0;
    bool bf16 = false, logprobs = false;
    po::options_description desc("tagflow generate options");
    // clang-format off
    desc.add_options()
        ("help,h", "print this help and exit")
        ("model", po::value<std::string>(&model_dir), "Hugging Face checkpoint directory (config.json + safetensors); required")
        ("prompt-ids", po::value<std::string>(&prompt_ids), "prompt token ids, comma-separated (e.g. 1,2,3); prints ids")
        ("prompt", po::value<std::string>(&prompt_text),
         "prompt text, encoded with the model's tokenizer.json (special tokens added as Hugging Face's tokenizer(text) "
         "does; byte-level for models without one); prints text")
        ("chat", po::value<std::string>(&chat_text),
         "a user message, rendered with the model's chat template (generation prompt added); prints the reply")
        ("system", po::value<std::string>(&system_text), "--chat: a system message before the user's")
        ("chat-template", po::value<std::string>(&chat_template), "--chat: this Jinja template file instead of the model's")
        ("max-tokens", po::value<int32_t>(&p.max_tokens)->default_value(16), "most tokens to generate (stop token included)")
        ("temperature", po::value<double>(&p.temperature)->default_value(0.0), "sampling temperature; 0 = greedy")
        ("top-p", po::value<double>(&p.top_p)->default_value(1.0), "nucleus sampling mass in (0, 1]")
        ("top-k", po::value<int32_t>(&p.top_k)->default_value(0), "keep the k most likely tokens (0 = all)")
        ("seed", po::value<int64_t>(&seed)->default_value(0), "random stream of the request (sampling only)")
        ("stop-ids", po::value<std::string>(&stop_ids)->default_value(""),
         "stop token ids, comma-separated (--prompt/--chat: default the model's eos ids, generation_config.json)")
        ("bf16", po::bool_switch(&bf16), "compute in bf16")
        ("logprobs", po::bool_switch(&logprobs), "print a second line with each token's log-probability")
        ("threads", po::value<int>(&threads)->default_value(0), "torch threads (0 = LibTorch's default)");
    // clang-format on
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
        h << "usage: tagflow generate --model DIR (--prompt-ids 1,2,3 | --prompt TEXT | --chat TEXT) [options]\n"
          << "Generates one completion (rank 0): with --prompt-ids prints its token ids on one line; with\n"
          << "--prompt or --chat prints its text (special tokens skipped).\n\n"
          << desc;
        print0("%s", h.str().c_str());
        return 0;
    }
    if (model_dir.empty()) throw ConfigError("generate: --model DIR is required (a checkpoint directory)");
    const int inputs = static_cast<int>(vm.count("prompt-ids") + vm.count("prompt") + vm.count("chat"));
    if (inputs != 1)
        throw ConfigError(inputs == 0 ? "generate: give the prompt: --prompt-ids 1,2,3, --prompt TEXT or --chat TEXT"
                                      : "generate: --prompt-ids, --prompt and --chat exclude each other");
    if (!vm.count("chat") && (vm.count("system") || vm.count("chat-template")))
        throw ConfigError("generate: --system and --chat-template apply to --chat only");
    const bool text_mode = !vm.count("prompt-ids");
    GenRequest req;
    if (!text_mode) req.prompt = parse_ids("--prompt-ids", prompt_ids, false);
    p.stop_ids = parse_ids("--stop-ids", stop_ids, true);
    if (p.max_tokens < 1)
        throw ConfigError("generate: --max-tokens " + std::to_string(p.max_tokens) + ": must be >= 1");
    if (!std::isfinite(p.temperature) || p.temperature < 0) throw ConfigError("generate: --temperature must be >= 0");
    if (!(p.top_p > 0.0 && p.top_p <= 1.0)) throw ConfigError("generate: --top-p must be in (0, 1]");
    if (p.top_k < 0) throw ConfigError("generate: --top-k must be >= 0");
    if (threads < 0) throw ConfigError("generate: --threads must be >= 0");
    p.seed = static_cast<uint64_t>(seed);

    const std::filesystem::path cfg_path = std::filesystem::path(model_dir) / "config.json";
    if (!std::filesystem::exists(cfg_path))
        throw ConfigError("generate: --model " + model_dir + ": no config.json there (not a checkpoint directory)");
    const model::HfConfig cfg = model::load_hf_config(cfg_path.string());
    std::shared_ptr<const text::Tokenizer> tok;
    if (text_mode) {
        // A model directory's own tokenizer (tokenizer.json), else the byte-level one (tagflow's
        // models of the built-in tasks). Every error names the file or the text (ConfigError).
        tok = text::tokenizer_for_model(model_dir, chat_template);
        try {
            if (vm.count("chat")) {
                nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
                if (vm.count("system")) msgs.push_back({{"role", "system"}, {"content", system_text}});
                msgs.push_back({{"role", "user"}, {"content", chat_text}});
                req.prompt = tok->chat_prompt(msgs, /*add_generation_prompt=*/true);
            } else {
                req.prompt = tok->encode(prompt_text, /*add_special_tokens=*/true);
            }
        } catch (const ConfigError&) {
            throw;
        } catch (const Error& e) {  // e.g. text that is not valid UTF-8
            throw ConfigError(std::string("generate: ") + (vm.count("chat") ? "--chat" : "--prompt") + ": " + e.what());
        }
        if (req.prompt.empty()) throw ConfigError("generate: --prompt: empty prompt (no tokens)");
        if (stop_ids.empty()) p.stop_ids = vm.count("chat") ? tok->chat_stop_ids() : tok->stop_ids();
    }
    for (int32_t t : req.prompt)
        if (t >= cfg.vocab_size)
            throw ConfigError(std::string("generate: ") + (text_mode ? "the prompt's" : "--prompt-ids:") +
                              " token id " + std::to_string(t) + " outside the vocabulary [0, " +
                              std::to_string(cfg.vocab_size) + ")");
    if (static_cast<int64_t>(req.prompt.size()) + p.max_tokens - 1 > cfg.max_position_embeddings)
        throw ConfigError("generate: prompt (" + std::to_string(req.prompt.size()) + " tokens) + --max-tokens " +
                          std::to_string(p.max_tokens) + " exceeds the model's max_position_embeddings (" +
                          std::to_string(cfg.max_position_embeddings) + ") + 1");

    if (log_rank() != 0) return 0;  // the same work on every rank would only be repeated
    if (threads > 0) at::set_num_threads(threads);
    model::LlamaModel model(model::LlamaModelImpl::from_pretrained(model_dir));
    InferenceConfig ec;
    ec.max_batch = 1;
    ec.bf16 = bf16;
    InferenceEngine engine(model, ec);
    req.params = p;
    engine.submit(req);
    const GenResult r = engine.run().at(0);
    std::string line;
    if (tok) {
        // Ids the model has but the tokenizer does not (embedding rows padded past the vocabulary)
        // have no text: left out, as Hugging Face's decode does.
        std::vector<int32_t> known;
        for (int32_t t : r.response)
            if (t >= 0 && t < tok->vocab_size()) known.push_back(t);
        line = tok->decode(known, /*skip_special=*/true);
    } else {
        for (std::size_t i = 0; i < r.response.size(); ++i) line += (i ? " " : "") + std::to_string(r.response[i]);
    }
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
