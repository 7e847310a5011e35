// SPDX-License-Identifier: Apache-2.0
// dataset: the one indexing pass over a JSON Lines file, row checks and parsing, and the index's
// byte form (see dataset.hpp).
#include "data/dataset.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "common/error.hpp"

namespace tagflow::data {
namespace {

using ojson = nlohmann::ordered_json;

const char* json_type(const ojson& j) {
    switch (j.type()) {
        case ojson::value_t::null: return "null";
        case ojson::value_t::boolean: return "a boolean";
        case ojson::value_t::string: return "a string";
        case ojson::value_t::array: return "a list";
        case ojson::value_t::object: return "an object";
        default: return "a number";
    }
}

bool blank(const char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return false;
    return true;
}

// ---- index bytes ----

void put_u64(std::string& s, uint64_t v) {
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& s, const std::string& v) {
    put_u64(s, v.size());
    s += v;
}
template <class T>
void put_vec(std::string& s, const std::vector<T>& v) {
    put_u64(s, v.size());
    for (T x : v) put_u64(s, static_cast<uint64_t>(x));
}

struct Reader {
    const std::string& b;
    std::size_t pos = 0;
    uint64_t u64() {
        if (b.size() - pos < 8) throw ConfigError("dataset index: truncated");
        uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(b[pos + i])) << (8 * i);
        pos += 8;
        return v;
    }
    std::string str() {
        uint64_t n = u64();
        if (b.size() - pos < n) throw ConfigError("dataset index: truncated");
        std::string s = b.substr(pos, n);
        pos += n;
        return s;
    }
    template <class T>
    std::vector<T> vec() {
        uint64_t n = u64();
        if ((b.size() - pos) / 8 < n) throw ConfigError("dataset index: truncated");
        std::vector<T> v(n);
        for (auto& x : v) x = static_cast<T>(u64());
        return v;
    }
};

constexpr char kMagic[] = "tagflow-data-index-1";

}  // namespace

