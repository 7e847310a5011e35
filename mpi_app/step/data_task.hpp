// SPDX-License-Identifier: Apache-2.0
// data_task: `tagflow train --data FILE` as a rollout::Task (share/doc/data.md, "Training on a data
// set"). Holds the indexed data set (data/dataset.hpp; rank 0 indexes the file, the others get the
// index as bytes and read rows by offset), the run's text tokenizer, and on rollout ranks the reward
// scorer (reward/scorer.hpp: a built-in rule scorer per data_source or --reward builtin:NAME, a
// --reward-fn worker pool, or a --reward-url client); in the asynchronous modes with --val-data the
// coordinator also holds a second scorer of the same kind for validation alone (its rewards never
// mix with the training samples' rewards that rank's generation drains). A prompt group is a
// data-set Ticket (epoch, row), not an index into a prompt stream: train_prompt() is not used, the
// scheduler asks ticket_prompt(). The vocabulary and stop ids are the tokenizer's.
// With --val-data it also holds the indexed validation set (the same way: rank 0 indexes, the others
// get the index); validation itself is step/validation.hpp's, called by the scheduler.
// Does NOT: decide which ticket a group trains (the schedulers own the data::EpochSampler), write the
// run file, or evaluate (eval_prompt/reward throw: the --val-data rows go through validate()).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/options.hpp"
#include "data/dataset.hpp"
#include "data/epoch.hpp"
#include "reward/scorer.hpp"
#include "rollout/task.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::sched {

/// Response budget of a --data run without --max-new-tokens.
constexpr int32_t kDataDefaultMaxNew = 64;

class DataTask final : public rollout::Task {
public:
    DataTask(data::Dataset ds, std::shared_ptr<const text::Tokenizer> tok, const config::Options& opt);
    ~DataTask() override;

    std::string name() const override { return "data"; }
    int32_t vocab_size() const override { return tok_->vocab_size(); }
    int32_t eos_token() const override { return stop_ids_.front(); }
    int32_t max_prompt_tokens() const override { return max_prompt_; }
    int32_t max_response_tokens() const override { return max_new_; }
    std::vector<int32_t> train_prompt(int64_t index) const override;
    std::vector<int32_t> eval_prompt(int64_t index) const override;
    float reward(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) const override;
    std::string render(const std::vector<int32_t>& tokens) const override;
    float best_constant_score(int64_t) const override { return 0.f; }

    const data::Dataset& dataset() const { return ds_; }
    const text::Tokenizer& tokenizer() const { return *tok_; }
    /// Every id that ends a response: the tokenizer's stop ids and its chat stop ids.
    const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
    /// The prompt ids of data row `row` (chat template for messages, else the string encoded).
    std::vector<int32_t> row_prompt(uint64_t row) const;
    /// A reward request for `response` (stop token and what follows dropped, decoded without special
    /// tokens) to data row `row`.
    reward::Request reward_request(uint64_t id, uint64_t row, const std::vector<int32_t>& response) const;

    /// --val-data: whether there is a validation set, and rows i = part, part + parts, ... of it (parsed).
    bool has_val() const { return val_.has_value(); }
    const data::Dataset& val() const { return *val_; }
    std::vector<data::Row> val_rows(uint64_t part, uint64_t parts) const;
    void set_val(data::Dataset val);

    /// Starts this rank's scorer (rollout ranks; the Python workers import --reward-fn here): ConfigError
    /// naming the option or file. Not collective.
    void start_scorer();
    reward::Scorer& scorer();
    bool has_scorer() const { return scorer_ != nullptr; }
    /// The asynchronous modes' coordinator with --val-data: a scorer of its own for validation (the
    /// same options; a --reward-fn pool of its own). Not collective.
    void start_val_scorer();
    reward::Scorer& val_scorer();

private:
    data::Dataset ds_;
    std::optional<data::Dataset> val_;
    std::shared_ptr<const text::Tokenizer> tok_;
    const config::Options& opt_;
    std::vector<int32_t> stop_ids_;
    int32_t max_prompt_ = 1, max_new_ = kDataDefaultMaxNew;
    std::unique_ptr<reward::Scorer> scorer_, val_scorer_;
    std::unique_ptr<reward::Scorer> new_scorer() const;  // the one the --reward* options ask for
};

/// A --data prompt group names its ticket and its attempt: group = attempt x kAttemptStride + epoch
/// x rows + row. Attempt 0 is the ticket's first hand-out (sync mode's only one); an asynchronous
/// mode hands a requeued ticket (its group dropped as stale, or cut by a kill) out again as the
/// next attempt, so every group, and every sample id group x G + k, is new.
constexpr int64_t kAttemptStride = int64_t{1} << 32;
inline int64_t data_group(const data::Ticket& t, uint64_t rows, uint64_t attempt) {
    const uint64_t at = t.epoch * rows + t.row;
    if (at >= static_cast<uint64_t>(kAttemptStride))
        throw Error("--data: epoch " + std::to_string(t.epoch) + " of " + std::to_string(rows) +
                    " rows is past the 2^32 prompt groups a run can name");
    return static_cast<int64_t>(attempt) * kAttemptStride + static_cast<int64_t>(at);
}
inline uint64_t data_row(int64_t group, uint64_t rows) { return static_cast<uint64_t>(group % kAttemptStride) % rows; }
inline data::Ticket data_ticket(int64_t group, uint64_t rows) {
    const auto at = static_cast<uint64_t>(group % kAttemptStride);
    return {at / rows, at % rows};
}
inline uint64_t data_attempt(int64_t group) { return static_cast<uint64_t>(group / kAttemptStride); }

/// What /samples/reward_extras stores for a reward result: its extras' JSON object text, "" when
/// there are none (a number returned, or a dict with only `score`).
inline std::string stored_extras(const reward::Result& q) { return q.extras == "{}" ? std::string() : q.extras; }

inline DataTask* as_data_task(rollout::Task& t) { return dynamic_cast<DataTask*>(&t); }
inline const DataTask* as_data_task(const rollout::Task& t) { return dynamic_cast<const DataTask*>(&t); }

/// COLLECTIVE over MPI_COMM_WORLD, before the run directory exists: rank 0 indexes opt.data (and
/// opt.val_data) with the run tokenizer (every row checked, prompts counted and limited by
/// --max-prompt-tokens), the others receive the index (Dataset::to_bytes) and reopen the file;
/// checks that every row (of both files) has a scorer (a data_source with a built-in one, or --reward/--reward-fn/--reward-url); then the
/// rollout ranks start their scorers (`start_scorer`), and `val_rank` (an asynchronous mode's
/// coordinator with --val-data) its validation scorer (`start_val_scorer`). The same ConfigError
/// (FILE:LINE, or the option) on every rank.
std::unique_ptr<DataTask> open_data_task_on_every_rank(const config::Options& opt, bool rollout_rank,
                                                       bool val_rank = false);

/// Steps a --data run makes: --steps, or fewer when --epochs ends it first
/// (ceil(rows x epochs / prompts-per-step)).
int64_t data_steps(const config::Options& opt, uint64_t rows);

}  // namespace tagflow::sched
