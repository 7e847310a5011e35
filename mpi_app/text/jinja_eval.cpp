// SPDX-License-Identifier: Apache-2.0
// jinja_eval: runs a parsed template. Scoping is Jinja's: `set` writes the innermost frame;
// each for-loop iteration and each macro call get a fresh frame (a macro sees the template's
// top level, not its caller's locals); `if` has no scope; namespace() objects are shared, so
// `set ns.x` inside a loop is seen after it. The globals (transformers': range, dict, namespace,
// raise_exception, strftime_now) are jinja_builtins.cpp's template_globals().
// Does NOT support recursive loops, call blocks, loop.changed, or macros with *args/**kwargs;
// expression evaluation stops at 1000 nested levels, macro calls at 100, strings and output at
// 256 MiB, a render at 5 million steps (one-line errors).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "text/jinja_internal.hpp"

namespace tagflow::text::jinja {

Expr::~Expr() {
    std::vector<ExprP> stack;
    auto take = [&stack](Expr& e) {
        for (auto& a : e.args)
            if (a) stack.push_back(std::move(a));
        for (auto& kv : e.kwargs)
            if (kv.second) stack.push_back(std::move(kv.second));
    };
    take(*this);
    while (!stack.empty()) {
        ExprP e = std::move(stack.back());
        stack.pop_back();
        take(*e);
    }
}

namespace {

constexpr int kMaxEvalDepth = 1000;
constexpr int kMaxMacroDepth = 100;
// Work budget of one render: one step per expression evaluated or loop item, plus one per 64
// bytes of every string produced. Conversations stay well inside it (a 10 MB message through
// ChatML renders, Hostile.chat.messages); a loop nest or a quadratic string build that would run
// for hours (also in Jinja2) stops after a few seconds (Hostile.chat.nesting).
constexpr std::uint64_t kMaxSteps = 5'000'000;
constexpr std::size_t kMaxString = std::size_t{256} << 20;  // 256 MiB: no prompt is near it

Value from_json(const nlohmann::ordered_json& j, int depth) {
    if (depth > 512) throw TemplateError("chat template: input value nested more than 512 levels");
    switch (j.type()) {
        case nlohmann::ordered_json::value_t::null: return Value::none();
        case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<std::int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
            auto u = j.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value::real(static_cast<double>(u));
            return Value::integer(static_cast<std::int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
        case nlohmann::ordered_json::value_t::string: return Value::str(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
            ValueList items;
            items.reserve(j.size());
            for (const auto& x : j) items.push_back(from_json(x, depth + 1));
            return Value::new_list(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
            Value d = Value::new_dict();
            for (auto it = j.begin(); it != j.end(); ++it) d.dict->set(it.key(), from_json(it.value(), depth + 1));
            return d;
        }
        default: throw TemplateError("chat template: unsupported JSON value (binary)");
    }
}

}  // namespace

class Interp {
public:
    enum class Flow { Normal, Break, Continue };
    using Frame = std::unordered_map<std::string, Value>;

    std::vector<Frame> frames;
    std::string out;
    int depth = 0;
    int macro_depth = 0;
    std::uint64_t steps = 0;

    void charge(std::uint64_t n, int line, int col) {
        steps += n;
        if (steps > kMaxSteps)
            fail(line, col, "render stopped after 5000000 steps (a loop that does not end in reasonable time)");
    }

    Value lookup(const std::string& name) const {
        for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
            auto f = it->find(name);
            if (f != it->end()) return f->second;
        }
        return Value::undefined("'" + name + "' is undefined");
    }

    Flow exec(const Body& body) {
        for (const auto& s : body) {
            Flow f = exec(*s);
            if (f != Flow::Normal) return f;
        }
        return Flow::Normal;
    }

    Flow exec(const Stmt& s) {
        switch (s.kind) {
            case Stmt::Text: out += s.text; break;
            case Stmt::Output: {
                Value v = eval(*s.expr);
                out += to_str(v);
                if (out.size() > kMaxString) fail(s.line, s.col, "rendered output larger than 256 MiB");
                break;
            }
            case Stmt::If:
                for (const auto& br : s.branches)
                    if (!br.first || truthy(eval(*br.first))) return exec(br.second);
                break;
            case Stmt::For: return exec_for(s);
            case Stmt::Set: {
                Value v = eval(*s.expr);
                if (s.attr_target) {
                    Value ns = lookup(s.targets[0]);
                    if (ns.kind != Value::DictK || !ns.is_namespace)
                        fail(s.line, s.col, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
                    ns.dict->set(s.targets[1], std::move(v));
                } else {
                    assign(s.targets, std::move(v), s.line, s.col);
                }
                break;
            }
            case Stmt::SetBlock: {
                std::string saved = std::move(out);
                out.clear();
                exec(s.body);
                frames.back()[s.targets[0]] = Value::str(std::move(out));
                out = std::move(saved);
                break;
            }
            case Stmt::Macro: frames.back()[s.text] = make_macro(s); break;
            case Stmt::Break: return Flow::Break;
            case Stmt::Continue: return Flow::Continue;
            case Stmt::Scope: {
                frames.emplace_back();
                Flow f = exec(s.body);
                frames.pop_back();
                return f;
            }
        }
        return Flow::Normal;
    }

    void assign(const std::vector<std::string>& targets, Value v, int line, int col) {
        if (targets.size() == 1) {
            frames.back()[targets[0]] = std::move(v);
            return;
        }
        ValueList items = v.kind == Value::List ? *v.list : iterate(v, line, col);
        if (items.size() != targets.size())
            fail(line, col,
                 std::string(items.size() > targets.size() ? "too many" : "not enough") +
                     " values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                     std::to_string(items.size()) + ")");
        for (std::size_t k = 0; k < targets.size(); ++k) frames.back()[targets[k]] = items[k];
    }

    Flow exec_for(const Stmt& s) {
        Value iterable = eval(*s.expr);
        ValueList items = iterate(iterable, s.expr->line, s.expr->col);
        if (s.cond) {
            ValueList kept;
            for (auto& it : items) {
                frames.emplace_back();
                assign(s.targets, it, s.line, s.col);
                bool keep = truthy(eval(*s.cond));
                frames.pop_back();
                if (keep) kept.push_back(it);
            }
            items = std::move(kept);
        }
        if (items.empty()) {
            frames.emplace_back();
            exec(s.else_body);
            frames.pop_back();
            return Flow::Normal;
        }
        auto n = static_cast<std::int64_t>(items.size());
        charge(static_cast<std::uint64_t>(n), s.line, s.col);
        // One loop object, updated in place each iteration (Jinja's LoopContext is one object too).
        Value loop = Value::new_dict();
        auto pos = std::make_shared<std::int64_t>(0);
        for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length", "depth",
                                "depth0", "previtem", "nextitem"})
            loop.dict->items.emplace_back(key, Value());
        loop.dict->items.emplace_back("cycle", Value::function("cycle", [pos](CallArgs& a) {
                                          if (a.pos.empty()) arg_fail(a, "no items for cycling given");
                                          return a.pos[static_cast<std::size_t>(*pos) % a.pos.size()];
                                      }));
        auto& slot = loop.dict->items;
        frames.emplace_back();
        for (std::int64_t k = 0; k < n; ++k) {
            *pos = k;
            slot[0].second = Value::integer(k + 1);
            slot[1].second = Value::integer(k);
            slot[2].second = Value::integer(n - k);
            slot[3].second = Value::integer(n - k - 1);
            slot[4].second = Value::boolean(k == 0);
            slot[5].second = Value::boolean(k == n - 1);
            slot[6].second = Value::integer(n);
            slot[7].second = Value::integer(1);
            slot[8].second = Value::integer(0);
            slot[9].second =
                k > 0 ? items[static_cast<std::size_t>(k - 1)] : Value::undefined("there is no previous item");
            slot[10].second =
                k + 1 < n ? items[static_cast<std::size_t>(k + 1)] : Value::undefined("there is no next item");
            Frame& frame = frames.back();
            frame.clear();  // each iteration starts from the enclosing scope
            frame["loop"] = loop;
            assign(s.targets, items[static_cast<std::size_t>(k)], s.line, s.col);
            if (exec(s.body) == Flow::Break) break;
        }
        frames.pop_back();
        return Flow::Normal;
    }

