// SPDX-License-Identifier: Apache-2.0
// run_file: the tagflow run file, HDF5 schema v1 (see share/doc/hdf5-schema.md).
// Creates the file, appends rows to its 1-D extendable datasets collectively over one fixed
// I/O communicator, flushes. Does not decide what goes in a row (the app fills the records).
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/finish_reason.hpp"

namespace tagflow::io {

/// finish_reason stored as uint8 (kStop, kLength or kAbort); names in the dataset attribute
/// `enum_names`. The one enum of common/finish_reason.hpp.
using tagflow::FinishReason;
/// /timeline kind enum stored as uint8; names in the dataset attribute `enum_names`.
enum class SpanKind : uint8_t {
    kRollout = 0,
    kTrain = 1,
    kWeightSync = 2,
    kResplit = 3,
    kIdle = 4,
    kIo = 5,
    kCheckpoint = 6
};
/// /steps regroup enum stored as uint8 (--rebalance-every): what the coordinator decided about the
/// train group at the start of the step. kNone: no decision (between decisions, or not enough
/// measured yet); kKept: the current group predicted best; kMoved: a measured move; kForced: the
/// group named by the test-only TAGFLOW_TEST_TRAIN_GROUPS.
enum class Regroup : uint8_t { kNone = 0, kKept = 1, kMoved = 2, kForced = 3 };
const char* to_string(FinishReason r);
const char* to_string(SpanKind k);
const char* to_string(Regroup g);

struct SampleRecord {
    int64_t id = 0;
    int64_t group = 0;
    int64_t prompt_index = 0;
    std::string task;  // fixed-length S32 in the file
    float reward = 0.f;
    FinishReason finish_reason = FinishReason::kStop;
    int32_t rank = 0;
    int32_t version_min = 0;
    int32_t version_max = 0;
    double t_done = 0.0;
    // Ragged per-token columns; all four have the same length (prompt + response).
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;    // NaN where loss_mask == 0
    std::vector<int32_t> versions;  // -1 on prompt/environment tokens
    std::vector<uint8_t> loss_mask;
    // /tree row of the segment holding the sample's last token (its full sequence is the first
    // len(tokens) tokens through that row, see /tree); -1 when not recorded in /tree.
    int64_t tree_node = -1;
    // Text of the prompt and of the response (UTF-8; may be empty), stored as bytes in the flat
    // /samples/text with per-row offsets (text_start, response_text_start, text_end).
    std::string prompt_text;
    std::string response_text;
    // The reward's extras (the keys other than `score` of a returned dict) as JSON object text;
    // empty when there are none. Stored as bytes in /samples/reward_extras (extras_start/_end).
    std::string reward_extras;
};

/// One /tree row: a run of tokens a trajectory prefix tree stores once for every sample whose
/// sequence passes through it (mpi_app/traj/, share/doc/hdf5-schema.md "/tree"). Its full
/// sequence is (full sequence of the parent row)[0:depth] + its own tokens.
struct TreeNodeRecord {
    int64_t parent = -1;            // /tree row of the parent written by an EARLIER append, or -1
    int64_t parent_in_batch = -1;   // >= 0: the parent is this rank's row parent_in_batch of the
                                    // same call (earlier in `rows`); parent must then be -1
    int64_t depth = 0;              // tokens of the full sequence before this row's first token
    int32_t rank = 0;               // rank that served the request that stored these tokens
    double t_start = 0, t_end = 0;  // that request's arrival and completion (s since t0_unix)
    // Own tokens, as in SampleRecord (all four the same length, at least one token).
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    std::vector<int32_t> versions;
    std::vector<uint8_t> loss_mask;
};

struct ConsumedRecord {
    int64_t id = 0;
    int32_t step = 0;
    float advantage = 0.f;
    float weight = 1.f;
};

struct StepRecord {
    int32_t step = 0;
    double t_start = 0, t_end = 0;
    int32_t policy_version = 0;
    int64_t samples = 0, tokens = 0;
    float reward_mean = 0, reward_std = 0, loss = 0, kl = 0, entropy = 0, clip_frac = 0;
    float logprob_diff_mean = 0, staleness_mean = 0;
    int32_t staleness_max = 0;
    float samples_per_s = 0, idle_frac = 0;
    int64_t stale_dropped = 0;    // samples consumed with weight 0 (older than --staleness)
    int64_t stale_weighted = 0;   // samples trained with an importance weight < 1 (--stale weight)
    int32_t skipped_updates = 0;  // optimiser updates dropped: non-finite loss or gradient norm
    // Off-policy correction (--old-logprobs recompute): mean importance weight the policy loss used,
    // largest pi_old / pi_rollout before truncation, sequences rejected by --rollout-rs; -1 = not measured.
    double is_weight_mean = -1, is_weight_max = -1;
    int32_t rs_rejected = -1;
    int64_t rs_rejected_tokens = -1;
    // The actor update's input token slots (every epoch, whole train group): those holding a token of
    // some sequence, and all of them, padding included (--pack on removes most of it); -1 = not measured.
    int64_t train_real_tokens = -1, train_token_slots = -1;
    // The actor's learning rate of this step's update (--lr-warmup-steps, --lr-schedule); -1 = not recorded.
    double lr = -1;
    // The step's train group (async modes): how many ranks, and which ("0-3,6"; a list longer than
    // kTrainGroupLen ends in "..."; membership.json has it whole); -1 / "" = not recorded.
    int32_t train_members = -1;
    std::string train_group;
    // --rebalance-every: the decision taken before the step, the predicted seconds per step of the
    // group chosen and of the group that trained before it (-1: no measured decision this step), and
    // what forming the step's group cost: seconds (0 when the group did not change) and bytes of
    // actor state sent to each joining rank (0: none joined); -1 = not recorded (no --rebalance-every).
    Regroup regroup = Regroup::kNone;
    double predicted_s = -1, predicted_current_s = -1;
    double resplit_s = -1;
    int64_t resplit_bytes = -1;
};

struct EvalRecord {
    EvalRecord() = default;
    // (step, task, score, n) as before the columns below existed; they default to "" and 0.
    EvalRecord(int32_t step_, std::string task_, float score_, int32_t n_, std::string data_source_ = "",
               int32_t k_ = 0)
        : step(step_), task(std::move(task_)), score(score_), n(n_), data_source(std::move(data_source_)), k(k_) {}
    int32_t step = 0;
    std::string task;  // S32
    float score = 0;
    int32_t n = 0;
    // Added later (older files lack them; open_append adds them, "" / -1 in the rows before):
    std::string data_source;  // S64: the rows' data_source ("" = all rows of the evaluation, or a task)
    int32_t k = 0;            // 0: greedy; K >= 1: mean score of K sampled responses per prompt (mean@K)
};

/// One weight sync (train root -> rollout ranks), written by the root. The last three fields
/// have defaults that keep a 5-field initialiser valid: a dense sync whose gbps the writer computes.
struct SyncRecord {
    int32_t version = 0;
    int64_t bytes = 0;              // bytes sent per rank (delta: header + payloads)
    double t_start = 0, t_end = 0;  // t_end - t_start: the sync's wall time on the root
    std::string mode;               // S16: mpi_bcast, mpi_bcast_delta, nccl_bcast, ...
    int64_t dense_bytes = -1;       // what a dense sync moves (4 B per weight); < 0: = bytes
    int32_t buckets = 0;            // bucket collectives issued (0: not recorded)
    float gbps = -1.f;              // bytes / (t_end - t_start) / 1e9; < 0: the writer computes it
};

struct SpanRecord {
    int32_t rank = 0;
    SpanKind kind = SpanKind::kRollout;
    double t_start = 0, t_end = 0;
    int32_t step = 0;
};

struct RankRecord {
    int32_t rank = 0;
    std::string host;        // S64
    std::string tags;        // S32, e.g. "rollout,train"
    std::string tag_source;  // S16: env, option, rank-tags, default, map ...
    int32_t gpus = 0;
    double clock_offset = 0;
    double clock_error = -1;  // bound on |clock_offset error| (s); -1: not measured
};

/// One row per resume (/resumes).
struct ResumeRecord {
    int32_t from_step = 0;       // the checkpoint's step the run resumed from
    double t = 0;                // seconds since t0_unix
    int64_t rows_discarded = 0;  // rows cut off by RunFile::truncate()
};

/// Row counts of every table (equal on every rank). `tokens` is the length of the flat
/// per-token arrays of /samples (== token_offsets[samples]).
struct TableSizes {
    int64_t samples = 0, tokens = 0, consumed = 0, steps = 0, eval = 0, syncs = 0, timeline = 0, ranks = 0, resumes = 0;
    int64_t tree = 0, tree_tokens = 0;  // /tree rows and its flat token arrays' length
    int64_t text = 0;                   // bytes of /samples/text (truncate() derives it from /samples/text_end)
};

/// This rank's H5Dwrite calls, by the I/O mode HDF5 reports it really used
/// (H5Pget_mpio_actual_io_mode). independent_writes > 0 means collective I/O was broken.
struct IoStats {
    int64_t collective_writes = 0;
    int64_t independent_writes = 0;
};

struct RunAttributes {
    std::string config_json;
    std::string tagflow_version;
    int32_t world_size = 1;
    double t0_unix = 0;
    std::string slurm_job_id;  // empty: attribute not written
};

/// Fixed lengths (bytes) of the string columns; longer values are cut (never inside a UTF-8
/// sequence).
inline constexpr size_t kTaskLen = 32, kModeLen = 16, kHostLen = 64, kTagsLen = 32, kTagSourceLen = 16,
                        kDataSourceLen = 64, kTrainGroupLen = 64;
inline constexpr int32_t kFormatVersion = 1;

/// An open run file. Every method marked COLLECTIVE must be called by every rank of the
/// I/O communicator given to create(), in the same order, each rank passing its own rows
/// (possibly none). Rows from all ranks are appended in rank order.
class RunFile {
public:
    /// COLLECTIVE: creates (truncates) `path`, writes the root attributes and every group and
    /// dataset of schema v1. The communicator is duplicated; it must be fixed for the run.
    /// `path` and `attrs` are taken from rank 0 of `io_comm` (broadcast), so ranks cannot
    /// disagree on metadata (e.g. t0_unix read from different clocks).
    static RunFile create(MPI_Comm io_comm, const std::string& path, const RunAttributes& attrs);
    /// COLLECTIVE: opens an existing file for appending (schema v1 checked; later: resume).
    /// A file shorter than its superblock records (a kill landed inside a flush, between the
    /// superblock write and the file's extension) is extended to that length first, with a
    /// warning: the bytes missing were never written, and a resume cuts the rows after its
    /// checkpoint anyway.
    static RunFile open_append(MPI_Comm io_comm, const std::string& path);

