// SPDX-License-Identifier: Apache-2.0
// Unit tests of the Jinja interpreter (text/jinja.hpp): whitespace control under trim_blocks
// and lstrip_blocks, scoping, loops, filters, tests, Python value printing and the one-line
// errors. Expected strings follow Jinja2's documentation and Python's str()/json.dumps(); the
// byte-for-byte comparison with Jinja2 itself is tests/text/chat_parity.py.
#include <gtest/gtest.h>

#include <string>

#include "text/jinja.hpp"

using tagflow::text::JinjaTemplate;
using tagflow::text::TemplateError;
using json = nlohmann::ordered_json;

namespace {

std::string render(const std::string& src, const json& vars = json::object()) {
    return JinjaTemplate(src).render(vars);
}

std::string error_of(const std::string& src, const json& vars = json::object()) {
    try {
        JinjaTemplate(src).render(vars);
    } catch (const TemplateError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST(Jinja, TextAndPrint) {
    EXPECT_EQ(render("hello {{ name }}!", {{"name", "world"}}), "hello world!");
    EXPECT_EQ(render("{{ missing }}|"), "|");
    EXPECT_EQ(render("a\n"), "a");  // keep_trailing_newline=False drops one newline
    EXPECT_EQ(render("a\n\n"), "a\n");
    EXPECT_EQ(render("a\r\nb"), "a\nb");  // newlines normalised
    EXPECT_EQ(render("{# note #}x"), "x");
}

TEST(Jinja, WhitespaceControl) {
    // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it goes
    EXPECT_EQ(render("  {% if true %}\n    yes\n  {% endif %}\nend"), "    yes\nend");
    EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
    EXPECT_EQ(render("x\n  {{ 1 }}\n"), "x\n  1");  // {{ }} is not lstripped, no trim after }}
    EXPECT_EQ(render("a {%+ if true %}b{% endif +%}\nc"), "a b\nc");
    EXPECT_EQ(render("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
}

TEST(Jinja, Values) {
    EXPECT_EQ(render("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 % 3 }}"),
              "1.0 0.30000000000000004 1e+16 1.5e-05 3.5 3 2");
    EXPECT_EQ(render("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': \"it's\"} }} {{ (1,) }}"),
              "None True [1, 'a', None] {'k': \"it's\"} (1,)");
    EXPECT_EQ(render("{{ 'ab' * 3 }} {{ 'a' ~ 1 ~ none }} {{ [1] + [2] }}"), "ababab a1None [1, 2]");
}

TEST(Jinja, LoopsAndScopes) {
    EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}"),
              "11,22,33");
    EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
    EXPECT_EQ(render("{% for x in range(10) if x is odd %}{{ x }}{% endfor %}"), "13579");
    EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
    EXPECT_EQ(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                     "{% endif %}{{ x }}{% endfor %}"),
              "13");
    // a set inside a loop does not leak; a namespace does
    EXPECT_EQ(render("{% set a = 0 %}{% set ns = namespace(b=0) %}{% for x in [1,2] %}{% set a = x %}"
                     "{% set ns.b = x %}{% endfor %}{{ a }}{{ ns.b }}"),
              "02");
    EXPECT_EQ(render("{% for x in 'ab' %}{{ loop.previtem }}|{{ loop.nextitem }};{% endfor %}"), "|b;a|;");
    EXPECT_EQ(render("{% macro m(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}"), "[1d][23]");
    EXPECT_EQ(render("{% set x %}in{{ 1 }}{% endset %}{{ x }}"), "in1");
}

TEST(Jinja, FiltersAndMethods) {
    EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ 'xx' | upper }}|{{ [3,1,2] | sort | join(',') }}|{{ 'ab' | length }}"),
              "a b|XX|1,2,3|2");
    EXPECT_EQ(render("{{ {'b': 1, 'a': [1.5, 'é']} | tojson }}"), "{\"b\": 1, \"a\": [1.5, \"é\"]}");
    EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | tojson(indent=2, sort_keys=true) }}"), "{\n  \"a\": 2,\n  \"b\": 1\n}");
    EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ 'x y  z'.split() }} {{ 'a.b.c'.rsplit('.', 1) }}"),
              "['a', 'b', '', 'c'] ['x', 'y', 'z'] ['a.b', 'c']");
    EXPECT_EQ(
        render("{{ '\\n\\nhi\\n'.strip('\\n') }}|{{ 'abc'[::-1] }}|{{ [1,2,3][1:] }}|{{ 'hello'.startswith('he') }}"),
        "hi|cba|[2, 3]|True");
    EXPECT_EQ(render("{{ [{'n': 'a', 'k': 1}, {'n': 'b', 'k': 0}] | selectattr('k') | map(attribute='n') | list }}"),
              "['a']");
    EXPECT_EQ(render("{{ undefined_thing | default('d') }} {{ '' | default('e', true) }} {{ 'x' if false }}|"),
              "d e |");
    // select/map/... give generators in Jinja: always true, no length
    EXPECT_EQ(render("{{ 'yes' if [] | select else 'no' }} {{ [0, 1] | select | list | length }}"), "yes 1");
    EXPECT_NE(error_of("{{ [1] | select | length }}").find("object of type 'generator' has no len()"),
              std::string::npos);
    EXPECT_EQ(render("{{ 'a\\nb' | indent(2) }}|{{ 'hello world' | title }}|{{ 3.14159 | round(2) }}"),
              "a\n  b|Hello World|3.14");
}

TEST(Jinja, Tests) {
    EXPECT_EQ(render("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}"
                     "{{ {} is mapping }}{{ [] is sequence }}{{ false is false }}{{ 3 is odd }}{{ 2 in [1,2] }}"
                     "{{ 'a' not in 'bcd' }}{{ 1 < 2 < 3 }}",
                     {{"x", 1}}),
              "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(Jinja, ErrorsAreOneLineWithPosition) {
    EXPECT_EQ(error_of("a\n{{ x | xmlattr }}"), "chat template: line 2:8: unsupported filter 'xmlattr'");
    EXPECT_EQ(error_of("{% include 'x' %}"), "chat template: line 1:4: unsupported tag 'include'");
    EXPECT_EQ(error_of("{% if x %}"),
              "chat template: line 1:11: unexpected end of template, expected 'elif' or 'else' or 'endif'");
    EXPECT_EQ(error_of("{{ raise_exception('Bad\\nrole') }}"), "chat template: line 1:19: raise_exception: Bad\\nrole");
    EXPECT_EQ(error_of("{{ a.b.c }}"), "chat template: line 1:5: 'a' is undefined");
    EXPECT_EQ(error_of("{{ 1 + 'a' }}"), "chat template: line 1:6: unsupported operand type(s) for +: 'int' and 'str'");
    // deep nesting: refused, not a crash
    EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply"),
              std::string::npos);
    std::string chain = "{{ 1";
    for (int k = 0; k < 200000; ++k) chain += "+1";
    EXPECT_NE(error_of(chain + " }}").find("nested more than 1000"), std::string::npos);
}