    Value make_macro(const Stmt& s) {
        const Stmt* m = &s;
        return Value::function(s.text, [m](CallArgs& a) {
            Interp& in = *a.interp;
            if (++in.macro_depth > kMaxMacroDepth) arg_fail(a, "macro calls nested more than 100 levels");
            if (a.pos.size() > m->params.size())
                arg_fail(a, "macro '" + m->text + "' takes not more than " + std::to_string(m->params.size()) +
                                " argument(s)");
            std::vector<Frame> saved = std::move(in.frames);
            in.frames.clear();
            in.frames.push_back(saved.front());
            in.frames.emplace_back();
            for (const auto& kv : a.kw) {
                bool ok = false;
                for (const auto& p : m->params) ok = ok || p.first == kv.first;
                if (!ok) arg_fail(a, "macro '" + m->text + "' takes no keyword argument '" + kv.first + "'");
            }
            for (std::size_t k = 0; k < m->params.size(); ++k) {
                const auto& p = m->params[k];
                const Value* given = a.get(k, p.first.c_str());
                in.frames.back()[p.first] = given ? *given
                                            : p.second
                                                ? in.eval(*p.second)
                                                : Value::undefined("parameter '" + p.first + "' was not provided");
            }
            std::string saved_out = std::move(in.out);
            in.out.clear();
            in.exec(m->body);
            Value result = Value::str(std::move(in.out));
            in.out = std::move(saved_out);
            in.frames = std::move(saved);
            --in.macro_depth;
            return result;
        });
    }

