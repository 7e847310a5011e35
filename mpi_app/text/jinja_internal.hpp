// SPDX-License-Identifier: Apache-2.0
// jinja_internal: the pieces shared by the Jinja interpreter's files (not a public header):
// the value model (Python's None/bool/int/float/str/list/dict as Jinja sees them, plus
// Undefined, namespace() and callables), the lexer tokens, the syntax tree, and the error
// helper that formats "chat template: line L:C: what".
//
// Values copy by value except lists and dicts, which share their storage (Python reference
// semantics: a namespace assigned in a loop is seen after it). Dict keys are strings only
// (JSON objects, namespace() and dict literals with string keys), kept in insertion order.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/jinja.hpp"

namespace tagflow::text::jinja {

using tagflow::text::TemplateError;

struct Value;
struct Dict;
struct Function;
struct CallArgs;
class Interp;
using ValueList = std::vector<Value>;

struct Value {
    enum Kind : std::uint8_t { Undefined, None, Bool, Int, Float, Str, List, DictK, Func };
    Kind kind = Undefined;
    bool is_tuple = false;      // a List made by a tuple literal or items(): prints as (a, b)
    bool is_namespace = false;  // a DictK made by namespace(): `set ns.x = ...` allowed
    bool is_iter = false;       // a List standing for a Python generator (map, select, ...):
                                // always true, no len(), no [i], not JSON (see jinja_filters.cpp)
    bool b = false;
    std::int64_t i = 0;
    double f = 0.0;
    std::string s;  // Str: the text; Undefined: the name that was looked up (for errors)
    std::shared_ptr<ValueList> list;
    std::shared_ptr<Dict> dict;
    std::shared_ptr<Function> fn;

    static Value undefined(std::string name = {}) {
        Value v;
        v.s = std::move(name);
        return v;
    }
    static Value none() { return make(None); }
    static Value boolean(bool x) {
        Value v = make(Bool);
        v.b = x;
        return v;
    }
    static Value integer(std::int64_t x) {
        Value v = make(Int);
        v.i = x;
        return v;
    }
    static Value real(double x) {
        Value v = make(Float);
        v.f = x;
        return v;
    }
    static Value str(std::string x) {
        Value v = make(Str);
        v.s = std::move(x);
        return v;
    }
    static Value new_list(ValueList items = {}, bool tuple = false) {
        Value v = make(List);
        v.list = std::make_shared<ValueList>(std::move(items));
        v.is_tuple = tuple;
        return v;
    }
    static Value new_iter(ValueList items) {
        Value v = new_list(std::move(items));
        v.is_iter = true;
        return v;
    }
    static Value new_dict();
    static Value function(std::string name, std::function<Value(CallArgs&)> call);

    bool is_undefined() const { return kind == Undefined; }
    bool is_number() const { return kind == Int || kind == Float || kind == Bool; }
    bool is_str() const { return kind == Str; }
    bool is_list() const { return kind == List; }
    bool is_dict() const { return kind == DictK; }

private:
    static Value make(Kind k) {
        Value v;
        v.kind = k;
        return v;
    }
};

struct Dict {
    std::vector<std::pair<std::string, Value>> items;
    const Value* find(const std::string& key) const {
        for (const auto& kv : items)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
    void set(const std::string& key, Value v) {
        for (auto& kv : items)
            if (kv.first == key) {
                kv.second = std::move(v);
                return;
            }
        items.emplace_back(key, std::move(v));
    }
};

/// Arguments of a call: positional then keyword, as written.
struct CallArgs {
    ValueList pos;
    std::vector<std::pair<std::string, Value>> kw;
    Interp* interp = nullptr;
    int line = 0, col = 0;
    /// The argument `name` (keyword) or position `index`; nullptr when absent.
    const Value* get(std::size_t index, const char* name) const;
    /// Throws unless every argument is one of `names` (positions map to names in order).
    void check(const char* what, std::initializer_list<const char*> names) const;
};

struct Function {
    std::string name;
    std::function<Value(CallArgs&)> call;
};

inline Value Value::new_dict() {
    Value v = make(DictK);
    v.dict = std::make_shared<Dict>();
    return v;
}
inline Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
    Value v = make(Func);
    v.fn = std::make_shared<Function>(Function{std::move(name), std::move(call)});
    return v;
}

// ---- value operations (jinja_value.cpp) ----
[[noreturn]] void fail(int line, int col, const std::string& what);
bool truthy(const Value& v);
std::string to_str(const Value& v);     // Python str()
std::string repr(const Value& v);       // Python repr()
std::string type_name(const Value& v);  // Python type name, for messages
std::string float_repr(double x);
bool equal(const Value& a, const Value& b);
/// a < b as Python orders them; throws TemplateError (line:col) on unorderable types.
bool less(const Value& a, const Value& b, int line, int col);
/// Python json.dumps(v, ensure_ascii=False, indent, separators, sort_keys).
std::string to_json(const Value& v, int indent, const std::string& indent_str, bool use_indent,
                    const std::string& item_sep, const std::string& key_sep, bool sort_keys, int line, int col);
/// Elements a `for` loop visits (list items, dict keys, string characters); throws if not iterable.
ValueList iterate(const Value& v, int line, int col);
std::int64_t length(const Value& v, int line, int col);
/// Unicode-aware pieces of Python's str methods (UTF-8 in, UTF-8 out).
std::vector<std::uint32_t> decode_utf8(const std::string& s);
std::string encode_utf8(const std::vector<std::uint32_t>& cps);
bool is_py_space(std::uint32_t c);
/// Bytes of the Python-whitespace code point starting at s[k] (0 when it is not whitespace).
std::size_t space_len_at(const std::string& s, std::size_t k);
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);