    RunFile(RunFile&&) noexcept;
    RunFile& operator=(RunFile&&) noexcept;
    ~RunFile();  // closes; never throws

    void append_samples(const std::vector<SampleRecord>& rows);     // COLLECTIVE
    void append_consumed(const std::vector<ConsumedRecord>& rows);  // COLLECTIVE
    void append_steps(const std::vector<StepRecord>& rows);         // COLLECTIVE
    void append_eval(const std::vector<EvalRecord>& rows);          // COLLECTIVE
    void append_syncs(const std::vector<SyncRecord>& rows);         // COLLECTIVE
    void append_timeline(const std::vector<SpanRecord>& rows);      // COLLECTIVE
    void append_ranks(const std::vector<RankRecord>& rows);         // COLLECTIVE
    void append_resumes(const std::vector<ResumeRecord>& rows);     // COLLECTIVE
    /// COLLECTIVE: appends /tree rows. Returns the /tree row of this rank's first row (its rows
    /// are consecutive, in the order given), or -1 when it passed none. Invalid rows (token
    /// arrays of unequal length or empty, a parent that is not an earlier row) throw as below.
    int64_t append_tree(const std::vector<TreeNodeRecord>& rows);
    // Appends with no rows on any rank do nothing (and cost one allgather). Rows that are
    // invalid on any rank (per-token vectors of different lengths) make every rank throw
    // tagflow::Error before anything is written; the file stays usable. An HDF5/MPI failure
    // throws H5Error/MpiError; the RunFile is then unusable (main() must MPI_Abort).