namespace detail {

int json_depth(const char* p, std::size_t n) {
    int depth = 0, worst = 0;
    bool in_str = false;
    for (std::size_t i = 0; i < n; ++i) {
        char c = p[i];
        if (in_str) {
            if (c == '\\') ++i;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            worst = std::max(worst, ++depth);
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return worst;
}

std::string parse_message(const std::exception& e) {
    std::string m = e.what();
    if (m.rfind("[json.exception.", 0) == 0) {
        auto k = m.find("] ");
        if (k != std::string::npos) m = m.substr(k + 2);
    }
    return m;
}

}  // namespace detail

Row parse_row(std::string_view text, const std::string& file, uint64_t line, bool sft) {
    const std::string where = file + ":" + std::to_string(line) + ": ";
    if (detail::json_depth(text.data(), text.size()) > kMaxJsonDepth)
        throw ConfigError(where + "JSON nested more than " + std::to_string(kMaxJsonDepth) + " levels");
    ojson j;
    try {
        j = ojson::parse(text.begin(), text.end());
    } catch (const std::exception& e) {
        throw ConfigError(where + "not JSON: " + detail::parse_message(e));
    }
    if (!j.is_object()) throw ConfigError(where + "a row must be a JSON object, not " + json_type(j));
    Row r;
    r.line = line;
    auto it = j.find("prompt");
    if (it == j.end()) throw ConfigError(where + "no \"prompt\" (a string, or a list of {role, content} messages)");
    if (it->is_string()) {
        if (it->get_ref<const std::string&>().empty()) throw ConfigError(where + "\"prompt\" is an empty string");
    } else if (it->is_array()) {
        if (it->empty()) throw ConfigError(where + "\"prompt\" is an empty list of messages");
        std::size_t k = 0;
        for (const auto& m : *it) {
            const std::string at = where + "\"prompt\"[" + std::to_string(k++) + "] ";
            if (!m.is_object()) throw ConfigError(at + "must be a {role, content} object, not " + json_type(m));
            auto role = m.find("role"), content = m.find("content");
            if (role == m.end() || !role->is_string()) throw ConfigError(at + "needs a string \"role\"");
            if (content == m.end() || !content->is_string())
                throw ConfigError(at + "needs a string \"content\"" +
                                  (content == m.end() ? std::string() : std::string(", not ") + json_type(*content)));
        }
    } else {
        throw ConfigError(where + "\"prompt\" must be a string or a list of {role, content} messages, not " +
                          json_type(*it));
    }
    r.prompt = std::move(*it);
    it = j.find("data_source");
    if (it != j.end() && !it->is_null()) {
        if (!it->is_string()) throw ConfigError(where + "\"data_source\" must be a string, not " + json_type(*it));
        r.data_source = it->get<std::string>();
    }
    it = j.find("reward_model");
    if (it != j.end() && !it->is_null()) {
        if (!it->is_object()) throw ConfigError(where + "\"reward_model\" must be an object, not " + json_type(*it));
        auto gt = it->find("ground_truth");
        if (gt != it->end()) r.ground_truth = *gt;
    }
    if (r.ground_truth.is_null()) {
        it = j.find("ground_truth");
        if (it != j.end()) r.ground_truth = *it;
    }
    it = j.find("extra_info");
    if (it != j.end()) r.extra_info = std::move(*it);
    it = j.find("response");
    if (it != j.end() && !it->is_null()) {
        if (!it->is_string()) throw ConfigError(where + "\"response\" must be a string, not " + json_type(*it));
        r.response = it->get<std::string>();
        r.has_response = true;
    } else if (r.extra_info.is_object()) {
        auto a = r.extra_info.find("answer");
        if (a != r.extra_info.end() && a->is_string()) {
            r.response = a->get<std::string>();
            r.has_response = true;
        }
    }
    if (sft && !r.has_response)
        throw ConfigError(where +
                          "sft needs the answer to train on: a string \"response\" or \"extra_info\".\"answer\"");
    return r;
}

std::vector<int32_t> prompt_ids(const Row& row, const text::Tokenizer& tok) {
    if (row.prompt.is_string()) return tok.encode(row.prompt.get_ref<const std::string&>(), true);
    return tok.chat_prompt(row.prompt, /*add_generation_prompt=*/true);
}

Dataset Dataset::open(const std::string& path, const DatasetOptions& opts) {
    if (opts.max_prompt_tokens > 0 && !opts.tokenizer)
        throw ConfigError("--max-prompt-tokens needs a tokenizer (--tokenizer PATH or the model's)");
    Dataset d;
    d.file_ = TextFile::open(path, opts.gzip_span);
    d.sft_ = opts.sft;
    uint64_t line = 0, offset = 0, lines_seen_rows = 0;
    uint64_t shortest_over = std::numeric_limits<uint64_t>::max(), first_over_line = 0;
    std::string partial;  // a line cut by a block boundary
    uint64_t partial_start = 0;
    auto keep = [&](uint64_t start, std::size_t n, const std::string& source) {
        if (!d.lines_.empty() || line != d.starts_.size() + 1) {  // from here on lines differ from index + 1
            if (d.lines_.empty())
                for (uint64_t i = 0; i < d.starts_.size(); ++i) d.lines_.push_back(i + 1);
            d.lines_.push_back(line);
        }
        d.starts_.push_back(start);
        d.lens_.push_back(static_cast<uint32_t>(n));
        ++d.sources_[source];
    };
    auto handle = [&](const char* p, std::size_t n, uint64_t start) {
        ++line;
        if (n && p[n - 1] == '\r') --n;
        if (blank(p, n)) return;
        ++lines_seen_rows;
        const std::string_view text(p, n);
        if (!opts.tokenizer) return keep(start, n, check_row(text, path, line, opts.sft));  // no row built
        Row r = parse_row(text, path, line, opts.sft);
        std::vector<int32_t> ids;
        try {
            ids = prompt_ids(r, *opts.tokenizer);
        } catch (const Error& e) {
            throw ConfigError(path + ":" + std::to_string(line) + ": prompt: " + e.what());
        }
        if (opts.max_prompt_tokens > 0 && static_cast<int64_t>(ids.size()) > opts.max_prompt_tokens) {
            if (opts.over_limit_is_error)
                throw ConfigError(path + ":" + std::to_string(line) + ": prompt has " + std::to_string(ids.size()) +
                                  " tokens, over --max-prompt-tokens " + std::to_string(opts.max_prompt_tokens));
            shortest_over = std::min<uint64_t>(shortest_over, ids.size());
            if (!first_over_line) first_over_line = line;
            ++d.skipped_;
            return;
        }
        keep(start, n, r.data_source);
        d.tokens_.push_back(static_cast<uint32_t>(std::min<std::size_t>(ids.size(), UINT32_MAX)));
    };
    d.file_.scan([&](const char* data, std::size_t n) {
        const char* p = data;
        const char* end = data + n;
        while (p < end) {
            const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p)));
            if (!nl) {
                if (partial.empty()) partial_start = offset + static_cast<uint64_t>(p - data);
                partial.append(p, end);
                if (partial.size() > kMaxLineBytes)
                    throw ConfigError(path + ":" + std::to_string(line + 1) + ": line longer than " +
                                      std::to_string(kMaxLineBytes >> 20) + " MiB");
                break;
            }
            std::size_t len = static_cast<std::size_t>(nl - p);
            if (partial.empty()) {
                if (len > kMaxLineBytes)
                    throw ConfigError(path + ":" + std::to_string(line + 1) + ": line longer than " +
                                      std::to_string(kMaxLineBytes >> 20) + " MiB");
                handle(p, len, offset + static_cast<uint64_t>(p - data));
            } else {
                partial.append(p, nl);
                if (partial.size() > kMaxLineBytes)
                    throw ConfigError(path + ":" + std::to_string(line + 1) + ": line longer than " +
                                      std::to_string(kMaxLineBytes >> 20) + " MiB");
                handle(partial.data(), partial.size(), partial_start);
                partial.clear();
            }
            p = nl + 1;
        }
        offset += n;
    });
    if (!partial.empty()) handle(partial.data(), partial.size(), partial_start);  // no final newline
    if (d.file_.uncompressed_bytes() == 0) throw ConfigError(path + ": empty file, no rows");
    if (lines_seen_rows == 0) throw ConfigError(path + ": no rows (only blank lines)");
    if (d.starts_.empty())
        throw ConfigError(path + ": every row's prompt is over --max-prompt-tokens " +
                          std::to_string(opts.max_prompt_tokens) + " (the shortest has " +
                          std::to_string(shortest_over) + " tokens, the first is line " +
                          std::to_string(first_over_line) + ")");
    d.starts_.shrink_to_fit();
    d.lens_.shrink_to_fit();
    d.lines_.shrink_to_fit();
    d.tokens_.shrink_to_fit();
    return d;
}

