// SPDX-License-Identifier: Apache-2.0
// jinja_value: what Python does with the values a chat template sees: truth, str() and repr()
// (floats in Python's shortest round-trip form), ==, <, json.dumps (transformers' tojson:
// ensure_ascii=False), iteration, len(), UTF-8 decoding and str.strip().
// Does NOT know the template language (that is jinja_parse / jinja_eval / jinja_builtins).
// Python's str.isprintable() is approximated for repr(): controls, format characters and
// non-ASCII spaces common in text are escaped; rarer unprintable code points are not.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "text/jinja_internal.hpp"

namespace tagflow::text::jinja {

void fail(int line, int col, const std::string& what) {
    throw TemplateError("chat template: line " + std::to_string(line) + ":" + std::to_string(col) + ": " + what);
}

bool truthy(const Value& v) {
    switch (v.kind) {
        case Value::Undefined:
        case Value::None: return false;
        case Value::Bool: return v.b;
        case Value::Int: return v.i != 0;
        case Value::Float: return v.f != 0.0;
        case Value::Str: return !v.s.empty();
        case Value::List: return v.is_iter || !v.list->empty();
        case Value::DictK: return v.is_namespace || !v.dict->items.empty();
        case Value::Func: return true;
    }
    return false;
}

std::string float_repr(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    if (x == 0.0) return std::signbit(x) ? "-0.0" : "0.0";
    // shortest round-trip digits, locale-independent: [-]d[.ddd]e[+-]XX
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
    std::string s(buf, res.ptr);
    bool neg = s[0] == '-';
    if (neg) s.erase(0, 1);
    std::size_t e = s.find('e');
    int exp10 = std::atoi(s.c_str() + e + 1);
    std::string digits;
    for (std::size_t k = 0; k < e; ++k)
        if (s[k] != '.') digits += s[k];
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    int decpt = exp10 + 1;  // position of the decimal point after the first `decpt` digits
    std::string out = neg ? "-" : "";
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out += "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
        } else if (static_cast<std::size_t>(decpt) >= digits.size()) {
            out += digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
        } else {
            out += digits.substr(0, static_cast<std::size_t>(decpt)) + "." +
                   digits.substr(static_cast<std::size_t>(decpt));
        }
    } else {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        int ex = decpt - 1;
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", ex < 0 ? '-' : '+', std::abs(ex));
        out += eb;
    }
    return out;
}

std::vector<std::uint32_t> decode_utf8(const std::string& s) {
    std::vector<std::uint32_t> out;
    out.reserve(s.size());
    for (std::size_t k = 0; k < s.size();) {
        auto c = static_cast<unsigned char>(s[k]);
        int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        std::uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
        if (k + static_cast<std::size_t>(n) > s.size()) n = 1, cp = c;
        for (int j = 1; j < n; ++j)
            cp = (cp << 6) | (static_cast<unsigned char>(s[k + static_cast<std::size_t>(j)]) & 0x3f);
        out.push_back(cp);
        k += static_cast<std::size_t>(n);
    }
    return out;
}

static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

std::string encode_utf8(const std::vector<std::uint32_t>& cps) {
    std::string out;
    out.reserve(cps.size());
    for (auto cp : cps) append_utf8(out, cp);
    return out;
}

