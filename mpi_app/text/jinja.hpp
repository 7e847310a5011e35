// SPDX-License-Identifier: Apache-2.0
// jinja: a Jinja2 interpreter for Hugging Face chat templates. It implements the subset real
// chat templates use (share/doc/chat-templates.md lists it) with the semantics transformers
// gives them: an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, the
// loopcontrols extension, its tojson filter (ensure_ascii=False), raise_exception and
// strftime_now. Output is byte-identical to Python's Jinja2 for what is supported (tested
// against Debian's python3-jinja2 in tests/text).
// Does NOT load files, escape HTML, or run anything outside the template; a construct it does
// not implement is refused when the template is compiled (or, for a method name, when it is
// called) with one line: "chat template: line L:C: unsupported filter 'xmlattr'".
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace tagflow::text {

/// Every template error (syntax, unsupported construct, runtime error, raise_exception): one line.
struct TemplateError : ConfigError {
    using ConfigError::ConfigError;
};

class JinjaTemplate {
public:
    /// Parses `source`; throws TemplateError naming line:column on a syntax error or unsupported construct.
    explicit JinjaTemplate(const std::string& source);
    /// Renders with the members of the JSON object `vars` as template variables (key order kept).
    std::string render(const nlohmann::ordered_json& vars) const;

    struct Impl;

private:
    std::shared_ptr<const Impl> impl_;
};

}  // namespace tagflow::text
