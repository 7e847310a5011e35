// SPDX-License-Identifier: Apache-2.0
// jinja_parse: the parser for the Jinja2 subset chat templates use (statements if/for/set/
// macro/break/continue/generation, expressions with Jinja's operator precedence, filters and
// tests), on the tokens of jinja_lex.cpp.
// Does NOT evaluate anything (jinja_eval.cpp) and refuses, with line:column, every tag,
// filter or test it does not implement (extends/include/import/call/filter/with/do, ...).
#include <algorithm>
#include <cstdlib>
#include <set>

#include "text/jinja_internal.hpp"

namespace tagflow::text::jinja {
namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions and of blocks

const std::set<std::string> kUnsupportedTags = {"extends", "block", "include", "import",     "from", "call",
                                                "filter",  "with",  "do",      "autoescape", "trans"};

class Parser {
public:
    explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

    Body parse() {
        std::string end;
        Body b = parse_body({}, end);
        return b;
    }

private:
    std::vector<Token> t_;
    std::size_t i_ = 0;
    int depth_ = 0;
    int loops_ = 0;

    const Token& cur() const { return t_[i_]; }
    const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
    [[noreturn]] void error_at(const Token& k, const std::string& what) const { fail(k.line, k.col, what); }
    static std::string describe(const Token& k) {
        switch (k.type) {
            case Tok::Eof: return "end of template";
            case Tok::VarEnd: return "'}}'";
            case Tok::BlockEnd: return "'%}'";
            case Tok::Data: return "text";
            case Tok::Str: return "string";
            case Tok::Int:
            case Tok::Float: return "number";
            default: return "'" + k.text + "'";
        }
    }
    bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
    bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
    void expect_op(const char* op) {
        if (!is_op(op)) error_at(cur(), std::string("expected '") + op + "', got " + describe(cur()));
        ++i_;
    }
    void expect(Tok type, const char* what) {
        if (cur().type != type) error_at(cur(), std::string("expected ") + what + ", got " + describe(cur()));
        ++i_;
    }
    std::string expect_name() {
        if (cur().type != Tok::Name) error_at(cur(), "expected a name, got " + describe(cur()));
        return t_[i_++].text;
    }
    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxDepth) p.error_at(p.cur(), "template nested too deeply (more than 200 levels)");
        }
        ~DepthGuard() { --p.depth_; }
    };
    ExprP node(Expr::Kind k, const Token& at) {
        auto e = std::make_unique<Expr>();
        e->kind = k;
        e->line = at.line;
        e->col = at.col;
        return e;
    }

    // ---- statements ----
    Body parse_body(const std::set<std::string>& ends, std::string& end_found) {
        DepthGuard g(*this);
        Body body;
        for (;;) {
            const Token& k = cur();
            if (k.type == Tok::Eof) {
                if (ends.empty()) return body;
                std::string want;
                for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
                error_at(k, "unexpected end of template, expected " + want);
            }
            if (k.type == Tok::Data) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Text;
                s->text = k.text;
                body.push_back(std::move(s));
                ++i_;
            } else if (k.type == Tok::VarBegin) {
                ++i_;
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Output;
                s->line = k.line;
                s->col = k.col;
                s->expr = parse_tuple(true, false);
                expect(Tok::VarEnd, "'}}'");
                body.push_back(std::move(s));
            } else if (k.type == Tok::BlockBegin) {
                ++i_;
                const Token& name = cur();
                if (name.type != Tok::Name) error_at(name, "expected a tag name, got " + describe(name));
                if (ends.count(name.text)) {
                    end_found = name.text;
                    ++i_;
                    return body;
                }
                body.push_back(parse_statement());
            } else {
                error_at(k, "unexpected " + describe(k));
            }
        }
    }

    StmtP parse_statement() {
        const Token& k = cur();
        auto s = std::make_unique<Stmt>();
        s->line = k.line;
        s->col = k.col;
        std::string tag = k.text;
        ++i_;
        std::string end;
        if (tag == "if") {
            s->kind = Stmt::If;
            ExprP c = parse_tuple(true, false);
            for (;;) {
                expect(Tok::BlockEnd, "'%}'");
                Body b = parse_body({"elif", "else", "endif"}, end);
                s->branches.emplace_back(std::move(c), std::move(b));
                if (end == "elif") {
                    c = parse_tuple(true, false);
                } else if (end == "else") {
                    expect(Tok::BlockEnd, "'%}'");
                    Body eb = parse_body({"endif"}, end);
                    s->branches.emplace_back(nullptr, std::move(eb));
                    break;
                } else {
                    break;
                }
            }
        } else if (tag == "for") {
            s->kind = Stmt::For;
            parse_targets(s->targets, false);
            if (!is_name("in")) error_at(cur(), "expected 'in', got " + describe(cur()));
            ++i_;
            s->expr = parse_tuple(false, false);
            if (is_name("if")) {
                ++i_;
                s->cond = parse_expression(true);
            }
            if (is_name("recursive")) error_at(cur(), "unsupported: recursive for loops");
            expect(Tok::BlockEnd, "'%}'");
            ++loops_;
            s->body = parse_body({"endfor", "else"}, end);
            --loops_;
            if (end == "else") {
                expect(Tok::BlockEnd, "'%}'");
                s->else_body = parse_body({"endfor"}, end);
            }
        } else if (tag == "set") {
            parse_targets(s->targets, true);
            s->attr_target = attr_set_;
            attr_set_ = false;
            if (is_op("=")) {
                ++i_;
                s->kind = Stmt::Set;
                s->expr = parse_tuple(true, false);
            } else {
                if (s->targets.size() != 1 || s->attr_target) error_at(cur(), "expected '=' in set");
                if (is_op("|")) error_at(cur(), "unsupported: filters on a block set");
                s->kind = Stmt::SetBlock;
                expect(Tok::BlockEnd, "'%}'");
                s->body = parse_body({"endset"}, end);
            }
        } else if (tag == "macro") {
            s->kind = Stmt::Macro;
            s->text = expect_name();
            expect_op("(");
            while (!is_op(")")) {
                if (!s->params.empty()) expect_op(",");
                if (is_op(")")) break;
                std::string pname = expect_name();
                ExprP def;
                if (is_op("=")) {
                    ++i_;
                    def = parse_expression(true);
                }
                s->params.emplace_back(pname, std::move(def));
            }
            ++i_;
            expect(Tok::BlockEnd, "'%}'");
            int saved = loops_;
            loops_ = 0;
            s->body = parse_body({"endmacro"}, end);
            loops_ = saved;
        } else if (tag == "break" || tag == "continue") {
            if (loops_ == 0) error_at(k, "'" + tag + "' outside of a for loop");
            s->kind = tag == "break" ? Stmt::Break : Stmt::Continue;
        } else if (tag == "generation") {
            s->kind = Stmt::Scope;
            expect(Tok::BlockEnd, "'%}'");
            s->body = parse_body({"endgeneration"}, end);
        } else if (kUnsupportedTags.count(tag)) {
            fail(s->line, s->col, "unsupported tag '" + tag + "'");
        } else if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else") {
            fail(s->line, s->col, "unexpected tag '" + tag + "'");
        } else {
            fail(s->line, s->col, "unknown tag '" + tag + "'");
        }
        expect(Tok::BlockEnd, "'%}'");
        return s;
    }

    bool attr_set_ = false;
    // for/set targets: `a`, `a, b`, `(a, b)`; with `allow_attr`, `ns.attr` (returned as {ns, attr}).
    void parse_targets(std::vector<std::string>& out, bool allow_attr) {
        bool paren = is_op("(");
        if (paren) ++i_;
        for (;;) {
            out.push_back(expect_name());
            if (allow_attr && !paren && out.size() == 1 && is_op(".")) {
                ++i_;
                out.push_back(expect_name());
                attr_set_ = true;
                return;
            }
            if (!is_op(",")) break;
            ++i_;
        }
        if (paren) expect_op(")");
    }

    // ---- expressions ----
    bool is_tuple_end() const {
        return cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") || is_name("if") ||
               is_name("in") || is_name("recursive");
    }
    ExprP parse_tuple(bool with_condexpr, bool explicit_parens) {
        const Token& start = cur();
        std::vector<ExprP> args;
        bool is_tuple = false;
        for (;;) {
            if (!args.empty()) expect_op(",");
            if (is_tuple_end() && (explicit_parens || !args.empty())) break;
            args.push_back(parse_expression(with_condexpr));
            if (is_op(",")) is_tuple = true;
            else break;
        }
        if (!is_tuple) {
            if (!args.empty()) return std::move(args[0]);
            if (!explicit_parens) error_at(cur(), "expected an expression, got " + describe(cur()));
        }
        auto e = node(Expr::TupleLit, start);
        e->args = std::move(args);
        return e;
    }
    ExprP parse_expression(bool with_condexpr) {
        DepthGuard g(*this);
        if (!with_condexpr) return parse_or();
        const Token& start = cur();
        ExprP expr = parse_or();
        while (is_name("if")) {
            ++i_;
            auto c = node(Expr::Cond, start);
            ExprP test = parse_or();
            ExprP otherwise;
            if (is_name("else")) {
                ++i_;
                otherwise = parse_expression(true);
            }
            c->args.push_back(std::move(test));
            c->args.push_back(std::move(expr));
            c->args.push_back(std::move(otherwise));
            expr = std::move(c);
        }
        return expr;
    }
    ExprP binary_chain(Expr::Kind kind, const char* word, ExprP (Parser::*next)()) {
        ExprP left = (this->*next)();
        while (is_name(word)) {
            const Token& at = cur();
            ++i_;
            auto e = node(kind, at);
            e->args.push_back(std::move(left));
            e->args.push_back((this->*next)());
            left = std::move(e);
        }
        return left;
    }
    ExprP parse_or() { return binary_chain(Expr::Or, "or", &Parser::parse_and); }
    ExprP parse_and() { return binary_chain(Expr::And, "and", &Parser::parse_not); }
    ExprP parse_not() {
        if (is_name("not")) {
            DepthGuard g(*this);
            auto e = node(Expr::Not, cur());
            ++i_;
            e->args.push_back(parse_not());
            return e;
        }
        return parse_compare();
    }
    ExprP parse_compare() {
        const Token& start = cur();
        ExprP first = parse_math1();
        auto e = node(Expr::Compare, start);
        e->args.push_back(std::move(first));
        for (;;) {
            static const std::set<std::string> ops = {"==", "!=", "<", "<=", ">", ">="};
            if (cur().type == Tok::Op && ops.count(cur().text)) {
                e->ops.push_back(cur().text);
                ++i_;
            } else if (is_name("in")) {
                e->ops.push_back("in");
                ++i_;
            } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
                e->ops.push_back("not in");
                i_ += 2;
            } else {
                break;
            }
            e->args.push_back(parse_math1());
        }
        if (e->ops.empty()) return std::move(e->args[0]);
        return e;
    }
    ExprP binary_ops(std::initializer_list<const char*> ops, ExprP (Parser::*next)()) {
        ExprP left = (this->*next)();
        for (;;) {
            bool match = false;
            for (const char* op : ops) match = match || is_op(op);
            if (!match) return left;
            auto e = node(Expr::Binary, cur());
            e->name = cur().text;
            ++i_;
            e->args.push_back(std::move(left));
            e->args.push_back((this->*next)());
            left = std::move(e);
        }
    }
    ExprP parse_math1() { return binary_ops({"+", "-"}, &Parser::parse_concat); }
    ExprP parse_concat() {
        const Token& start = cur();
        ExprP first = parse_math2();
        if (!is_op("~")) return first;
        auto e = node(Expr::Concat, start);
        e->args.push_back(std::move(first));
        while (is_op("~")) {
            ++i_;
            e->args.push_back(parse_math2());
        }
        return e;
    }
    ExprP parse_math2() { return binary_ops({"*", "/", "//", "%"}, &Parser::parse_pow); }
    ExprP parse_pow() { return binary_ops({"**"}, &Parser::parse_unary_filtered); }
    ExprP parse_unary_filtered() { return parse_unary(true); }
    ExprP parse_unary(bool with_filter) {
        DepthGuard g(*this);
        ExprP e;
        if (is_op("-") || is_op("+")) {
            e = node(is_op("-") ? Expr::Neg : Expr::Pos, cur());
            ++i_;
            e->args.push_back(parse_unary(false));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }
    ExprP parse_primary() {
        const Token& k = cur();
        if (k.type == Tok::Name) {
            ++i_;
            if (k.text == "true" || k.text == "True" || k.text == "false" || k.text == "False") {
                auto e = node(Expr::Const, k);
                e->value = Value::boolean(k.text[0] == 't' || k.text[0] == 'T');
                return e;
            }
            if (k.text == "none" || k.text == "None") {
                auto e = node(Expr::Const, k);
                e->value = Value::none();
                return e;
            }
            auto e = node(Expr::Name, k);
            e->name = k.text;
            return e;
        }
        if (k.type == Tok::Str) {
            auto e = node(Expr::Const, k);
            std::string s;
            while (cur().type == Tok::Str) s += t_[i_++].text;
            e->value = Value::str(std::move(s));
            return e;
        }
        if (k.type == Tok::Int || k.type == Tok::Float) {
            ++i_;
            auto e = node(Expr::Const, k);
            e->value = k.type == Tok::Int ? Value::integer(k.ival) : Value::real(k.fval);
            return e;
        }
        if (is_op("(")) {
            ++i_;
            ExprP e = parse_tuple(true, true);
            expect_op(")");
            return e;
        }
        if (is_op("[")) {
            auto e = node(Expr::ListLit, k);
            ++i_;
            while (!is_op("]")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("]")) break;
                e->args.push_back(parse_expression(true));
            }
            ++i_;
            return e;
        }
        if (is_op("{")) {
            auto e = node(Expr::DictLit, k);
            ++i_;
            while (!is_op("}")) {
                if (!e->args.empty()) expect_op(",");
                if (is_op("}")) break;
                e->args.push_back(parse_expression(true));
                expect_op(":");
                e->args.push_back(parse_expression(true));
            }
            ++i_;
            return e;
        }
        error_at(k, "unexpected " + describe(k));
    }
    ExprP parse_postfix(ExprP e) {
        for (;;) {
            const Token& k = cur();
            if (is_op(".")) {
                ++i_;
                if (cur().type == Tok::Name) {
                    auto a = node(Expr::Attr, k);
                    a->name = t_[i_++].text;
                    a->args.push_back(std::move(e));
                    e = std::move(a);
                } else if (cur().type == Tok::Int) {
                    auto a = node(Expr::Item, k);
                    auto key = node(Expr::Const, cur());
                    key->value = Value::integer(cur().ival);
                    ++i_;
                    a->args.push_back(std::move(e));
                    a->args.push_back(std::move(key));
                    e = std::move(a);
                } else {
                    error_at(cur(), "expected a name after '.', got " + describe(cur()));
                }
            } else if (is_op("[")) {
                ++i_;
                e = parse_subscript(std::move(e), k);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }
    ExprP parse_subscript(ExprP obj, const Token& at) {
        std::vector<ExprP> parts(3);
        bool slice = false;
        int idx = 0;
        for (;;) {
            if (is_op("]")) break;
            if (is_op(":")) {
                slice = true;
                if (++idx > 2) error_at(cur(), "unexpected ':'");
                ++i_;
                continue;
            }
            if (parts[static_cast<std::size_t>(idx)]) error_at(cur(), "expected ']', got " + describe(cur()));
            parts[static_cast<std::size_t>(idx)] = parse_expression(true);
            if (is_op(",")) error_at(cur(), "unsupported: tuple subscripts");
        }
        ++i_;
        if (!slice) {
            if (!parts[0]) error_at(at, "expected an expression in '[]'");
            auto e = node(Expr::Item, at);
            e->args.push_back(std::move(obj));
            e->args.push_back(std::move(parts[0]));
            return e;
        }
        auto e = node(Expr::Slice, at);
        e->args.push_back(std::move(obj));
        for (auto& p : parts) e->args.push_back(std::move(p));
        return e;
    }
    void parse_call_args(Expr& e) {
        expect_op("(");
        bool first = true;
        while (!is_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (is_op(")")) break;
            if (is_op("*") || is_op("**")) error_at(cur(), "unsupported: *args/**kwargs in calls");
            if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
                std::string key = t_[i_].text;
                i_ += 2;
                e.kwargs.emplace_back(key, parse_expression(true));
            } else {
                if (!e.kwargs.empty()) error_at(cur(), "positional argument follows keyword argument");
                e.args.push_back(parse_expression(true));
            }
        }
        ++i_;
    }
    ExprP parse_call(ExprP callee) {
        auto e = node(Expr::Call, cur());
        e->args.push_back(std::move(callee));
        parse_call_args(*e);
        return e;
    }
    std::string dotted_name() {
        std::string name = expect_name();
        while (is_op(".") && peek().type == Tok::Name) {
            name += "." + peek().text;
            i_ += 2;
        }
        return name;
    }
    ExprP parse_filter_expr(ExprP e) {
        for (;;) {
            if (is_op("|")) {
                ++i_;
                const Token& at = cur();
                auto f = node(Expr::Filter, at);
                f->name = dotted_name();
                if (!is_known_filter(f->name)) error_at(at, "unsupported filter '" + f->name + "'");
                f->args.push_back(std::move(e));
                if (is_op("(")) parse_call_args(*f);
                e = std::move(f);
            } else if (is_name("is")) {
                ++i_;
                bool neg = false;
                if (is_name("not")) {
                    neg = true;
                    ++i_;
                }
                const Token& at = cur();
                auto t = node(Expr::Test, at);
                t->negated = neg;
                t->name = dotted_name();
                if (!is_known_test(t->name)) error_at(at, "unsupported test '" + t->name + "'");
                t->args.push_back(std::move(e));
                const Token& n = cur();
                if (is_op("(")) {
                    parse_call_args(*t);
                } else if ((n.type == Tok::Name || n.type == Tok::Str || n.type == Tok::Int || n.type == Tok::Float ||
                            is_op("[") || is_op("{")) &&
                           !is_name("else") && !is_name("or") && !is_name("and")) {
                    if (is_name("is")) error_at(n, "cannot chain multiple tests with 'is'");
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                e = std::move(t);
            } else if (is_op("(")) {
                e = parse_call(std::move(e));
            } else {
                return e;
            }
        }
    }
};

}  // namespace

Body parse_template(const std::string& source) {
    Parser p(lex_template(source));
    return p.parse();
}

}  // namespace tagflow::text::jinja
