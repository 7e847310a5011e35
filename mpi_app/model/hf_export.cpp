// SPDX-License-Identifier: Apache-2.0
// hf_export: writing a complete Hugging Face directory (see hf_export.hpp).
#include "model/hf_export.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/safe_file.hpp"
#include "model/hf_config.hpp"
#include "model/llama.hpp"
#include "text/hf_tokenizer.hpp"

namespace tagflow::model {
namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) throw ConfigError(p.string() + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
    write_file_replace(p.string(), text);  // a temporary renamed into place: never through a planted link
}

}  // namespace

const std::vector<std::string>& tokenizer_file_names() {
    // tokenizer.json first; the others as transformers' save_pretrained writes them (the chat
    // template lives in tokenizer_config.json, or in chat_template.jinja / chat_template.json).
    static const std::vector<std::string> names = {"tokenizer.json",
                                                   "tokenizer_config.json",
                                                   "special_tokens_map.json",
                                                   "chat_template.jinja",
                                                   "chat_template.json",
                                                   "added_tokens.json",
                                                   "vocab.json",
                                                   "merges.txt"};
    return names;
}

st::DType parse_export_dtype(const std::string& value, const std::string& source_torch_dtype,
                             const std::string& option) {
    if (value == "bf16") return st::DType::BF16;
    if (value == "fp32") return st::DType::F32;
    if (!value.empty() && value != "auto")
        throw ConfigError(option + " " + value +
                          ": expected bf16, fp32 or auto (auto: bf16 when the source model's "
                          "torch_dtype is bfloat16, else fp32)");
    return source_torch_dtype == "bfloat16" ? st::DType::BF16 : st::DType::F32;
}

std::string resolve_tokenizer_json(const std::string& path, const std::string& option) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        const fs::path f = fs::path(path) / "tokenizer.json";
        if (!fs::is_regular_file(f, ec))
            throw ConfigError(option + " " + path + ": no tokenizer.json in this directory");
        return f.string();
    }
    if (!fs::is_regular_file(path, ec))
        throw ConfigError(option + " " + path +
                          ": no such file (expected a tokenizer.json or a directory holding one)");
    return path;
}

std::string export_tokenizer(const std::string& tokenizer_option, const std::string& source_dir) {
    if (!tokenizer_option.empty()) return resolve_tokenizer_json(tokenizer_option);
    std::error_code ec;
    if (!source_dir.empty() && fs::is_regular_file(fs::path(source_dir) / "tokenizer.json", ec))
        return (fs::path(source_dir) / "tokenizer.json").string();
    return "";
}

void apply_tokenizer_vocab(HfConfig& c, const std::string& tokenizer_json, int64_t min_vocab,
                           const std::string& option) {
    const text::HfTokenizer tok = text::HfTokenizer::load(tokenizer_json);  // ConfigError naming the file
    if (tok.vocab_size() < min_vocab)
        throw ConfigError(option + " " + tokenizer_json + ": " + std::to_string(tok.vocab_size()) +
                          " tokens, fewer than the task's " + std::to_string(min_vocab) + " ids");
    c.vocab_size = tok.vocab_size();
    c.bos_token_id.reset();
    c.eos_token_ids.clear();
    c.pad_token_id.reset();
    if (tok.bos_id()) c.bos_token_id = *tok.bos_id();
    if (tok.eos_id()) c.eos_token_ids.push_back(*tok.eos_id());
    if (tok.pad_id()) c.pad_token_id = *tok.pad_id();
}

HfConfig fresh_config(const FreshShape& shape, int64_t vocab, const std::string& tokenizer_json, int64_t positions) {
    HfConfig c;
    c.model_type = "llama";
    c.hidden_size = shape.d_model;
    c.intermediate_size = shape.d_ff;
    c.num_hidden_layers = shape.layers;
    c.num_attention_heads = shape.heads;
    c.num_key_value_heads = shape.kv_heads > 0 ? shape.kv_heads : shape.heads;
    c.head_dim = shape.heads > 0 ? shape.d_model / shape.heads : 0;
    c.vocab_size = vocab;
    if (!tokenizer_json.empty()) apply_tokenizer_vocab(c, tokenizer_json, vocab);
    c.max_position_embeddings = positions;
    return c;
}

