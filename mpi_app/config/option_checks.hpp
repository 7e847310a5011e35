// SPDX-License-Identifier: Apache-2.0
// option_checks: what every command's option parser shares: an option bound to a field whose
// current value is its default (`val`), and the one-line ConfigErrors for a number out of range
// (NaN included) or a word not among the choices. Header-only; include it from the .cpp files that
// build Boost program_options tables (config/options.cpp, cmd/sft_options.cpp).
#pragma once

#include <initializer_list>
#include <sstream>
#include <string>

#include <boost/program_options.hpp>

#include "common/error.hpp"

namespace tagflow::config {

/// An option bound to `*field`, its present value the default shown by --help.
template <typename T>
boost::program_options::typed_value<T>* val(T* field) {
    return boost::program_options::value<T>(field)->default_value(*field);
}

/// Throws ConfigError "--NAME V: must be between LO and HI" unless LO <= V <= HI (NaN is out).
template <typename T>
void check_range(const char* name, T v, T lo, T hi) {
    if (!(v >= lo && v <= hi)) {
        std::ostringstream m;
        m << "--" << name << " " << v << ": must be between " << lo << " and " << hi;
        throw ConfigError(m.str());
    }
}

/// Throws ConfigError "--NAME 'V': unknown value (choose a, b, c)" unless V is one of `choices`.
inline void check_choice(const char* name, const std::string& v, std::initializer_list<const char*> choices) {
    std::string list;
    for (const char* c : choices) {
        if (v == c) return;
        list += (list.empty() ? "" : ", ") + std::string(c);
    }
    throw ConfigError("--" + std::string(name) + " '" + v + "': unknown value (choose " + list + ")");
}

}  // namespace tagflow::config
