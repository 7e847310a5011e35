// SPDX-License-Identifier: Apache-2.0
// mode: see the header.
#include "config/mode.hpp"

#include <ostream>

#include "common/error.hpp"

namespace tagflow::config {
namespace {

constexpr const char* kNames[] = {"sync", "disaggregated", "multiplex"};  // in Kind order

}  // namespace

Mode::Mode(const std::string& name) : k_(kDefault) {
    for (int k = 0; k < 3; ++k)
        if (name == kNames[k]) {
            k_ = static_cast<Kind>(k);
            return;
        }
    throw ConfigError("unknown mode '" + name + "' (" + mode_names() + ")");
}

const char* Mode::name() const { return kNames[static_cast<int>(k_)]; }

bool is_mode_name(const std::string& name) {
    for (const char* n : kNames)
        if (name == n) return true;
    return false;
}

const char* mode_names() { return "sync, disaggregated, multiplex"; }

std::ostream& operator<<(std::ostream& os, Mode m) { return os << m.name(); }

}  // namespace tagflow::config
