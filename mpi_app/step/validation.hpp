// SPDX-License-Identifier: Apache-2.0
// validation: scoring a policy on a validation data set (share/doc/data.md, "Validation"). Each
// row's prompt is tokenized with the run tokenizer (data::prompt_ids: the chat template for
// messages), answered greedily by an InferenceEngine (and, with K > 1 samples, K more times at
// the sampling temperature), the responses decoded to text and scored by a reward::Scorer with
// veRL's arguments (data_source, solution_str, ground_truth, extra_info). The result is the mean
// score per data_source and over every row, greedy and mean@K, as sums that ranks can add up
// (reduce_validation) and as /eval rows (eval_records).
// validate() is local: one rank, its own engine and rows (split the rows over ranks and reduce,
// or run it on one rank as `tagflow train`'s evaluate_local does). It blocks until every reward
// is in. Does not: choose the scorer (the caller's --reward / --reward-fn), read data files
// (data/dataset.hpp), or write the run file. No LibTorch in this header.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "io/run_file.hpp"
#include "reward/scorer.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::rollout {
class InferenceEngine;
}

namespace tagflow::sched {

struct ValOptions {
    int32_t max_tokens = 256;  ///< response budget per row, stop token included (cut to the model's positions)
    int32_t samples = 1;       ///< K: 1 = greedy only; K > 1 = greedy and K sampled responses per row (mean@K)
    double temperature = 1.0;  ///< sampling (K > 1 only)
    double top_p = 1.0;
    int32_t top_k = 0;
    uint64_t seed = 0;      ///< sampled response j of row r uses derive_seed(derive_seed(seed, r), j)
    int64_t positions = 0;  ///< the model's max_position_embeddings (0: not checked; the engine refuses)
};

/// The ValOptions of a run's --val-samples, --val-temperature and --seed (`o`: train's
/// config::Options or sft's options, which name them alike), with the resolved response budget
/// and the model's positions.
template <class RunOptions>
ValOptions val_options(const RunOptions& o, int32_t max_tokens, int64_t positions) {
    ValOptions vo;
    vo.max_tokens = max_tokens;
    vo.samples = o.val_samples;
    vo.temperature = o.val_temperature;
    vo.seed = static_cast<uint64_t>(o.seed);
    vo.positions = positions;
    return vo;
}

/// Score sums of one data_source (or of every row: data_source "" in ValResult::overall).
struct ValScore {
    int64_t n = 0;           ///< rows
    double greedy_sum = 0;   ///< sum over rows of the greedy response's score
    double sampled_sum = 0;  ///< sum over rows and samples of the sampled responses' scores (K > 1)
    int64_t sampled_n = 0;   ///< sampled responses scored
    double greedy() const { return n ? greedy_sum / static_cast<double>(n) : 0.0; }
    double mean_at_k() const { return sampled_n ? sampled_sum / static_cast<double>(sampled_n) : 0.0; }
};

/// One row's greedy answer.
struct ValResponse {
    uint64_t row = 0;  ///< data::Row::index
    std::string data_source;
    std::string text;  ///< decoded response (special tokens skipped), what the scorer saw
    double score = 0;
};

struct ValResult {
    std::map<std::string, ValScore> sources;  ///< by data_source ("" for rows without one)
    ValScore overall;
    int32_t k = 1;                    ///< ValOptions::samples
    int64_t failed = 0;               ///< rewards that failed and counted 0 (--reward-error zero)
    std::vector<ValResponse> greedy;  ///< local rows only (not reduced), in the order given
};

/// The ids that end a row's response: the tokenizer's chat stop ids for a message list, its
/// stop ids for a plain-string prompt.
std::vector<int32_t> response_stop_ids(const data::Row& row, const text::Tokenizer& tok);

/// Scores `rows` (local; see the file comment). A reward that fails under the scorer's `fail`
/// policy throws tagflow::Error with its one-line cause; under `zero` it counts 0 (and `failed`).
/// A prompt longer than the engine model's positions throws ConfigError naming the row's line.
ValResult validate(rollout::InferenceEngine& engine, const text::Tokenizer& tok, const std::vector<data::Row>& rows,
                   reward::Scorer& scorer, const ValOptions& opt);

/// COLLECTIVE over `comm`: the sums of every rank's result (sources, overall, failed); `greedy`
/// stays the local one.
ValResult reduce_validation(const ValResult& local, MPI_Comm comm);

/// The /eval rows of a result at `step` (io/run_file.hpp, share/doc/hdf5-schema.md): greedy
/// (k 0) per data_source and overall (data_source ""), and with K > 1 the same rows with k = K.
/// Rows without a data_source only get the overall row.
std::vector<io::EvalRecord> eval_records(const ValResult& r, int32_t step, const std::string& task);

/// The validation file's name without its directory and .gz/.jsonl/.json: /eval's `task`.
std::string val_task_name(const std::string& path);

/// "0.420 (a 0.500, b 0.340)" -- greedy overall then per data_source, for progress lines; with
/// K > 1 also " mean@K 0.380".
std::string describe(const ValResult& r);

}  // namespace tagflow::sched
