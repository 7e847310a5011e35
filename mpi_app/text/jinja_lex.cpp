// SPDX-License-Identifier: Apache-2.0
// jinja_lex: the lexer of the Jinja2 subset, configured as Hugging Face transformers configures
// Jinja (trim_blocks, lstrip_blocks, keep_trailing_newline off). Whitespace control follows
// Jinja's lexer rule by rule: newlines normalised to \n, one trailing newline dropped, `{%-`
// strips all whitespace before a tag, `-%}` all after, lstrip_blocks removes the whitespace
// between a line start and `{%`/`{#` (not `{{`), trim_blocks one newline after `%}`/`#}`,
// `{%+`/`+%}` turn those two off; {% raw %} text is data.
// Does NOT parse (jinja_parse.cpp): it only splits text and tags into tokens with line:column.
#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdlib>

#include "text/jinja_internal.hpp"

namespace tagflow::text::jinja {
namespace {

class Lexer {
public:
    explicit Lexer(const std::string& raw) {
        // newline normalisation and keep_trailing_newline=False, as Jinja's lexer does
        for (std::size_t k = 0; k < raw.size(); ++k) {
            if (raw[k] == '\r') {
                src_ += '\n';
                if (k + 1 < raw.size() && raw[k + 1] == '\n') ++k;
            } else {
                src_ += raw[k];
            }
        }
        if (!src_.empty() && src_.back() == '\n') src_.pop_back();
        line_starts_.push_back(0);
        for (std::size_t k = 0; k < src_.size(); ++k)
            if (src_[k] == '\n') line_starts_.push_back(k + 1);
    }