    CallArgs eval_args(const Expr& e, std::size_t first) {
        CallArgs a;
        a.interp = this;
        a.line = e.line;
        a.col = e.col;
        for (std::size_t k = first; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k]));
        for (const auto& kv : e.kwargs) a.kw.emplace_back(kv.first, eval(*kv.second));
        return a;
    }

    struct DepthGuard {
        Interp& in;
        const Expr& e;
        DepthGuard(Interp& interp, const Expr& expr) : in(interp), e(expr) {
            if (++in.depth > kMaxEvalDepth) fail(e.line, e.col, "expression nested more than 1000 levels");
        }
        ~DepthGuard() { --in.depth; }
    };

    Value eval(const Expr& e) {
        DepthGuard g(*this, e);
        charge(1, e.line, e.col);
        Value v = eval_node(e);
        if (v.kind == Value::Str && v.s.size() >= 64) charge(v.s.size() / 64, e.line, e.col);
        return v;
    }

    Value eval_node(const Expr& e) {
        switch (e.kind) {
            case Expr::Const: return e.value;
            case Expr::Name: return lookup(e.name);
            case Expr::ListLit:
            case Expr::TupleLit: {
                ValueList items;
                for (const auto& x : e.args) items.push_back(eval(*x));
                return Value::new_list(std::move(items), e.kind == Expr::TupleLit);
            }
            case Expr::DictLit: {
                Value d = Value::new_dict();
                for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
                    Value key = eval(*e.args[k]);
                    if (key.kind != Value::Str)
                        fail(e.args[k]->line, e.args[k]->col, "unsupported: non-string dict key");
                    d.dict->set(key.s, eval(*e.args[k + 1]));
                }
                return d;
            }
            case Expr::Attr: return get_attr(eval(*e.args[0]), e.name, e.line, e.col);
            case Expr::Item: return get_item(eval(*e.args[0]), eval(*e.args[1]), e.line, e.col);
            case Expr::Slice: return slice(e);
            case Expr::Call: {
                Value callee = eval(*e.args[0]);
                CallArgs a = eval_args(e, 1);
                return call_value(callee, a);
            }
            case Expr::Filter: {
                Value subject = eval(*e.args[0]);
                CallArgs a = eval_args(e, 1);
                return apply_filter(e.name, std::move(subject), a);
            }
            case Expr::Test: {
                Value subject = eval(*e.args[0]);
                CallArgs a = eval_args(e, 1);
                return Value::boolean(apply_test(e.name, subject, a) != e.negated);
            }
            case Expr::Not: return Value::boolean(!truthy(eval(*e.args[0])));
            case Expr::Neg:
            case Expr::Pos: {
                Value v = eval(*e.args[0]);
                if (v.is_undefined()) fail(e.line, e.col, v.s);
                if (!v.is_number())
                    fail(e.line, e.col,
                         "bad operand type for unary " + std::string(e.kind == Expr::Neg ? "-" : "+") + ": '" +
                             type_name(v) + "'");
                if (v.kind == Value::Bool) v = Value::integer(v.b);
                if (e.kind == Expr::Pos) return v;
                if (v.kind == Value::Float) return Value::real(-v.f);
                if (v.i == INT64_MIN) fail(e.line, e.col, "integer overflow");
                return Value::integer(-v.i);
            }
            case Expr::And: {
                Value l = eval(*e.args[0]);
                return truthy(l) ? eval(*e.args[1]) : l;
            }
            case Expr::Or: {
                Value l = eval(*e.args[0]);
                return truthy(l) ? l : eval(*e.args[1]);
            }
            case Expr::Cond:
                if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
                return e.args[2] ? eval(*e.args[2])
                                 : Value::undefined(
                                       "the inline if-expression evaluated to false and no else section was defined.");
            case Expr::Concat: {
                std::string s;
                for (const auto& x : e.args) s += to_str(eval(*x));
                return Value::str(std::move(s));
            }
            case Expr::Compare: return compare(e);
            case Expr::Binary: return binary(e.name, eval(*e.args[0]), eval(*e.args[1]), e.line, e.col);
        }
        fail(e.line, e.col, "internal error: unknown expression");
    }

    Value compare(const Expr& e) {
        Value left = eval(*e.args[0]);
        for (std::size_t k = 0; k < e.ops.size(); ++k) {
            Value right = eval(*e.args[k + 1]);
            const std::string& op = e.ops[k];
            bool r;
            if (op == "==") {
                r = equal(left, right);
            } else if (op == "!=") {
                r = !equal(left, right);
            } else if (op == "<") {
                r = less(left, right, e.line, e.col);
            } else if (op == ">") {
                r = less(right, left, e.line, e.col);
            } else if (op == "<=") {
                r = less(left, right, e.line, e.col) || equal(left, right);
            } else if (op == ">=") {
                r = less(right, left, e.line, e.col) || equal(left, right);
            } else {
                r = contains(right, left, e.line, e.col);
                if (op == "not in") r = !r;
            }
            if (!r) return Value::boolean(false);
            left = std::move(right);
        }
        return Value::boolean(true);
    }

    static bool contains(const Value& container, const Value& item, int line, int col) {
        switch (container.kind) {
            case Value::Str:
                if (item.kind != Value::Str)
                    fail(line, col, "'in <string>' requires string as left operand, not " + type_name(item));
                return container.s.find(item.s) != std::string::npos;
            case Value::List:
                for (const auto& x : *container.list)
                    if (equal(x, item)) return true;
                return false;
            case Value::DictK:
                if (container.is_namespace) break;
                return item.kind == Value::Str && container.dict->find(item.s) != nullptr;
            case Value::Undefined: return false;
            default: break;
        }
        fail(line, col, "argument of type '" + type_name(container) + "' is not iterable");
    }

    static Value binary(const std::string& op, const Value& a, const Value& b, int line, int col) {
        if (a.is_undefined()) fail(line, col, a.s.empty() ? "undefined value in '" + op + "'" : a.s);
        if (b.is_undefined()) fail(line, col, b.s.empty() ? "undefined value in '" + op + "'" : b.s);
        auto bad = [&]() -> Value {
            fail(line, col,
                 "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
        };
        if (a.is_number() && b.is_number()) {
            auto iv = [](const Value& v) { return v.kind == Value::Bool ? std::int64_t{v.b} : v.i; };
            auto dv = [](const Value& v) {
                return v.kind == Value::Float ? v.f : v.kind == Value::Bool ? double(v.b) : double(v.i);
            };
            bool ints = a.kind != Value::Float && b.kind != Value::Float;
            if (op == "/") {
                if (dv(b) == 0.0) fail(line, col, "division by zero");
                return Value::real(dv(a) / dv(b));
            }
            if (op == "**") {
                if (ints && iv(b) >= 0) {
                    std::int64_t r = 1, base = iv(a);
                    for (std::int64_t k = 0; k < iv(b); ++k)
                        if (__builtin_mul_overflow(r, base, &r)) fail(line, col, "integer overflow in '**'");
                    return Value::integer(r);
                }
                return Value::real(std::pow(dv(a), dv(b)));
            }
            if (ints) {
                std::int64_t x = iv(a), y = iv(b), r = 0;
                bool of = false;
                if (op == "+") of = __builtin_add_overflow(x, y, &r);
                else if (op == "-") of = __builtin_sub_overflow(x, y, &r);
                else if (op == "*") of = __builtin_mul_overflow(x, y, &r);
                else {
                    if (y == 0) fail(line, col, "integer division or modulo by zero");
                    std::int64_t q = x / y, m = x % y;
                    if (m != 0 && ((m < 0) != (y < 0))) {
                        --q;
                        m += y;
                    }
                    r = op == "//" ? q : m;
                }
                if (of) fail(line, col, "integer overflow in '" + op + "'");
                return Value::integer(r);
            }
            double x = dv(a), y = dv(b);
            if (op == "+") return Value::real(x + y);
            if (op == "-") return Value::real(x - y);
            if (op == "*") return Value::real(x * y);
            if (y == 0.0) fail(line, col, "float division by zero");
            if (op == "//") return Value::real(std::floor(x / y));
            double m = std::fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return Value::real(m);
        }
        if (op == "+") {
            if (a.kind == Value::Str && b.kind == Value::Str) {
                if (a.s.size() + b.s.size() > kMaxString) fail(line, col, "string larger than 256 MiB");
                return Value::str(a.s + b.s);
            }
            if (a.kind == Value::List && b.kind == Value::List && a.is_tuple == b.is_tuple) {
                ValueList items = *a.list;
                items.insert(items.end(), b.list->begin(), b.list->end());
                return Value::new_list(std::move(items), a.is_tuple);
            }
            return bad();
        }
        if (op == "*") {
            const Value* seq = (a.kind == Value::Str || a.kind == Value::List) ? &a : &b;
            const Value* cnt = seq == &a ? &b : &a;
            if ((seq->kind != Value::Str && seq->kind != Value::List) ||
                (cnt->kind != Value::Int && cnt->kind != Value::Bool))
                return bad();
            std::int64_t n = std::max<std::int64_t>(0, cnt->kind == Value::Bool ? cnt->b : cnt->i);
            std::size_t unit = seq->kind == Value::Str ? seq->s.size() : seq->list->size();
            if (unit && static_cast<std::uint64_t>(n) > kMaxString / unit)
                fail(line, col, "repetition larger than 256 MiB");
            if (seq->kind == Value::Str) {
                std::string s;
                for (std::int64_t k = 0; k < n; ++k) s += seq->s;
                return Value::str(std::move(s));
            }
            ValueList items;
            for (std::int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->list->begin(), seq->list->end());
            return Value::new_list(std::move(items), seq->is_tuple);
        }
        if (op == "%" && a.kind == Value::Str) fail(line, col, "unsupported: '%' string formatting");
        return bad();
    }

    Value slice(const Expr& e) {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) fail(e.line, e.col, obj.s.empty() ? "undefined value is not subscriptable" : obj.s);
        auto bound = [&](const ExprP& x, bool& given) -> std::int64_t {
            given = false;
            if (!x) return 0;
            Value v = eval(*x);
            if (v.kind == Value::None) return 0;
            if (v.kind != Value::Int && v.kind != Value::Bool)
                fail(x->line, x->col, "slice indices must be integers or None");
            given = true;
            return v.kind == Value::Bool ? v.b : v.i;
        };
        bool hs, he, hp;
        std::int64_t start = bound(e.args[1], hs), stop = bound(e.args[2], he), step = bound(e.args[3], hp);
        if (!hp) step = 1;
        if (step == 0) fail(e.line, e.col, "slice step cannot be zero");
        std::vector<std::uint32_t> cps;
        std::int64_t n;
        if (obj.kind == Value::Str) {
            cps = decode_utf8(obj.s);
            n = static_cast<std::int64_t>(cps.size());
        } else if (obj.kind == Value::List) {
            n = static_cast<std::int64_t>(obj.list->size());
        } else {
            fail(e.line, e.col, "'" + type_name(obj) + "' object is not subscriptable");
        }
        auto norm = [&](std::int64_t x, bool given, std::int64_t def_pos, std::int64_t def_neg) {
            if (!given) return step > 0 ? def_pos : def_neg;
            if (x < 0) x += n;
            if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
            return std::clamp<std::int64_t>(x, -1, n - 1);
        };
        std::int64_t b = norm(start, hs, 0, n - 1), en = norm(stop, he, n, -1);
        std::vector<std::size_t> idx;
        for (std::int64_t k = b; step > 0 ? k < en : k > en; k += step) idx.push_back(static_cast<std::size_t>(k));
        if (obj.kind == Value::Str) {
            std::vector<std::uint32_t> o;
            for (auto k : idx) o.push_back(cps[k]);
            return Value::str(encode_utf8(o));
        }
        ValueList items;
        for (auto k : idx) items.push_back((*obj.list)[k]);
        return Value::new_list(std::move(items), obj.is_tuple);
    }
};

}  // namespace tagflow::text::jinja

namespace tagflow::text {

struct JinjaTemplate::Impl {
    jinja::Body body;
};

JinjaTemplate::JinjaTemplate(const std::string& source) {
    auto impl = std::make_shared<Impl>();
    impl->body = jinja::parse_template(source);
    impl_ = std::move(impl);
}

std::string JinjaTemplate::render(const nlohmann::ordered_json& vars) const {
    jinja::Interp in;
    in.frames.push_back(jinja::template_globals());
    if (!vars.is_object()) throw TemplateError("chat template: variables must be a JSON object");
    for (auto it = vars.begin(); it != vars.end(); ++it) in.frames[0][it.key()] = jinja::from_json(it.value(), 0);
    in.exec(impl_->body);
    return std::move(in.out);
}

}  // namespace tagflow::text
