// SPDX-License-Identifier: Apache-2.0
// async_scheduler: see the header. The protocol, all point-to-point on one communicator
// duplicated up front (p2p_), every message from the coordinator C tagged with an epoch:
//   samples  rank -> C    [spans][pack_samples] as soon as an engine step finishes samples
//   ctl      C -> rank    [kind, epoch, version, n, members...]: TRAIN (join the train group for
//                         training step `epoch`) or STOP (end of run)
//   weights  C -> rollout-only ranks: a header (version) and one message per bucket of the flat
//                         parameter buffer; receivers keep these receives posted into a shadow
//                         buffer, test them between decode steps and copy at a token boundary
//   final    rank -> C    [spans][membership log][discarded count] after STOP
//   signal   rank -> C    [int64 signal] once, when SIGTERM/SIGUSR1 reached that rank: C stops
//                         at the step boundary, checkpoints and every rank exits 75
// Checkpoints are C's alone (no collective; see "checkpoints" below and share/doc/checkpoints.md).
// The train group's communicator is made once with MPI_Comm_create_group over its members;
// a training step's batch reaches them with MPI_Ibcast on it. Every wait is test-and-sleep.
// Paused generations keep their KV caches (computed with the older weights): recomputing them
// would cost a prefill per sequence, and the per-token versions record what produced each token.
#include "sched/async_scheduler.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <list>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "ckpt/checkpoint.hpp"
#include "ckpt/checkpoint_mpi.hpp"
#include "ckpt/signals.hpp"
#include "cluster/roles.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config/options.hpp"
#include "io/run_file.hpp"
#include "model/llama.hpp"
#include "profile/timeline.hpp"
#include "rollout/agent_loop.hpp"
#include "rollout/engine.hpp"
#include "rollout/sampling.hpp"
#include "rollout/task.hpp"
#include "sched/agent_rollout.hpp"
#include "sched/agent_stream.hpp"
#include "sched/exchange.hpp"
#include "sched/gateway_router.hpp"
#include "sched/policy.hpp"
#include "sched/rl_trainer.hpp"
#include "sched/sample_pool.hpp"
#include "sched/sample_row.hpp"
#include "sched/wire.hpp"
#include "train/delta_sync.hpp"
#include "train/delta_sync_mpi.hpp"
#include "tagflow/config.hpp"

namespace tagflow::sched {

int async_coordinator(const cluster::Roles& roles) { return roles.train_root; }

std::vector<int> async_train_group(const config::Options& opt, const cluster::Roles& roles) {
    return policy::train_group(opt, roles.all_tags);  // pure: shared with the simulator (sim/)
}

void check_async_roles(const config::Options& opt, const cluster::Roles& roles) {
    policy::check_roles(opt, roles.all_tags);
}

void check_async_resume(const config::Options& opt, const cluster::Roles& roles, const ckpt::Manifest& m) {
    const std::vector<int> members = async_train_group(opt, roles);
    std::string gens, mems;
    for (int r = 0; r < roles.world_size; ++r) {
        const bool rolls = (roles.all_tags[static_cast<size_t>(r)] & cluster::kRollout) != 0;
        const bool trains = std::count(members.begin(), members.end(), r) > 0;
        if (rolls && (opt.mode == config::Mode::kMultiplex || !trains))
            gens += (gens.empty() ? "" : ",") + std::to_string(r);
    }
    for (int r : members) mems += (mems.empty() ? "" : ",") + std::to_string(r);
    if (gens.empty()) gens = "-";
    if (mems.empty()) mems = "-";
    if (m.get("sched.gens") != gens || m.get("sched.members") != mems)
        throw ConfigError("checkpoint " + m.path + ": written with generating ranks {" + m.get("sched.gens") +
                          "} and train group {" + m.get("sched.members") + "}, this run has {" + gens + "} and {" +
                          mems + "} (same ranks and --rank-tags, or --no-resume --overwrite)");
}

namespace {

using io::SpanKind;

constexpr int kTagSamples = 7101, kTagCtl = 7102, kTagFinal = 7103, kTagWHdr = 7104, kTagWBucket = 7200;
// A requeue signal (SIGTERM/SIGUSR1) a rank received: rank -> C, one int64 (the signal), once.
constexpr int kTagSignal = 7105;
constexpr int kTagCritic = 7106;  // the critic's state (int64 step + bytes) for the coordinator's checkpoint
// kCtlTrainCkpt: train, and a checkpoint follows this step (a critic on its own ranks sends its state).
constexpr int64_t kCtlTrain = 1, kCtlStop = 2, kCtlTrainCkpt = 3;

void nap() { std::this_thread::sleep_for(std::chrono::microseconds(300)); }

// Test-and-sleep until every request completed (never a busy spin: ranks are oversubscribed).
void wait_all(std::vector<MPI_Request>& reqs) {
    if (reqs.empty()) return;
    for (;;) {
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
        if (done) break;
        nap();
    }
    reqs.clear();
}

// One (epoch, members) a rank saw: the coordinator's announcement, logged on every member.
struct Membership {
    int64_t epoch = 0;
    std::vector<int64_t> members;
};

class AsyncScheduler final : public Scheduler {
 public:
    AsyncScheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile* run, double t0_unix,
                   std::unique_ptr<rollout::Task> task, const ckpt::Plan* plan)
        : opt_(opt), roles_(roles), run_(run), clock_(t0_unix), tl_(clock_, roles.world_rank),
          task_(std::move(task)), multiplex_(opt.mode == config::Mode::kMultiplex) {
        me_ = roles.world_rank;
        coord_ = async_coordinator(roles);
        members_ = async_train_group(opt, roles);
        in_train_ = std::count(members_.begin(), members_.end(), me_) > 0;
        // PPO with ranks tagged critic: the critic lives on them, and they join every training
        // step (after the train group in the step's communicator); otherwise on the train group.
        step_members_ = members_;
        if (opt.algo == "ppo")
            for (int r = 0; r < roles.world_size; ++r)
                if (roles.all_tags[static_cast<size_t>(r)] & cluster::kCritic) {
                    if (!std::count(step_members_.begin(), step_members_.end(), r)) step_members_.push_back(r);
                    critic_pos_.push_back(static_cast<int>(
                        std::find(step_members_.begin(), step_members_.end(), r) - step_members_.begin()));
                }
        std::sort(critic_pos_.begin(), critic_pos_.end());
        in_step_ = std::count(step_members_.begin(), step_members_.end(), me_) > 0;
        critic_root_ = critic_pos_.empty() ? coord_ : step_members_[static_cast<size_t>(critic_pos_.front())];
        for (int r = 0; r < roles.world_size; ++r) {
            const bool rolls = (roles.all_tags[static_cast<size_t>(r)] & cluster::kRollout) != 0;
            const bool trains = std::count(members_.begin(), members_.end(), r) > 0;
            if (rolls && (multiplex_ || !trains)) gens_.push_back(r);
            if (rolls && !trains) receivers_.push_back(r);
        }
        is_gen_ = std::count(gens_.begin(), gens_.end(), me_) > 0;
        is_recv_ = std::count(receivers_.begin(), receivers_.end(), me_) > 0;
        threshold_ = policy::train_threshold(opt);

        max_new_ = opt.max_new_tokens > 0 ? opt.max_new_tokens : task_->max_response_tokens();
        policy_ = make_policy(opt, *task_, task_->max_prompt_tokens() + max_new_);
        flat_ = train::share_one_buffer(policy_->parameters());
        print_model_and_algorithm(opt, roles, policy_->config(), flat_.numel());
        {
            train::FlatView fv(params());
            buckets_ = fv.plan_buckets(static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0));
        }
        train::WeightSync::Options so;
        so.bucket_bytes = static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0);
        wsync_ = std::make_unique<train::WeightSync>(so);

