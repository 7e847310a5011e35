// SPDX-License-Identifier: Apache-2.0
#include "cmd/train_command.hpp"

#include <ATen/Parallel.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "ckpt/checkpoint.hpp"
#include "ckpt/checkpoint_mpi.hpp"
#include "ckpt/signals.hpp"
#include "cluster/roles.hpp"
#include "cluster/tags.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/mpi_env.hpp"
#include "common/safe_file.hpp"
#include "config/options.hpp"
#include "health/heartbeat.hpp"
#include "health/status.hpp"
#include "io/run_file.hpp"
#include "model/hf_config.hpp"
#include "model/pretrained_check.hpp"
#include "profile/clock_sync.hpp"
#include "profile/on_demand.hpp"
#include "profile/timeline.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/task.hpp"
#include "sched/async_scheduler.hpp"
#include "step/data_task.hpp"
#include "cmd/gemm_check.hpp"
#include "sched/sched_policy.hpp"
#include "step/rl_trainer.hpp"
#include "step/run_tokenizer.hpp"
#include "sched/sync_scheduler.hpp"
#include "tagflow/config.hpp"

namespace tagflow::cmd {
namespace {

// What OPENBLAS_CORETYPE suits this CPU (OpenBLAS 0.3.21 misdetects recent ones).
const char* openblas_hint() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return "AVX-512: SkylakeX";
    if (__builtin_cpu_supports("avx2")) return "AVX2: Haswell";
    return "no AVX2: expect slow maths";
}

}  // namespace

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

model::HfConfig check_pretrained_on_every_rank(const std::string& dir, const std::string& option) {
    std::string error;
    model::HfConfig c;
    try {
        c = model::check_pretrained(dir, option);
    } catch (const ConfigError& e) {
        error = *e.what() ? e.what() : "bad checkpoint";
    }
    // Same verdict everywhere: the lowest failing rank's message (its weights may be on a
    // node-local disk that differs), named when some ranks found no problem.
    Comm world = Comm::world();
    int first = error.empty() ? world.size() : world.rank(), failing = !error.empty();
    TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (failing == 0) return c;
    int len = static_cast<int>(error.size());
    TAGFLOW_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD));
    error.resize(static_cast<size_t>(len));
    TAGFLOW_MPI_CHECK(MPI_Bcast(error.data(), len, MPI_CHAR, first, MPI_COMM_WORLD));
    if (failing < world.size())
        error = "rank " + std::to_string(first) + " (one of " + std::to_string(failing) + " of " +
                std::to_string(world.size()) + " ranks): " + error;
    throw ConfigError(error);
}

void make_run_dirs(const std::string& path) {
    std::string cur;
    for (size_t i = 0; i <= path.size(); ++i) {
        if (i == path.size() || path[i] == '/') {
            if (!cur.empty() && mkdir(cur.c_str(), 0750) != 0 && errno != EEXIST)
                throw Error("cannot create run directory " + cur + ": " + std::strerror(errno));
        }
        if (i < path.size()) cur += path[i];
    }
}

