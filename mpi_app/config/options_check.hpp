// SPDX-License-Identifier: Apache-2.0
// options_check: the checks `tagflow train`'s parsed options must pass together (ranges, choices,
// combinations, the objective and off-policy correction options), each failure one ConfigError
// line naming the option. Internal to config/: parse_train() calls it after merging the three
// sources (command line, environment, --config file).
#pragma once

#include "config/options.hpp"

namespace tagflow::config {

/// Throws ConfigError (one line naming the option and the problem) unless `o` is a valid run.
void validate_options(const Options& o);

}  // namespace tagflow::config
