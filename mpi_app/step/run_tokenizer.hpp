// SPDX-License-Identifier: Apache-2.0
// run_tokenizer: the one text tokenizer of a `tagflow train` run. --tokenizer PATH, else --model
// DIR holding a tokenizer.json: that tokenizer (text::load_tokenizer: its tokenizer_config.json's chat template,
// or --chat-template FILE; its generation_config.json's stop ids); otherwise the byte-level one.
// The gateway serves with it and the gateway samples' /samples text is decoded with it. Loaded
// once per process (every rank that needs it gets the same object back). Does not tokenize the
// built-in tasks' prompts (their ids are the task's own vocabulary) and decides nothing about the
// model's vocabulary.
#pragma once
#include <memory>

#include "config/options.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::sched {

/// The run's tokenizer (see above). The first call loads it; a bad tokenizer.json or template
/// file throws ConfigError naming the file.
std::shared_ptr<const text::Tokenizer> run_tokenizer(const config::Options& opt);

/// COLLECTIVE over MPI_COMM_WORLD: run_tokenizer(opt) on every rank before anything is written,
/// so a bad tokenizer.json or --chat-template file stops the run with the same ConfigError on
/// every rank (the lowest failing rank's message).
void load_run_tokenizer_on_every_rank(const config::Options& opt);

}  // namespace tagflow::sched
