// SPDX-License-Identifier: Apache-2.0
// jinja_builtins: the filters and tests a chat template may use, and attribute/item access
// with the methods of str, list and dict that Jinja's ImmutableSandboxedEnvironment lets a
// template call (mutating methods such as list.append or dict.update are refused, as the
// sandbox refuses them), and the globals a template starts with (template_globals). Semantics
// follow Jinja 3.1's filters.py/tests.py and Python's str.
// Does NOT implement HTML escaping, i18n, random, urlize, xmlattr, groupby, batch,
// format strings (%/str.format) or Unicode case mapping beyond ASCII (upper/lower/title
// change ASCII letters only).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>

#include "text/jinja_internal.hpp"

namespace tagflow::text::jinja {
namespace {

const std::set<std::string> kFilters = {
    "abs",  "capitalize", "count",      "d",       "default", "dictsort", "first",  "float",  "indent",
    "int",  "items",      "join",       "last",    "length",  "list",     "lower",  "map",    "max",
    "min",  "reject",     "rejectattr", "replace", "reverse", "round",    "safe",   "select", "selectattr",
    "sort", "string",     "sum",        "title",   "tojson",  "trim",     "unique", "upper",  "wordcount"};
const std::set<std::string> kTests = {
    "!=",          "<",       "<=",       "==",     ">",        ">=",     "boolean", "callable",    "defined",
    "divisibleby", "eq",      "equalto",  "even",   "false",    "float",  "ge",      "greaterthan", "gt",
    "in",          "integer", "iterable", "le",     "lessthan", "lower",  "lt",      "mapping",     "ne",
    "none",        "number",  "odd",      "sameas", "sequence", "string", "true",    "undefined",   "upper"};

}  // namespace

[[noreturn]] void arg_fail(const CallArgs& a, const std::string& what) { fail(a.line, a.col, what); }

std::string ascii_upper(std::string s) {
    for (char& c : s)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    return s;
}
std::string ascii_lower(std::string s) {
    for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return s;
}
static bool is_alpha_byte(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

std::string capitalize_str(const std::string& s) {
    std::string out = ascii_lower(s);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
    return out;
}

// Python str.title() on ASCII letters: a letter after a non-letter starts a word.
std::string py_title(const std::string& s) {
    std::string out = s;
    bool prev_cased = false;
    for (char& c : out) {
        if (is_alpha_byte(c)) {
            c = prev_cased ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                           : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            prev_cased = true;
        } else {
            prev_cased = false;
        }
    }
    return out;
}

// Jinja's title filter: split at runs of [-\s({\[<], capitalise each piece.
std::string jinja_title(const std::string& s) {
    std::string out;
    auto sep_len = [&](std::size_t k) -> std::size_t {
        char c = s[k];
        if (c == '-' || c == '(' || c == '{' || c == '[' || c == '<') return 1;
        return space_len_at(s, k);
    };
    std::size_t k = 0;
    while (k < s.size()) {
        std::size_t e = k;
        bool sep = sep_len(k) > 0;
        while (e < s.size()) {
            std::size_t l = sep_len(e);
            if ((l > 0) != sep) break;
            e += l ? l : 1;
        }
        std::string part = s.substr(k, e - k);
        if (sep) {
            out += part;
        } else {
            std::string low = ascii_lower(part);
            if (low[0] >= 'a' && low[0] <= 'z') low[0] = static_cast<char>(low[0] - 32);
            out += low;
        }
        k = e;
    }
    return out;
}

std::vector<std::string> py_split(const CallArgs& a, const std::string& s, const Value* sep, std::int64_t maxsplit,
                                  bool from_right) {
    std::vector<std::string> out;
    if (!sep || sep->kind == Value::None) {
        // whitespace runs; leading/trailing whitespace ignored
        std::vector<std::pair<std::size_t, std::size_t>> words;
        std::size_t k = 0;
        while (k < s.size()) {
            for (std::size_t l; k < s.size() && (l = space_len_at(s, k)) > 0;) k += l;
            if (k >= s.size()) break;
            std::size_t e = k;
            while (e < s.size() && space_len_at(s, e) == 0) ++e;
            words.emplace_back(k, e);
            k = e;
        }
        if (maxsplit < 0 || static_cast<std::size_t>(maxsplit) + 1 >= words.size()) {
            for (auto& w : words) out.push_back(s.substr(w.first, w.second - w.first));
            return out;
        }
        auto m = static_cast<std::size_t>(maxsplit);
        if (!from_right) {
            for (std::size_t j = 0; j < m; ++j)
                out.push_back(s.substr(words[j].first, words[j].second - words[j].first));
            out.push_back(py_strip(s.substr(words[m].first), nullptr, false, true));
        } else {
            std::size_t first = words.size() - m;
            out.push_back(py_strip(s.substr(0, words[first - 1].second), nullptr, true, false));
            for (std::size_t j = first; j < words.size(); ++j)
                out.push_back(s.substr(words[j].first, words[j].second - words[j].first));
        }
        return out;
    }
    if (sep->kind != Value::Str) arg_fail(a, "split(): separator must be a string, got " + type_name(*sep));
    const std::string& d = sep->s;
    if (d.empty()) arg_fail(a, "split(): empty separator");
    if (!from_right) {
        std::size_t k = 0;
        std::int64_t n = 0;
        for (;;) {
            std::size_t f = (maxsplit >= 0 && n >= maxsplit) ? std::string::npos : s.find(d, k);
            if (f == std::string::npos) {
                out.push_back(s.substr(k));
                return out;
            }
            out.push_back(s.substr(k, f - k));
            k = f + d.size();
            ++n;
        }
    }
    std::size_t end = s.size();
    std::int64_t n = 0;
    for (;;) {
        std::size_t f =
            (maxsplit >= 0 && n >= maxsplit) || end < d.size() ? std::string::npos : s.rfind(d, end - d.size());
        if (f == std::string::npos) {
            out.insert(out.begin(), s.substr(0, end));
            return out;
        }
        out.insert(out.begin(), s.substr(f + d.size(), end - f - d.size()));
        end = f;
        ++n;
    }
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, std::int64_t count) {
    std::string out;
    if (old.empty()) {
        auto cps = decode_utf8(s);
        std::int64_t n = 0;
        for (auto cp : cps) {
            if (count < 0 || n < count) {
                out += rep;
                ++n;
            }
            out += encode_utf8({cp});
        }
        if (count < 0 || n < count) out += rep;
        return out;
    }
    std::size_t k = 0;
    std::int64_t n = 0;
    for (;;) {
        std::size_t f = (count >= 0 && n >= count) ? std::string::npos : s.find(old, k);
        if (f == std::string::npos) break;
        out += s.substr(k, f - k) + rep;
        k = f + old.size();
        ++n;
    }
    return out + s.substr(k);
}

std::vector<std::string> splitlines(const std::string& s) {
    std::vector<std::string> out;
    auto cps = decode_utf8(s);
    std::vector<std::uint32_t> line;
    for (std::size_t k = 0; k < cps.size(); ++k) {
        std::uint32_t c = cps[k];
        bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                   c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) {
            line.push_back(c);
            continue;
        }
        if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') ++k;
        out.push_back(encode_utf8(line));
        line.clear();
    }
    if (!line.empty()) out.push_back(encode_utf8(line));
    return out;
}

namespace {

std::int64_t int_arg(const CallArgs& a, const Value* v, const char* what, std::int64_t def) {
    if (!v || v->kind == Value::None) return def;
    if (v->kind == Value::Int) return v->i;
    if (v->kind == Value::Bool) return v->b;
    arg_fail(a, std::string(what) + ": expected an integer, got " + type_name(*v));
}
const std::string& str_arg(const CallArgs& a, const Value* v, const char* what) {
    if (!v || v->kind != Value::Str)
        arg_fail(a, std::string(what) + ": expected a string, got " + (v ? type_name(*v) : std::string("nothing")));
    return v->s;
}

Value bound(const std::string& name, std::function<Value(CallArgs&)> fn) {
    return Value::function(name, std::move(fn));
}

Value unsafe_method(const std::string& type, const std::string& name) {
    return bound(name, [type, name](CallArgs& a) -> Value {
        arg_fail(a, "access to attribute '" + name + "' of '" + type + "' object is unsafe (the sandbox is immutable)");
    });
}

Value str_method(const Value& self, const std::string& name) {
    const std::string s = self.s;
    if (name == "startswith" || name == "endswith") {
        bool starts = name == "startswith";
        return bound(name, [s, starts, name](CallArgs& a) {
            a.check(name.c_str(), {"prefix"});
            const Value* p = a.get(0, "prefix");
            if (!p) arg_fail(a, name + "() takes at least 1 argument");
            auto one = [&](const std::string& x) {
                return x.size() <= s.size() &&
                       (starts ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
            };
            if (p->kind == Value::List && p->is_tuple) {
                for (const auto& x : *p->list)
                    if (one(str_arg(a, &x, name.c_str()))) return Value::boolean(true);
                return Value::boolean(false);
            }
            return Value::boolean(one(str_arg(a, p, name.c_str())));
        });
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
        bool l = name != "rstrip", r = name != "lstrip";
        return bound(name, [s, l, r, name](CallArgs& a) {
            a.check(name.c_str(), {"chars"});
            const Value* c = a.get(0, "chars");
            if (c && c->kind == Value::None) c = nullptr;
            return Value::str(py_strip(s, c ? &str_arg(a, c, name.c_str()) : nullptr, l, r));
        });
    }
    if (name == "split" || name == "rsplit") {
        bool right = name == "rsplit";
        return bound(name, [s, right, name](CallArgs& a) {
            a.check(name.c_str(), {"sep", "maxsplit"});
            ValueList parts;
            for (auto& p : py_split(a, s, a.get(0, "sep"), int_arg(a, a.get(1, "maxsplit"), "maxsplit", -1), right))
                parts.push_back(Value::str(std::move(p)));
            return Value::new_list(std::move(parts));
        });
    }
    if (name == "replace") {
        return bound(name, [s](CallArgs& a) {
            a.check("replace", {"old", "new", "count"});
            return Value::str(py_replace(s, str_arg(a, a.get(0, "old"), "replace"),
                                         str_arg(a, a.get(1, "new"), "replace"),
                                         int_arg(a, a.get(2, "count"), "count", -1)));
        });
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "splitlines" ||
        name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
        name == "isupper") {
        return bound(name, [s, name](CallArgs& a) -> Value {
            a.check(name.c_str(), {});
            if (name == "upper") return Value::str(ascii_upper(s));
            if (name == "lower") return Value::str(ascii_lower(s));
            if (name == "title") return Value::str(py_title(s));
            if (name == "capitalize") return Value::str(capitalize_str(s));
            if (name == "splitlines") {
                ValueList parts;
                for (auto& p : splitlines(s)) parts.push_back(Value::str(std::move(p)));
                return Value::new_list(std::move(parts));
            }
            bool any = false, all = !s.empty(), cased = false;
            for (char ch : s) {
                auto c = static_cast<unsigned char>(ch);
                bool ok = name == "isdigit"   ? std::isdigit(c) != 0
                          : name == "isalpha" ? std::isalpha(c) != 0
                          : name == "isalnum" ? std::isalnum(c) != 0
                          : name == "isspace" ? is_py_space(c)
                          : name == "islower" ? !std::isupper(c)
                                              : !std::islower(c);
                cased = cased || std::isalpha(c);
                all = all && ok;
                any = true;
            }
            if (name == "islower" || name == "isupper") return Value::boolean(any && all && cased);
            return Value::boolean(all);
        });
    }
    if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
        return bound(name, [s, name](CallArgs& a) -> Value {
            a.check(name.c_str(), {"sub"});
            const std::string& sub = str_arg(a, a.get(0, "sub"), name.c_str());
            if (name == "count") {
                if (sub.empty()) return Value::integer(length(Value::str(s), a.line, a.col) + 1);
                std::int64_t n = 0;
                for (std::size_t k = s.find(sub); k != std::string::npos; k = s.find(sub, k + sub.size())) ++n;
                return Value::integer(n);
            }
            std::size_t f = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
            if (f == std::string::npos) {
                if (name == "index" || name == "rindex") arg_fail(a, "substring not found");
                return Value::integer(-1);
            }
            return Value::integer(length(Value::str(s.substr(0, f)), a.line, a.col));
        });
    }
    if (name == "join") {
        return bound(name, [s](CallArgs& a) {
            a.check("join", {"iterable"});
            const Value* it = a.get(0, "iterable");
            if (!it) arg_fail(a, "join() takes exactly one argument");
            std::string out;
            bool first = true;
            for (const auto& x : iterate(*it, a.line, a.col)) {
                if (!first) out += s;
                first = false;
                out += str_arg(a, &x, "join");
            }
            return Value::str(out);
        });
    }
    return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name) {
    auto d = self.dict;
    if (name == "items" || name == "keys" || name == "values") {
        return bound(name, [d, name](CallArgs& a) {
            a.check(name.c_str(), {});
            ValueList out;
            for (const auto& kv : d->items) {
                if (name == "items") out.push_back(Value::new_list({Value::str(kv.first), kv.second}, true));
                else out.push_back(name == "keys" ? Value::str(kv.first) : kv.second);
            }
            return Value::new_list(std::move(out));
        });
    }
    if (name == "get") {
        return bound(name, [d](CallArgs& a) {
            a.check("get", {"key", "default"});
            const Value* k = a.get(0, "key");
            if (!k) arg_fail(a, "get expected at least 1 argument");
            const Value* def = a.get(1, "default");
            const Value* found = k->kind == Value::Str ? d->find(k->s) : nullptr;
            return found ? *found : def ? *def : Value::none();
        });
    }
    static const std::set<std::string> mutating = {"pop", "popitem", "update", "setdefault", "clear"};
    if (mutating.count(name)) return unsafe_method("dict", name);
    return Value::undefined();
}

}  // namespace

bool is_known_filter(const std::string& name) { return kFilters.count(name) != 0; }
bool is_known_test(const std::string& name) { return kTests.count(name) != 0; }

Value get_attr(const Value& obj, const std::string& name, int line, int col) {
    switch (obj.kind) {
        case Value::Undefined:
            fail(line, col, obj.s.empty() ? "undefined value has no attribute '" + name + "'" : obj.s);
        case Value::DictK: {
            if (obj.is_namespace) {
                const Value* v = obj.dict->find(name);
                return v ? *v : Value::undefined("'Namespace' object has no attribute '" + name + "'");
            }
            Value m = dict_method(obj, name);
            if (!m.is_undefined()) return m;
            const Value* v = obj.dict->find(name);
            return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
        }
        case Value::Str: return str_method(obj, name);
        case Value::List: {
            static const std::set<std::string> mutating = {"append", "pop",  "extend",  "insert",
                                                           "remove", "sort", "reverse", "clear"};
            if (mutating.count(name)) return unsafe_method(type_name(obj), name);
            if (name == "index" || name == "count") {
                auto l = obj.list;
                bool count = name == "count";
                return bound(name, [l, count](CallArgs& a) {
                    a.check(count ? "count" : "index", {"value"});
                    const Value* x = a.get(0, "value");
                    if (!x) arg_fail(a, "missing argument");
                    std::int64_t n = 0;
                    for (std::size_t k = 0; k < l->size(); ++k) {
                        if (!equal((*l)[k], *x)) continue;
                        if (!count) return Value::integer(static_cast<std::int64_t>(k));
                        ++n;
                    }
                    if (!count) arg_fail(a, repr(*x) + " is not in list");
                    return Value::integer(n);
                });
            }
            return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
        }
        default: return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
    }
}

Value get_item(const Value& obj, const Value& key, int line, int col) {
    if (obj.is_undefined()) fail(line, col, obj.s.empty() ? "undefined value is not subscriptable" : obj.s);
    if (obj.is_iter) return Value::undefined("'generator object' has no element " + repr(key));
    if ((obj.kind == Value::List || obj.kind == Value::Str) && (key.kind == Value::Int || key.kind == Value::Bool)) {
        std::int64_t idx = key.kind == Value::Bool ? key.b : key.i;
        if (obj.kind == Value::List) {
            auto n = static_cast<std::int64_t>(obj.list->size());
            if (idx < 0) idx += n;
            if (idx >= 0 && idx < n) return (*obj.list)[static_cast<std::size_t>(idx)];
        } else {
            auto cps = decode_utf8(obj.s);
            auto n = static_cast<std::int64_t>(cps.size());
            if (idx < 0) idx += n;
            if (idx >= 0 && idx < n) return Value::str(encode_utf8({cps[static_cast<std::size_t>(idx)]}));
        }
        return Value::undefined("'" + type_name(obj) + " object' has no element " + to_str(key));
    }
    if (obj.kind == Value::DictK && !obj.is_namespace && key.kind == Value::Str) {
        const Value* v = obj.dict->find(key.s);
        if (v) return *v;
    }
    if (key.kind == Value::Str) {
        Value v = get_attr(obj, key.s, line, col);
        if (v.is_undefined() && obj.kind == Value::DictK)
            return Value::undefined("'dict object' has no attribute '" + key.s + "'");
        return v;
    }
    return Value::undefined("'" + type_name(obj) + " object' has no element " + repr(key));
}

Value call_value(const Value& callee, CallArgs& args) {
    if (callee.kind == Value::Func) return callee.fn->call(args);
    if (callee.is_undefined())
        fail(args.line, args.col, callee.s.empty() ? "undefined value is not callable" : callee.s);
    fail(args.line, args.col, "'" + type_name(callee) + "' object is not callable");
}

namespace {

constexpr std::int64_t kMaxRange = 100000;  // range() items, as the sandbox allows

std::string one_line(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else out += c;
    }
    return out;
}

}  // namespace

