// SPDX-License-Identifier: Apache-2.0
// hf_tokenizer_load: HfTokenizer::load — reads tokenizer.json (and tokenizer_config.json beside
// it), checks every part it uses and refuses what it does not support with one line naming the
// file. Added-token ids are assigned as Hugging Face's AddedVocabulary::add_tokens does; a file
// whose ids disagree with that is refused rather than guessed at.
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "common/error.hpp"
#include "text/hf_tokenizer.hpp"
#include "text/hf_tokenizer_impl.hpp"
#include "text/utf8.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace tagflow::text {
namespace {

const char kSupported[] = "tagflow reads byte-level BPE tokenizer.json files (GPT-2, Llama 3, Qwen2/2.5/3)";

std::string type_of(const json& j) {
    if (j.is_object() && j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
    return std::string();
}

/// Reads a whole file; ConfigError naming it when it cannot.
std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw ConfigError(path + ": cannot open (" + std::strerror(errno) + ")");
    std::ostringstream ss;
    ss << f.rdbuf();
    if (f.bad()) throw ConfigError(path + ": read error");
    return ss.str();
}

json parse_json(const std::string& path, const std::string& text) {
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        std::string msg = e.what();
        const auto p = msg.find("] ");
        if (p != std::string::npos) msg = msg.substr(p + 2);
        if (e.byte >= text.size() || msg.find("unexpected end of input") != std::string::npos)
            throw ConfigError(path + ": truncated JSON (input ends at byte " + std::to_string(text.size()) +
                              " inside a value; " + msg + ")");
        throw ConfigError(path + ": not JSON (" + msg + ")");
    }
}

bool flag(const json& j, const char* key, bool dflt) {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    if (!j[key].is_boolean()) throw std::runtime_error(std::string("\"") + key + "\" is not a boolean");
    return j[key].get<bool>();
}

std::optional<std::string> token_name(const json& j) {
    if (j.is_string()) return j.get<std::string>();
    if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
    return std::nullopt;
}

void load_normalizer(HfTokenizer::Impl& m, const json& j, std::vector<NormalForm>& forms) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    if (t == "NFC") forms.push_back(NormalForm::NFC);
    else if (t == "NFD") forms.push_back(NormalForm::NFD);
    else if (t == "NFKC") forms.push_back(NormalForm::NFKC);
    else if (t == "NFKD") forms.push_back(NormalForm::NFKD);
    else if (t == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array())
        for (const json& n : j["normalizers"]) load_normalizer(m, n, forms);
    else
        throw std::runtime_error("normalizer type \"" + (t.empty() ? j.dump().substr(0, 60) : t) +
                                 "\" is not supported (NFC, NFD, NFKC, NFKD and Sequence are)");
}

