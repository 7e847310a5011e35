// SPDX-License-Identifier: Apache-2.0
// tagflow: RL post-training for language-model policies on MPI + SLURM.
// Thin entry point: subcommand dispatch and the error policy. Bad usage (found identically on
// every rank before anything is written) returns 2 everywhere; any other error after the
// first collective aborts the whole job so no rank is left waiting.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <string>

#include "ckpt/signals.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/malloc_tuning.hpp"
#include "common/mpi_env.hpp"
#include "config/options.hpp"
#include "data/data_command.hpp"
#include "health/status.hpp"
#include "profile/on_demand.hpp"
#include "profile/trace_command.hpp"
#include "reward/reward_command.hpp"
#include "rollout/generate_command.hpp"
#include "cmd/gemm_check.hpp"
#include "cmd/sft_command.hpp"
#include "cmd/sft_options.hpp"
#include "cmd/train_command.hpp"
#include "sim/sim_command.hpp"
#include "tagflow/config.hpp"
#include "text/tokenize_command.hpp"

namespace {

const char kUsage[] =
    "usage: tagflow <command> [options]\n"
    "\n"
    "commands:\n"
    "  train     run GRPO post-training (see `tagflow train --help`)\n"
    "  sft       supervised warm start on a task's solutions (see `tagflow sft --help`)\n"
    "  generate  generate token ids from a checkpoint directory (see `tagflow generate --help`)\n"
    "  trace     write a run file's timeline as Chrome trace JSON (see `tagflow trace --help`)\n"
    "  status    the live status of a running train job: roles, load, staleness (see `tagflow status --help`)\n"
    "  profile   record N steps of chosen ranks of a running train job with LibTorch's profiler (see `tagflow\n"
    "            profile --help`)\n"
    "  sim       simulate the scheduling modes at scale in virtual time (see `tagflow sim --help`)\n"
    "  tokenize  JSON Lines of text <-> token ids with a tokenizer.json (see `tagflow tokenize --help`)\n"
    "  data      check a JSON Lines data set, score answers with a built-in rule (see `tagflow data --help`)\n"
    "  reward    score JSON Lines samples with --reward-fn or --reward-url (see `tagflow reward --help`)\n"
    "  version   print the version and build features\n"
    "\n"
    "options:\n"
    "  -h, --help  print this help and exit\n";

// This process's rank and size in its launcher's job, without starting MPI (0 of 1 outside a
// launcher): the commands below print once under `mpirun -n N` or `srun` too.
void launcher_rank(int& rank, int& size) {
    auto env_int = [](std::initializer_list<const char*> names, int dflt) {
        for (const char* v : names) {
            const char* s = std::getenv(v);
            if (s && *s) return std::atoi(s);
        }
        return dflt;
    };
    rank = env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}, 0);
    size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1);
}

// Commands that never communicate: they start no MPI. A singleton MPI_Init starts an `orted`
// and costs seconds (2-7 s measured on a 2-core machine), more than most of these commands run.
bool needs_mpi(int argc, char** argv) {
    if (argc < 2) return false;
    for (const char* c : {"-h", "--help", "help", "version", "--version", "trace", "status", "profile", "tokenize",
                          "data", "reward", "sim"})
        if (std::strcmp(argv[1], c) == 0) return false;
    return true;
}

// `train` and `sft` with bad usage (or --help) are answered before MPI starts: their option
// parsers are pure, so a typo costs no singleton MPI_Init (seconds) and no collective. Returns the
// exit status, or -1 to go on (the command parses again, the same way, under MPI).
int answer_usage_without_mpi(int argc, char** argv) {
    if (argc < 2) return -1;
    const std::string cmd = argv[1];
    try {
        if (cmd == "train") {
            const tagflow::config::ParseResult pr =
                tagflow::config::parse_train(argc - 1, argv + 1, tagflow::config::tagflow_environment());
            if (!pr.help) return -1;
            tagflow::print0("%s", pr.help_text.c_str());
            return 0;
        }
        if (cmd == "sft") {
            tagflow::cmd::SftOptions o;
            boost::program_options::variables_map vm;
            return tagflow::cmd::parse_sft_options(argc - 1, argv + 1, o, vm) ? -1 : 0;
        }
    } catch (const tagflow::ConfigError& e) {
        if (tagflow::log_rank() == 0 && e.what()[0] != '\0') tagflow::log_error("%s", e.what());
        return 2;
    }
    return -1;
}

