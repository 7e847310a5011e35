// SPDX-License-Identifier: Apache-2.0
// mode: the scheduling mode (--mode) as a value, parsed once from its name; the default mode
// is stated here only. A Mode still converts from and compares with a name ("sync", ...), so
// options and tests may spell it. Pure (no MPI). Does not decide what a mode does (sched/).
#pragma once
#include <iosfwd>
#include <string>

namespace tagflow::config {

class Mode {
public:
    enum Kind { kSync, kDisaggregated, kMultiplex };
    /// The mode of a run without --mode (and without a checkpoint that names one).
    static constexpr Kind kDefault = kMultiplex;

    constexpr Mode(Kind k = kDefault) : k_(k) {}  // NOLINT(google-explicit-constructor)
    /// Parses a mode name; anything but sync, disaggregated, multiplex throws ConfigError
    /// "unknown mode 'NAME' (sync, disaggregated, multiplex)".
    Mode(const std::string& name);                       // NOLINT(google-explicit-constructor)
    Mode(const char* name) : Mode(std::string(name)) {}  // NOLINT(google-explicit-constructor)

    constexpr Kind kind() const { return k_; }
    const char* name() const;
    /// disaggregated and multiplex: the async scheduler (sched/async_scheduler.hpp).
    constexpr bool is_async() const { return k_ != kSync; }

    friend constexpr bool operator==(Mode a, Mode b) { return a.k_ == b.k_; }
    friend constexpr bool operator!=(Mode a, Mode b) { return a.k_ != b.k_; }

private:
    Kind k_;
};

/// True when `name` is a mode's name (sync, disaggregated, multiplex).
bool is_mode_name(const std::string& name);
/// "sync, disaggregated, multiplex": the names, for messages.
const char* mode_names();

/// The name (what --help, logs and test failures print).
std::ostream& operator<<(std::ostream& os, Mode m);

}  // namespace tagflow::config
