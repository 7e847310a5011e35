// SPDX-License-Identifier: Apache-2.0
// jinja_filters: the filters (`x | name(args)`) and tests (`x is name args`) of the supported
// subset, with Jinja 3.1's argument names and defaults, and transformers' own tojson
// (json.dumps with ensure_ascii=False, indent, separators, sort_keys; no HTML escaping).
// map/select/reject/selectattr/rejectattr/unique/items and reverse of a list return Python
// generators in Jinja: here lists flagged is_iter, with a generator's truth (always true), no
// len() and no indexing, so `{% if x | select(...) %}` behaves as in Jinja. Not modelled: a
// generator being empty once iterated, and its printed form (<generator object ... at 0x...>).
// The list of names accepted at parse time is in jinja_builtins.cpp; a name missing there is
// refused when the template is compiled.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "text/jinja_internal.hpp"

namespace tagflow::text::jinja {
namespace {

bool bool_arg(const Value* v, bool def) { return v ? truthy(*v) : def; }

// `attribute="a.b"` as Jinja's make_attrgetter resolves it (item access per dotted part).
Value attr_path(const Value& item, const std::string& path, const CallArgs& a) {
    Value cur = item;
    std::size_t k = 0;
    for (;;) {
        std::size_t e = path.find('.', k);
        std::string part = path.substr(k, e == std::string::npos ? std::string::npos : e - k);
        bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(c); });
        cur = get_item(cur, digits ? Value::integer(std::atoll(part.c_str())) : Value::str(part), a.line, a.col);
        if (e == std::string::npos) return cur;
        k = e + 1;
    }
}

ValueList seq(const Value& v, const CallArgs& a) { return iterate(v, a.line, a.col); }

std::string ensure_ascii(const std::string& json) {
    std::string out;
    for (std::uint32_t c : decode_utf8(json)) {
        char buf[16];
        if (c < 0x80) {
            out += static_cast<char>(c);
        } else if (c < 0x10000) {
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            std::uint32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            out += buf;
        }
    }
    return out;
}

Value tojson(const Value& x, CallArgs& a) {
    a.check("tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
    bool ascii = bool_arg(a.get(0, "ensure_ascii"), false);
    const Value* ind = a.get(1, "indent");
    bool use_indent = ind && ind->kind != Value::None;
    std::string unit;
    if (use_indent) {
        if (ind->kind == Value::Str) unit = ind->s;
        else if (ind->kind == Value::Int)
            unit = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, ind->i)), ' ');
        else arg_fail(a, "tojson: indent must be an integer or a string");
    }
    std::string item_sep = use_indent ? "," : ", ", key_sep = ": ";
    const Value* sep = a.get(2, "separators");
    if (sep && sep->kind != Value::None) {
        if (sep->kind != Value::List || sep->list->size() != 2 || (*sep->list)[0].kind != Value::Str ||
            (*sep->list)[1].kind != Value::Str)
            arg_fail(a, "tojson: separators must be a pair of strings");
        item_sep = (*sep->list)[0].s;
        key_sep = (*sep->list)[1].s;
    }
    std::string out =
        to_json(x, 0, unit, use_indent, item_sep, key_sep, bool_arg(a.get(3, "sort_keys"), false), a.line, a.col);
    return Value::str(ascii ? ensure_ascii(out) : out);
}

Value py_int(const Value& v, const CallArgs& a) {
    a.check("int", {"default", "base"});
    const Value* def = a.get(0, "default");
    Value fallback = def ? *def : Value::integer(0);
    switch (v.kind) {
        case Value::Int: return v;
        case Value::Bool: return Value::integer(v.b);
        case Value::Float:
            if (std::isnan(v.f) || std::isinf(v.f)) return fallback;
            return Value::integer(static_cast<std::int64_t>(v.f));
        case Value::Str: {
            std::string s = py_strip(v.s, nullptr, true, true);
            s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
            if (s.empty()) return fallback;
            char* end = nullptr;
            errno = 0;
            long long x = std::strtoll(s.c_str(), &end, 10);
            if (*end == 0 && errno == 0) return Value::integer(x);
            double d = std::strtod(s.c_str(), &end);
            if (*end == 0 && std::isfinite(d)) return Value::integer(static_cast<std::int64_t>(d));
            return fallback;
        }
        default: return fallback;
    }
}

