// SPDX-License-Identifier: Apache-2.0
// run_tokenizer: see the header.
#include "step/run_tokenizer.hpp"

#include <mpi.h>

#include <mutex>
#include <string>

#include "common/error.hpp"
#include "common/mpi_env.hpp"

namespace tagflow::sched {

std::shared_ptr<const text::Tokenizer> run_tokenizer(const config::Options& opt) {
    static std::mutex mu;
    static std::string loaded_for;  // "model\ntemplate" of `tok`
    static std::shared_ptr<const text::Tokenizer> tok;
    std::lock_guard<std::mutex> lk(mu);
    const std::string key = opt.tokenizer + "\n" + opt.model + "\n" + opt.chat_template;
    if (tok && key == loaded_for) return tok;
    if (!opt.tokenizer.empty()) {  // --tokenizer (a file or a directory) wins over --model's own
        tok = text::load_tokenizer(opt.tokenizer, opt.chat_template);
    } else if (!opt.model.empty() && text::has_hf_tokenizer(opt.model)) {
        tok = text::load_tokenizer(opt.model, opt.chat_template);
    } else {
        if (!opt.chat_template.empty())
            throw ConfigError("--chat-template " + opt.chat_template + ": " +
                              (opt.model.empty() ? std::string("no --model or --tokenizer")
                                                 : "--model " + opt.model + " has no tokenizer.json") +
                              " (the byte-level tokenizer has its own ChatML template)");
        tok = text::byte_level_tokenizer();
    }
    loaded_for = key;
    return tok;
}

void load_run_tokenizer_on_every_rank(const config::Options& opt) {
    std::string error;
    try {
        run_tokenizer(opt);
    } catch (const Error& e) {  // ConfigError, or tagflow::Error from a file the loader refuses
        error = *e.what() ? e.what() : "bad tokenizer";
    }
    // Same verdict everywhere: the lowest failing rank's message.
    int first = error.empty() ? Comm::world().size() : Comm::world().rank();
    TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == Comm::world().size()) return;
    int len = static_cast<int>(error.size());
    TAGFLOW_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD));
    error.resize(static_cast<size_t>(len));
    TAGFLOW_MPI_CHECK(MPI_Bcast(error.data(), len, MPI_CHAR, first, MPI_COMM_WORLD));
    throw ConfigError(error);
}

}  // namespace tagflow::sched