    /// Current row counts (local, no communication; identical on every rank).
    TableSizes sizes() const;
    /// COLLECTIVE: cuts every table except /resumes back to `to` (e.g. the sizes recorded with
    /// a checkpoint); to.tokens < 0 means "derive from token_offsets", to.tree_tokens < 0
    /// "derive from /tree/token_end". Throws tagflow::Error
    /// (on every rank, before changing anything) if `to` exceeds the current sizes or
    /// to.tokens (to.tree_tokens) disagrees with token_offsets (token_end). /samples/text is cut
    /// to the text_end of the last row kept (to.text is not consulted). Returns the number of
    /// rows discarded (all tables, not counting tokens or text bytes).
    int64_t truncate(const TableSizes& to);
    /// The root attributes as written (create) or read back (open_append).
    const RunAttributes& attributes() const;
    /// This rank's count of collective vs independent H5Dwrite calls.
    const IoStats& io_stats() const;
    /// COLLECTIVE: H5Fflush(GLOBAL) — after it returns, a crash leaves a readable file.
    void flush();
    /// COLLECTIVE: closes the file (idempotent). The destructor closes too, except while an
    /// exception is propagating or after an I/O error: then the file is left as of the last
    /// flush() instead of risking a collective close that other ranks never join.
    void close();
    bool is_open() const;

    const std::string& path() const;

    struct Impl;  // opaque; defined in io/run_file_impl.hpp

private:
    explicit RunFile(std::unique_ptr<Impl> impl);
    static RunFile open_append_once(MPI_Comm io_comm, const std::string& path);
    void close_or_leak() noexcept;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tagflow::io