Value py_float(const Value& v, const CallArgs& a) {
    a.check("float", {"default"});
    const Value* def = a.get(0, "default");
    Value fallback = def ? *def : Value::real(0.0);
    switch (v.kind) {
        case Value::Float: return v;
        case Value::Int: return Value::real(static_cast<double>(v.i));
        case Value::Bool: return Value::real(v.b ? 1.0 : 0.0);
        case Value::Str: {
            std::string s = py_strip(v.s, nullptr, true, true);
            char* end = nullptr;
            double d = std::strtod(s.c_str(), &end);
            if (s.empty() || *end != 0) return fallback;
            return Value::real(d);
        }
        default: return fallback;
    }
}

// Python round(x, n): correctly rounded through the exact decimal expansion (printf), ties to even.
Value py_round(const Value& v, CallArgs& a) {
    a.check("round", {"precision", "method"});
    const Value* p = a.get(0, "precision");
    std::int64_t prec = p ? (p->kind == Value::Int ? p->i : 0) : 0;
    std::string method = a.get(1, "method") ? to_str(*a.get(1, "method")) : "common";
    if (!v.is_number()) arg_fail(a, "round: expected a number, got " + type_name(v));
    if (v.kind != Value::Float && method == "common") return v.kind == Value::Bool ? Value::integer(v.b) : v;
    double x = v.kind == Value::Float ? v.f : v.kind == Value::Bool ? v.b : static_cast<double>(v.i);
    double scale = std::pow(10.0, static_cast<double>(prec));
    if (method == "ceil") return Value::real(std::ceil(x * scale) / scale);
    if (method == "floor") return Value::real(std::floor(x * scale) / scale);
    if (method != "common") arg_fail(a, "round: method must be common, ceil or floor");
    if (!std::isfinite(x)) return Value::real(x);
    if (prec < 0 || prec > 300) return Value::real(std::nearbyint(x * scale) / scale);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(prec), x);
    return Value::real(std::strtod(buf, nullptr));
}

std::string sort_key_str(const Value& v, bool case_sensitive) { return case_sensitive ? v.s : ascii_lower(v.s); }

ValueList sorted(ValueList items, bool reverse, bool case_sensitive, const Value* attribute, const CallArgs& a) {
    auto key = [&](const Value& v) {
        Value k = attribute && attribute->kind != Value::None ? attr_path(v, to_str(*attribute), a) : v;
        if (k.kind == Value::Str && !case_sensitive) k = Value::str(sort_key_str(k, false));
        return k;
    };
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& v : items) keyed.emplace_back(key(v), v);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
        return reverse ? less(y.first, x.first, a.line, a.col) : less(x.first, y.first, a.line, a.col);
    });
    ValueList out;
    for (auto& kv : keyed) out.push_back(kv.second);
    return out;
}