    std::vector<Token> run() {
        std::size_t pos = 0, n = src_.size();
        while (pos < n) {
            std::size_t idx = pos;
            for (;;) {
                idx = src_.find('{', idx);
                if (idx == std::string::npos || idx + 1 >= n) {
                    idx = std::string::npos;
                    break;
                }
                char k = src_[idx + 1];
                if (k == '{' || k == '%' || k == '#') break;
                ++idx;
            }
            if (idx == std::string::npos) {
                emit_data(src_.substr(pos), pos);
                break;
            }
            char kind = src_[idx + 1];
            char sign = idx + 2 < n && (src_[idx + 2] == '-' || src_[idx + 2] == '+') ? src_[idx + 2] : 0;
            std::string text = src_.substr(pos, idx - pos);
            strip_before(text, pos, sign, kind != '{');
            emit_data(text, pos);
            std::size_t p = idx + 2 + (sign ? 1 : 0);
            if (kind == '#') {
                std::size_t q = src_.find("#}", p);
                if (q == std::string::npos) error(idx, "missing end of comment tag");
                pos = after_end(q + 2, q > p ? src_[q - 1] : 0, true);
                continue;
            }
            if (kind == '%' && is_raw_begin(p, pos)) continue;
            tokens_.push_back(tok(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", idx));
            pos = lex_tag(p, kind == '%', idx);
        }
        tokens_.push_back(tok(Tok::Eof, "", src_.size()));
        return std::move(tokens_);
    }

private:
    std::string src_;
    std::vector<std::size_t> line_starts_;
    std::vector<Token> tokens_;

    void line_col(std::size_t pos, int& line, int& col) const {
        auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
        line = static_cast<int>(it - line_starts_.begin());
        col = static_cast<int>(pos - *(it - 1)) + 1;
    }
    Token tok(Tok t, std::string text, std::size_t pos) const {
        Token k{t, std::move(text), 0, 0};
        line_col(pos, k.line, k.col);
        return k;
    }
    [[noreturn]] void error(std::size_t pos, const std::string& what) const {
        int line, col;
        line_col(pos, line, col);
        fail(line, col, what);
    }
    void emit_data(const std::string& text, std::size_t pos) {
        if (!text.empty()) tokens_.push_back(tok(Tok::Data, text, pos));
    }
    bool line_starting(std::size_t data_pos) const { return data_pos == 0 || src_[data_pos - 1] == '\n'; }

    // `{%-` strips all trailing whitespace of the data; lstrip_blocks strips the spaces before a
    // block or comment tag that starts its line.
    void strip_before(std::string& text, std::size_t data_pos, char sign, bool block_or_comment) const {
        if (sign == '-') {
            text = py_strip(text, nullptr, false, true);
        } else if (sign != '+' && block_or_comment) {
            std::size_t l_pos = text.rfind('\n');
            l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
            if (l_pos > 0 || line_starting(data_pos)) {
                bool ws = l_pos < text.size();
                for (std::size_t k = l_pos, l; k < text.size() && ws; k += l) ws = (l = space_len_at(text, k)) > 0;
                if (ws) text.resize(l_pos);
            }
        }
    }
    // Position after a tag end at `end` (just past `%}`/`#}`/`}}`): `-` before it eats the
    // following whitespace, trim_blocks one newline after a block or comment (not after `+`).
    std::size_t after_end(std::size_t end, char sign_before, bool trim) const {
        if (sign_before == '-') {
            for (std::size_t l; end < src_.size() && (l = space_len_at(src_, end)) > 0;) end += l;
        } else if (trim && sign_before != '+' && end < src_.size() && src_[end] == '\n') {
            ++end;
        }
        return end;
    }
    std::size_t skip_ws(std::size_t p) const {
        for (std::size_t l; p < src_.size() && (l = space_len_at(src_, p)) > 0;) p += l;
        return p;
    }
    bool word_at(std::size_t p, const char* w) const {
        std::size_t len = std::char_traits<char>::length(w);
        if (src_.compare(p, len, w) != 0) return false;
        char c = p + len < src_.size() ? src_[p + len] : ' ';
        return !(std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    }

    // {% raw %} ... {% endraw %}: the text in between is data, verbatim.
    bool is_raw_begin(std::size_t p, std::size_t& pos) {
        std::size_t q = skip_ws(p);
        if (!word_at(q, "raw")) return false;
        q = skip_ws(q + 3);
        std::size_t body;
        if (src_.compare(q, 3, "-%}") == 0) {
            body = after_end(q + 3, '-', false);
        } else if (src_.compare(q, 2, "%}") == 0) {
            body = q + 2;
        } else {
            return false;
        }
        for (std::size_t s = body;; ++s) {
            s = src_.find("{%", s);
            if (s == std::string::npos) error(p, "missing {% endraw %} for this raw block");
            char sign = s + 2 < src_.size() && (src_[s + 2] == '-' || src_[s + 2] == '+') ? src_[s + 2] : 0;
            std::size_t e = skip_ws(s + 2 + (sign ? 1 : 0));
            if (!word_at(e, "endraw")) continue;
            e = skip_ws(e + 6);
            char end_sign = (src_.compare(e, 3, "-%}") == 0) ? '-' : (src_.compare(e, 3, "+%}") == 0) ? '+' : 0;
            if (!end_sign && src_.compare(e, 2, "%}") != 0) continue;
            std::string text = src_.substr(body, s - body);
            strip_before(text, body, sign, true);
            emit_data(text, body);
            pos = after_end(e + (end_sign ? 3 : 2), end_sign, true);
            return true;
        }
    }

    // Tokens of one {{ }} or {% %} tag; returns the position after its end.
    std::size_t lex_tag(std::size_t p, bool block, std::size_t open) {
        std::vector<char> balance;
        const std::size_t n = src_.size();
        for (;;) {
            p = skip_ws(p);
            if (p >= n) error(open, block ? "missing end of block tag '%}'" : "missing end of print tag '}}'");
            if (balance.empty()) {
                const char* close = block ? "%}" : "}}";
                if ((src_[p] == '-' || (block && src_[p] == '+')) && src_.compare(p + 1, 2, close) == 0) {
                    tokens_.push_back(tok(block ? Tok::BlockEnd : Tok::VarEnd, "", p));
                    return after_end(p + 3, src_[p], block);
                }
                if (src_.compare(p, 2, close) == 0) {
                    tokens_.push_back(tok(block ? Tok::BlockEnd : Tok::VarEnd, "", p));
                    return after_end(p + 2, 0, block);
                }
            }
            char c = src_[p];
            if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
                std::size_t e = p;
                while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
                tokens_.push_back(tok(Tok::Name, src_.substr(p, e - p), p));
                p = e;
            } else if (std::isdigit(static_cast<unsigned char>(c))) {
                p = lex_number(p);
            } else if (c == '\'' || c == '"') {
                p = lex_string(p);
            } else {
                static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
                std::string op;
                for (const char* t : two)
                    if (src_.compare(p, 2, t) == 0) op = t;
                if (op.empty()) {
                    if (std::string("+-/*%~<>=()[]{},.:|").find(c) == std::string::npos)
                        error(p, std::string("unexpected character '") + c + "'");
                    op = std::string(1, c);
                }
                if (op == "(" || op == "[" || op == "{") balance.push_back(op[0]);
                if (op == ")" || op == "]" || op == "}") {
                    char want = op == ")" ? '(' : op == "]" ? '[' : '{';
                    if (balance.empty() || balance.back() != want) error(p, "unexpected '" + op + "'");
                    balance.pop_back();
                }
                tokens_.push_back(tok(Tok::Op, op, p));
                p += op.size();
            }
        }
    }

    std::size_t lex_number(std::size_t p) {
        std::size_t e = p;
        const std::size_t n = src_.size();
        auto digits = [&](std::size_t q) {
            while (q < n && (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                             (src_[q] == '_' && q + 1 < n && std::isdigit(static_cast<unsigned char>(src_[q + 1])))))
                ++q;
            return q;
        };
        e = digits(e);
        bool is_float = false;
        if (e + 1 < n && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
            is_float = true;
            e = digits(e + 1);
        }
        if (e < n && (src_[e] == 'e' || src_[e] == 'E')) {
            std::size_t q = e + 1;
            if (q < n && (src_[q] == '+' || src_[q] == '-')) ++q;
            if (q < n && std::isdigit(static_cast<unsigned char>(src_[q]))) {
                is_float = true;
                e = digits(q);
            }
        }
        std::string text;
        for (std::size_t k = p; k < e; ++k)
            if (src_[k] != '_') text += src_[k];
        Token t = tok(is_float ? Tok::Float : Tok::Int, text, p);
        if (is_float) {
            std::from_chars(text.data(), text.data() + text.size(), t.fval);  // locale-independent
        } else {
            errno = 0;
            t.ival = std::strtoll(text.c_str(), nullptr, 10);
            if (errno == ERANGE) error(p, "integer literal too large");
        }
        tokens_.push_back(t);
        return e;
    }

    // A quoted string with Python's escapes (Jinja decodes them with "unicode-escape").
    std::size_t lex_string(std::size_t p) {
        char q = src_[p];
        std::string out;
        std::size_t k = p + 1;
        const std::size_t n = src_.size();
        auto hex = [&](std::size_t at, int count) {
            std::uint32_t v = 0;
            for (int j = 0; j < count; ++j) {
                char h = at + static_cast<std::size_t>(j) < n ? src_[at + static_cast<std::size_t>(j)] : 'g';
                if (!std::isxdigit(static_cast<unsigned char>(h))) error(p, "truncated \\x/\\u escape in string");
                v = v * 16 + static_cast<std::uint32_t>(
                                 std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
            }
            return v;
        };
        for (;;) {
            if (k >= n) error(p, "unterminated string");
            char c = src_[k];
            if (c == q) break;
            if (c != '\\') {
                out += c;
                ++k;
                continue;
            }
            if (k + 1 >= n) error(p, "unterminated string");
            char e = src_[k + 1];
            k += 2;
            switch (e) {
                case 'n': out += '\n'; break;
                case 't': out += '\t'; break;
                case 'r': out += '\r'; break;
                case '\\': out += '\\'; break;
                case '\'': out += '\''; break;
                case '"': out += '"'; break;
                case 'a': out += '\a'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'v': out += '\v'; break;
                case '\n': break;
                case 'x':
                    out += encode_utf8({hex(k, 2)});
                    k += 2;
                    break;
                case 'u':
                    out += encode_utf8({hex(k, 4)});
                    k += 4;
                    break;
                case 'U':
                    out += encode_utf8({hex(k, 8)});
                    k += 8;
                    break;
                default:
                    if (e >= '0' && e <= '7') {
                        std::uint32_t v = static_cast<std::uint32_t>(e - '0');
                        for (int j = 0; j < 2 && k < n && src_[k] >= '0' && src_[k] <= '7'; ++j, ++k)
                            v = v * 8 + static_cast<std::uint32_t>(src_[k] - '0');
                        out += encode_utf8({v});
                    } else {
                        out += '\\';
                        out += e;
                    }
            }
        }
        tokens_.push_back(tok(Tok::Str, out, p));
        return k + 1;
    }
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) { return Lexer(source).run(); }

}  // namespace tagflow::text::jinja