uint64_t Dataset::line(uint64_t i) const {
    if (i >= starts_.size())
        throw InternalError(path() + ": row " + std::to_string(i) + " of " + std::to_string(starts_.size()));
    return lines_.empty() ? i + 1 : lines_[i];
}

Row Dataset::row(uint64_t i) const {
    uint64_t ln = line(i);
    std::string text = file_.read(starts_[i], starts_[i] + lens_[i]);
    if (!text.empty() && text.back() == '\r') text.pop_back();
    Row r = parse_row(text, path(), ln, sft_);
    r.index = i;
    return r;
}

std::size_t Dataset::index_bytes() const {
    return starts_.capacity() * sizeof(uint64_t) + lens_.capacity() * sizeof(uint32_t) +
           lines_.capacity() * sizeof(uint64_t) + tokens_.capacity() * sizeof(uint32_t) + file_.index_bytes();
}

std::string Dataset::to_bytes() const {
    std::string s = kMagic;
    put_u64(s, file_bytes());
    put_u64(s, uncompressed_bytes());
    put_u64(s, skipped_);
    put_vec(s, starts_);
    put_vec(s, lens_);
    put_vec(s, lines_);
    put_vec(s, tokens_);
    put_u64(s, sources_.size());
    for (const auto& [k, v] : sources_) {
        put_str(s, k);
        put_u64(s, v);
    }
    put_u64(s, file_.points().size());
    for (const auto& p : file_.points()) {
        put_u64(s, p.out);
        put_u64(s, p.in);
        put_u64(s, static_cast<uint64_t>(static_cast<int64_t>(p.bits)));
        put_str(s, p.window);
    }
    return s;
}

Dataset Dataset::from_bytes(const std::string& path, const std::string& bytes, bool sft) {
    if (bytes.compare(0, sizeof(kMagic) - 1, kMagic) != 0) throw ConfigError(path + ": not a dataset index");
    Reader r{bytes, sizeof(kMagic) - 1};
    Dataset d;
    d.file_ = TextFile::open(path);
    d.sft_ = sft;
    uint64_t fbytes = r.u64(), ubytes = r.u64();
    if (fbytes != d.file_.file_bytes())
        throw ConfigError(path + ": " + std::to_string(d.file_.file_bytes()) + " bytes, the index was built for " +
                          std::to_string(fbytes) + " (the file changed)");
    d.skipped_ = r.u64();
    d.starts_ = r.vec<uint64_t>();
    d.lens_ = r.vec<uint32_t>();
    d.lines_ = r.vec<uint64_t>();
    d.tokens_ = r.vec<uint32_t>();
    for (uint64_t n = r.u64(); n; --n) {
        std::string k = r.str();
        d.sources_[k] = r.u64();
    }
    std::vector<GzipPoint> pts;
    for (uint64_t n = r.u64(); n; --n) {
        GzipPoint p;
        p.out = r.u64();
        p.in = r.u64();
        p.bits = static_cast<int>(static_cast<int64_t>(r.u64()));
        p.window = r.str();
        pts.push_back(std::move(p));
    }
    if (d.lens_.size() != d.starts_.size()) throw ConfigError(path + ": dataset index: inconsistent");
    if (d.file_.gzip()) d.file_.set_index(std::move(pts), ubytes);
    return d;
}

}  // namespace tagflow::data