bool is_py_space(std::uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::size_t space_len_at(const std::string& s, std::size_t k) {
    auto c = static_cast<unsigned char>(s[k]);
    if (c < 0x80) return is_py_space(c) ? 1 : 0;
    int n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (n == 1 || k + static_cast<std::size_t>(n) > s.size()) return 0;
    std::uint32_t cp = n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int j = 1; j < n; ++j)
        cp = (cp << 6) | (static_cast<unsigned char>(s[k + static_cast<std::size_t>(j)]) & 0x3f);
    return is_py_space(cp) ? static_cast<std::size_t>(n) : 0;
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
    bool ascii = true;
    for (char ch : s)
        if (static_cast<unsigned char>(ch) >= 0x80) ascii = false;
    if (chars)
        for (char ch : *chars)
            if (static_cast<unsigned char>(ch) >= 0x80) ascii = false;
    if (ascii) {
        std::size_t b = 0, e = s.size();
        auto strip_it = [&](char ch) {
            return chars ? chars->find(ch) != std::string::npos : is_py_space(static_cast<unsigned char>(ch));
        };
        if (left)
            while (b < e && strip_it(s[b])) ++b;
        if (right)
            while (e > b && strip_it(s[e - 1])) --e;
        return s.substr(b, e - b);
    }
    auto cps = decode_utf8(s);
    std::vector<std::uint32_t> set;
    if (chars) set = decode_utf8(*chars);
    auto strip_it = [&](std::uint32_t c) {
        return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_py_space(c);
    };
    std::size_t b = 0, e = cps.size();
    if (left)
        while (b < e && strip_it(cps[b])) ++b;
    if (right)
        while (e > b && strip_it(cps[e - 1])) --e;
    return encode_utf8(std::vector<std::uint32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                                  cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

static bool py_printable(std::uint32_t c) {
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f)) return false;
    if ((c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff || (c >= 0xd800 && c <= 0xdfff)) return false;
    if (c >= 0xfff9 && c <= 0xfffb) return false;
    return true;
}

static std::string str_repr(const std::string& s) {
    bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
    char q = (has_single && !has_double) ? '"' : '\'';
    std::string out(1, q);
    for (std::uint32_t c : decode_utf8(s)) {
        if (c == static_cast<std::uint32_t>(q) || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (!py_printable(c)) {
            char buf[16];
            if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", c);
            else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", c);
            else std::snprintf(buf, sizeof buf, "\\U%08x", c);
            out += buf;
        } else {
            append_utf8(out, c);
        }
    }
    out += q;
    return out;
}

std::string repr(const Value& v) {
    switch (v.kind) {
        case Value::Undefined: return "Undefined";
        case Value::Str: return str_repr(v.s);
        case Value::List: {
            if (v.is_iter) return "<generator object>";
            std::string out = v.is_tuple ? "(" : "[";
            for (std::size_t k = 0; k < v.list->size(); ++k) {
                if (k) out += ", ";
                out += repr((*v.list)[k]);
            }
            if (v.is_tuple && v.list->size() == 1) out += ",";
            return out + (v.is_tuple ? ")" : "]");
        }
        case Value::DictK: {
            std::string out = "{";
            bool first = true;
            for (const auto& kv : v.dict->items) {
                if (!first) out += ", ";
                first = false;
                out += str_repr(kv.first) + ": " + repr(kv.second);
            }
            out += "}";
            return v.is_namespace ? "<Namespace " + out + ">" : out;
        }
        default: return to_str(v);
    }
}

std::string to_str(const Value& v) {
    switch (v.kind) {
        case Value::Undefined: return "";
        case Value::None: return "None";
        case Value::Bool: return v.b ? "True" : "False";
        case Value::Int: return std::to_string(v.i);
        case Value::Float: return float_repr(v.f);
        case Value::Str: return v.s;
        case Value::Func: return "<function " + v.fn->name + ">";
        default: return repr(v);
    }
}

std::string type_name(const Value& v) {
    switch (v.kind) {
        case Value::Undefined: return "Undefined";
        case Value::None: return "NoneType";
        case Value::Bool: return "bool";
        case Value::Int: return "int";
        case Value::Float: return "float";
        case Value::Str: return "str";
        case Value::List: return v.is_iter ? "generator" : v.is_tuple ? "tuple" : "list";
        case Value::DictK: return v.is_namespace ? "Namespace" : "dict";
        case Value::Func: return "function";
    }
    return "object";
}

static double as_double(const Value& v) {
    return v.kind == Value::Float ? v.f : v.kind == Value::Bool ? (v.b ? 1.0 : 0.0) : static_cast<double>(v.i);
}

bool equal(const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
        if (a.kind != Value::Float && b.kind != Value::Float)
            return (a.kind == Value::Bool ? a.b : a.i) == (b.kind == Value::Bool ? b.b : b.i);
        return as_double(a) == as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
        case Value::Undefined:
        case Value::None: return true;
        case Value::Str: return a.s == b.s;
        case Value::List:
            if (a.is_iter || b.is_iter) return a.list == b.list;
            if (a.list->size() != b.list->size() || a.is_tuple != b.is_tuple) return false;
            for (std::size_t k = 0; k < a.list->size(); ++k)
                if (!equal((*a.list)[k], (*b.list)[k])) return false;
            return true;
        case Value::DictK:
            if (a.is_namespace || b.is_namespace) return a.dict == b.dict;
            if (a.dict->items.size() != b.dict->items.size()) return false;
            for (const auto& kv : a.dict->items) {
                const Value* o = b.dict->find(kv.first);
                if (!o || !equal(kv.second, *o)) return false;
            }
            return true;
        case Value::Func: return a.fn == b.fn;
        default: return false;
    }
}

bool less(const Value& a, const Value& b, int line, int col) {
    if (a.is_number() && b.is_number()) {
        if (a.kind != Value::Float && b.kind != Value::Float)
            return (a.kind == Value::Bool ? a.b : a.i) < (b.kind == Value::Bool ? b.b : b.i);
        return as_double(a) < as_double(b);
    }
    if (a.kind == Value::Str && b.kind == Value::Str) return a.s < b.s;  // UTF-8 order == code point order
    if (a.kind == Value::List && b.kind == Value::List && a.is_tuple == b.is_tuple) {
        std::size_t n = std::min(a.list->size(), b.list->size());
        for (std::size_t k = 0; k < n; ++k) {
            if (!equal((*a.list)[k], (*b.list)[k])) return less((*a.list)[k], (*b.list)[k], line, col);
        }
        return a.list->size() < b.list->size();
    }
    if (a.is_undefined() || b.is_undefined()) fail(line, col, "'" + (a.is_undefined() ? a.s : b.s) + "' is undefined");
    fail(line, col, "'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

static void json_string(std::string& out, const std::string& s) {
    out += '"';
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

namespace {
struct JsonWriter {
    bool use_indent;
    std::string indent_unit, item_sep, key_sep;
    bool sort_keys;
    int line, col;
    std::string out;
    int depth = 0;

    void newline(int level) {
        out += '\n';
        for (int k = 0; k < level; ++k) out += indent_unit;
    }
    void write(const Value& v) {
        if (++depth > 500) fail(line, col, "tojson: value nested too deeply");
        switch (v.kind) {
            case Value::None: out += "null"; break;
            case Value::Bool: out += v.b ? "true" : "false"; break;
            case Value::Int: out += std::to_string(v.i); break;
            case Value::Float:
                out += std::isnan(v.f)   ? "NaN"
                       : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                                         : float_repr(v.f);
                break;
            case Value::Str: json_string(out, v.s); break;
            case Value::List: {
                if (v.is_iter) fail(line, col, "tojson: Object of type generator is not JSON serializable");
                if (v.list->empty()) {
                    out += "[]";
                    break;
                }
                out += '[';
                for (std::size_t k = 0; k < v.list->size(); ++k) {
                    if (k) out += item_sep;
                    if (use_indent) newline(depth);
                    write((*v.list)[k]);
                }
                if (use_indent) newline(depth - 1);
                out += ']';
                break;
            }
            case Value::DictK: {
                if (v.is_namespace) fail(line, col, "tojson: Object of type Namespace is not JSON serializable");
                if (v.dict->items.empty()) {
                    out += "{}";
                    break;
                }
                std::vector<const std::pair<std::string, Value>*> items;
                for (const auto& kv : v.dict->items) items.push_back(&kv);
                if (sort_keys)
                    std::stable_sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
                out += '{';
                for (std::size_t k = 0; k < items.size(); ++k) {
                    if (k) out += item_sep;
                    if (use_indent) newline(depth);
                    json_string(out, items[k]->first);
                    out += key_sep;
                    write(items[k]->second);
                }
                if (use_indent) newline(depth - 1);
                out += '}';
                break;
            }
            default: fail(line, col, "tojson: Object of type " + type_name(v) + " is not JSON serializable");
        }
        --depth;
    }
};
}  // namespace

std::string to_json(const Value& v, int, const std::string& indent_str, bool use_indent, const std::string& item_sep,
                    const std::string& key_sep, bool sort_keys, int line, int col) {
    JsonWriter w{use_indent, indent_str, item_sep, key_sep, sort_keys, line, col, {}};
    w.write(v);
    return w.out;
}

ValueList iterate(const Value& v, int line, int col) {
    switch (v.kind) {
        case Value::Undefined: return {};
        case Value::List: return *v.list;
        case Value::DictK: {
            if (v.is_namespace) fail(line, col, "'Namespace' object is not iterable");
            ValueList keys;
            for (const auto& kv : v.dict->items) keys.push_back(Value::str(kv.first));
            return keys;
        }
        case Value::Str: {
            ValueList chars;
            for (auto cp : decode_utf8(v.s)) chars.push_back(Value::str(encode_utf8({cp})));
            return chars;
        }
        default: fail(line, col, "'" + type_name(v) + "' object is not iterable");
    }
}

std::int64_t length(const Value& v, int line, int col) {
    switch (v.kind) {
        case Value::Undefined: return 0;
        case Value::List:
            if (v.is_iter) break;
            return static_cast<std::int64_t>(v.list->size());
        case Value::DictK:
            if (!v.is_namespace) return static_cast<std::int64_t>(v.dict->items.size());
            break;
        case Value::Str: {
            std::int64_t n = 0;
            for (char ch : v.s)
                if ((static_cast<unsigned char>(ch) & 0xc0) != 0x80) ++n;
            return n;
        }
        default: break;
    }
    fail(line, col, "object of type '" + type_name(v) + "' has no len()");
}

const Value* CallArgs::get(std::size_t index, const char* name) const {
    for (const auto& kv : kw)
        if (kv.first == name) return &kv.second;
    return index < pos.size() ? &pos[index] : nullptr;
}

void CallArgs::check(const char* what, std::initializer_list<const char*> names) const {
    if (pos.size() > names.size())
        fail(line, col,
             std::string(what) + "() takes at most " + std::to_string(names.size()) + " arguments (" +
                 std::to_string(pos.size()) + " given)");
    for (const auto& kv : kw) {
        bool ok = false;
        for (const char* n : names) ok = ok || kv.first == n;
        if (!ok) fail(line, col, std::string(what) + "() got an unexpected keyword argument '" + kv.first + "'");
    }
}

}  // namespace tagflow::text::jinja