// ---- lexer (jinja_lex.cpp) / parser (jinja_parse.cpp) ----
enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, Str, Int, Float, Op, Eof };

struct Token {
    Tok type;
    std::string text;
    int line, col;
    std::int64_t ival = 0;
    double fval = 0;
};

/// The tokens of a template: data, tag delimiters, and the names/literals/operators inside tags.
std::vector<Token> lex_template(const std::string& source);

struct Expr;
struct Stmt;
using ExprP = std::unique_ptr<Expr>;
using StmtP = std::unique_ptr<Stmt>;
using Body = std::vector<StmtP>;

struct Expr {
    Expr() = default;
    Expr(const Expr&) = delete;
    Expr& operator=(const Expr&) = delete;
    ~Expr();  // iterative: a left-deep chain of 100k operators must not overflow the stack
    enum Kind {
        Const,
        Name,
        ListLit,
        TupleLit,
        DictLit,
        Attr,
        Item,
        Slice,
        Call,
        Filter,
        Test,
        Not,
        Neg,
        Pos,
        Binary,
        Compare,
        And,
        Or,
        Cond,
        Concat
    };
    Kind kind = Const;
    int line = 0, col = 0;
    Value value;              // Const
    std::string name;         // Name, Attr, Filter/Test name, Binary operator
    std::vector<ExprP> args;  // operands / elements / positional call args (Filter/Test: args[0] is the subject)
    std::vector<std::pair<std::string, ExprP>> kwargs;  // call keyword arguments; DictLit: key exprs in args
    std::vector<std::string> ops;                       // Compare: the operators between args
    bool negated = false;                               // Test: `is not`
};

struct Stmt {
    enum Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Scope };
    Kind kind = Text;
    int line = 0, col = 0;
    std::string text;                                   // Text: the data; Macro / Set / SetBlock: the name
    ExprP expr;                                         // Output / Set value / For iterable
    ExprP cond;                                         // For: the `if` filter
    std::vector<std::string> targets;                   // For / Set names; Set on an attribute: {object, attribute}
    bool attr_target = false;                           // Set: `ns.attr = ...`
    std::vector<std::pair<ExprP, Body>> branches;       // If: (condition, body), else has null condition
    Body body, else_body;                               // For / Macro / SetBlock / Scope
    std::vector<std::pair<std::string, ExprP>> params;  // Macro parameters (default or null)
};

/// Parses a template; throws TemplateError with line:column on a syntax error or an unsupported construct.
Body parse_template(const std::string& source);

// ---- built-ins (jinja_builtins.cpp) ----
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
Value apply_filter(const std::string& name, Value subject, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
/// obj.name as Jinja's sandbox resolves it: str/list/dict methods first, then the item.
Value get_attr(const Value& obj, const std::string& name, int line, int col);
/// obj[key] (with the attribute fallback Jinja applies for string keys).
Value get_item(const Value& obj, const Value& key, int line, int col);
Value call_value(const Value& callee, CallArgs& args);
/// The globals a template starts with (transformers': range, dict, namespace, raise_exception, strftime_now).
std::unordered_map<std::string, Value> template_globals();
[[noreturn]] void arg_fail(const CallArgs& a, const std::string& what);
std::string ascii_upper(std::string s);
std::string ascii_lower(std::string s);
std::string capitalize_str(const std::string& s);
std::string py_title(const std::string& s);
std::string jinja_title(const std::string& s);
std::vector<std::string> py_split(const CallArgs& a, const std::string& s, const Value* sep, std::int64_t maxsplit,
                                  bool from_right);
std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, std::int64_t count);
std::vector<std::string> splitlines(const std::string& s);

}  // namespace tagflow::text::jinja
