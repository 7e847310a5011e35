// SPDX-License-Identifier: Apache-2.0
// gateway_router: the OpenAI-compatible gateway inside `tagflow train --gateway` (async modes).
// Three parts, one per role, all driven from their rank's main thread between engine steps:
//   GatewayRouter   — on the gateway rank (the first rank that only rolls out, never
//                     preempted): runs gateway::Server (its own I/O thread, which only queues
//                     requests and rewards), routes each request to a generating rank (the one
//                     that served the session before, which holds its prefix; a new session
//                     whose whole prompt the router's trajectory manager holds goes to the rank
//                     that stored it, any other to the least-loaded rank), submits local
//                     ones into this rank's engine, sends the others point-to-point, relays every
//                     token back to the HTTP thread as it arrives, and forwards each finished
//                     request (token level) and each reward to the coordinator.
//   GatewayWorker   — on the other rollout-only ranks: receives routed requests into the engine
//                     and sends their tokens to the gateway rank once per engine step.
//   GatewayRecorder — on the coordinator: replica trajectory managers of every gateway request,
//                     one per serving rank (the run file's /tree), and, when a session's reward arrives, its final
//                     trajectories as training samples (loss_mask 0 on tokens the model did not
//                     generate) and /samples rows.
// Cancel: a client that goes away (the HTTP thread sees the connection close) cancels its
// request: the router cancels it in its own engine or sends the cancel to the worker rank that
// runs it, which cancels it there (InferenceEngine::cancel: the slot is free at the next step). A
// cancelled request is not recorded (no /tree row, no sample); /health "cancelled" counts them.
// Session lifetime: the router forgets a session (routing, reward validation) when a
// session-level reward closed it and none of its requests is in flight, or when it has been
// idle session_idle_s; the recorder drops a session once every trajectory of it went into a
// sample (or it was idle session_idle_s), and a replica tree once no session, open group or
// unwritten sample refers to it, after its /tree rows are written (new sessions start a new
// tree when the rank's tree is gone or holds seal_tokens). /health "sessions" is the router's count.
// Checkpoints (share/doc/checkpoints.md): only the recorder's id counters are saved (next_ids);
// sessions, open groups and requests in flight are not, so a resumed job starts with empty
// tables and a fresh token/URL (clients redo their episodes, as after any server restart).
// Only the main thread calls MPI (MPI_THREAD_FUNNELED is enough). Does not decide when to train
// or write the run file on its own.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/run_file.hpp"
#include "rollout/engine.hpp"
#include "sched/sample.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::sched {

/// InferenceEngine request ids and sample ids/groups of gateway traffic start here (task ids stay below).
inline constexpr int64_t kGatewayIdBase = int64_t{1} << 60;
inline bool is_gateway_id(int64_t id) { return id >= kGatewayIdBase; }
/// Point-to-point tags (on the async scheduler's p2p communicator).
inline constexpr int kTagGwReq = 7401, kTagGwTok = 7402, kTagGwRec = 7403;

struct GatewayConfig {
    std::string host = "127.0.0.1";
    int port = 0;     ///< 0 = any free port (written to <out>/gateway.url)
    std::string out;  ///< run directory: gateway.token (0600) and gateway.url
    std::string model_id = "tagflow-policy";
    int64_t context = 0, vocab = 0;                ///< the policy's positions and vocabulary
    int me = 0, coordinator = 0;                   ///< world ranks
    std::vector<int> targets;                      ///< generating ranks requests may go to (never preempted)
    MPI_Comm comm = MPI_COMM_NULL;                 ///< the scheduler's point-to-point communicator
    double session_idle_s = 600;                   ///< forget a session idle this long (run clock, s)
    int64_t route_tree_tokens = int64_t{1} << 22;  ///< the routing tree is reset above this many tokens
    /// Text and chat prompts of requests (step/run_tokenizer.hpp); null = the byte-level tokenizer.
    std::shared_ptr<const text::Tokenizer> tokenizer;
};

class GatewayRouter {
public:
    /// Binds, writes the token and URL files, starts the HTTP thread. Throws on bind failure.
    explicit GatewayRouter(const GatewayConfig& cfg);
    ~GatewayRouter();
    GatewayRouter(const GatewayRouter&) = delete;
    GatewayRouter& operator=(const GatewayRouter&) = delete;

    /// Between engine steps: routes queued requests (local ones into `engine`), relays tokens
    /// that other ranks sent, forwards queued rewards. `now`: the run clock; `version`: the
    /// policy version of this rank (for /health).
    void poll(rollout::InferenceEngine& engine, double now, int32_t version);
    /// InferenceEngine callbacks for this rank's gateway requests (is_gateway_id ids).
    void on_token(const rollout::TokenEvent& e);
    void on_finish(const rollout::GenResult& g, double now);
    /// End of run: stops the HTTP thread; requests in flight end with finish_reason "abort".
    void stop();
    int port() const;
    int64_t served() const;         ///< requests finished and recorded
    int64_t cancelled() const;      ///< requests cancelled inside an engine (client went away)
    int64_t live_sessions() const;  ///< sessions the router keeps state for

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

class GatewayWorker {
public:
    GatewayWorker(int gateway_rank, MPI_Comm comm);
    ~GatewayWorker();
    /// Receives routed requests into `engine` (never waits).
    void poll(rollout::InferenceEngine& engine);
    void on_token(const rollout::TokenEvent& e);
    void on_finish(const rollout::GenResult& g);
    /// Sends this step's tokens and finishes to the gateway rank (one message, non-blocking).
    void flush();
    /// Waits (test-and-sleep) for every send to complete.
    void finish_sends();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

struct RecorderLimits {
    double session_idle_s = 600;             ///< drop a session (and an open group) idle this long
    int64_t seal_tokens = int64_t{1} << 20;  ///< a replica tree takes no new session above this
};

class GatewayRecorder {
public:
    /// `group_size`: sessions a reported group needs before it is trained (--group-size).
    /// `tokenizer`: the gateway's (step/run_tokenizer.hpp), for the samples' /samples text; null =
    /// the byte-level one.
    explicit GatewayRecorder(int32_t group_size, RecorderLimits limits = RecorderLimits{},
                             std::shared_ptr<const text::Tokenizer> tokenizer = nullptr);
    ~GatewayRecorder();
    /// One kTagGwRec message from the gateway rank; groups that became complete are appended
    /// to `groups` (samples with ids and group ids from kGatewayIdBase on, consecutive per group).
    void ingest(const char* data, size_t size, std::vector<std::vector<RolloutSample>>& groups);
    /// Appends the /tree rows not written yet (COLLECTIVE over the run file's I/O communicator,
    /// i.e. the coordinator alone), then the /samples rows of the samples handed out since the
    /// last call (with tree_node) to `samples`.
    void write(io::RunFile& f, std::vector<io::SampleRecord>& samples);
    /// Checkpoints: (next sample id, next group id), counted from kGatewayIdBase; every sample
    /// id and group id handed out so far is below them.
    std::pair<int64_t, int64_t> next_ids() const;
    /// After a resume (before any ingest): ids continue from a checkpoint's next_ids(), so none
    /// collides with a /samples row written before it. Sessions are not restored (none saved).
    void resume_ids(int64_t next_id, int64_t next_group);
    int64_t requests() const;       ///< gateway requests recorded
    int64_t samples() const;        ///< gateway samples handed out
    int64_t live_sessions() const;  ///< sessions with state (not closed or expired yet)
    int64_t live_trees() const;     ///< replica trees held
    /// One line: requests, samples, sessions closed/expired/live, trees dropped/live.
    std::string summary() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tagflow::sched
