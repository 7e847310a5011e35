// SPDX-License-Identifier: Apache-2.0
// sft_data: the data-set side of `tagflow sft --data FILE [--val-data FILE]` (share/doc/data.md,
// "Supervised fine-tuning"): the run tokenizer, the indexed training and validation files (rank 0
// indexes and checks them, the others receive the index), the longest sequence a model must hold,
// the rows of each step (EpochSampler: a seeded shuffle per epoch, every row once per epoch) as
// prompt + response token ids, and the validation scorer. Every error in the inputs is one
// ConfigError, the same on every rank, raised before anything is written.
// Does not: train (sft_command.cpp) or generate (step/validation.hpp). No LibTorch.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/epoch.hpp"
#include "reward/scorer.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::cmd {

struct SftDataOptions {
    std::string data, val_data;
    std::string tokenizer;      ///< --tokenizer (file or directory); else `init`'s tokenizer.json
    std::string init;           ///< --init checkpoint directory ("" = a fresh model)
    std::string chat_template;  ///< --chat-template FILE ("" = the tokenizer's)
    int64_t max_prompt_tokens = 0;
    int64_t epochs = 0;  ///< 0: bounded by `steps` only
    int64_t seed = 1;
    std::string reward;     ///< builtin:NAME ("" = by data_source)
    std::string reward_fn;  ///< FILE.py[:NAME]
    int32_t reward_workers = 2;
    int64_t val_rows = 0;  ///< 0 = every validation row, else the first N
};

/// One training sequence: prompt ids then response ids (the response ends with its stop id).
struct SftSeq {
    std::vector<int32_t> ids;
    std::size_t prompt_len = 0;
};

class SftData {
public:
    /// COLLECTIVE over MPI_COMM_WORLD: loads the tokenizer and indexes the files (rank 0), checks
    /// every training row's response, and agrees on the result; ConfigError on every rank (rank
    /// 0's message) for a bad tokenizer, file or row.
    static SftData load(const SftDataOptions& o, int rank, int size);

    const text::Tokenizer& tokenizer() const { return *tok_; }
    const std::string& tokenizer_path() const { return tok_path_; }
    const data::Dataset& train() const { return *train_; }
    bool has_val() const { return val_.has_value(); }
    const data::Dataset& val() const { return *val_; }
    /// This rank's validation rows (every size-th of the first val_rows), parsed.
    const std::vector<data::Row>& val_rows() const { return val_rows_; }
    int64_t val_total() const { return val_total_; }
    /// Longest prompt + response (stop id included) of the training rows, in tokens, and its line.
    int64_t longest_sequence() const { return longest_seq_; }
    uint64_t longest_sequence_line() const { return longest_line_; }
    /// Longest response (stop id included) of the training rows and of the validation rows that
    /// have one: the default generation budget of validation.
    int32_t longest_response() const { return longest_resp_; }
    /// Longest validation prompt.
    int64_t longest_val_prompt() const { return longest_val_prompt_; }
    /// The stop ids of the rows' responses (the chat stop ids when any prompt is a message list).
    std::vector<int32_t> stop_ids() const;

    /// Rows of the next step: up to `batch` tickets from the sampler (the same on every rank),
    /// this rank's share (every size-th) as sequences. Empty when the epochs are done.
    std::vector<SftSeq> next_batch(int64_t batch, int rank, int size, int64_t* rows_taken);
    const data::EpochSampler& sampler() const { return *sampler_; }

    /// The validation scorer (null without --val-data): --reward-fn's worker pool (started and its
    /// import checked by load()), else builtin:NAME or each row's data_source's built-in scorer.
    reward::Scorer* val_scorer() const { return scorer_.get(); }
    std::string scorer_name() const;

private:
    SftDataOptions o_;
    std::shared_ptr<const text::Tokenizer> tok_;
    std::string tok_path_;
    std::shared_ptr<data::Dataset> train_;
    std::optional<data::Dataset> val_;
    std::vector<data::Row> val_rows_;
    int64_t val_total_ = 0;
    int64_t longest_seq_ = 0, longest_val_prompt_ = 0;
    int32_t longest_resp_ = 0;
    uint64_t longest_line_ = 0;
    bool chat_ = false;
    std::shared_ptr<data::EpochSampler> sampler_;
    std::shared_ptr<reward::Scorer> scorer_;
};

/// A training row as a sequence (prompt_ids + encode(response) + the row's first stop id).
SftSeq sft_sequence(const data::Row& row, const text::Tokenizer& tok);

}  // namespace tagflow::cmd