int dispatch(int argc, char** argv, int rank) {
    if (argc < 2) {
        tagflow::log_error("missing command (try `tagflow --help`)");
        return 2;
    }
    std::string cmd = argv[1];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
        tagflow::print0("%s", kUsage);
        return 0;
    }
    if (cmd == "version" || cmd == "--version") {
        tagflow::print0("tagflow %s (cuda %d, nccl %d)\n", TAGFLOW_VERSION, TAGFLOW_HAVE_CUDA, TAGFLOW_HAVE_NCCL);
        return 0;
    }
    if (cmd == "train") return tagflow::cmd::train_command(argc - 1, argv + 1);
    if (cmd == "sft") return tagflow::cmd::sft_command(argc - 1, argv + 1);
    if (cmd == "generate") return tagflow::rollout::generate_command(argc - 1, argv + 1);
    if (cmd == "trace") return tagflow::profile::trace_command(argc - 1, argv + 1);
    if (cmd == "status") return tagflow::health::status_command(argc - 1, argv + 1);
    if (cmd == "profile") return tagflow::profile::profile_command(argc - 1, argv + 1);
    if (cmd == "tokenize") return tagflow::text::tokenize_command(argc - 1, argv + 1, rank == 0);
    if (cmd == "data") return tagflow::data::data_command(argc - 1, argv + 1, rank == 0);
    if (cmd == "reward") return tagflow::reward::reward_command(argc - 1, argv + 1);
    if (cmd == "sim") return tagflow::sim::sim_command(argc - 1, argv + 1, rank == 0);
    tagflow::log_error("unknown command '%s' (try `tagflow --help`)", cmd.c_str());
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    tagflow::keep_freed_memory();  // before anything allocates: see common/malloc_tuning.hpp
    // `tagflow train`: SIGTERM/SIGUSR1 set the requeue flag from the very start (ckpt/signals.hpp),
    // so one that arrives during start-up is acted on at the first step boundary, not fatal; held
    // (blocked, pending) across the OpenBLAS re-exec, whose new image starts with default actions.
    const bool train = argc > 1 && std::strcmp(argv[1], "train") == 0;
    if (train) tagflow::ckpt::hold_requeue_signals();
    tagflow::cmd::maybe_reexec_for_openblas(argv);
    if (train) tagflow::ckpt::install_requeue_signals();
    int rank = 0, size = 1;
    // Any other error aborts the whole job at once (a single process just exits 1 after its one
    // line). MPI_Abort must come before `env` goes out of scope: its MPI_Finalize runs HDF5's
    // close callbacks, which wait in a barrier for ranks that are still in the run (a rank that
    // threw after the first collective hung there, run file open).
    auto fatal = [&](const char* what) {
        fprintf(stderr, "[tagflow %d/%d] fatal: %s\n", rank, size, what);
        fflush(stderr);
        int initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        if (initialized && !finalized && size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    };
    try {
        launcher_rank(rank, size);
        tagflow::set_log_rank(rank, size);
        if (const int status = answer_usage_without_mpi(argc, argv); status >= 0) return status;
        std::unique_ptr<tagflow::MpiEnvironment> env;
        if (needs_mpi(argc, argv)) {
            env = std::make_unique<tagflow::MpiEnvironment>(argc, argv);
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            MPI_Comm_size(MPI_COMM_WORLD, &size);
            tagflow::set_log_rank(rank, size);
        }
        try {
            return dispatch(argc, argv, rank);
        } catch (const tagflow::ConfigError& e) {
            // Same error on every rank: one line from rank 0, exit 2 everywhere.
            if (rank == 0 && e.what()[0] != '\0') tagflow::log_error("%s", e.what());
            return 2;
        } catch (const std::exception& e) {
            return fatal(e.what());
        }
    } catch (const std::exception& e) {
        return fatal(e.what());
    }
}
