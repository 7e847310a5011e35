// SPDX-License-Identifier: Apache-2.0
// tokenizer: byte-level encode/decode, special-token names, the ChatML chat template and the
// UTF-8 completeness helper used by streaming. No torch, no MPI.
#include "model/tokenizer.hpp"

#include <array>

#include "common/error.hpp"

namespace tagflow::model {

namespace {
constexpr std::array<const char*, 5> kSpecialNames = {"<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"};
}  // namespace

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> out;
    out.reserve(text.size());
    for (unsigned char c : text) out.push_back(static_cast<int32_t>(c));
    return out;
}

std::string Tokenizer::token_text(int32_t id) const {
    if (id < 0 || id >= vocab_size())
        throw Error("tokenizer: token id " + std::to_string(id) + " outside [0, " + std::to_string(vocab_size()) + ")");
    if (id < 256) return std::string(1, static_cast<char>(static_cast<unsigned char>(id)));
    return kSpecialNames[static_cast<std::size_t>(id - 256)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) {
        if (is_special(id) && skip_special) continue;
        out += token_text(id);
    }
    return out;
}

int32_t Tokenizer::special_id(std::string_view name) const {
    for (std::size_t i = 0; i < kSpecialNames.size(); ++i)
        if (name == kSpecialNames[i]) return 256 + static_cast<int32_t>(i);
    return -1;
}

std::vector<int32_t> Tokenizer::apply_chat_template(
    const std::vector<std::pair<std::string, std::string>>& messages) const {
    std::vector<int32_t> out;
    auto add = [&](std::string_view s) {
        for (unsigned char c : s) out.push_back(static_cast<int32_t>(c));
    };
    for (const auto& [role, content] : messages) {
        out.push_back(kImStart);
        add(role);
        add("\n");
        add(content);
        out.push_back(kImEnd);
        add("\n");
    }
    out.push_back(kImStart);
    add("assistant\n");
    return out;
}

std::size_t utf8_complete_prefix(std::string_view b) {
    const std::size_t n = b.size();
    // Look back at most 3 bytes for the lead byte of the last sequence.
    for (std::size_t back = 1; back <= 4 && back <= n; ++back) {
        const auto c = static_cast<unsigned char>(b[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking
        std::size_t need = 1;
        if ((c & 0xE0) == 0xC0) need = 2;
        else if ((c & 0xF0) == 0xE0) need = 3;
        else if ((c & 0xF8) == 0xF0) need = 4;
        return back < need ? n - back : n;  // incomplete sequence -> hold it back
    }
    return n;  // only continuation bytes (invalid): nothing to wait for
}

}  // namespace tagflow::model
