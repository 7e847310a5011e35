// SPDX-License-Identifier: Apache-2.0
#include "sched/train_command.hpp"

#include <ATen/Parallel.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cluster/roles.hpp"
#include "cluster/tags.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/mpi_env.hpp"
#include "config/options.hpp"
#include "io/run_file.hpp"
#include "model/hf_config.hpp"
#include "profile/timeline.hpp"
#include "rollout/task.hpp"
#include "sched/async_scheduler.hpp"
#include "sched/gemm_check.hpp"
#include "sched/sync_scheduler.hpp"
#include "tagflow/config.hpp"

namespace tagflow::sched {
namespace {

// Threads for this rank: SLURM_CPUS_PER_TASK if set, else the cores this rank may run on
// divided among the ranks of this node that share them.
int choose_threads(int requested) {
    if (requested > 0) return requested;
    if (const char* c = std::getenv("SLURM_CPUS_PER_TASK")) {
        int n = std::atoi(c);
        if (n > 0) return n;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    int affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    MPI_Comm node = MPI_COMM_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    Comm node_comm = Comm::adopt(node);
    int local = node_comm.size();
    int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, std::min(affinity, hw / local));
}

// What OPENBLAS_CORETYPE suits this CPU (OpenBLAS 0.3.21 misdetects recent ones).
const char* openblas_hint() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "AVX-512: SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "AVX2: Haswell";
    return "no AVX2: expect slow maths";
}

// mkdir -p for the run directory (rank 0 only).
void make_dirs(const std::string& path) {
    std::string cur;
    for (size_t i = 0; i <= path.size(); ++i) {
        if (i == path.size() || path[i] == '/') {
            if (!cur.empty() && mkdir(cur.c_str(), 0750) != 0 && errno != EEXIST)
                throw Error("cannot create run directory " + cur + ": " + std::strerror(errno));
        }
        if (i < path.size()) cur += path[i];
    }
}

}  // namespace