int train_command(int argc, char** argv) {
    Comm world = Comm::world();
    const int rank = world.rank();

    config::ParseResult pr = config::parse_train(argc, argv, config::tagflow_environment());
    const config::Options& opt = pr.options;
    if (pr.help) {
        print0("%s", pr.help_text.c_str());
        return 0;
    }

    // Tests only: a skewed clock on the ranks TAGFLOW_TEST_CLOCK_SKEW_S names (profile/clock_sync.hpp).
    profile::init_test_clock_skew(rank);

    // Tags: a problem on one rank only (a bad TAGFLOW_TAGS on one node) is reported by that
    // rank; build_roles() makes every rank agree and fail together.
    cluster::RankTags local;
    std::string local_error;
    try {
        local =
            cluster::resolve_rank_tags(rank, world.size(), opt.tags, opt.tags_origin, opt.tag_source, opt.rank_tags);
    } catch (const ConfigError& e) {
        local_error = e.what();
    }
    cluster::Roles roles = cluster::build_roles(local, local_error);

    // An --out others may write to could hold planted links (common/safe_file.hpp): refused on
    // rank 0 before anything there is read or written, the same one-line verdict on every rank.
    std::string dir_error;
    if (rank == 0) {
        try {
            check_run_dir(opt.out, opt.allow_shared_dir);
        } catch (const ConfigError& e) {
            dir_error = e.what();
        }
    }
    dir_error = ckpt::bcast_string(MPI_COMM_WORLD, 0, dir_error);
    if (!dir_error.empty()) {
        if (rank == 0) log_error("%s", dir_error.c_str());
        throw ConfigError("");
    }

    // The run file must not silently replace an earlier run.
    const std::string path = opt.out + "/tagflow.h5";
    // Checkpoints (mpi_app/ckpt): a run directory with OUT/checkpoint resumes from it unless
    // --no-resume or --overwrite (both start afresh); --resume insists on one.
    int probe[2] = {0, 0};  // run file exists, checkpoint exists
    if (rank == 0) {
        probe[0] = access(path.c_str(), F_OK) == 0;
        probe[1] = ckpt::recover_and_probe(opt.out);
    }
    TAGFLOW_MPI_CHECK(MPI_Bcast(probe, 2, MPI_INT, 0, MPI_COMM_WORLD));
    const int exists = probe[0];
    if (opt.resume && opt.overwrite)
        throw ConfigError("--resume and --overwrite: choose one (--overwrite deletes the checkpoint)");
    if (opt.resume && !probe[1])
        throw ConfigError("--resume: no checkpoint " + ckpt::checkpoint_dir(opt.out) + "/manifest.txt to resume from");
    const bool resume = probe[1] && !opt.no_resume && !opt.overwrite;
    // No --mode: multiplex, or the mode of the checkpoint this run resumes.
    if (!opt.mode_given) {
        std::string ckpt_mode;
        if (rank == 0 && resume) {
            try {
                ckpt_mode = ckpt::read_manifest(ckpt::checkpoint_dir(opt.out)).get("mode");
            } catch (const std::exception&) {  // reported on every rank by read_verified below
            }
        }
        ckpt_mode = ckpt::bcast_string(MPI_COMM_WORLD, 0, ckpt_mode);
        // A manifest naming no mode: the default here, and read_verified below reports the
        // checkpoint's mode against it (one line naming the checkpoint).
        if (!config::is_mode_name(ckpt_mode)) ckpt_mode.clear();
        std::string why;
        pr.options.mode = sched::sched_policy::default_mode(ckpt_mode, why);
        for (auto& [name, value] : pr.resolved)
            if (name == "mode") value = std::string("\"") + opt.mode.name() + "\"";
        if (!why.empty()) print0("tagflow: no --mode given: %s\n", why.c_str());
    }
    // Same verdict on every rank (it depends only on the options and every rank's tags).
    sched::check_async_roles(opt, roles);
    const bool async = opt.mode.is_async();
    // --gateway runs resume too: rewarded gateway samples are in the checkpoint, sessions are not
    // (share/doc/checkpoints.md).
    if (resume && !exists)
        throw ConfigError("--out " + opt.out + ": has a checkpoint but no run file " + path +
                          " (use --no-resume --overwrite to start afresh)");
    if (exists && !resume && !opt.overwrite) {
        if (rank == 0)
            log_error("--out %s: %s already exists (use a new --out, or --overwrite)", opt.out.c_str(), path.c_str());
        throw ConfigError("");
    }

    // The task is built (and its parameters checked) on every rank before anything is written.
    rollout::TaskParams task_params;
    task_params.digits = opt.digits;
    std::unique_ptr<rollout::Task> task;
    if (!opt.data.empty()) {
        // --data: rank 0 indexes the file (every row checked: FILE:LINE), the others get the index;
        // the rollout ranks start their reward scorers (a --reward-fn that does not import stops here),
        // and an asynchronous mode's coordinator, which answers --val-data alone, its validation scorer.
        sched::load_run_tokenizer_on_every_rank(opt);
        const bool val_rank = opt.mode.is_async() && roles.world_rank == sched::async_coordinator(roles);
        std::unique_ptr<sched::DataTask> dt = sched::open_data_task_on_every_rank(opt, roles.is_rollout(), val_rank);
        // Sync mode trains --prompts-per-step rows a step; an asynchronous one may take more steps
        // (a group dropped as stale is trained again later) and ends when the last epoch is trained.
        const int64_t steps = opt.mode.is_async() ? opt.steps : sched::data_steps(opt, dt->dataset().size());
        if (opt.mode.is_async() && opt.epochs > 0)
            print0(
                "tagflow: --data %s: %llu rows x %lld epochs; the run ends when every row is trained (or at "
                "--steps %lld)\n",
                opt.data.c_str(), static_cast<unsigned long long>(dt->dataset().size()),
                static_cast<long long>(opt.epochs), static_cast<long long>(opt.steps));
        if (steps != opt.steps) {
            pr.options.steps = steps;
            for (auto& [name, value] : pr.resolved)
                if (name == "steps") value = std::to_string(steps);
            print0("tagflow: --data %s: %llu rows x %lld epochs = %lld steps of %d prompts\n", opt.data.c_str(),
                   static_cast<unsigned long long>(dt->dataset().size()), static_cast<long long>(opt.epochs),
                   static_cast<long long>(steps), opt.prompts_per_step);
        }
        task = std::move(dt);
    } else {
        task = rollout::make_task(opt.task, static_cast<uint64_t>(opt.seed), task_params);
    }
    if (config::parse_response_lengths(opt.response_lengths).forced && rollout::as_agent_loop(*task))
        throw ConfigError("--response-lengths " + opt.response_lengths + ": task " + opt.task +
                          " is multi-turn (its sessions end by the agent loop's rules); forced lengths are for "
                          "single-turn tasks");
    // So is a --model checkpoint: config.json and every safetensors header (names, shapes,
    // sizes), on every rank, so bad weights leave no run directory behind.
    if (!opt.model.empty()) {
        model::HfConfig c = check_pretrained_on_every_rank(opt.model, "--model");
        if (c.vocab_size < task->vocab_size())
            throw ConfigError("--model " + opt.model + ": vocab_size " + std::to_string(c.vocab_size) +
                              " is smaller than the " + std::to_string(task->vocab_size()) + " tokens of task " +
                              task->name());
        const int64_t need =
            task->max_prompt_tokens() + (opt.max_new_tokens > 0 ? opt.max_new_tokens : task->max_response_tokens());
        if (c.max_position_embeddings < need)
            throw ConfigError("--model " + opt.model + ": max_position_embeddings " +
                              std::to_string(c.max_position_embeddings) + " is below the " + std::to_string(need) +
                              " positions task " + task->name() + " needs");
    }

    // --export-dtype and --tokenizer (model/hf_export.hpp), on every rank: the tokenizer loads and
    // its ids are ids of the model.
    (void)sched::policy_export(opt, *task, 0);
    if (!opt.tokenizer.empty()) {
        const std::string tj = model::resolve_tokenizer_json(opt.tokenizer);
        model::HfConfig c;
        if (opt.model.empty()) model::apply_tokenizer_vocab(c, tj, task->vocab_size());
        else model::check_tokenizer_fits(tj, model::load_hf_config(opt.model + "/config.json").vocab_size, opt.model);
    }
    // And the run's tokenizer (--model's tokenizer.json, --chat-template): loaded on every rank.
    sched::load_run_tokenizer_on_every_rank(opt);

    // The checkpoint to resume from: read and verified by rank 0 (manifest, every file's size and
    // CRC-32, the run's identity, the policy's tensor shapes), the same verdict on every rank.
    ckpt::Plan plan;
    plan.out = opt.out;
    plan.every = opt.ckpt_every;
    if (resume) {
        plan.resume = true;
        plan.dir = ckpt::checkpoint_dir(opt.out);
        plan.manifest = ckpt::read_verified(MPI_COMM_WORLD, 0, plan.dir, [&](const ckpt::Manifest& m) {
            auto same = [&](const char* key, const std::string& now, const char* option) {
                if (m.get(key) != now)
                    throw ConfigError("checkpoint " + m.path + ": written with " + option + " " + m.get(key) +
                                      ", this run has " + option + " " + now +
                                      " (use --no-resume --overwrite to start afresh)");
            };
            same("mode", opt.mode.name(), "--mode");
            same("task", task->name(), "--task");
            same("algo", opt.algo, "--algo");
            same("seed", std::to_string(opt.seed), "--seed");
            same("prompts_per_step", std::to_string(opt.prompts_per_step), "--prompts-per-step");
            same("group_size", std::to_string(opt.group_size), "--group-size");
            if (const sched::DataTask* dt = sched::as_data_task(*task))
                same("data_rows", std::to_string(dt->dataset().size()), "a --data file of rows");
            if (async) sched::check_async_resume(opt, roles, m);  // same split of the ranks (async_scheduler.hpp)
            if (m.get_int("step") > opt.steps)
                throw ConfigError("checkpoint " + m.path + ": at step " + m.get("step") + ", past --steps " +
                                  std::to_string(opt.steps));
            std::vector<std::string> need = {"policy/model.safetensors", "actor_state.pt"};
            if (opt.kl_coef > 0) need.push_back("reference_state.pt");
            if (opt.algo == "ppo") need.push_back("critic_state.pt");
            for (const auto& n : need)
                if (!m.find_file(n))
                    throw ConfigError("checkpoint " + m.path + ": lists no " + n + " (other --kl-coef or --algo?)");
            const int64_t positions =
                task->max_prompt_tokens() + (opt.max_new_tokens > 0 ? opt.max_new_tokens : task->max_response_tokens());
            model::LlamaModel fresh = sched::make_policy(opt, *task, positions);
            std::map<std::string, std::vector<int64_t>> shapes;
            for (const auto& [name, t] : fresh->hf_state_dict()) shapes[name] = t.sizes().vec();
            ckpt::verify_shapes(plan.dir, "policy/model.safetensors", shapes);
        });
    }

    // ---- from here on the run exists; errors abort the job ----
    double t0 = profile::unix_now();
    TAGFLOW_MPI_CHECK(MPI_Bcast(&t0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    print0("tagflow %s train: %d ranks, mode %s, run file %s\n", TAGFLOW_VERSION, roles.world_size, opt.mode.name(),
           path.c_str());
    print0("configuration:\n%s", config::to_table(pr).c_str());
    for (int r = 0; r < roles.world_size; ++r)
        print0("  rank %d on %s: tags %s (source %s)\n", r, roles.hosts[static_cast<size_t>(r)].c_str(),
               cluster::tags_to_string(roles.all_tags[static_cast<size_t>(r)]).c_str(),
               roles.sources[static_cast<size_t>(r)].c_str());

    int threads = choose_threads(opt.threads);
    const int blas_threads = set_compute_threads(threads);
    if (opt.gemm_check) {
        double g = measure_gemm_gflops();
        std::vector<double> all(static_cast<size_t>(roles.world_size));
        TAGFLOW_MPI_CHECK(MPI_Gather(&g, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (rank == 0) {
            std::string s;
            for (size_t r = 0; r < all.size(); ++r) s += (r ? ", " : "") + std::to_string(static_cast<int>(all[r]));
            const std::string blas = blas_threads <= 0
                                         ? "not in use"
                                         : std::to_string(blas_threads) + (blas_threads == 1 ? " thread" : " threads");
            print0("fp32 GEMM (512x512, %d thread%s/rank, OpenBLAS %s): %s GFLOP/s per rank (OPENBLAS_CORETYPE=%s)\n",
                   threads, threads == 1 ? "" : "s", blas.c_str(), s.c_str(),
                   std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "unset");
        }
        if (g < opt.min_gflops)
            log_warn(
                "*** SLOW MATHS: fp32 GEMM runs at %.0f GFLOP/s, below --min-gflops %.0f. This looks like the "
                "reference Netlib BLAS (~4 GFLOP/s) or generic OpenBLAS kernels: install "
                "libopenblas0-pthread (share/setup.sh does) and set OPENBLAS_CORETYPE for this CPU "
                "(%s). ***",
                g, opt.min_gflops, openblas_hint());
    }

    if (rank == 0) make_run_dirs(opt.out);
    if (rank == 0 && !resume) ckpt::remove_all(opt.out);   // a fresh run: no stale checkpoint to resume later
    if (rank == 0 && resume) ckpt::remove_stale(opt.out);  // staging dirs a crash left behind
    TAGFLOW_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    // Heartbeat watchdog: a lost rank ends the job within --heartbeat-timeout (health/heartbeat.hpp).
    health::start_watchdog(
        {opt.out + "/.heartbeat", rank, roles.world_size, roles.hosts, std::to_string(t0), opt.heartbeat_timeout});
    // Every rank's clock against rank 0's (whose clock gave t0): /ranks clock_offset and clock_error,
    // which `tagflow trace` applies. After the watchdog: a rank lost here ends the job.
    const std::vector<profile::ClockOffset> clocks = profile::measure_clock_offsets(MPI_COMM_WORLD, 0);
    {
        double worst = 0;
        for (const auto& c : clocks) worst = std::max(worst, c.error_s);
        print0("clocks: offsets to rank 0 measured by ping-pong, error bound <= %.3f ms\n", 1e3 * worst);
    }
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
    const int writer = async ? sched::async_coordinator(roles) : 0;
    std::unique_ptr<io::RunFile> run;
    double clock0 = t0;  // the schedulers' t = 0: the run file's t0_unix (the first start's)
    if (resume) {
        // Append to the run file, cut every table back to the checkpoint (later rows describe
        // work that is redone), record the resume.
        // (Async modes: the coordinator alone, over a communicator of just that rank; its verdict
        // reaches every rank.)
        io::ResumeRecord rr;
        rr.from_step = static_cast<int32_t>(plan.manifest.get_int("step"));
        // OUT/resumes.log first: one line per start that resumes, appended before the run file is
        // touched, so a restart that dies before its next checkpoint (whose /resumes row the next
        // cut-back erases) is still on record. A failed append is a warning, not the run's end.
        if (rank == 0) {
            char line[160];
            std::snprintf(line, sizeof line, "t_unix=%.3f from_step=%d world_size=%d mode=%s\n", profile::unix_now(),
                          rr.from_step, roles.world_size, opt.mode.name());
            try {
                append_file_nofollow(opt.out + "/resumes.log", line);
            } catch (const Error& e) {
                log_warn("restart log not written: %s", e.what());
            }
        }
        int64_t dropped = 0;
        auto reopen = [&] {
            run = std::make_unique<io::RunFile>(io::RunFile::open_append(async ? MPI_COMM_SELF : roles.io.get(), path));
            clock0 = run->attributes().t0_unix;
            const io::TableSizes want = ckpt::get_sizes(plan.manifest), have = run->sizes();
            const int64_t w[] = {want.samples,  want.consumed, want.steps,   want.eval, want.syncs,
                                 want.timeline, want.ranks,    want.resumes, want.tree};
            const int64_t h[] = {have.samples,  have.consumed, have.steps,   have.eval, have.syncs,
                                 have.timeline, have.ranks,    have.resumes, have.tree};
            for (size_t k = 0; k < sizeof w / sizeof w[0]; ++k)
                if (w[k] > h[k])
                    throw ConfigError(path + ": has fewer rows than checkpoint " + plan.manifest.path +
                                      " recorded (another run's file, or one restored from a backup?)");
            dropped = run->truncate(want);
            rr.t = profile::unix_now() - clock0;
            rr.rows_discarded = dropped;
            std::vector<io::ResumeRecord> rows;
            if (rank == writer) rows.push_back(rr);
            run->append_resumes(rows);
            run->flush();
        };
        if (async) {
            ckpt::check_on_root(MPI_COMM_WORLD, writer, [&] {
                if (rank == writer) reopen();
            });
            double v[2] = {clock0, static_cast<double>(dropped)};
            TAGFLOW_MPI_CHECK(MPI_Bcast(v, 2, MPI_DOUBLE, writer, MPI_COMM_WORLD));
            clock0 = v[0];
            dropped = static_cast<int64_t>(v[1]);
            rr.rows_discarded = dropped;
        } else {
            reopen();
        }
        print0("tagflow: resuming %s from %s (step %d); %lld rows written after it discarded\n", path.c_str(),
               plan.dir.c_str(), rr.from_step, static_cast<long long>(dropped));
    } else if (!async || rank == writer) {
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
                rr.clock_offset = clocks[static_cast<size_t>(r)].offset_s;
                rr.clock_error = clocks[static_cast<size_t>(r)].error_s;
                ranks.push_back(rr);
            }
        run->append_ranks(ranks);
        run->flush();
    }

    // Live status: every rank's .status/rank.N.json, the coordinator's status.json (health/status.hpp).
    {
        health::StatusConfig sc;
        sc.out = opt.out;
        sc.rank = rank;
        sc.world_size = roles.world_size;
        sc.coordinator = writer;
        sc.hosts = roles.hosts;
        for (const auto& t : roles.all_tags) sc.tags.push_back(cluster::tags_to_string(t));
        sc.run_id = std::to_string(t0);
        sc.mode = opt.mode.name();
        sc.steps = opt.steps;
        health::start_status_writer(std::move(sc));
    }
    // On-demand profiling: `tagflow profile` asks, this rank looks once per step (profile/on_demand.hpp).
    profile::init_on_demand_profiling({opt.out, rank, clock0});
    std::unique_ptr<sched::Scheduler> scheduler =
        async ? sched::make_async_scheduler(opt, roles, run.get(), clock0, std::move(task), &plan)
              : sched::make_sync_scheduler(opt, roles, *run, clock0, std::move(task), &plan);
    // SIGTERM/SIGUSR1: checkpoint at the next step boundary, exit 75, every mode. (main.cpp
    // installed the handlers before MPI_Init already; again here for other callers. Idempotent.)
    ckpt::install_requeue_signals();
    sched::RunSummary s = scheduler->run();
    profile::finish_on_demand_profiling();  // a profile still recording is written with the steps it has
    if (run) run->close();
    health::mark_done();
    health::status_done();
    print0(
        "summary: %ld steps in %.1fs (%.1f samples/s); reward first step %.3f -> last step %.3f; "
        "held-out greedy eval %.3f -> %.3f (best %.3f; best constant output %.3f)\n",
        s.steps, s.elapsed, s.samples_per_s, s.first_reward, s.last_reward, s.first_eval, s.last_eval, s.best_eval,
        s.best_constant);
    print0("run file: %s\n", path.c_str());
    return s.exit_code;  // ckpt::kExitRequeue after a checkpoint forced by a signal
}

}  // namespace tagflow::cmd
