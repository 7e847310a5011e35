// SPDX-License-Identifier: Apache-2.0
// byte_tokenizer: the byte-level text::Tokenizer (model::Tokenizer's 261 ids: UTF-8 bytes and
// ChatML special ids), for models without a tokenizer.json. Its own file so that the gateway's
// fuzz target compiles it without PCRE2, ICU or the chat templates. See tokenizer.hpp.
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "model/tokenizer.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

using ojson = nlohmann::ordered_json;

namespace tagflow::text {
namespace {

class ByteTextTokenizer final : public Tokenizer {
public:
    std::string name() const override { return "byte-level"; }
    int32_t vocab_size() const override { return tok_.vocab_size(); }
    std::vector<int32_t> encode(std::string_view text, bool) const override {
        std::size_t off = 0;
        if (!utf8_valid(text, &off)) throw Error("text is not valid UTF-8 (byte offset " + std::to_string(off) + ")");
        return tok_.encode(text);
    }
    std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
        return utf8_lossy(tok_.decode(ids, skip_special));
    }
    std::string token_bytes(int32_t id) const override { return tok_.token_text(id); }
    bool is_special(int32_t id) const override { return tok_.is_special(id); }
    /// ChatML with the special ids: <|im_start|>role\ncontent<|im_end|>\n per message (content a
    /// string or null), then <|im_start|>assistant\n when add_generation_prompt.
    std::vector<int32_t> chat_prompt(const ojson& messages, bool add_generation_prompt, const ojson&,
                                     const ojson&) const override {
        if (!messages.is_array()) throw ConfigError("messages must be a list of {role, content} objects");
        std::vector<std::pair<std::string, std::string>> msgs;
        for (const auto& m : messages) {
            if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
                throw ConfigError("each message must be an object with a string 'role'");
            const auto c = m.find("content");
            if (c != m.end() && !c->is_null() && !c->is_string())
                throw ConfigError("the byte-level chat format takes string contents only");
            msgs.emplace_back(m["role"].get<std::string>(), c == m.end() || c->is_null() ? "" : c->get<std::string>());
        }
        for (const auto& [role, content] : msgs) {
            std::size_t off = 0;
            if (!utf8_valid(role, &off) || !utf8_valid(content, &off))
                throw Error("message text is not valid UTF-8 (byte offset " + std::to_string(off) + ")");
        }
        std::vector<int32_t> ids = tok_.apply_chat_template(msgs);  // ends with the generation prompt
        if (!add_generation_prompt) ids.resize(ids.size() - (1 + std::string("assistant\n").size()));
        return ids;
    }
    std::vector<int32_t> stop_ids() const override { return {model::Tokenizer::kEos}; }
    std::vector<int32_t> chat_stop_ids() const override { return tok_.chat_stop_ids(); }
    std::optional<int32_t> bos_id() const override { return model::Tokenizer::kBos; }

private:
    model::Tokenizer tok_;
};

}  // namespace

std::shared_ptr<const Tokenizer> byte_level_tokenizer() {
    static const auto tok = std::make_shared<const ByteTextTokenizer>();
    return tok;
}

}  // namespace tagflow::text