// select/reject/selectattr/rejectattr: items whose test (or truth) is `want`.
Value select_items(const Value& v, CallArgs& a, bool want, bool by_attr) {
    std::size_t first = 0;
    std::string attr;
    if (by_attr) {
        if (a.pos.empty()) arg_fail(a, "selectattr/rejectattr need an attribute name");
        attr = to_str(a.pos[0]);
        first = 1;
    }
    std::string test;
    CallArgs targs;
    targs.line = a.line;
    targs.col = a.col;
    if (a.pos.size() > first) {
        test = to_str(a.pos[first]);
        if (!is_known_test(test)) arg_fail(a, "unsupported test '" + test + "'");
        targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(first + 1), a.pos.end());
        targs.kw = a.kw;
    }
    ValueList out;
    for (const auto& item : seq(v, a)) {
        Value subject = by_attr ? attr_path(item, attr, a) : item;
        bool ok = test.empty() ? truthy(subject) : apply_test(test, subject, targs);
        if (ok == want) out.push_back(item);
    }
    return Value::new_iter(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, Value v, CallArgs& a) {
    if (name == "tojson") return tojson(v, a);
    if (name == "length" || name == "count") return Value::integer(length(v, a.line, a.col));
    if (name == "string") return Value::str(to_str(v));
    if (name == "safe") return Value::str(to_str(v));
    if (name == "trim") {
        a.check("trim", {"chars"});
        const Value* c = a.get(0, "chars");
        std::string chars = c && c->kind != Value::None ? to_str(*c) : std::string();
        return Value::str(py_strip(to_str(v), c && c->kind != Value::None ? &chars : nullptr, true, true));
    }
    if (name == "upper") return Value::str(ascii_upper(to_str(v)));
    if (name == "lower") return Value::str(ascii_lower(to_str(v)));
    if (name == "capitalize") return Value::str(capitalize_str(to_str(v)));
    if (name == "title") return Value::str(jinja_title(to_str(v)));
    if (name == "replace") {
        a.check("replace", {"old", "new", "count"});
        const Value* o = a.get(0, "old");
        const Value* n = a.get(1, "new");
        const Value* c = a.get(2, "count");
        if (!o || !n) arg_fail(a, "replace needs old and new");
        return Value::str(py_replace(to_str(v), to_str(*o), to_str(*n), c && c->kind == Value::Int ? c->i : -1));
    }
    if (name == "join") {
        a.check("join", {"d", "attribute"});
        const Value* d = a.get(0, "d");
        const Value* attr = a.get(1, "attribute");
        std::string sep = d ? to_str(*d) : std::string(), out;
        bool first = true;
        for (const auto& x : seq(v, a)) {
            if (!first) out += sep;
            first = false;
            out += to_str(attr && attr->kind != Value::None ? attr_path(x, to_str(*attr), a) : x);
        }
        return Value::str(out);
    }
    if (name == "first" || name == "last") {
        a.check(name.c_str(), {});
        if (name == "last" && v.is_iter) arg_fail(a, "'generator' object is not reversible");
        ValueList items = seq(v, a);
        if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
        return name == "first" ? items.front() : items.back();
    }
    if (name == "default" || name == "d") {
        a.check("default", {"default_value", "boolean"});
        const Value* def = a.get(0, "default_value");
        bool boolean = bool_arg(a.get(1, "boolean"), false);
        if (v.is_undefined() || (boolean && !truthy(v))) return def ? *def : Value::str("");
        return v;
    }
    if (name == "int") return py_int(v, a);
    if (name == "float") return py_float(v, a);
    if (name == "list") return Value::new_list(seq(v, a));
    if (name == "items") {
        if (v.is_undefined()) return Value::new_list();
        if (v.kind != Value::DictK || v.is_namespace) arg_fail(a, "items: can only get item pairs from a mapping");
        ValueList out;
        for (const auto& kv : v.dict->items) out.push_back(Value::new_list({Value::str(kv.first), kv.second}, true));
        return Value::new_iter(std::move(out));
    }
    if (name == "map") {
        ValueList out;
        const Value* attr = nullptr;
        for (const auto& kv : a.kw)
            if (kv.first == "attribute") attr = &kv.second;
        if (attr) {
            const Value* def = nullptr;
            for (const auto& kv : a.kw)
                if (kv.first == "default") def = &kv.second;
            for (const auto& x : seq(v, a)) {
                Value r = attr_path(x, to_str(*attr), a);
                out.push_back(r.is_undefined() && def ? *def : r);
            }
            return Value::new_iter(std::move(out));
        }
        if (a.pos.empty()) arg_fail(a, "map: needs a filter name or attribute=");
        std::string f = to_str(a.pos[0]);
        if (!is_known_filter(f)) arg_fail(a, "unsupported filter '" + f + "'");
        CallArgs fa;
        fa.line = a.line;
        fa.col = a.col;
        fa.pos.assign(a.pos.begin() + 1, a.pos.end());
        fa.kw = a.kw;
        for (const auto& x : seq(v, a)) out.push_back(apply_filter(f, x, fa));
        return Value::new_iter(std::move(out));
    }
    if (name == "select" || name == "reject") return select_items(v, a, name == "select", false);
    if (name == "selectattr" || name == "rejectattr") return select_items(v, a, name == "selectattr", true);
    if (name == "indent") {
        a.check("indent", {"width", "first", "blank"});
        const Value* w = a.get(0, "width");
        std::string ind =
            w && w->kind == Value::Str
                ? w->s
                : std::string(
                      static_cast<std::size_t>(std::max<std::int64_t>(0, w && w->kind == Value::Int ? w->i : 4)), ' ');
        bool first = bool_arg(a.get(1, "first"), false), blank = bool_arg(a.get(2, "blank"), false);
        std::vector<std::string> lines = splitlines(to_str(v) + "\n");
        std::string out;
        if (blank) {
            for (std::size_t k = 0; k < lines.size(); ++k) out += (k ? "\n" + ind : "") + lines[k];
        } else {
            out = lines.empty() ? "" : lines[0];
            for (std::size_t k = 1; k < lines.size(); ++k) out += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
        }
        return Value::str(first ? ind + out : out);
    }
    if (name == "reverse") {
        if (v.kind == Value::Str) {
            auto cps = decode_utf8(v.s);
            std::reverse(cps.begin(), cps.end());
            return Value::str(encode_utf8(cps));
        }
        ValueList items = seq(v, a);
        std::reverse(items.begin(), items.end());
        if (v.kind == Value::List && !v.is_iter) return Value::new_iter(std::move(items));  // reversed(list)
        return Value::new_list(std::move(items));
    }
    if (name == "sort") {
        a.check("sort", {"reverse", "case_sensitive", "attribute"});
        return Value::new_list(sorted(seq(v, a), bool_arg(a.get(0, "reverse"), false),
                                      bool_arg(a.get(1, "case_sensitive"), false), a.get(2, "attribute"), a));
    }
    if (name == "dictsort") {
        a.check("dictsort", {"case_sensitive", "by", "reverse"});
        if (v.kind != Value::DictK || v.is_namespace) arg_fail(a, "dictsort: expected a mapping, got " + type_name(v));
        const Value* by = a.get(1, "by");
        std::string by_s = by ? to_str(*by) : "key";
        if (by_s != "key" && by_s != "value") arg_fail(a, "dictsort: you can only sort by either \"key\" or \"value\"");
        ValueList pairs;
        for (const auto& kv : v.dict->items) pairs.push_back(Value::new_list({Value::str(kv.first), kv.second}, true));
        Value attr = Value::str(by_s == "key" ? "0" : "1");
        return Value::new_list(sorted(std::move(pairs), bool_arg(a.get(2, "reverse"), false),
                                      bool_arg(a.get(0, "case_sensitive"), false), &attr, a));
    }
    if (name == "unique") {
        a.check("unique", {"case_sensitive", "attribute"});
        bool cs = bool_arg(a.get(0, "case_sensitive"), false);
        const Value* attr = a.get(1, "attribute");
        ValueList out, seen;
        for (const auto& x : seq(v, a)) {
            Value k = attr && attr->kind != Value::None ? attr_path(x, to_str(*attr), a) : x;
            if (k.kind == Value::Str && !cs) k = Value::str(ascii_lower(k.s));
            bool dup = false;
            for (const auto& s : seen) dup = dup || equal(s, k);
            if (!dup) {
                seen.push_back(k);
                out.push_back(x);
            }
        }
        return Value::new_iter(std::move(out));
    }
    if (name == "min" || name == "max") {
        a.check(name.c_str(), {"case_sensitive", "attribute"});
        ValueList s = sorted(seq(v, a), false, bool_arg(a.get(0, "case_sensitive"), false), a.get(1, "attribute"), a);
        if (s.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        return name == "min" ? s.front() : s.back();
    }
    if (name == "sum") {
        a.check("sum", {"attribute", "start"});
        const Value* attr = a.get(0, "attribute");
        const Value* start = a.get(1, "start");
        Value total = start ? *start : Value::integer(0);
        for (const auto& x : seq(v, a)) {
            Value y = attr && attr->kind != Value::None ? attr_path(x, to_str(*attr), a) : x;
            if (!total.is_number() || !y.is_number()) arg_fail(a, "sum: can only add numbers");
            if (total.kind == Value::Float || y.kind == Value::Float) {
                auto d = [](const Value& q) {
                    return q.kind == Value::Float ? q.f : q.kind == Value::Bool ? q.b : double(q.i);
                };
                total = Value::real(d(total) + d(y));
            } else {
                total = Value::integer((total.kind == Value::Bool ? total.b : total.i) +
                                       (y.kind == Value::Bool ? y.b : y.i));
            }
        }
        return total;
    }
    if (name == "abs") {
        if (v.kind == Value::Int) return Value::integer(v.i < 0 ? -v.i : v.i);
        if (v.kind == Value::Bool) return Value::integer(v.b);
        if (v.kind == Value::Float) return Value::real(std::fabs(v.f));
        arg_fail(a, "bad operand type for abs(): '" + type_name(v) + "'");
    }
    if (name == "round") return py_round(v, a);
    if (name == "wordcount") {
        std::string s = to_str(v);
        std::int64_t n = 0;
        bool in_word = false;
        for (char ch : s) {
            auto c = static_cast<unsigned char>(ch);
            bool w = std::isalnum(c) || c == '_' || c >= 0x80;
            if (w && !in_word) ++n;
            in_word = w;
        }
        return Value::integer(n);
    }
    arg_fail(a, "unsupported filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
    auto other = [&]() -> const Value& {
        if (a.pos.empty()) arg_fail(a, "test '" + name + "' needs an argument");
        return a.pos[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.kind == Value::None;
    if (name == "string") return v.kind == Value::Str;
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Value::Int;
    if (name == "float") return v.kind == Value::Float;
    if (name == "boolean") return v.kind == Value::Bool;
    if (name == "true") return v.kind == Value::Bool && v.b;
    if (name == "false") return v.kind == Value::Bool && !v.b;
    if (name == "mapping") return v.kind == Value::DictK && !v.is_namespace;
    if (name == "sequence")
        return v.kind == Value::Str || (v.kind == Value::List && !v.is_iter) ||
               (v.kind == Value::DictK && !v.is_namespace) || v.is_undefined();
    if (name == "iterable")
        return v.kind == Value::Str || v.kind == Value::List || (v.kind == Value::DictK && !v.is_namespace) ||
               v.is_undefined();
    if (name == "callable") return v.kind == Value::Func;
    if (name == "odd" || name == "even") {
        if (v.kind != Value::Int && v.kind != Value::Bool) arg_fail(a, "test '" + name + "' needs an integer");
        std::int64_t x = v.kind == Value::Bool ? v.b : v.i;
        return ((x % 2) != 0) == (name == "odd");
    }
    if (name == "divisibleby") {
        const Value& d = other();
        if (v.kind != Value::Int || d.kind != Value::Int || d.i == 0)
            arg_fail(a, "divisibleby needs non-zero integers");
        return v.i % d.i == 0;
    }
    if (name == "==" || name == "eq" || name == "equalto") return equal(v, other());
    if (name == "!=" || name == "ne") return !equal(v, other());
    if (name == "<" || name == "lt" || name == "lessthan") return less(v, other(), a.line, a.col);
    if (name == ">" || name == "gt" || name == "greaterthan") return less(other(), v, a.line, a.col);
    if (name == "<=" || name == "le") return !less(other(), v, a.line, a.col);
    if (name == ">=" || name == "ge") return !less(v, other(), a.line, a.col);
    if (name == "sameas") {
        const Value& o = other();
        if (v.kind != o.kind) return false;
        if (v.kind == Value::None || v.kind == Value::Undefined) return true;
        if (v.kind == Value::Bool) return v.b == o.b;
        if (v.kind == Value::List) return v.list == o.list;
        if (v.kind == Value::DictK) return v.dict == o.dict;
        if (v.kind == Value::Func) return v.fn == o.fn;
        return equal(v, o) && v.kind == Value::Int && v.i >= -5 && v.i <= 256;  // CPython's small-int cache
    }
    if (name == "in") {
        const Value& container = other();
        if (container.kind == Value::Str) {
            if (v.kind != Value::Str) arg_fail(a, "'in <string>' requires string as left operand, not " + type_name(v));
            return container.s.find(v.s) != std::string::npos;
        }
        for (const auto& x : iterate(container, a.line, a.col))
            if (equal(x, v)) return true;
        return false;
    }
    if (name == "lower" || name == "upper") {
        std::string s = to_str(v);
        bool cased = false, ok = true;
        for (char ch : s) {
            auto c = static_cast<unsigned char>(ch);
            if (std::isalpha(c)) cased = true;
            if (name == "lower" ? std::isupper(c) : std::islower(c)) ok = false;
        }
        return cased && ok;
    }
    arg_fail(a, "unsupported test '" + name + "'");
}

}  // namespace tagflow::text::jinja