void load_pre_tokenizer(HfTokenizer::Impl& m, const json& j) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    if (t == "Sequence" && j.contains("pretokenizers") && j["pretokenizers"].is_array()) {
        for (const json& p : j["pretokenizers"]) load_pre_tokenizer(m, p);
        return;
    }
    if (!m.stages.empty() && m.stages.back().kind == PreTokStage::kByteLevel)
        throw std::runtime_error("pre-tokenizer " + t + " after ByteLevel is not supported (ByteLevel must come last)");
    PreTokStage st;
    if (t == "Split") {
        const json& p = j.at("pattern");
        if (p.contains("Regex") && p["Regex"].is_string()) {
            st.pattern = Pattern::regex(p["Regex"].get<std::string>());
        } else if (p.contains("String") && p["String"].is_string()) {
            st.pattern = Pattern::literal(p["String"].get<std::string>());
        } else {
            throw std::runtime_error("Split pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
        }
        st.behavior = parse_split_behavior(j.at("behavior").get<std::string>());
        st.invert = flag(j, "invert", false);
    } else if (t == "ByteLevel") {
        st.kind = PreTokStage::kByteLevel;
        st.add_prefix_space = flag(j, "add_prefix_space", true);
        st.use_regex = flag(j, "use_regex", true);
        if (st.use_regex && !m.gpt2)
            m.gpt2 =
                Pattern::regex("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
    } else {
        throw std::runtime_error("pre-tokenizer type \"" + (t.empty() ? j.dump().substr(0, 60) : t) +
                                 "\" is not supported (Split, ByteLevel and Sequence are)");
    }
    m.stages.push_back(std::move(st));
}

void load_post_processor(HfTokenizer::Impl& m, const json& j) {
    if (j.is_null()) return;
    const std::string t = type_of(j);
    if (t == "ByteLevel") return;  // offsets only: nothing changes in the ids
    if (t == "Sequence" && j.contains("processors") && j["processors"].is_array()) {
        for (const json& p : j["processors"]) load_post_processor(m, p);
        return;
    }
    if (t != "TemplateProcessing")
        throw std::runtime_error("post-processor type \"" + t +
                                 "\" is not supported (ByteLevel, TemplateProcessing and Sequence are)");
    const json& specials = j.at("special_tokens");
    std::vector<int32_t> tmpl;
    for (const json& piece : j.at("single")) {
        if (piece.contains("Sequence")) {
            tmpl.push_back(-1);
        } else if (piece.contains("SpecialToken")) {
            const std::string name = piece["SpecialToken"].at("id").get<std::string>();
            if (!specials.contains(name))
                throw std::runtime_error("TemplateProcessing names special token \"" + name + "\" without ids");
            for (const json& id : specials[name].at("ids")) tmpl.push_back(id.get<int32_t>());
        } else {
            throw std::runtime_error("TemplateProcessing piece " + piece.dump() + " is not understood");
        }
    }
    m.templates.push_back(std::move(tmpl));
}

void load_decoder(HfTokenizer::Impl& m, const json& j) {
    if (j.is_null()) {
        m.byte_level_decoder = false;
        return;
    }
    const std::string t = type_of(j);
    if (t == "ByteLevel") return;
    if (t == "Sequence" && j.contains("decoders") && j["decoders"].is_array()) {
        for (const json& d : j["decoders"])
            if (type_of(d) != "ByteLevel")
                throw std::runtime_error("decoder type \"" + type_of(d) + "\" is not supported (ByteLevel is)");
        return;
    }
    throw std::runtime_error("decoder type \"" + t + "\" is not supported (ByteLevel is)");
}

void load_model(HfTokenizer::Impl& m, const json& model, std::vector<std::pair<std::string, int32_t>>& vocab) {
    std::string t = type_of(model);
    if (t.empty() && model.is_object() && model.contains("merges")) t = "BPE";
    if (t != "BPE")
        throw std::runtime_error("model type \"" + (t.empty() ? std::string("?") : t) + "\" is not supported; " +
                                 kSupported);
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0)
        throw std::runtime_error("BPE dropout is not supported (it makes encoding random)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty())
            throw std::runtime_error(std::string("BPE ") + key + " is not supported (byte-level BPE has none)");
    const json& v = model.at("vocab");
    if (!v.is_object()) throw std::runtime_error("model.vocab is not an object");
    std::unordered_map<int64_t, std::string> seen;
    vocab.reserve(v.size());
    for (auto it = v.begin(); it != v.end(); ++it) {
        if (!it.value().is_number_integer())
            throw std::runtime_error("model.vocab[\"" + it.key() + "\"] is not an integer id");
        const int64_t id = it.value().get<int64_t>();
        if (id < 0 || id > 0x7fffffff)
            throw std::runtime_error("model.vocab[\"" + it.key() + "\"] = " + std::to_string(id) +
                                     " is not a valid id");
        if (!utf8_valid(it.key())) throw std::runtime_error("model.vocab has a token that is not valid UTF-8");
        const auto [pos, fresh] = seen.emplace(id, it.key());
        if (!fresh)
            throw std::runtime_error("model.vocab gives id " + std::to_string(id) + " to both \"" + pos->second +
                                     "\" and \"" + it.key() + "\"");
        vocab.emplace_back(it.key(), static_cast<int32_t>(id));
    }
    std::vector<std::pair<std::string, std::string>> merges;
    const json& mj = model.at("merges");
    if (!mj.is_array()) throw std::runtime_error("model.merges is not an array");
    merges.reserve(mj.size());
    for (std::size_t r = 0; r < mj.size(); ++r) {
        const json& e = mj[r];
        if (e.is_string()) {
            const std::string s = e.get<std::string>();
            const auto sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                throw std::runtime_error("merge " + std::to_string(r) + " (\"" + s +
                                         "\") is not two tokens separated by one space");
            merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
            throw std::runtime_error("merge " + std::to_string(r) + " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }
    m.model = std::make_unique<BpeModel>(vocab, merges, flag(model, "ignore_merges", false));
}

/// Everything from the parsed tokenizer.json; std::runtime_error / json errors on bad content.
void build(HfTokenizer::Impl& m, const json& root) {
    if (!root.is_object()) throw std::runtime_error("the top level is not a JSON object");
    if (!root.contains("model")) throw std::runtime_error("no \"model\" (not a tokenizer.json)");
    std::vector<std::pair<std::string, int32_t>> vocab;
    load_model(m, root["model"], vocab);
    std::vector<NormalForm> forms;
    if (root.contains("normalizer")) load_normalizer(m, root["normalizer"], forms);
    m.normalizer = Normalizer(forms);
    if (root.contains("pre_tokenizer")) load_pre_tokenizer(m, root["pre_tokenizer"]);
    if (m.stages.empty() || m.stages.back().kind != PreTokStage::kByteLevel)
        throw std::runtime_error("no ByteLevel pre-tokenizer; " + std::string(kSupported));
    if (root.contains("post_processor")) load_post_processor(m, root["post_processor"]);
    if (root.contains("decoder")) load_decoder(m, root["decoder"]);

    // ids and strings of the model's vocabulary
    std::unordered_map<std::string, int32_t> model_ids;
    int64_t max_id = -1;
    for (const auto& [tok, id] : vocab) {
        model_ids.emplace(tok, id);
        max_id = std::max<int64_t>(max_id, id);
    }
    // added tokens, with ids as AddedVocabulary::add_tokens assigns them
    std::unordered_map<std::string, int32_t> added_ids;
    std::unordered_set<std::string> special_set;
    const int64_t model_size = static_cast<int64_t>(vocab.size());
    if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
        for (const json& a : root.at("added_tokens")) {
            AddedToken t;
            t.content = a.at("content").get<std::string>();
            if (t.content.empty()) continue;
            t.special = flag(a, "special", false);
            t.single_word = flag(a, "single_word", false);
            t.lstrip = flag(a, "lstrip", false);
            t.rstrip = flag(a, "rstrip", false);
            t.normalized = flag(a, "normalized", true);
            if (added_ids.count(t.content))
                throw std::runtime_error("added token \"" + t.content + "\" is listed twice");
            int64_t id;
            if (const auto it = model_ids.find(t.content); it != model_ids.end()) {
                id = it->second;
            } else {
                int64_t mx = -1;
                for (const auto& kv : added_ids) mx = std::max<int64_t>(mx, kv.second);
                id = mx < 0 ? model_size : (mx >= model_size || model_size == 0 ? mx + 1 : model_size);
            }
            const int64_t file_id = a.at("id").get<int64_t>();
            if (file_id != id)
                throw std::runtime_error("added token \"" + t.content + "\" has id " + std::to_string(file_id) +
                                         " but Hugging Face tokenizers would give it id " + std::to_string(id));
            t.id = static_cast<int32_t>(id);
            added_ids.emplace(t.content, t.id);
            if (t.special) special_set.insert(t.content);
            max_id = std::max<int64_t>(max_id, id);
            m.added.push_back(std::move(t));
        }
    }
    // tries: special tokens first, then the others (AddedVocabulary::refresh_added_tokens order)
    for (int pass = 0; pass < 2; ++pass)
        for (std::size_t i = 0; i < m.added.size(); ++i) {
            const AddedToken& t = m.added[i];
            if (t.special != (pass == 0)) continue;
            if (t.normalized) {
                m.norm_trie.add(m.normalizer.empty() ? t.content : m.normalizer.apply(t.content), i);
            } else {
                m.raw_trie.add(t.content, i);
            }
        }
    // per-id tables for decode
    const auto n = static_cast<std::size_t>(max_id + 1);
    m.token.assign(n, std::string());
    m.bytes.assign(n, std::string());
    m.exists.assign(n, 0);
    m.special.assign(n, 0);
    for (const auto& [tok, id] : vocab) {
        m.token[static_cast<std::size_t>(id)] = tok;
        m.exists[static_cast<std::size_t>(id)] = 1;
    }
    for (const AddedToken& t : m.added) {
        m.token[static_cast<std::size_t>(t.id)] = t.content;
        m.exists[static_cast<std::size_t>(t.id)] = 1;
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (!m.exists[i]) continue;
        if (!byte_level_to_bytes(m.token[i], &m.bytes[i])) m.bytes[i] = m.token[i];
        m.special[i] = special_set.count(m.token[i]) ? 1 : 0;
    }
    m.token_ids = model_ids;
    for (const auto& kv : added_ids) m.token_ids[kv.first] = kv.second;
    for (const auto& tmpl : m.templates)
        for (int32_t id : tmpl)
            if (id >= 0 && (static_cast<std::size_t>(id) >= n || !m.exists[static_cast<std::size_t>(id)]))
                throw std::runtime_error("TemplateProcessing uses id " + std::to_string(id) + ", which no token has");
}

}  // namespace

HfTokenizer HfTokenizer::load(const std::string& path_in) {
    std::string path = path_in;
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        const fs::path dir(path);
        if (fs::exists(dir / "tokenizer.json")) {
            path = (dir / "tokenizer.json").string();
        } else if (fs::exists(dir / "tokenizer.model")) {
            throw ConfigError(path + ": has a SentencePiece tokenizer.model but no tokenizer.json; " + kSupported);
        } else {
            throw ConfigError(path + ": no tokenizer.json in this directory");
        }
    } else if (!fs::exists(path, ec)) {
        throw ConfigError(path + ": no such file or directory");
    }
    if (fs::path(path).extension() == ".model")
        throw ConfigError(path + ": a SentencePiece .model file is not supported; " + kSupported);
    const std::string text = read_file(path);
    const json root = parse_json(path, text);
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    try {
        build(*impl, root);
    } catch (const ConfigError&) {
        throw;
    } catch (const json::exception& e) {
        std::string msg = e.what();
        const auto p = msg.find("] ");
        if (p != std::string::npos) msg = msg.substr(p + 2);
        throw ConfigError(path + ": unexpected structure (" + msg + ")");
    } catch (const std::exception& e) {
        throw ConfigError(path + ": " + e.what());
    }
    // tokenizer_config.json beside it: the names of the bos/eos/pad tokens
    const fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
    if (fs::exists(cfg, ec)) {
        const std::string cpath = cfg.string();
        const json c = parse_json(cpath, read_file(cpath));
        if (!c.is_object()) throw ConfigError(cpath + ": the top level is not a JSON object");
        const auto resolve = [&](const char* key, std::optional<int32_t>& slot) {
            if (!c.contains(key) || c[key].is_null()) return;
            const auto name = token_name(c[key]);
            if (!name) throw ConfigError(cpath + ": " + key + " is neither a string nor {\"content\": ...}");
            const auto it = impl->token_ids.find(*name);
            if (it == impl->token_ids.end())
                throw ConfigError(cpath + ": " + key + " \"" + *name + "\" is not a token of " + path);
            slot = it->second;
        };
        resolve("bos_token", impl->bos);
        resolve("eos_token", impl->eos);
        resolve("pad_token", impl->pad);
    }
    return HfTokenizer(std::move(impl));
}

}  // namespace tagflow::text
