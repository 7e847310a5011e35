// SPDX-License-Identifier: Apache-2.0
// async_scheduler_impl: the class behind make_async_scheduler (async_scheduler.hpp), shared by
// the files that implement it, one per role: async_scheduler.cpp (construction, run(), spans,
// evaluation), async_generator.cpp (generation and the samples stream), async_agent.cpp
// (multi-turn sessions), async_gateway.cpp (--gateway glue), async_weights.cpp (the weight
// broadcast and its shadow receive), async_coordinator.cpp (pool, training steps, the run file),
// async_checkpoint.cpp (checkpoints, resume, first receipts), async_worker.cpp (the other
// ranks' loop) and async_data.cpp (--data: the coordinator's sampler, assignments, rewards). Internal: included by those files only. The message protocol is described in
// async_scheduler.cpp.
#pragma once
#include <mpi.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <list>
#include <map>
#include <numeric>
#include <optional>
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
#include "sched/async_scheduler.hpp"
#include "step/data_task.hpp"
#include "sched/agent_stream.hpp"
#include "step/exchange.hpp"
#include "serve/gateway_router.hpp"
#include "sched/sched_policy.hpp"
#include "step/rl_trainer.hpp"
#include "sched/sample_pool.hpp"
#include "step/sample_row.hpp"
#include "step/validation.hpp"
#include "step/wire.hpp"
#include "train/delta_sync.hpp"
#include "train/delta_sync_mpi.hpp"
#include "train/weight_push_mpi.hpp"
#include "tagflow/config.hpp"