void check_tokenizer_fits(const std::string& tokenizer_json, int64_t model_vocab, const std::string& model_dir,
                          const std::string& option) {
    const text::HfTokenizer tok = text::HfTokenizer::load(tokenizer_json);
    if (tok.vocab_size() > model_vocab)
        throw ConfigError(option + " " + tokenizer_json + ": " + std::to_string(tok.vocab_size()) +
                          " tokens, more than " + model_dir + "'s vocab_size " + std::to_string(model_vocab));
}

std::string generation_config_json(const HfConfig& c, const HfExport& e) {
    ojson j = ojson::object();
    if (!e.source_dir.empty()) {
        const fs::path src = fs::path(e.source_dir) / "generation_config.json";
        std::error_code ec;
        if (fs::is_regular_file(src, ec)) {
            try {
                j = ojson::parse(read_file(src));
            } catch (const nlohmann::json::exception& ex) {
                throw ConfigError(src.string() + ": not valid JSON (" + ex.what() + ")");
            }
            if (!j.is_object()) throw ConfigError(src.string() + ": expected a JSON object");
        }
    }
    // The ids: the tokenizer's (its tokenizer_config.json), then config.json's; the source's
    // generation_config.json, when there is one, keeps its own.
    std::optional<int64_t> bos = c.bos_token_id, pad = c.pad_token_id;
    std::vector<int64_t> eos = c.eos_token_ids;
    if (!e.tokenizer_json.empty()) {
        const text::HfTokenizer tok = text::HfTokenizer::load(e.tokenizer_json);
        if (tok.bos_id()) bos = *tok.bos_id();
        if (tok.pad_id()) pad = *tok.pad_id();
        if (tok.eos_id() && std::find(eos.begin(), eos.end(), *tok.eos_id()) == eos.end()) eos.push_back(*tok.eos_id());
    } else if (eos.empty()) {
        eos = e.stop_ids;
    }
    const auto put = [&j](const char* key, const ojson& v) {
        if (!j.contains(key)) j[key] = v;
    };
    if (bos) put("bos_token_id", *bos);
    if (eos.size() == 1) put("eos_token_id", eos[0]);
    if (eos.size() > 1) put("eos_token_id", eos);
    if (pad) put("pad_token_id", *pad);
    if (e.sampling) {
        put("do_sample", true);
        put("temperature", e.temperature);
        put("top_p", e.top_p);
        put("top_k", e.top_k);  // 0: no top-k filtering (Hugging Face's default would be 50)
        if (e.max_new_tokens > 0) put("max_new_tokens", e.max_new_tokens);
    }
    return j.dump(2) + "\n";
}

void check_finite(const torch::nn::Module& module, const std::string& what) {
    torch::NoGradGuard no_grad;
    for (const auto& p : module.named_parameters()) {
        if (torch::isfinite(p.value()).all().item<bool>()) continue;
        throw Error("refusing to save the " + what + " weights: " + p.key() +
                    " holds NaN or inf values; nothing written (a previous checkpoint is kept)");
    }
}

std::vector<std::string> write_hf_dir(const LlamaModelImpl& m, const std::string& dir_str, const HfExport& e) {
    check_finite(m, "policy");
    const fs::path dir(dir_str);
    m.save_pretrained(dir_str, /*shard_bytes=*/0, e.dtype);
    std::vector<std::string> names = {"config.json", "model.safetensors"};
    if (!e.tokenizer_json.empty()) {
        const fs::path src_dir = fs::path(e.tokenizer_json).parent_path();
        for (const std::string& name : tokenizer_file_names()) {
            const fs::path from = name == "tokenizer.json" ? fs::path(e.tokenizer_json) : src_dir / name;
            std::error_code ec;
            if (name != "tokenizer.json" && !fs::is_regular_file(from, ec)) continue;
            fs::copy_file(from, dir / name, fs::copy_options::overwrite_existing, ec);
            if (ec) throw Error("cannot copy " + from.string() + " to " + (dir / name).string() + ": " + ec.message());
            names.push_back(name);
        }
    }
    write_file(dir / "generation_config.json", generation_config_json(m.config(), e));
    names.push_back("generation_config.json");
    return names;
}

}  // namespace tagflow::model
