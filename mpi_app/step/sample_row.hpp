// SPDX-License-Identifier: Apache-2.0
// sample_row: the one builder of the run file's /samples rows (io::SampleRecord) from a finished
// sample, for every mode (sync, the async coordinator, the gateway recorder). Its per-token
// columns come either from the sample itself or, when the sample's requests are in a trajectory
// tree, from that tree (traj::fill_sample, at the write that also writes its /tree rows), so
// /samples and /tree agree exactly. Its text columns (prompt_text, response_text) come from a
// TextSource. Pure (no LibTorch). Does not write anything.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/run_file.hpp"
#include "rollout/task.hpp"
#include "sched/sample.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::sched {

/// What a row's ids say as text (share/doc/hdf5-schema.md, "Sample text"): a built-in task's
/// samples are its rendering (Task::render: "^12345=" and "54321$" for reverse); the gateway's
/// are the run tokenizer's decode with special tokens kept (so the chat template's markers show:
/// "<|im_start|>user\n...<|im_end|>"), ids the tokenizer does not know skipped, as Hugging Face's
/// decode skips them. Neither set: empty text.
struct TextSource {
    const rollout::Task* task = nullptr;
    const text::Tokenizer* tokenizer = nullptr;
    std::string operator()(const std::vector<int32_t>& ids) const;
};

/// Where a row's per-token columns (tokens, logprobs, versions, loss_mask) come from.
enum class RowColumns {
    kFromSample,  ///< prompt then response; NaN logprobs, version -1 and loss_mask 0 on the prompt
                  ///< and on environment tokens (RolloutSample::loss_mask 0); version_min/max over
                  ///< the model's tokens (RolloutSample::version when there is none)
    kFromTree,    ///< left empty: traj::fill_sample fills them (and version_min/max, tree_node)
};

/// The /samples row of `r`: id, group, prompt_index, task, reward, finish_reason (stop when the
/// sample hit EOS, else length), rank, t_done, the per-token columns as `columns` says, and the
/// text of r.prompt and r.response as `text` makes it.
io::SampleRecord sample_row(const RolloutSample& r, const std::string& task, int64_t prompt_index, RowColumns columns,
                            const TextSource& text);

}  // namespace tagflow::sched