// The globals transformers gives a chat template: range (at most 100000 items, like the
// sandbox), dict, namespace, raise_exception, strftime_now.
std::unordered_map<std::string, Value> template_globals() {
    std::unordered_map<std::string, Value> g;
    g["range"] = Value::function("range", [](CallArgs& a) {
        if (a.pos.empty() || a.pos.size() > 3 || !a.kw.empty()) arg_fail(a, "range expects 1 to 3 integer arguments");
        std::int64_t v[3] = {0, 0, 1};
        for (std::size_t k = 0; k < a.pos.size(); ++k) {
            if (a.pos[k].kind != Value::Int && a.pos[k].kind != Value::Bool)
                arg_fail(a, "range: arguments must be integers");
            v[k] = a.pos[k].kind == Value::Bool ? a.pos[k].b : a.pos[k].i;
        }
        std::int64_t start = a.pos.size() == 1 ? 0 : v[0], stop = a.pos.size() == 1 ? v[0] : v[1],
                     step = a.pos.size() == 3 ? v[2] : 1;
        if (step == 0) arg_fail(a, "range() arg 3 must not be zero");
        ValueList out;
        for (std::int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
            if (static_cast<std::int64_t>(out.size()) >= kMaxRange)
                arg_fail(a, "range too big: the sandbox blocks ranges larger than 100000");
            out.push_back(Value::integer(k));
        }
        return Value::new_list(std::move(out));
    });
    auto make_dict = [](CallArgs& a, bool ns) {
        Value d = Value::new_dict();
        d.is_namespace = ns;
        if (a.pos.size() > 1) arg_fail(a, "expected at most 1 positional argument");
        if (!a.pos.empty()) {
            if (a.pos[0].kind != Value::DictK) arg_fail(a, "expected a mapping, got " + type_name(a.pos[0]));
            for (const auto& kv : a.pos[0].dict->items) d.dict->set(kv.first, kv.second);
        }
        for (const auto& kv : a.kw) d.dict->set(kv.first, kv.second);
        return d;
    };
    g["namespace"] = Value::function("namespace", [make_dict](CallArgs& a) { return make_dict(a, true); });
    g["dict"] = Value::function("dict", [make_dict](CallArgs& a) { return make_dict(a, false); });
    g["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
        const Value* m = a.get(0, "message");
        arg_fail(a, "raise_exception: " + one_line(m ? to_str(*m) : std::string()));
    });
    g["strftime_now"] = Value::function("strftime_now", [](CallArgs& a) {
        const Value* f = a.get(0, "format");
        if (!f || f->kind != Value::Str) arg_fail(a, "strftime_now expects a format string");
        std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[512];
        std::size_t n = std::strftime(buf, sizeof buf, f->s.c_str(), &tm);
        return Value::str(std::string(buf, n));
    });
    return g;
}

}  // namespace tagflow::text::jinja