int train_command(int argc, char** argv) {
    Comm world = Comm::world();
    const int rank = world.rank();

    config::ParseResult pr = config::parse_train(argc, argv, config::tagflow_environment());
    const config::Options& opt = pr.options;
    if (pr.help) {
        print0("%s", pr.help_text.c_str());
        return 0;
    }

    // Tags: a problem on one rank only (a bad TAGFLOW_TAGS on one node) is reported by that
    // rank; build_roles() makes every rank agree and fail together.
    cluster::RankTags local;
    std::string local_error;
    try {
        local = cluster::resolve_rank_tags(rank, world.size(), opt.tags, opt.tags_origin, opt.tag_source,
                                           opt.rank_tags);
    } catch (const ConfigError& e) {
        local_error = e.what();
    }
    cluster::Roles roles = cluster::build_roles(local, local_error);
    // Same verdict on every rank (it depends only on the options and every rank's tags).
    check_async_roles(opt, roles);
    const bool async = opt.mode != "sync";

    // The run file must not silently replace an earlier run.
    const std::string path = opt.out + "/tagflow.h5";
    int exists = 0;
    if (rank == 0) exists = access(path.c_str(), F_OK) == 0;
    TAGFLOW_MPI_CHECK(MPI_Bcast(&exists, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (exists && !opt.overwrite) {
        if (rank == 0) log_error("--out %s: %s already exists (use a new --out, or --overwrite)", opt.out.c_str(), path.c_str());
        throw ConfigError("");
    }

    // The task is built (and its parameters checked) on every rank before anything is written.
    rollout::TaskParams task_params;
    task_params.digits = opt.digits;
    std::unique_ptr<rollout::Task> task = rollout::make_task(opt.task, static_cast<uint64_t>(opt.seed), task_params);
    // So is a --model checkpoint's config.json (the weights are read later, by every rank).
    if (!opt.model.empty()) {
        model::HfConfig c = model::load_hf_config(opt.model + "/config.json");
        if (c.vocab_size < task->vocab_size())
            throw ConfigError("--model " + opt.model + ": vocab_size " + std::to_string(c.vocab_size) +
                              " is smaller than the " + std::to_string(task->vocab_size()) + " tokens of task " + task->name());
        const int64_t need = task->max_prompt_tokens() +
                             (opt.max_new_tokens > 0 ? opt.max_new_tokens : task->max_response_tokens());
        if (c.max_position_embeddings < need)
            throw ConfigError("--model " + opt.model + ": max_position_embeddings " +
                              std::to_string(c.max_position_embeddings) + " is below the " + std::to_string(need) +
                              " positions task " + task->name() + " needs");
    }

    // ---- from here on the run exists; errors abort the job ----
    double t0 = profile::unix_now();
    TAGFLOW_MPI_CHECK(MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    print0("tagflow %s train: %d ranks, mode %s, run file %s\n", TAGFLOW_VERSION, roles.world_size,
           opt.mode.c_str(), path.c_str());
    print0("configuration:\n%s", config::to_table(pr).c_str());
    for (int r = 0; r < roles.world_size; ++r)
        print0("  rank %d on %s: tags %s (source %s)\n", r, roles.hosts[static_cast<size_t>(r)].c_str(),
               cluster::tags_to_string(roles.all_tags[static_cast<size_t>(r)]).c_str(),
               roles.sources[static_cast<size_t>(r)].c_str());

    int threads = choose_threads(opt.threads);
    at::set_num_threads(threads);
    if (opt.gemm_check) {
        double g = measure_gemm_gflops();
        std::vector<double> all(static_cast<size_t>(roles.world_size));
        TAGFLOW_MPI_CHECK(MPI_Gather(&g, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (rank == 0) {
            std::string s;
            for (size_t r = 0; r < all.size(); ++r) s += (r ? ", " : "") + std::to_string(static_cast<int>(all[r]));
            print0("fp32 GEMM (512x512, %d thread%s/rank): %s GFLOP/s per rank (OPENBLAS_CORETYPE=%s)\n", threads,
                   threads == 1 ? "" : "s", s.c_str(), std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "unset");
        }
        if (g < opt.min_gflops)
            log_warn("*** SLOW MATHS: fp32 GEMM runs at %.0f GFLOP/s, below --min-gflops %.0f. This looks like the "
                     "reference Netlib BLAS (~4 GFLOP/s) or generic OpenBLAS kernels: install "
                     "libopenblas0-pthread (share/setup.sh does) and set OPENBLAS_CORETYPE for this CPU "
                     "(%s). ***",
                     g, opt.min_gflops, openblas_hint());
    }

    if (rank == 0) make_dirs(opt.out);
    TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    io::RunAttributes attrs;
    // The resolved options plus what the run derived from its surroundings.
    pr.resolved.emplace_back("world_size", std::to_string(roles.world_size));
    pr.resolved.emplace_back("threads", std::to_string(threads));
    pr.resolved.emplace_back("tag_source", config::json_string(opt.tag_source));
    attrs.config_json = config::to_json(pr);
    attrs.tagflow_version = TAGFLOW_VERSION;
    attrs.world_size = roles.world_size;
    attrs.t0_unix = t0;
    if (const char* job = std::getenv("SLURM_JOB_ID")) attrs.slurm_job_id = job;
    // sync: every rank writes through the io communicator. The async modes: the coordinator is
    // the only writer (a communicator of just that rank), so no rollout rank ever joins an HDF5
    // collective while it generates.
    const int writer = async ? async_coordinator(roles) : 0;
    std::unique_ptr<io::RunFile> run;
    if (!async || rank == writer) {
        run = std::make_unique<io::RunFile>(io::RunFile::create(async ? MPI_COMM_SELF : roles.io.get(), path, attrs));
        std::vector<io::RankRecord> ranks;
        if (rank == writer)
            for (int r = 0; r < roles.world_size; ++r) {
                io::RankRecord rr;
                rr.rank = r;
                rr.host = roles.hosts[static_cast<size_t>(r)];
                rr.tags = cluster::tags_to_string(roles.all_tags[static_cast<size_t>(r)]);
                rr.tag_source = roles.sources[static_cast<size_t>(r)];
                rr.gpus = 0;  // Debian's LibTorch is CPU-only; GPU ranks come with a CUDA build
                rr.clock_offset = 0;
                ranks.push_back(rr);
            }
        run->append_ranks(ranks);
        run->flush();
    }

    std::unique_ptr<Scheduler> scheduler =
        async ? make_async_scheduler(opt, roles, run.get(), t0, std::move(task))
              : make_sync_scheduler(opt, roles, *run, t0, std::move(task));
    RunSummary s = scheduler->run();
    if (run) run->close();
    print0("summary: %ld steps in %.1fs (%.1f samples/s); reward first step %.3f -> last step %.3f; "
           "held-out greedy eval %.3f -> %.3f (best %.3f; best constant output %.3f)\n",
           s.steps, s.elapsed, s.samples_per_s, s.first_reward, s.last_reward, s.first_eval, s.last_eval,
           s.best_eval, s.best_constant);
    print0("run file: %s\n", path.c_str());
    return 0;
}

}  // namespace tagflow::sched