        // Communicators, once, up front (every rank is here: nobody is generating yet).
        p2p_ = Comm::world().dup();
        const bool in_bcast = is_recv_ || me_ == coord_;
        bcast_ = Comm::world().split(in_bcast ? 0 : MPI_UNDEFINED, me_ == coord_ ? -1 : me_);
        if (in_step_) {
            MPI_Group wg = MPI_GROUP_NULL, tg = MPI_GROUP_NULL;
            TAGFLOW_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
            TAGFLOW_MPI_CHECK(
                MPI_Group_incl(wg, static_cast<int>(step_members_.size()), step_members_.data(), &tg));
            MPI_Comm c = MPI_COMM_NULL;
            TAGFLOW_MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, tg, 7301, &c));
            MPI_Group_free(&tg);
            MPI_Group_free(&wg);
            train_comm_ = Comm::adopt(c);
            if (train_comm_.rank() !=
                static_cast<int>(std::find(step_members_.begin(), step_members_.end(), me_) - step_members_.begin()))
                throw InternalError("train group: rank order differs from the member list");
            TrainGroup g;
            g.comm = train_comm_.get();
            g.actors = static_cast<int>(members_.size());
            g.critics = critic_pos_;
            trainer_ = std::make_unique<RlTrainer>(opt, roles, policy_, g);
            // Inside a train span, time in the train group's collectives is idle (set_wait_hook).
            trainer_->set_wait_hook([this](bool waiting) {
                enter(waiting ? SpanKind::kIdle : SpanKind::kTrain, span_step_);
            });
        }
        if (is_gen_) {
            rollout::EngineConfig ec;
            ec.max_batch = opt.max_batch;
            engine_ = std::make_unique<rollout::Engine>(policy_, ec);
            setup_agent_sessions();
            gen_index_ = static_cast<int64_t>(std::find(gens_.begin(), gens_.end(), me_) - gens_.begin());
            // --rollout-ahead: when every generator trains too, each starts only about its share
            // of the next step's samples per version; more would sit in the pool and go stale
            // while they train (colocated tags, uncapped: 2/3 of all samples dropped).
            int64_t training_gens = 0;
            for (int r : gens_) training_gens += std::count(members_.begin(), members_.end(), r) > 0;
            if (in_train_)
                quota_ = policy::rollout_quota(opt, threshold_, static_cast<int64_t>(gens_.size()), training_gens);
        }
        if (me_ == coord_) {
            std::string ms, rs;
            for (int r : members_) ms += (ms.empty() ? "" : ",") + std::to_string(r);
            for (int r : gens_) rs += (rs.empty() ? "" : ",") + std::to_string(r);
            std::string cs;
            for (int k : critic_pos_) cs += (cs.empty() ? "" : ",") + std::to_string(step_members_[static_cast<size_t>(k)]);
            say("%s: coordinator rank %d; train group {%s}%s%s%s; generating ranks {%s}; threshold %lld samples; "
                "staleness %d (%s)\n",
                opt.mode.name(), coord_, ms.c_str(), cs.empty() ? "" : "; critic on ranks {", cs.c_str(),
                cs.empty() ? "" : "}", rs.c_str(), static_cast<long long>(threshold_), opt.staleness, opt.stale.c_str());
        }
        if (!opt.gateway.empty()) setup_gateway();
        lo_.assign(gens_.size(), 0);
        // Checkpoints (share/doc/checkpoints.md). With --gateway they hold the gateway samples
        // already rewarded (pool and /samples) and the recorder's id counters; sessions not yet
        // rewarded and requests in flight are not saved (clients redo them after a restart).
        if (plan) {
            ckpt_ = *plan;
            have_ckpt_ = true;
        }
        if (plan && plan->resume) restore(plan->manifest, plan->dir);
    }

    RunSummary run() override {
        RunSummary sum;
        sum.best_constant = task_->best_constant_score(opt_.eval_prompts);
        // Version 0: one WeightSync broadcast from the coordinator to the rollout-only ranks
        // (after a resume every rank loaded the checkpoint's weights instead).
        if (!bcast_.is_null() && !resumed_) {
            profile::Span span(tl_, SpanKind::kWeightSync, 0);
            train::WeightSyncStats st = wsync_->broadcast(params(), 0, bcast_.get(), 0);
            if (me_ == coord_) {
                io::SyncRecord r;
                r.version = 0;
                r.bytes = st.bytes;
                r.t_end = clock_.now();
                r.t_start = r.t_end - st.seconds;
                r.mode = wsync_->mode();
                r.dense_bytes = st.dense_bytes;
                r.buckets = st.buckets;
                syncs_.push_back(r);
            }
        }
        version_ = resumed_ ? static_cast<int32_t>(step_) : 0;
        if (engine_ && resumed_) engine_->update_weights(version_, rollout::ResumeMode::kKeep, 0);
        if (is_recv_) post_weight_recv();
        if (me_ == coord_) {
            if (resumed_) {
                resume_summary(sum);
            } else {
                double e0 = evaluate(0);
                sum.first_eval = sum.best_eval = sum.last_eval = std::max(0.0, e0);
                if (e0 >= 0) say("step %5d/%-5lld eval %.3f (held-out greedy; best constant output %.3f)\n", 0,
                                 static_cast<long long>(opt_.steps), e0, sum.best_constant);
                // A fresh run checkpoints its start too, so a job killed at any later moment can resume.
                if (have_ckpt_) checkpoint_now(sum);
            }
            coordinator_loop(sum);
        } else {
            if (!resumed_) send_critic_state();  // for the coordinator's checkpoint of the start
            worker_loop();
        }
        // The one final collective: every rank meets here, then learns the summary.
        {
            MPI_Request rq = MPI_REQUEST_NULL;
            TAGFLOW_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &rq));
            std::vector<MPI_Request> v{rq};
            wait_all(v);
        }
        double s[9] = {sum.first_reward, sum.last_reward, sum.first_eval, sum.last_eval,
                       sum.best_eval, sum.samples_per_s, sum.elapsed, static_cast<double>(sum.steps),
                       static_cast<double>(sum.exit_code)};
        TAGFLOW_MPI_CHECK(MPI_Bcast(s, 9, MPI_DOUBLE, coord_, MPI_COMM_WORLD));
        sum.first_reward = s[0], sum.last_reward = s[1], sum.first_eval = s[2], sum.last_eval = s[3];
        sum.best_eval = s[4], sum.samples_per_s = s[5], sum.elapsed = s[6], sum.steps = static_cast<long>(s[7]);
        sum.exit_code = static_cast<int>(s[8]);  // ckpt::kExitRequeue on every rank after a requeue signal
        return sum;
    }

 private:
    // ------------------------------------------------------------------ helpers
    __attribute__((format(printf, 2, 3))) void say(const char* fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        std::vprintf(fmt, ap);
        va_end(ap);
        std::fflush(stdout);
    }

    // The parameters themselves (WeightSync bumps their version counters when it writes them).
    std::vector<at::Tensor> params() { return policy_->parameters(); }

    // One span at a time per rank: entering a kind closes the previous span (so spans on one
    // rank never overlap). `step` is the rank's policy version (the training step for train).
    void enter(SpanKind k, int32_t step) {
        const double now = clock_.now();
        if (open_ && (k != kind_ || step != span_step_)) {
            if (now > span_t0_) tl_.add(kind_, span_t0_, now, span_step_);
            span_t0_ = now;
        } else if (!open_) {
            span_t0_ = now;
        }
        open_ = true;
        kind_ = k;
        span_step_ = step;
    }
    void enter(SpanKind k) { enter(k, version_); }
    // Closes the open span at now (it reopens on the next enter()).
    void cut() {
        const double now = clock_.now();
        if (open_ && now > span_t0_) tl_.add(kind_, span_t0_, now, span_step_);
        open_ = false;
    }
    std::vector<io::SpanRecord> take_spans() {
        const bool was = open_;
        const SpanKind k = kind_;
        const int32_t st = span_step_;
        cut();
        if (was) enter(k, st);
        return tl_.take();
    }

    double evaluate(int32_t step) {
        if (!roles_.is_rollout()) return -1;  // a rank without the rollout tag never generates
        enter(SpanKind::kRollout);
        torch::NoGradGuard ng;
        double e = 0;
        if (const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_)) {
            // Multi-turn: greedy sessions with the tool, on an engine of their own (engine_
            // holds the generations in flight).
            rollout::EngineConfig ec;
            ec.max_batch = opt_.max_batch;
            rollout::Engine eng(policy_, ec);
            e = evaluate_agent_task(eng, *task_, *loop, opt_.eval_prompts);
        } else {
            e = rollout::evaluate(policy_, *task_, opt_.eval_prompts, opt_.max_batch);
        }
        cut();  // the evaluation's span ends here, not at the next enter()
        if (run_) evals_.push_back({step, task_->name(), static_cast<float>(e), opt_.eval_prompts});
        return e;
    }

    // ------------------------------------------------------------------ gateway (--gateway)
    // The gateway rank is the first rank that only rolls out (never preempted); requests go to
    // the rollout-only ranks; the coordinator records them (/tree) and pools their samples.
    void setup_gateway() {
        if (receivers_.empty())
            throw ConfigError("--gateway: needs a rank that only rolls out (it is never preempted), e.g. "
                              "--rank-tags \"0=rollout;1=rollout,train\"");
        gw_rank_ = receivers_.front();
        if (me_ == coord_) {
            RecorderLimits lim;
            lim.session_idle_s = opt_.gateway_session_idle;
            gw_rec_ = std::make_unique<GatewayRecorder>(opt_.group_size, lim);
        }
        if (me_ == gw_rank_) {
            GatewayConfig gc;
            const size_t c = opt_.gateway.rfind(':');
            gc.host = c == std::string::npos || c == 0 ? "127.0.0.1" : opt_.gateway.substr(0, c);
            if (gc.host.size() > 2 && gc.host.front() == '[') gc.host = gc.host.substr(1, gc.host.size() - 2);
            gc.port = std::stoi(c == std::string::npos ? opt_.gateway : opt_.gateway.substr(c + 1));
            gc.out = opt_.out;
            gc.context = policy_->config().max_position_embeddings;
            gc.vocab = policy_->config().vocab_size;
            gc.me = me_;
            gc.coordinator = coord_;
            gc.targets = receivers_;
            gc.comm = p2p_.get();
            gc.session_idle_s = opt_.gateway_session_idle;
            gw_router_ = std::make_unique<GatewayRouter>(gc);
        } else if (is_recv_) {
            gw_worker_ = std::make_unique<GatewayWorker>(gw_rank_, p2p_.get());
        }
    }
    // Between engine steps: take routed requests, relay tokens and rewards.
    void gateway_poll() {
        if (gw_router_) gw_router_->poll(*engine_, clock_.now(), version_);
        if (gw_worker_) gw_worker_->poll(*engine_);
    }
    // Coordinator: a gateway record; complete groups of rewarded sessions join the pool.
    void gateway_ingest(const char* p, size_t n) {
        std::vector<std::vector<RolloutSample>> groups;
        gw_rec_->ingest(p, n, groups);
        for (auto& g : groups) {
            finished_ += static_cast<int64_t>(g.size());
            pool_.add_group(std::move(g));
        }
    }

    // ------------------------------------------------------------------ generation
    void fill_engine() {
        if (opt_.gateway_only) return;  // only gateway requests are generated
        const int64_t G = opt_.group_size, n = static_cast<int64_t>(gens_.size());
        while (engine_->active() + engine_->waiting() < opt_.max_batch && (quota_ == 0 || started_ < quota_)) {
            started_ += G;
            const int64_t g = next_local_++ * n + gen_index_;
            auto prompt = task_->train_prompt(g);
            for (int64_t k = 0; k < G; ++k) {
                const int64_t id = g * G + k;
                rollout::GenRequest rq;
                rq.id = id;
                rq.prompt = prompt;
                rq.params = rollout_params(opt_, *task_, max_new_, id);
                groups_of_[id] = g;
                if (agent_) start_session(rq);  // multi-turn: this is the session's first turn
                else engine_->submit(std::move(rq));
            }
        }
    }

    // One engine step (a token boundary before and after); finished samples go to `out`.
    void gen_step(std::vector<RolloutSample>& out) {
        fill_engine();
        enter(SpanKind::kRollout);
        step_versions_.push_back(version_);
        const size_t f = step_versions_.size() - 1;
        rollout::Engine::TokenCallback on_token;
        if (gw_router_) on_token = [&](const rollout::TokenEvent& e) {
            if (is_gateway_id(e.id)) gw_router_->on_token(e);
        };
        if (gw_worker_) on_token = [&](const rollout::TokenEvent& e) {
            if (is_gateway_id(e.id)) gw_worker_->on_token(e);
        };
        engine_->step([&](const rollout::GenResult& g) {
            if (is_gateway_id(g.id)) {  // a gateway request: it goes back to its client, not to the pool
                if (gw_router_) gw_router_->on_finish(g, clock_.now());
                if (gw_worker_) gw_worker_->on_finish(g);
                return;
            }
            if (agent_ && agent_->owns(g.id)) return agent_turn(g, out);
            RolloutSample r;
            r.id = g.id;
            auto it = groups_of_.find(g.id);
            r.group = it->second;
            groups_of_.erase(it);
            r.rank = me_;
            r.prompt = task_->train_prompt(r.group);
            r.response = g.response;
            r.logprobs = g.logprobs;
            r.hit_eos = g.finish == rollout::FinishReason::kStop;
            r.reward = task_->reward(r.prompt, r.response);
            r.t_done = clock_.now();
            // Per-token versions: the engine's (GenResult::versions, set by update_weights);
            // failing that, since the engine samples one token per step for every admitted
            // sequence, the n tokens of a result that finished in step f came from steps f-n+1..f.
            const size_t n = g.response.size();
            if (g.versions.size() == n) {
                r.versions = g.versions;
            } else {
                r.versions.resize(n);
                for (size_t k = 0; k < n; ++k) {
                    const size_t at = f + 1 >= n - k ? f + 1 - (n - k) : 0;
                    r.versions[k] = step_versions_[at];
                }
            }
            r.version = n ? *std::min_element(r.versions.begin(), r.versions.end()) : version_;
            out.push_back(std::move(r));
        }, on_token);
        if (gw_worker_) gw_worker_->flush();
    }

    // ------------------------------------------------------------------ agent sessions
    // Multi-turn tasks (rollout/agent_loop.hpp): each sample is a session whose model turns are
    // engine requests under the sample's id, interleaved with the others in the batch; a turn
    // that ends with a tool call gets the tool output appended (loss_mask 0, version -1) and
    // continues as a new request. A session can span weight updates (its model tokens then
    // carry several versions; its staleness is the oldest's). Finished sessions are streamed
    // like single-turn samples; the coordinator records their requests (sched/agent_stream.hpp).
    void setup_agent_sessions() {
        const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_);
        if (!loop) return;
        rollout::AgentRunConfig cfg;
        cfg.temperature = opt_.temperature;
        cfg.top_p = opt_.top_p;
        cfg.top_k = opt_.top_k;
        cfg.stop_ids = {task_->eos_token()};
        cfg.max_session_tokens = task_->max_prompt_tokens() + max_new_;
        cfg.rank = me_;
        cfg.clock = [this] { return clock_.now(); };
        agent_ = std::make_unique<rollout::AgentSessions>(*loop, cfg);
    }
    // The session of request `rq` (its id, prompt and random stream; turns sample like sync's).
    void start_session(const rollout::GenRequest& rq) {
        rollout::AgentJob job;
        job.id = rq.id;
        job.prompt = rq.prompt;
        job.seed = rq.params.seed;
        agent_->start(*engine_, rq.id, job);
    }
    // A model turn finished (from the engine's callback): the session continues or is a sample.
    void agent_turn(const rollout::GenResult& g, std::vector<RolloutSample>& out) {
        agent_done_.clear();
        agent_->on_result(*engine_, g, agent_done_);
        for (const rollout::AgentResult& a : agent_done_) {
            auto it = groups_of_.find(a.id);
            if (it == groups_of_.end()) throw InternalError("agent session " + std::to_string(a.id) + " has no group");
            out.push_back(agent_sample(a, it->second, me_, clock_.now(), version_));
            groups_of_.erase(it);
        }
    }

    // Sends finished samples (and this rank's spans so far) to the coordinator; never waits.
    void send_samples(const std::vector<RolloutSample>& s) {
        test_sends();
        wire::Writer w;
        wire::put_spans(w, take_spans());
        wire::put_samples(w, s);
        queue_send(w.take(), kTagSamples);
    }
    void test_sends() {
        for (auto it = sends_.begin(); it != sends_.end();) {
            int done = 0;
            TAGFLOW_MPI_CHECK(MPI_Test(&it->req, &done, MPI_STATUS_IGNORE));
            it = done ? sends_.erase(it) : std::next(it);
        }
    }
    void finish_sends() {
        std::vector<MPI_Request> v;
        for (auto& m : sends_) v.push_back(m.req);
        wait_all(v);
        sends_.clear();
    }

    // ------------------------------------------------------------------ weights
    // Rollout-only ranks: a header and every bucket, received into the shadow buffer.
    void post_weight_recv() {
        shadow_.resize(static_cast<size_t>(flat_.numel()));
        wreqs_.assign(1 + buckets_.size(), MPI_REQUEST_NULL);
        TAGFLOW_MPI_CHECK(MPI_Irecv(&whdr_, 1, MPI_INT, coord_, kTagWHdr, p2p_.get(), &wreqs_[0]));
        for (size_t b = 0; b < buckets_.size(); ++b)
            TAGFLOW_MPI_CHECK(MPI_Irecv(shadow_.data() + buckets_[b].first, static_cast<int>(buckets_[b].second),
                                        MPI_FLOAT, coord_, kTagWBucket + static_cast<int>(b), p2p_.get(),
                                        &wreqs_[b + 1]));
    }
    // Between decode steps: swaps in new weights when they have fully arrived.
    void test_weight_recv() {
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Testall(static_cast<int>(wreqs_.size()), wreqs_.data(), &done, MPI_STATUSES_IGNORE));
        if (!done) return;
        enter(SpanKind::kWeightSync, whdr_);
        {
            torch::NoGradGuard ng;
            // In place on the flat buffer: the parameters are views of it, their version
            // counters move, and the engine re-snapshots the weights at its next step.
            flat_.copy_(torch::from_blob(shadow_.data(), {flat_.numel()}, torch::kFloat));
        }
        // flat_.copy_ bumps flat_'s counter only: the parameters (set_data views) keep theirs.
        train::bump_versions(policy_->parameters());
        version_ = whdr_;
        // At a token boundary: in-flight generations resume with their KV caches kept.
        engine_->update_weights(version_, rollout::ResumeMode::kKeep, 0);
        post_weight_recv();
    }
    void cancel_weight_recv() {
        for (auto& r : wreqs_) {
            if (r == MPI_REQUEST_NULL) continue;
            int done = 0;
            TAGFLOW_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
            if (done) continue;
            MPI_Cancel(&r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        wreqs_.clear();
    }

    // Coordinator: the new weights to every rollout-only rank, non-blocking.
    void send_weights(int32_t version) {
        if (receivers_.empty()) return;
        wait_weight_sends();  // the send buffer is reused
        send_buf_.resize(static_cast<size_t>(flat_.numel()));
        std::memcpy(send_buf_.data(), flat_.data_ptr<float>(), send_buf_.size() * sizeof(float));
        send_version_ = version;
        for (int r : receivers_) {
            wsends_.emplace_back();
            TAGFLOW_MPI_CHECK(MPI_Isend(&send_version_, 1, MPI_INT, r, kTagWHdr, p2p_.get(), &wsends_.back()));
            for (size_t b = 0; b < buckets_.size(); ++b) {
                wsends_.emplace_back();
                TAGFLOW_MPI_CHECK(MPI_Isend(send_buf_.data() + buckets_[b].first, static_cast<int>(buckets_[b].second),
                                            MPI_FLOAT, r, kTagWBucket + static_cast<int>(b), p2p_.get(),
                                            &wsends_.back()));
            }
        }
        wsend_t0_ = clock_.now();
    }
    // Coordinator: records the sync once every message went out.
    void test_weight_sends() {
        if (wsends_.empty()) return;
        int done = 0;
        TAGFLOW_MPI_CHECK(MPI_Testall(static_cast<int>(wsends_.size()), wsends_.data(), &done, MPI_STATUSES_IGNORE));
        if (!done) return;
        wsends_.clear();
        io::SyncRecord r;
        r.version = send_version_;
        r.bytes = static_cast<int64_t>(send_buf_.size() * sizeof(float));
        r.dense_bytes = r.bytes;
        r.t_start = wsend_t0_;
        r.t_end = std::max(wsend_t0_, clock_.now());
        r.mode = "mpi_isend";
        r.buckets = static_cast<int32_t>(buckets_.size());
        syncs_.push_back(r);
    }
    void wait_weight_sends() {
        if (wsends_.empty()) return;
        enter(SpanKind::kIdle);
        while (!wsends_.empty()) {
            poll_messages();
            test_weight_sends();
            if (!wsends_.empty()) nap();
        }
    }

    // ------------------------------------------------------------------ coordinator
    struct Pending {
        MPI_Request req = MPI_REQUEST_NULL;
        std::vector<char> buf;
    };

    void add_to_pool(std::vector<RolloutSample>& got) {
        for (auto& r : got) {
            if (!first_receipt(r.id, r.group)) {  // generated again after a resume, already recorded
                ++regenerated_;
                continue;
            }
            // A multi-turn session's requests go to the tree; its row's columns then come from it.
            const bool in_tree = agent_tree_.record(r);
            written_.push_back(
                sample_row(r, task_->name(), r.group, in_tree ? RowColumns::kFromTree : RowColumns::kFromSample));
            ++finished_;
            pool_.add(std::move(r));
        }
    }

    // Receives every message that has arrived (samples, finals); never waits.
    void poll_messages() {
        for (;;) {
            int flag = 0;
            MPI_Status st;
            TAGFLOW_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, p2p_.get(), &flag, &st));
            if (!flag) return;
            int count = 0;
            TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
            std::vector<char> b(static_cast<size_t>(count));
            TAGFLOW_MPI_CHECK(MPI_Recv(b.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, p2p_.get(), MPI_STATUS_IGNORE));
            if (st.MPI_TAG == kTagGwRec && gw_rec_) {  // gateway records carry no spans
                gateway_ingest(b.data(), b.size());
                continue;
            }
            wire::Reader in(b, "async scheduler");
            if (st.MPI_TAG == kTagCritic) {  // the critic's state after step critic_step_ (its own ranks)
                critic_step_ = in.get<int64_t>();
                critic_bytes_.assign(in.pos(), in.left());
                continue;
            }
            if (st.MPI_TAG == kTagSignal) {  // a rank got SIGTERM/SIGUSR1: checkpoint, stop, exit 75
                const auto sg = static_cast<int>(in.get<int64_t>());
                if (sig_ == 0) sig_ = sg;
                continue;
            }
            auto spans = wire::get_spans(in);
            other_spans_.insert(other_spans_.end(), spans.begin(), spans.end());
            if (st.MPI_TAG == kTagSamples) {
                auto got = wire::get_samples(in);
                add_to_pool(got);
            } else if (st.MPI_TAG == kTagFinal) {
                auto n = in.get<uint64_t>();
                auto& log = seen_[st.MPI_SOURCE];
                for (uint64_t i = 0; i < n; ++i) {
                    Membership m;
                    m.epoch = in.get<int64_t>();
                    auto k = in.get<int64_t>();
                    for (int64_t j = 0; j < k; ++j) m.members.push_back(in.get<int64_t>());
                    log.push_back(m);
                }
                discarded_ += in.get<int64_t>();
                ++finals_;
            } else {
                throw InternalError("coordinator: unexpected message tag " + std::to_string(st.MPI_TAG) + " from rank " +
                                    std::to_string(st.MPI_SOURCE));
            }
        }
    }

    // Samples of complete groups that would be trained now. --stale weight: weight
    // (eta+1)/(age+1); below policy::kMinStaleWeight the sample is dropped anyway, so a rollout
    // side much faster than training cannot make the backlog ever staler.
    int64_t usable() const { return pool_.usable(version_); }

    void send_ctl(int dest, int64_t kind, int64_t epoch) {
        wire::Writer w;  // int64 fields only: poll_ctl receives them as one int64 array
        for (int64_t f : {kind, epoch, static_cast<int64_t>(version_), static_cast<int64_t>(members_.size())})
            w.put<int64_t>(f);
        for (int r : members_) w.put<int64_t>(r);
        ctl_.push_back({MPI_REQUEST_NULL, w.take()});
        auto& c = ctl_.back();
        TAGFLOW_MPI_CHECK(MPI_Isend(c.buf.data(), static_cast<int>(c.buf.size()), MPI_CHAR, dest, kTagCtl, p2p_.get(),
                                    &c.req));
    }

    void coordinator_loop(RunSummary& sum) {
        double& total = total_;
        double t_prev = clock_.now();
        std::vector<RolloutSample> mine;
        while (step_ < opt_.steps) {
            poll_messages();
            test_weight_sends();
            // A requeue signal on any rank (this one, or a kTagSignal message): stop at this
            // step boundary; the checkpoint is written below, after every rank's last samples.
            if (sig_ == 0) sig_ = ckpt::requeue_signal();
            if (sig_ != 0) break;
            // --train-timeout: a step also starts when the oldest wait is long enough and at
            // least one usable sample is there (e.g. a slow agent behind the gateway).
            const int64_t u = usable();
            if (u >= threshold_ || (opt_.train_timeout > 0 && u > 0 && clock_.now() - t_prev >= opt_.train_timeout)) {
                const double t_end = train_one(t_prev, sum, total);
                t_prev = t_end;
                if (have_ckpt_ && ckpt_.every > 0 && step_ % ckpt_.every == 0 && step_ < opt_.steps) {
                    checkpoint_now(sum);
                    t_prev = clock_.now();  // as in sync, a step's row does not include the checkpoint before it
                }
                continue;
            }
            if (is_gen_) fill_engine();
            if (is_gen_ && engine_->active() + engine_->waiting() > 0) {
                mine.clear();
                gen_step(mine);
                add_to_pool(mine);
            } else {  // not generating, or at its --rollout-ahead quota: waiting for the others' samples
                enter(SpanKind::kIdle);  // waiting for samples
                nap();
            }
        }
        wait_weight_sends();
        // End of run: STOP to every other rank; their last samples and spans come back.
        for (int r = 0; r < roles_.world_size; ++r)
            if (r != coord_) send_ctl(r, kCtlStop, step_);
        enter(SpanKind::kIdle);
        while (finals_ < roles_.world_size - 1) {
            poll_messages();
            nap();
        }
        std::vector<MPI_Request> v;
        for (auto& c : ctl_) v.push_back(c.req);
        wait_all(v);
        ctl_.clear();
        if (engine_) discarded_ += engine_->active() + engine_->waiting();
        seen_[coord_] = my_log_;
        int64_t leftover = finished_ - consumed_count_;
        cut();
        {
            std::vector<io::SpanRecord> spans = tl_.take();
            spans.insert(spans.end(), other_spans_.begin(), other_spans_.end());
            other_spans_.clear();
            write({}, {}, spans);
        }
        write_membership();
        sum.steps = step_;
        sum.elapsed = clock_.now();
        sum.samples_per_s = total / std::max(1e-9, sum.elapsed);
        // The end of the run or a requeue: every rank stopped, its last samples are in the pool
        // and the file, so the checkpoint holds everything finished and nothing after it.
        if (have_ckpt_) write_checkpoint(sum);
        if (sig_ != 0 && step_ < opt_.steps) {
            if (have_ckpt_)
                say("tagflow: checkpoint at step %lld after %s; exiting for requeue\n", static_cast<long long>(step_),
                    ckpt::signal_name(sig_));
            else
                say("tagflow: %s at step %lld; no checkpoint; exiting for requeue\n", ckpt::signal_name(sig_),
                    static_cast<long long>(step_));
            sum.exit_code = ckpt::kExitRequeue;
        }
        if (regenerated_ > 0)
            say("%s: %lld samples generated again after the resume were already recorded before the checkpoint "
                "(dropped)\n", opt_.mode.name(), static_cast<long long>(regenerated_));
        say("%s: %lld samples finished, %lld consumed (%lld dropped as stale, %lld trained with a staleness "
            "weight), %lld left over at the end, %lld unfinished generations discarded\n",
            opt_.mode.name(), static_cast<long long>(finished_), static_cast<long long>(consumed_count_),
            static_cast<long long>(dropped_), static_cast<long long>(weighted_), static_cast<long long>(leftover),
            static_cast<long long>(discarded_));
    }

    // One training step on the coordinator; returns its t_end.
    double train_one(double t_start, RunSummary& sum, double& total) {
        const int32_t s = static_cast<int32_t>(step_);
        enter(SpanKind::kResplit, s);
        const bool ckpt_next = have_ckpt_ && ckpt_.every > 0 && (s + 1) % ckpt_.every == 0 && s + 1 < opt_.steps;
        for (int r : step_members_)
            if (r != coord_) send_ctl(r, ckpt_next ? kCtlTrainCkpt : kCtlTrain, s);
        my_log_.push_back({s, std::vector<int64_t>(members_.begin(), members_.end())});
        // The batch: complete groups, oldest first; stale samples dropped (weight 0) or weighted.
        PoolBatch pb = pool_.take_batch(threshold_, version_);
        std::vector<RolloutSample>& batch = pb.samples;
        std::vector<io::ConsumedRecord> consumed;
        for (int64_t id : pb.dropped_ids) consumed.push_back({id, s, 0.f, 0.f});
        const double age_sum = pb.age_sum;
        const int64_t age_max = pb.age_max;
        const auto stale_dropped = static_cast<int64_t>(pb.dropped_ids.size());
        dropped_ += stale_dropped;
        weighted_ += pb.weighted;
        bcast_batch(batch);
        enter(SpanKind::kTrain, s);
        TrainReport tr = trainer_->train_step(s, batch);
        version_ = s + 1;
        started_ = 0;
        if (engine_) engine_->update_weights(version_, rollout::ResumeMode::kKeep, 0);  // resume, KV kept
        enter(SpanKind::kWeightSync);
        send_weights(version_);
        for (size_t i = 0; i < batch.size(); ++i) consumed.push_back({batch[i].id, s, tr.advantages[i], batch[i].weight});
        consumed_count_ += static_cast<int64_t>(consumed.size());
        ++step_;
        // The evaluation (generation, on the coordinator) falls between steps, not inside one.
        const double t_end = clock_.now();
        const bool eval_now = (opt_.eval_every > 0 && step_ % opt_.eval_every == 0) || step_ == opt_.steps;
        const double ev = eval_now ? evaluate(static_cast<int32_t>(step_)) : -1;

        io::StepRecord row;
        row.step = s;
        row.t_start = t_start;
        row.t_end = t_end;
        row.policy_version = version_;
        row.samples = static_cast<int64_t>(batch.size());
        double mean = 0, var = 0;
        int64_t tokens = 0;
        for (const auto& r : batch) {
            mean += r.reward;
            tokens += static_cast<int64_t>(r.prompt.size() + r.response.size());
        }
        mean /= std::max<double>(1, static_cast<double>(batch.size()));
        for (const auto& r : batch) var += (r.reward - mean) * (r.reward - mean);
        row.tokens = tokens;
        row.reward_mean = static_cast<float>(mean);
        row.reward_std = static_cast<float>(std::sqrt(var / std::max<double>(1, static_cast<double>(batch.size()))));
        row.loss = static_cast<float>(tr.loss);
        row.kl = static_cast<float>(tr.kl);
        row.entropy = static_cast<float>(tr.entropy);
        row.clip_frac = static_cast<float>(tr.clip_frac);
        row.logprob_diff_mean = static_cast<float>(tr.logprob_diff_mean);
        row.staleness_mean = static_cast<float>(age_sum / std::max<double>(1, static_cast<double>(batch.size())));
        row.staleness_max = static_cast<int32_t>(age_max);
        row.stale_dropped = stale_dropped;
        row.stale_weighted = pb.weighted;
        const double dt = std::max(1e-9, t_end - t_start);
        row.samples_per_s = static_cast<float>(static_cast<double>(batch.size()) / dt);
        // Idle: every rank's idle spans inside this step, as known to the coordinator now.
        std::vector<io::SpanRecord> spans = take_spans();
        spans.insert(spans.end(), other_spans_.begin(), other_spans_.end());
        other_spans_.clear();
        double idle = 0;
        for (const auto& sp : spans)
            if (sp.kind == SpanKind::kIdle) idle += std::max(0.0, std::min(sp.t_end, t_end) - std::max(sp.t_start, t_start));
        row.idle_frac = static_cast<float>(std::min(1.0, idle / (roles_.world_size * dt)));
        total += static_cast<double>(batch.size());
        if (s == 0) sum.first_reward = row.reward_mean;
        sum.last_reward = row.reward_mean;
        if (ev >= 0) {
            sum.last_eval = ev;
            sum.best_eval = std::max(sum.best_eval, ev);
        }
        enter(SpanKind::kIo);
        write(consumed, {row}, spans);
        char evs[32] = "";
        if (ev >= 0) snprintf(evs, sizeof evs, "  eval %.3f", ev);
        say("step %5d/%-5lld reward %.3f ± %.3f%s  loss %+.4f  samples/s %7.1f  staleness %.2f/%d  idle %4.1f%%  "
            "elapsed %6.1fs\n",
            s + 1, static_cast<long long>(opt_.steps), row.reward_mean, row.reward_std, evs, row.loss,
            row.samples_per_s, row.staleness_mean, row.staleness_max, 100.0 * row.idle_frac, clock_.now());
        return t_end;
    }

    // Train group: the coordinator's batch to every member (Ibcast, test-and-sleep).
    void bcast_batch(std::vector<RolloutSample>& batch) {
        std::vector<char> b;
        if (me_ == coord_) b = pack_samples(batch);
        int64_t n = static_cast<int64_t>(b.size());
        std::vector<MPI_Request> v(1);
        TAGFLOW_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_INT64_T, 0, train_comm_.get(), &v[0]));
        wait_all(v);
        b.resize(static_cast<size_t>(n));
        v.assign(1, MPI_REQUEST_NULL);
        TAGFLOW_MPI_CHECK(MPI_Ibcast(b.data(), static_cast<int>(n), MPI_CHAR, 0, train_comm_.get(), &v[0]));
        wait_all(v);
        if (me_ != coord_) batch = unpack_samples(b.data(), b.size());
    }

    void write(const std::vector<io::ConsumedRecord>& consumed, const std::vector<io::StepRecord>& steps,
               const std::vector<io::SpanRecord>& spans) {
        if (gw_rec_) gw_rec_->write(*run_, written_);  // /tree rows first, then the samples naming them
        agent_tree_.write(*run_, written_);            // multi-turn sessions: likewise
        run_->append_samples(written_);
        written_.clear();
        run_->append_consumed(consumed);
        run_->append_steps(steps);
        run_->append_eval(evals_);
        evals_.clear();
        run_->append_syncs(syncs_);
        syncs_.clear();
        run_->append_timeline(spans);
        run_->flush();
    }

    // OUT/membership.json: the train group of every epoch as each member saw it announced.
    void write_membership() {
        std::ofstream f(opt_.out + "/membership.json");
        f << "{\"mode\": \"" << opt_.mode.name() << "\", \"coordinator\": " << coord_ << ", \"critic\": [";
        for (size_t k = 0; k < critic_pos_.size(); ++k)
            f << (k ? ", " : "") << step_members_[static_cast<size_t>(critic_pos_[k])];
        f << "], \"seen\": {";
        bool first = true;
        for (const auto& [rank, log] : seen_) {
            f << (first ? "" : ", ") << "\"" << rank << "\": [";
            first = false;
            for (size_t i = 0; i < log.size(); ++i) {
                f << (i ? ", " : "") << "[" << log[i].epoch << ", [";
                for (size_t j = 0; j < log[i].members.size(); ++j) f << (j ? ", " : "") << log[i].members[j];
                f << "]]";
            }
            f << "]";
        }
        f << "}}\n";
    }

    // ------------------------------------------------------------------ checkpoints
    // (mpi_app/ckpt, share/doc/checkpoints.md.) Sample ids are g*G+k and generator i of n
    // takes the groups i, i+n, i+2n, ... in order (fill_engine), so what the coordinator has
    // received is: per generator a low-water mark lo_[i] (its groups k*n+i, k < lo_[i], are all
    // complete) and the ids received above it (recv_ids_). A sample whose id is below the mark
    // or already in the set was recorded before: after a resume the generators start again at
    // their marks, and what they generate again is dropped here, so no id reaches /samples twice
    // and none handed out before the checkpoint but not received by it is left out.
    bool first_receipt(int64_t id, int64_t g) {
        const auto n = static_cast<int64_t>(gens_.size());
        if (n == 0 || g < 0) return true;
        const int64_t i = g % n, k = g / n, G = opt_.group_size;
        int64_t& lo = lo_[static_cast<size_t>(i)];
        if (k < lo || !recv_ids_.insert(id).second) return false;
        ++recv_count_[g];
        for (;;) {
            const int64_t low = lo * n + i;
            auto it = recv_count_.find(low);
            if (it == recv_count_.end() || it->second < G) break;
            for (int64_t j = 0; j < G; ++j) recv_ids_.erase(low * G + j);
            recv_count_.erase(it);
            ++lo;
        }
        return true;
    }

    static std::string join(const std::vector<int64_t>& v) {
        std::string out;
        for (int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
        return out.empty() ? "-" : out;
    }
    static std::vector<int64_t> split_ints(const std::string& s) {
        std::vector<int64_t> out;
        if (s == "-") return out;
        std::stringstream in(s);
        std::string t;
        while (std::getline(in, t, ',')) {
            try {
                out.push_back(std::stoll(t));
            } catch (const std::exception&) {
                throw ConfigError("checkpoint: malformed list value '" + s.substr(0, 60) + "'");
            }
        }
        return out;
    }

    // Coordinator, between training steps: everything received so far to the file, then the
    // checkpoint at step_ (the weight sends of this version complete first, so /syncs has it).
    void checkpoint_now(const RunSummary& sum) {
        wait_weight_sends();
        enter(SpanKind::kIo);
        std::vector<io::SpanRecord> spans = take_spans();
        spans.insert(spans.end(), other_spans_.begin(), other_spans_.end());
        other_spans_.clear();
        write({}, {}, spans);
        write_checkpoint(sum);
    }

    // Writes `n` bytes as the checkpoint staging dir's file `name`; its manifest entry.
    static ckpt::FileEntry write_staged(const std::string& tmp, const std::string& name, const char* data, size_t n) {
        std::ofstream f(tmp + "/" + name, std::ios::binary);
        f.write(data, static_cast<std::streamsize>(n));
        f.close();
        if (!f) throw Error("checkpoint: cannot write " + tmp + "/" + name);
        return ckpt::describe_file(tmp, name);
    }

    // Coordinator only (no collective: the other ranks go on generating): the policy, the
    // trainer states (the train group's first rank holds all of them, critic included), the pool
    // (pool.bin: every finished-but-untrained sample, all fields) and the scheduler state in the
    // manifest. The run file must be flushed with every pooled sample (written_ empty).
    void write_checkpoint(const RunSummary& sum) {
        if (!written_.empty()) throw InternalError("checkpoint: samples not yet in the run file");
        enter(SpanKind::kCheckpoint, static_cast<int32_t>(step_));
        const std::string tmp = ckpt::staging_dir(ckpt_.out, step_);
        ckpt::prepare_staging(tmp);
        std::vector<ckpt::FileEntry> files;
        policy_->save_pretrained(tmp + "/policy");
        ckpt::fsync_path(tmp + "/policy");
        files.push_back(ckpt::describe_file(tmp, "policy/config.json"));
        files.push_back(ckpt::describe_file(tmp, "policy/model.safetensors"));
        for (const std::string& name : trainer_->save_state(tmp)) files.push_back(ckpt::describe_file(tmp, name));
        if (critic_root_ != coord_) {  // the critic is on ranks of its own: its state as it sent it
            while (critic_step_ != step_) {
                poll_messages();
                nap();
            }
            files.push_back(write_staged(tmp, "critic_state.pt", critic_bytes_.data(), critic_bytes_.size()));
        }
        std::vector<RolloutSample> pooled;
        for (const auto& [g, v] : pool_.groups()) pooled.insert(pooled.end(), v.begin(), v.end());
        const int64_t partial = pool_.partial_groups();
        const std::vector<char> b = pack_samples(pooled);
        files.push_back(write_staged(tmp, "pool.bin", b.data(), b.size()));
        ckpt::Manifest m;
        put_run_keys(m, opt_, task_->name(), roles_.world_size, step_, version_, sum, total_);
        const auto n = static_cast<int64_t>(gens_.size());
        int64_t next_group = std::numeric_limits<int64_t>::max();
        for (int64_t i = 0; i < n; ++i) next_group = std::min(next_group, lo_[static_cast<size_t>(i)] * n + i);
        m.set_int("next_group", n ? next_group : 0);  // the dataset cursor: every group below it is complete
        m.set("sched.gens", join(std::vector<int64_t>(gens_.begin(), gens_.end())));
        m.set("sched.members", join(std::vector<int64_t>(members_.begin(), members_.end())));
        m.set("sched.lo", join(lo_));  // generator i resumes at its group lo[i]*n+i
        m.set("sched.received", join(std::vector<int64_t>(recv_ids_.begin(), recv_ids_.end())));
        m.set("sched.ready", join(std::vector<int64_t>(pool_.ready().begin(), pool_.ready().end())));
        m.set_int("sched.pool_samples", static_cast<int64_t>(pooled.size()));
        m.set_int("sched.pool_groups", static_cast<int64_t>(pool_.groups().size()));
        m.set_int("sched.pool_partial_groups", partial);
        m.set_int("sched.finished", finished_);
        m.set_int("sched.consumed", consumed_count_);
        m.set_int("sched.dropped", dropped_);
        m.set_int("sched.weighted", weighted_);
        m.set_int("sched.discarded", discarded_);
        // Gateway sample/group ids continue after these on resume (kept through a resume
        // without --gateway too, so a later one with it cannot reuse ids of the pool or file).
        if (gw_rec_) gw_next_ = gw_rec_->next_ids();
        m.set_int("sched.gw_next_id", gw_next_.first);
        m.set_int("sched.gw_next_group", gw_next_.second);
        m.set_double("t", clock_.now());
        ckpt::put_sizes(m, run_->sizes());
        m.files = files;
        ckpt::write_manifest(tmp, m);
        ckpt::commit(ckpt_.out, tmp);
        cut();
    }

    // Constructor, when resuming (every rank, same manifest): the weights on every rank, the
    // trainer states on the train group, each generator's cursor; the coordinator also its pool,
    // receipts and counters. A different split of the ranks is one ConfigError on every rank.
    void restore(const ckpt::Manifest& m, const std::string& dir) {
        check_async_resume(opt_, roles_, m);  // train_command checked it already, before touching the run file
        if (split_ints(m.get("sched.gens")) != std::vector<int64_t>(gens_.begin(), gens_.end()))
            throw InternalError("resume: generating ranks differ from check_async_resume's");
        lo_ = split_ints(m.get("sched.lo"));
        if (lo_.size() != gens_.size()) throw ConfigError("checkpoint " + m.path + ": sched.lo does not match sched.gens");
        try {
            torch::NoGradGuard ng;
            policy_->load_hf_state_dict(model::load_safetensors(dir + "/policy/model.safetensors"));
            if (trainer_) trainer_->load_state(dir);
        } catch (const Error& e) {
            throw Error(std::string("resume: ") + e.what());
        }
        flat_ = train::share_one_buffer(policy_->parameters());
        step_ = m.get_int("step");
        trained_ = step_;
        if (is_gen_) next_local_ = lo_[static_cast<size_t>(gen_index_)];
        resumed_ = true;
        resume_manifest_ = m;
        if (me_ != coord_) return;
        std::ifstream f(dir + "/pool.bin", std::ios::binary);
        std::vector<char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        pool_.restore(unpack_samples(b.data(), b.size()), split_ints(m.get("sched.ready")));
        for (int64_t id : split_ints(m.get("sched.received"))) {
            recv_ids_.insert(id);
            ++recv_count_[id / opt_.group_size];
        }
        finished_ = m.get_int("sched.finished");
        consumed_count_ = m.get_int("sched.consumed");
        dropped_ = m.get_int("sched.dropped");
        weighted_ = m.get_int("sched.weighted");
        discarded_ = m.get_int("sched.discarded");
        if (m.has("sched.gw_next_id"))  // absent: an older checkpoint, written without gateway ids
            gw_next_ = {m.get_int("sched.gw_next_id"), m.get_int("sched.gw_next_group")};
        if (gw_rec_) gw_rec_->resume_ids(gw_next_.first, gw_next_.second);
    }
    // run(), coordinator, when resuming: the summary so far.
    void resume_summary(RunSummary& sum) {
        const ckpt::Manifest& m = resume_manifest_;
        get_run_summary(m, sum, total_);
        say("tagflow: resumed from checkpoint at step %lld (policy version %lld, next prompt group %lld; %lld "
            "untrained samples in the pool)\n",
            static_cast<long long>(step_), static_cast<long long>(m.get_int("policy_version")),
            static_cast<long long>(m.get_int("next_group")), static_cast<long long>(m.get_int("sched.pool_samples")));
    }

    // The first critic rank, when it is not the coordinator and the run checkpoints: the critic's
    // state (after `trained_` steps) to the coordinator, which writes it into the checkpoint.
    // Through sends_, so it completes before this rank's final message.
    void send_critic_state() {
        if (!have_ckpt_ || me_ != critic_root_ || me_ == coord_ || !trainer_) return;
        const std::string st = trainer_->critic_state();
        wire::Writer w;
        w.put<int64_t>(trained_);
        w.raw(st.data(), st.size());
        queue_send(w.take(), kTagCritic);
    }

    // Any rank but the coordinator: a requeue signal to the coordinator, once (through sends_,
    // so it completes before this rank's final message).
    void send_signal(int sig) {
        sig_sent_ = true;
        wire::Writer w;
        w.put<int64_t>(sig);
        queue_send(w.take(), kTagSignal);
    }
    // A message to the coordinator through sends_ (completed by test_sends/finish_sends).
    void queue_send(std::vector<char> b, int tag) {
        sends_.push_back({MPI_REQUEST_NULL, std::move(b)});
        auto& m = sends_.back();
        TAGFLOW_MPI_CHECK(
            MPI_Isend(m.buf.data(), static_cast<int>(m.buf.size()), MPI_CHAR, coord_, tag, p2p_.get(), &m.req));
    }

    // ------------------------------------------------------------------ other ranks
    // Returns the control message from the coordinator if one has arrived (never waits).
    bool poll_ctl(std::vector<int64_t>& m) {
        int flag = 0;
        MPI_Status st;
        TAGFLOW_MPI_CHECK(MPI_Iprobe(coord_, kTagCtl, p2p_.get(), &flag, &st));
        if (!flag) return false;
        int count = 0;
        TAGFLOW_MPI_CHECK(MPI_Get_count(&st, MPI_CHAR, &count));
        m.assign(static_cast<size_t>(count) / sizeof(int64_t), 0);
        TAGFLOW_MPI_CHECK(MPI_Recv(m.data(), count, MPI_CHAR, coord_, kTagCtl, p2p_.get(), MPI_STATUS_IGNORE));
        if (m.size() < 4 || m.size() != 4 + static_cast<size_t>(m[3]))
            throw InternalError("rank " + std::to_string(me_) + ": malformed control message from the coordinator");
        return true;
    }

    void worker_loop() {
        std::vector<int64_t> ctl;
        std::vector<RolloutSample> done;
        for (;;) {
            // A requeue signal here: tell the coordinator once (it checkpoints and STOPs all).
            if (!sig_sent_ && ckpt::requeue_signal() != 0) send_signal(ckpt::requeue_signal());
            if (poll_ctl(ctl)) {
                if (ctl[0] == kCtlStop) break;
                if ((ctl[0] != kCtlTrain && ctl[0] != kCtlTrainCkpt) || !in_step_)
                    throw InternalError("rank " + std::to_string(me_) + ": told to train, but it is not in the train group");
                // Preempted into the train group: the engine is not stepped until training ends.
                const auto s = static_cast<int32_t>(ctl[1]);
                enter(SpanKind::kResplit, s);
                Membership mb;
                mb.epoch = ctl[1];
                mb.members.assign(ctl.begin() + 4, ctl.end());
                my_log_.push_back(mb);
                if (mb.members != std::vector<int64_t>(members_.begin(), members_.end()))
                    throw InternalError("rank " + std::to_string(me_) + ": epoch " + std::to_string(s) +
                                        " announces a train group other than the one built up front");
                std::vector<RolloutSample> batch;
                bcast_batch(batch);
                enter(SpanKind::kTrain, s);
                trainer_->train_step(s, batch);
                trained_ = s + 1;
                if (trainer_->has_actor()) {  // else (a critic rank) new weights come by the broadcast, if at all
                    version_ = s + 1;
                    started_ = 0;
                    if (engine_) engine_->update_weights(version_, rollout::ResumeMode::kKeep, 0);  // resume, KV kept
                }
                if (ctl[0] == kCtlTrainCkpt) send_critic_state();
                enter(is_gen_ ? SpanKind::kRollout : SpanKind::kIdle);
                continue;
            }
            if (is_recv_) test_weight_recv();
            done.clear();
            if (is_gen_) {
                gateway_poll();
                gen_step(done);
                if (engine_->active() + engine_->waiting() == 0) {  // nothing to generate (--gateway-only)
                    enter(SpanKind::kIdle);
                    nap();
                }
            } else {
                enter(SpanKind::kIdle);  // a train-only rank waiting for the next training step
                nap();
            }
            // Finished samples go out at once; spans at least every second anyway.
            if (!done.empty() || clock_.now() - last_ship_ > 1.0) {
                last_ship_ = clock_.now();
                send_samples(done);
            } else {
                test_sends();
            }
        }
        // STOP: unfinished generations are discarded (never written); finished ones are sent.
        send_critic_state();  // for the checkpoint the coordinator writes now
        if (gw_router_) gw_router_->stop();  // the HTTP thread ends; requests in flight end "abort"
        if (gw_worker_) gw_worker_->finish_sends();
        if (is_recv_) cancel_weight_recv();
        const int64_t discarded = engine_ ? engine_->active() + engine_->waiting() : 0;
        enter(SpanKind::kIdle);
        finish_sends();
        cut();
        wire::Writer w;
        wire::put_spans(w, tl_.take());
        w.put<uint64_t>(my_log_.size());
        for (const auto& m : my_log_) {
            w.put<int64_t>(m.epoch);
            w.put<int64_t>(static_cast<int64_t>(m.members.size()));
            for (int64_t r : m.members) w.put<int64_t>(r);
        }
        w.put<int64_t>(discarded);
        std::vector<char> b = w.take();
        MPI_Request rq = MPI_REQUEST_NULL;
        TAGFLOW_MPI_CHECK(MPI_Isend(b.data(), static_cast<int>(b.size()), MPI_CHAR, coord_, kTagFinal, p2p_.get(), &rq));
        std::vector<MPI_Request> v{rq};
        wait_all(v);
    }

    // ------------------------------------------------------------------ state
    const config::Options& opt_;
    cluster::Roles& roles_;
    io::RunFile* run_;
    profile::Clock clock_;
    profile::Timeline tl_;
    std::unique_ptr<rollout::Task> task_;
    bool multiplex_;
    int me_ = 0, coord_ = 0;
    std::vector<int> members_, gens_, receivers_;
    bool in_train_ = false, is_gen_ = false, is_recv_ = false;
    std::vector<int> step_members_;  // every rank of a training step: the train group, then critic-only ranks
    std::vector<int> critic_pos_;    // positions in step_members_ of the ranks holding the critic (ppo; empty: the train group)
    bool in_step_ = false;
    int critic_root_ = 0;            // the first critic rank (writes critic_state.pt's content)
    int64_t trained_ = 0;            // steps this rank took part in (critic state stamps)
    int64_t critic_step_ = -1;       // coordinator: the step of critic_bytes_
    std::string critic_bytes_;
    int64_t threshold_ = 0;
    int32_t max_new_ = 0;
    int32_t version_ = 0;

    model::LlamaModel policy_{nullptr};
    at::Tensor flat_;
    std::vector<std::pair<size_t, size_t>> buckets_;
    std::unique_ptr<train::WeightSync> wsync_;
    std::unique_ptr<RlTrainer> trainer_;
    std::unique_ptr<rollout::Engine> engine_;
    Comm p2p_, bcast_, train_comm_;

    // span recorder
    bool open_ = false;
    SpanKind kind_ = SpanKind::kIdle;
    int32_t span_step_ = 0;
    double span_t0_ = 0;

    // generation
    int64_t gen_index_ = 0, next_local_ = 0;
    int64_t quota_ = 0, started_ = 0;  // --rollout-ahead: samples a train-group generator may start per version
    std::map<int64_t, int64_t> groups_of_;  // sample id -> group, while generating
    std::vector<int32_t> step_versions_;    // policy version at each engine step
    std::list<Pending> sends_;

    // gateway (--gateway)
    int gw_rank_ = -1;
    std::unique_ptr<GatewayRouter> gw_router_;    // on the gateway rank
    std::unique_ptr<GatewayWorker> gw_worker_;    // on the other rollout-only ranks
    std::unique_ptr<GatewayRecorder> gw_rec_;     // on the coordinator
    std::pair<int64_t, int64_t> gw_next_{0, 0};   // coordinator: the recorder's id counters (checkpoints)

    // multi-turn tasks (agent loops)
    std::unique_ptr<rollout::AgentSessions> agent_;  // on generating ranks: the live sessions
    std::vector<rollout::AgentResult> agent_done_;   // sessions ended by one engine result
    AgentTreeRecorder agent_tree_;                   // on the coordinator: their requests (/tree)
    double last_ship_ = 0;

    // weights
    std::vector<float> shadow_;
    int whdr_ = 0;
    std::vector<MPI_Request> wreqs_;
    std::vector<float> send_buf_;
    int send_version_ = 0;
    std::vector<MPI_Request> wsends_;
    double wsend_t0_ = 0;

    // coordinator
    int64_t step_ = 0;
    SamplePool pool_{opt_};                                // finished samples not yet trained
    std::vector<io::SampleRecord> written_;                // finished samples not yet in the file
    std::vector<io::SpanRecord> other_spans_;
    std::vector<io::EvalRecord> evals_;
    std::vector<io::SyncRecord> syncs_;
    std::list<Pending> ctl_;
    int64_t finished_ = 0, consumed_count_ = 0, dropped_ = 0, weighted_ = 0, discarded_ = 0;
    int finals_ = 0;
    std::vector<Membership> my_log_;
    std::map<int, std::vector<Membership>> seen_;

    // checkpoints and requeue signals
    ckpt::Plan ckpt_;
    bool have_ckpt_ = false, resumed_ = false, sig_sent_ = false;
    int sig_ = 0;                          // coordinator: the requeue signal some rank received
    double total_ = 0;                     // samples trained so far (the summary's rate)
    ckpt::Manifest resume_manifest_;
    std::vector<int64_t> lo_;              // coordinator: per generator, its groups below lo*n+i are complete
    std::set<int64_t> recv_ids_;           // coordinator: ids received in groups above the marks
    std::map<int64_t, int64_t> recv_count_;  // coordinator: group -> its ids in recv_ids_
    int64_t regenerated_ = 0;              // generated again after a resume, already recorded: dropped
};

}  // namespace

std::unique_ptr<Scheduler> make_async_scheduler(const config::Options& opt, cluster::Roles& roles,
                                                io::RunFile* run, double t0_unix,
                                                std::unique_ptr<rollout::Task> task,
                                                const ckpt::Plan* ckpt) {
    return std::make_unique<AsyncScheduler>(opt, roles, run, t0_unix, std::move(task), ckpt);
}

}  // namespace tagflow::sched