namespace tagflow::sched::async {
using io::SpanKind;

inline constexpr int kTagSamples = 7101, kTagCtl = 7102, kTagFinal = 7103;
// A requeue signal (SIGTERM/SIGUSR1) a rank received: rank -> C, one int64 (the signal), once.
inline constexpr int kTagSignal = 7105;
inline constexpr int kTagCritic = 7106;  // the critic's state (int64 step + bytes) for the coordinator's checkpoint
// --data: C -> generator, int64 prompt groups to generate, in order (the row is the group's, step/data_task.hpp).
inline constexpr int kTagAssign = 7107;
// --data, --reward-error fail: generator -> C, once, the failed reward's one-line cause.
inline constexpr int kTagRewardError = 7108;
// --admission staleness: C -> generator, int64 pairs (version V, K): holding version >= V, the
// generator may start its local prompt groups below K (async_admission.cpp).
inline constexpr int kTagAdmit = 7109;
// Clock ping-pongs, C -> every other rank and back, on clk_ only (profile/clock_sync.hpp ping_peer).
inline constexpr int kTagClock = 7110;
// --shard: a train or critic rank's shares of the AdamW moments -> C, for its checkpoint: int64
// step, int64 count, then (file name, bytes) strings (RlTrainer::optim_shards).
inline constexpr int kTagShards = 7111;
// --rebalance-every: C -> a rank joining the train group: its actor's state (RlTrainer::actor_state)
// then the coordinator's weights hash (uint64, checked by the joiner after it loaded the state).
inline constexpr int kTagState = 7112;
// Weights, C -> rollout-only ranks (train/weight_push_mpi.hpp): a header on this tag, bucket b on this + 1 + b.
inline constexpr int kTagWeights = 9000;
// kCtlTrainCkpt: train, and a checkpoint follows this step (a critic on its own ranks sends its state).
// kCtlLeave (--rebalance-every): the rank leaves the train group; it generates on and receives the
// weights from the coordinator from the version it holds (the message's).
inline constexpr int64_t kCtlTrain = 1, kCtlStop = 2, kCtlTrainCkpt = 3, kCtlLeave = 4;

inline void nap() { std::this_thread::sleep_for(std::chrono::microseconds(300)); }

// Test-and-sleep until every request completed (never a busy spin: ranks are oversubscribed).
inline void wait_all(std::vector<MPI_Request>& reqs) {
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

// What a rank's final message says about its weights and its engine (report_weights()).
struct FinalWeights {
    int32_t version = -1;  // the version a rollout-only rank holds (-1: not one)
    uint64_t hash = 0;     // AsyncScheduler::weights_hash() of it
    int64_t recomputed_tokens = 0, recomputed_seqs = 0, updates = 0;  // its engine's (--resume-mode)
    uint64_t critic_hash = 0;  // --rebalance-every, a member with ppo's critic: RlTrainer::critic_hash()
};

// A non-blocking send whose buffer lives until it completes.
struct Pending {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<char> buf;
};

class AsyncScheduler final : public Scheduler {
public:
    AsyncScheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile* run, double t0_unix,
                   std::unique_ptr<rollout::Task> task, const ckpt::Plan* plan);

    RunSummary run() override;

private:
    // ------------------------------------------------------------------ helpers
    __attribute__((format(printf, 2, 3))) void say(const char* fmt, ...);

    // The parameters themselves (WeightSync bumps their version counters when it writes them).
    std::vector<at::Tensor> params() { return policy_->parameters(); }

    // One span at a time per rank: entering a kind closes the previous span (so spans on one
    // rank never overlap). `step` is the rank's policy version (the training step for train).
    void enter(SpanKind k, int32_t step);
    void enter(SpanKind k) { enter(k, version_); }
    // Closes the open span at now (it reopens on the next enter()).
    void cut();
    std::vector<io::SpanRecord> take_spans();

    // Coordinator, between steps: the built-in task's held-out greedy evaluation, or with --data
    // the --val-data validation (validate_data); -1 when there is none.
    double evaluate(int32_t step);
    // --val-data (coordinator alone, no collective): every validation row answered with the newest
    // weights on an engine of its own (engine_ may hold generations in flight) and scored by the
    // rank's validation scorer (step/validation.hpp); the /eval rows of `step` go to evals_ and
    // val_line_ holds the progress line's text. A reward that fails under --reward-error fail sets
    // reward_error_ (the loop stops at this boundary with a checkpoint) and returns -1.
    double validate_data(int32_t step);

    // ------------------------------------------------------------------ gateway (--gateway)
    // The gateway rank is the first rank that only rolls out (never preempted); requests go to
    // the rollout-only ranks; the coordinator records them (/tree) and pools their samples.
    void setup_gateway();
    // Between engine steps: take routed requests, relay tokens and rewards.
    void gateway_poll();
    // Coordinator: a gateway record; complete groups of rewarded sessions join the pool.
    void gateway_ingest(const char* p, size_t n);

    // ------------------------------------------------------------------ generation
    void fill_engine();

    // One engine step (a token boundary before and after); finished samples go to `out`.
    void gen_step(std::vector<RolloutSample>& out);

    // ------------------------------------------------------------------ agent sessions
    // Multi-turn tasks (rollout/agent_loop.hpp): each sample is a session whose model turns are
    // engine requests under the sample's id, interleaved with the others in the batch; a turn
    // that ends with a tool call gets the tool output appended (loss_mask 0, version -1) and
    // continues as a new request. A session can span weight updates (its model tokens then
    // carry several versions; its staleness is the oldest's). Finished sessions are streamed
    // like single-turn samples; the coordinator records their requests (sched/agent_stream.hpp).
    void setup_agent_sessions();
    // The session of request `rq` (its id, prompt and random stream; turns sample like sync's).
    void start_session(const rollout::GenRequest& rq);
    // A model turn finished (from the engine's callback): the session continues or is a sample.
    void agent_turn(const rollout::GenResult& g, std::vector<RolloutSample>& out);

    // Sends finished samples (and this rank's spans so far) to the coordinator; never waits.
    void send_samples(const std::vector<RolloutSample>& s);

    // ------------------------------------------------------------------ --data (async_data.cpp)
    // The coordinator owns the EpochSampler: it hands each generator prompt groups (a ticket and
    // its attempt, step/data_task.hpp), keeping every generator at most a few groups ahead; a group
    // dropped as stale is requeued (its ticket handed out again as the next attempt), a trained
    // one is done. Generators score their samples through the rank's reward scorer.
    void setup_data();
    // Coordinator: new groups to every generator below its load cap (point-to-point, never waits).
    void assign_work();
    // Coordinator: ready groups too stale to train leave the pool now (weight 0 in /consumed),
    // their tickets requeued.
    void purge_stale();
    // Coordinator: a sample of an assigned group arrived (the group's load ends with its last).
    void data_received(const RolloutSample& r);
    // Coordinator: the tickets of a step's groups: trained (done) or dropped (requeued).
    void data_settle(const PoolBatch& pb);
    // Coordinator: the last groups of the data are in: train them even below the threshold.
    bool data_tail() const;
    // Generators: assignments that arrived (never waits); STOP: drains them.
    void poll_assign();
    // Generators: rewards that are in; their samples go to `out`.
    void collect_rewards(std::vector<RolloutSample>& out);
    void put_data_checkpoint(ckpt::Manifest& m) const;
    void restore_data(const ckpt::Manifest& m, std::vector<RolloutSample>& pooled, std::vector<int64_t>& ready);
    void test_sends();
    void finish_sends();

    // ------------------------------------------------------------------ admission (async_admission.cpp)
    // --admission staleness, built-in tasks (--data: assign_work applies the same budget). The
    // coordinator grants each generator its next local groups while the samples started and not
    // yet consumed stay within sched_policy::admission_budget at the measured samples per version;
    // a generator starts only granted groups, and waits (idle) for more.
    // Coordinator: the samples started (granted) and not yet consumed by a step.
    int64_t outstanding() const;
    // Whether a step that could start now waits a little for groups the next step would drop.
    bool hold_for_late();
    // Coordinator: the measured samples trained per policy version (next_admission_rate; before the first step: the threshold).
    void measure_rate(int64_t trained, int64_t dropped);
    // Coordinator: grants within the budget to the generators below their load cap (never waits).
    void admit();
    // Coordinator: a sample of generator `g`'s group arrived.
    void admit_arrived(int64_t group);
    // Coordinator: per generator, whether it is in the train group (multiplex) too.
    std::vector<uint8_t> generator_trains() const;
    // Coordinator, after a step took its batch: each training generator's allowance from the
    // samples of its groups the step dropped and the groups it delivered (next_member_cap).
    void adjust_member_groups(const std::vector<int64_t>& dropped_ids);
    // Generators: grants that arrived (never waits); the groups they allow at this rank's version.
    void poll_admit();
    int64_t admitted();

    // ------------------------------------------------------------------ weights
    // Rollout-only ranks: the next version's receive (train::WeightPull, dense or --sync-delta).
    void post_weight_recv();
    // A fully arrived version into the weights (version_), no resume; false when none arrived.
    bool take_weights();
    // Between decode steps: swaps in new weights when they have fully arrived; the generations in
    // flight resume as --resume-mode says (resume_generations).
    void test_weight_recv();
    void cancel_weight_recv();
    // STOP: takes in every version up to `version` (the coordinator's last, all sent before STOP).
    void drain_weight_recv(int32_t version);
    // A generating rank's weights changed to version_: the engine's generations in flight resume
    // (--resume-mode keep or recompute, --resume-window, --resume-min-tokens).
    void resume_generations();
    // The start (version 0 broadcast) or a resume: every rollout-only rank holds version_.
    void weights_held();
    // The weights' bits hashed (FNV-1a over 8-byte words): equal hashes at the same version = bit-identical.
    uint64_t weights_hash() const;

    // Coordinator, at the end (every final message in): checks that every rollout-only rank holds
    // the coordinator's last version bit for bit (else an error line and exit code 1) and prints
    // what --resume-mode recompute cost on all generating ranks.
    void report_weights(RunSummary& sum);

    // Coordinator: the new weights to every rollout-only rank (train::WeightPush), non-blocking.
    void send_weights(int32_t version);
    // Coordinator: records the sync once every message went out.
    void test_weight_sends();
    void wait_weight_sends();

    // ------------------------------------------------------------------ coordinator

    void add_to_pool(std::vector<RolloutSample>& got);

    // Receives every message that has arrived (samples, finals); never waits.
    void poll_messages();

    // Samples of complete groups that would be trained now. --stale weight: weight
    // (eta+1)/(age+1); below sched_policy::kMinStaleWeight the sample is dropped anyway, so a rollout
    // side much faster than training cannot make the backlog ever staler.
    int64_t usable() const { return pool_.usable(version_); }

    void send_ctl(int dest, int64_t kind, int64_t epoch);

    // ------------------------------------------------------------------ re-splits (async_resplit.cpp)
    // --rebalance-every (multiplex): every rank of eligible_ holds a trainer; members_ is the
    // train group now (the coordinator always in it). A membership's communicator is made once
    // (MPI_Comm_create_group over its members) and kept for a later return to it.
    MPI_Comm group_comm(const std::vector<int>& members);
    // Any rank: the bookkeeping of a new train group (members_, in_train_, the --rollout-ahead quota).
    void set_members(const std::vector<int>& members);
    // Coordinator, at the start of step `s`: every --rebalance-every steps, the group with the
    // smallest predicted step (sched_policy::choose_train_group) from the rates measured since the
    // last decision; leavers are told (kCtlLeave) and become weight receivers. Returns the joiners.
    std::vector<int> rebalance(int32_t s);
    // Coordinator: the move to train group `to` (predicted current_s and best_s seconds per step;
    // 0 when forced): leavers told and made receivers, the change recorded. Returns the joiners.
    std::vector<int> change_group(int32_t s, const std::vector<int>& to, double current_s, double best_s);
    // Coordinator, after the TRAIN messages: each joiner gets the actor state; then the new group's
    // communicator (collective over its members). Returns the seconds it took.
    double hand_over(const std::vector<int>& joiners, int32_t s);
    // A worker told to train in a group it is not in yet (joins: its last weights, the actor state)
    // or in another group than the last (the communicator); kCtlLeave: it becomes a receiver.
    void follow_group(const std::vector<int64_t>& ctl);
    // Coordinator: step s's time for the next decision, and which ranks trained it. The first step
    // this process runs (after a start or a resume) is not measured: it pays for warming up (the
    // first passes' allocations), which made the first decision's overhead ~30x the later ones'.
    void measure_step(int32_t s, double step_s);
    // Coordinator: the generators' rollout time in `spans` (for their rates) and the members'
    // compute (not in the first step, as measure_step).
    void measure_spans(const std::vector<io::SpanRecord>& spans);

    void coordinator_loop(RunSummary& sum);

    // One training step on the coordinator; returns its t_end.
    double train_one(double t_start, RunSummary& sum, double& total);

    // Train group: the coordinator's batch to every member (Ibcast, test-and-sleep).
    void bcast_batch(std::vector<RolloutSample>& batch);

    void write(const std::vector<io::ConsumedRecord>& consumed, const std::vector<io::StepRecord>& steps,
               const std::vector<io::SpanRecord>& spans);

    // OUT/membership.json: the train group of every epoch as each member saw it announced.
    void write_membership();

    // ------------------------------------------------------------------ checkpoints
    // (mpi_app/ckpt, share/doc/checkpoints.md.) Sample ids are g*G+k and generator i of n
    // takes the groups i, i+n, i+2n, ... in order (fill_engine), so what the coordinator has
    // received is: per generator a low-water mark lo_[i] (its groups k*n+i, k < lo_[i], are all
    // complete) and the ids received above it (recv_ids_). A sample whose id is below the mark
    // or already in the set was recorded before: after a resume the generators start again at
    // their marks, and what they generate again is dropped here, so no id reaches /samples twice
    // and none handed out before the checkpoint but not received by it is left out.
    bool first_receipt(int64_t id, int64_t g);

    static std::string join(const std::vector<int64_t>& v);
    static std::vector<int64_t> split_ints(const std::string& s);

    // Coordinator, between training steps: everything received so far to the file, then the
    // checkpoint at step_ (the weight sends of this version complete first, so /syncs has it).
    void checkpoint_now(const RunSummary& sum);

    // Coordinator, at a checkpoint after step 0 (and before the final one): every rank's clock
    // offset to rank 0 measured again, by ping-pong with each rank in turn while the others go on
    // (profile::ping_peer), appended to /ranks. Blocks until each rank's loop has answered.
    void remeasure_clocks();
    // Every other rank, once per loop: answers the coordinator's clock pings if some are waiting.
    void poll_clock();

    // Writes `n` bytes as the checkpoint staging dir's file `name`; its manifest entry.
    static ckpt::FileEntry write_staged(const std::string& tmp, const std::string& name, const char* data, size_t n);

    // Coordinator only (no collective: the other ranks go on generating): the policy, the
    // trainer states (the train group's first rank holds all of them, critic included), the pool
    // (pool.bin: every finished-but-untrained sample, all fields) and the scheduler state in the
    // manifest. The run file must be flushed with every pooled sample (written_ empty).
    void write_checkpoint(const RunSummary& sum);

    // Constructor, when resuming (every rank, same manifest): the weights on every rank, the
    // trainer states on the train group, each generator's cursor; the coordinator also its pool,
    // receipts and counters. A different split of the ranks is one ConfigError on every rank.
    void restore(const ckpt::Manifest& m, const std::string& dir);
    // run(), coordinator, when resuming: the summary so far.
    void resume_summary(RunSummary& sum);

    // The first critic rank, when it is not the coordinator and the run checkpoints: the critic's
    // state (after `trained_` steps) to the coordinator, which writes it into the checkpoint.
    // Through sends_, so it completes before this rank's final message.
    // After a step a checkpoint follows, at the start and at STOP: the critic's state (the first
    // critic rank, when it is not C) and the moment shards (--shard, every step member but C).
    void send_trainer_state();
    bool ships_shards() const;  // --shard with step members besides C

    // Any rank but the coordinator: a requeue signal to the coordinator, once (through sends_,
    // so it completes before this rank's final message).
    void send_signal(int sig);
    // A message to the coordinator through sends_ (completed by test_sends/finish_sends).
    void queue_send(std::vector<char> b, int tag);

    // ------------------------------------------------------------------ other ranks
    // Returns the control message from the coordinator if one has arrived (never waits).
    bool poll_ctl(std::vector<int64_t>& m);

    void worker_loop();

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
    std::vector<int> eligible_;  // the ranks that may train (async_train_group); members_ with --rebalance-every ⊆ it
    bool rebalance_ = false;     // --rebalance-every > 0
    bool in_train_ = false, is_gen_ = false, is_recv_ = false;
    std::vector<int> step_members_;  // every rank of a training step: the train group, then critic-only ranks
    std::vector<int>
        critic_pos_;  // positions in step_members_ of the ranks holding the critic (ppo; empty: the train group)
    bool in_step_ = false;
    int critic_root_ = 0;       // the first critic rank (writes critic_state.pt's content)
    int64_t trained_ = 0;       // steps this rank took part in (critic state stamps)
    int64_t critic_step_ = -1;  // coordinator: the step of critic_bytes_
    std::string critic_bytes_;
    // coordinator, --shard: per step member, the step of its shards and the shards (name, bytes)
    struct Shards {
        int64_t step = -1;
        std::vector<std::pair<std::string, std::string>> files;
    };
    std::map<int, Shards> shards_;
    int64_t threshold_ = 0;
    int32_t max_new_ = 0;
    int32_t version_ = 0;

    model::LlamaModel policy_{nullptr};
    at::Tensor flat_;
    std::vector<std::pair<size_t, size_t>> buckets_;
    std::unique_ptr<train::WeightSync> wsync_;
    std::unique_ptr<RlTrainer> trainer_;
    std::unique_ptr<rollout::InferenceEngine> engine_;
    Comm p2p_, bcast_;
    MPI_Comm train_comm_ = MPI_COMM_NULL;  // the train group's now (owned by group_comms_)
    std::map<std::vector<int>, Comm> group_comms_;
    Comm clk_;  // clock ping-pongs only (remeasure_clocks): nothing else can match them

    // span recorder
    bool open_ = false;
    SpanKind kind_ = SpanKind::kIdle;
    int32_t span_step_ = 0;
    double span_t0_ = 0;

    // generation
    int64_t gen_index_ = 0, next_local_ = 0;
    int64_t quota_ = 0, started_ = 0;       // --rollout-ahead: samples a train-group generator may start per version
    std::map<int64_t, int64_t> groups_of_;  // sample id -> group, while generating
    std::vector<int32_t> step_versions_;    // policy version at each engine step
    std::list<Pending> sends_;

    // gateway (--gateway)
    int gw_rank_ = -1;
    std::unique_ptr<GatewayRouter> gw_router_;   // on the gateway rank
    std::unique_ptr<GatewayWorker> gw_worker_;   // on the other rollout-only ranks
    std::unique_ptr<GatewayRecorder> gw_rec_;    // on the coordinator
    std::pair<int64_t, int64_t> gw_next_{0, 0};  // coordinator: the recorder's id counters (checkpoints)

    // multi-turn tasks (agent loops)
    std::unique_ptr<rollout::AgentSessions> agent_;  // on generating ranks: the live sessions
    std::vector<rollout::AgentResult> agent_done_;   // sessions ended by one engine result
    AgentTreeRecorder agent_tree_;                   // on the coordinator: their requests (/tree)
    double last_ship_ = 0;

    // weights
    std::unique_ptr<train::WeightPush> push_;  // coordinator, when there are rollout-only ranks
    std::unique_ptr<train::WeightPull> pull_;  // rollout-only ranks
    bool pushing_ = false;                     // coordinator: a push in flight
    train::WeightSyncStats push_stats_;        // coordinator: its figures
    double wsend_t0_ = 0;

    // coordinator
    int64_t step_ = 0;
    SamplePool pool_{opt_};                  // finished samples not yet trained
    std::vector<io::SampleRecord> written_;  // finished samples not yet in the file
    std::vector<io::SpanRecord> other_spans_;
    std::vector<io::EvalRecord> evals_;
    std::vector<io::SyncRecord> syncs_;
    std::list<Pending> ctl_;
    int64_t finished_ = 0, consumed_count_ = 0, dropped_ = 0, weighted_ = 0, discarded_ = 0;
    int finals_ = 0;
    std::map<int, FinalWeights> finals_of_;  // rank -> its final message's weights and engine figures
    std::vector<Membership> my_log_;
    // --rebalance-every, coordinator: what was measured since the last decision, and the changes.
    sched_policy::RateWindow window_;
    double eval_s_ = 0;        // the coordinator's evaluations since the last measure_spans
    double cycle_eval_s_ = 0;  // and since the last step began (RateWindow::add_cycle)
    int64_t first_step_ = -1;  // the first step this process ran (measure_step)
    struct Resplit {
        int64_t step = 0;
        std::vector<int> from, to;
        double current_s = 0, best_s = 0;  // predicted seconds per step
        int64_t bytes = 0;                 // actor state handed over
        double seconds = 0;                // the hand-over and the new communicator
    };
    std::vector<Resplit> resplits_;
    struct Decision {  // the last decision (forced, kept or moved), for the /steps row of its step
        int64_t step = -1;
        io::Regroup kind = io::Regroup::kNone;
        double best_s = -1, current_s = -1;
    };
    Decision decision_;
    std::map<int, std::vector<Membership>> seen_;

    // checkpoints and requeue signals
    ckpt::Plan ckpt_;
    bool have_ckpt_ = false, resumed_ = false, sig_sent_ = false;
    int sig_ = 0;                             // coordinator: the requeue signal some rank received
    BadSteps bad_steps_{opt_.max_bad_steps};  // coordinator: --max-bad-steps (NaN/inf updates in a row)
    bool bad_stop_ = false;                   // coordinator: they stop the run (checkpoint, exit kExitBadSteps)
    double total_ = 0;                        // samples trained so far (the summary's rate)
    ckpt::Manifest resume_manifest_;
    std::vector<int64_t> lo_;                // coordinator: per generator, its groups below lo*n+i are complete
    std::set<int64_t> recv_ids_;             // coordinator: ids received in groups above the marks
    std::map<int64_t, int64_t> recv_count_;  // coordinator: group -> its ids in recv_ids_
    int64_t regenerated_ = 0;                // generated again after a resume, already recorded: dropped

    // --data
    DataTask* data_ = nullptr;                                               // task_ as the data set, else null
    uint64_t rows_ = 0;                                                      // its rows
    std::deque<int64_t> assigned_;                                           // generator: groups to start, in order
    std::map<int64_t, std::pair<std::vector<int32_t>, int64_t>> prompt_of_;  // generator: group -> prompt, samples left
    std::map<uint64_t, RolloutSample> awaiting_;  // generator: sample id -> finished, its reward pending
    bool reward_error_sent_ = false;              // generator: the first failed reward went to C
    uint64_t rewards_failed_ = 0;                 // generator: scored 0 under --reward-error zero
    std::optional<data::EpochSampler> sampler_;   // coordinator
    std::map<int64_t, data::Ticket> ticket_of_;   // coordinator: group -> ticket, handed out, not settled
    std::map<data::Ticket, uint64_t> attempt_;    // coordinator: requeued ticket -> its next attempt
    std::map<int64_t, int64_t> group_left_;       // coordinator: assigned group -> samples not yet received
    std::map<int64_t, size_t> gen_of_;            // coordinator: assigned group -> generator index
    std::vector<int64_t> gen_load_;               // coordinator: per generator, groups not fully received
    std::list<Pending> asg_sends_;                // coordinator: assignment messages in flight
    std::vector<io::ConsumedRecord> purged_;      // coordinator: dropped by purge_stale, for the next write
    int64_t purged_since_step_ = 0;               // coordinator: their count since the last step's row
    std::string reward_error_;                    // coordinator: a failed reward stops the run (fail)
    std::vector<data::Row> val_rows_;             // coordinator: every --val-data row
    std::string val_line_;                        // coordinator: describe() of the last validation, for its line
    uint64_t val_failed_ = 0;                     // coordinator: validation rewards scored 0 (--reward-error zero)

    // --admission staleness
    bool admission_ = false;                  // on (async modes, --admission staleness, not --data)
    double rate_ = 0;                         // coordinator: samples trained per version (measured)
    std::vector<int64_t> granted_, arrived_;  // coordinator: per generator, groups granted, samples arrived
    bool coord_idle_ = false;  // coordinator: it waited for samples with nothing to generate since the last step
    std::vector<int64_t> member_groups_;              // coordinator: per training generator, its allowance (grant_caps)
    std::vector<int64_t> arrived_at_step_;            // coordinator: arrived_ at the last step
    std::list<Pending> admit_sends_;                  // coordinator: grants in flight
    std::deque<std::pair<int64_t, int64_t>> grants_;  // generator: (version, K) not yet usable
    int64_t admit_k_ = 0;                             // generator: local groups below this may start
    // --late-wait (coordinator)
    double hold_since_ = -1;  // when this step began waiting for late groups (-1: not waiting)
    double cycle_s_ = 0;      // seconds from one step's start to the next, less any wait (sched_policy::next_cycle)
    double last_begin_ = -1;  // when the last step began
    double held_s_ = 0;       // seconds waited, whole run
    int64_t holds_ = 0;       // steps that waited
};

}  // namespace tagflow::sched::async
