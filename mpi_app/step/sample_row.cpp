// SPDX-License-Identifier: Apache-2.0
// sample_row: see the header.
#include "step/sample_row.hpp"

#include <algorithm>
#include <limits>

#include "common/error.hpp"

namespace tagflow::sched {

std::string TextSource::operator()(const std::vector<int32_t>& ids) const {
    if (task) return task->render(ids);
    if (!tokenizer || ids.empty()) return {};
    try {
        return tokenizer->decode(ids, /*skip_special=*/false);
    } catch (const Error&) {  // an id outside the tokenizer (a model's vocabulary may be larger)
        std::vector<int32_t> known;
        known.reserve(ids.size());
        for (int32_t id : ids) {
            try {
                tokenizer->token_bytes(id);
                known.push_back(id);
            } catch (const Error&) {}
        }
        return tokenizer->decode(known, /*skip_special=*/false);
    }
}

io::SampleRecord sample_row(const RolloutSample& r, const std::string& task, int64_t prompt_index, RowColumns columns,
                            const TextSource& text) {
    io::SampleRecord rec;
    rec.id = r.id;
    rec.group = r.group;
    rec.prompt_index = prompt_index;
    rec.task = task;
    rec.reward = r.reward;
    rec.finish_reason = r.hit_eos ? io::FinishReason::kStop : io::FinishReason::kLength;
    rec.rank = r.rank;
    rec.t_done = r.t_done;
    rec.version_min = rec.version_max = r.version;
    rec.prompt_text = text(r.prompt);
    rec.response_text = text(r.response);
    rec.reward_extras = r.extras;
    if (columns == RowColumns::kFromTree) return rec;

    const float nan = std::numeric_limits<float>::quiet_NaN();
    const size_t P = r.prompt.size(), n = r.response.size();
    rec.tokens = r.prompt;
    rec.tokens.insert(rec.tokens.end(), r.response.begin(), r.response.end());
    rec.logprobs.assign(P, nan);
    rec.logprobs.insert(rec.logprobs.end(), r.logprobs.begin(), r.logprobs.end());
    rec.versions.assign(P, -1);
    if (r.versions.size() == n) rec.versions.insert(rec.versions.end(), r.versions.begin(), r.versions.end());
    else rec.versions.insert(rec.versions.end(), n, r.version);
    rec.loss_mask.assign(P, 0);
    rec.loss_mask.insert(rec.loss_mask.end(), n, 1);
    if (r.loss_mask.size() == n) {  // multi-turn: tool tokens are not the model's
        for (size_t k = 0; k < n; ++k) {
            if (r.loss_mask[k]) continue;
            rec.loss_mask[P + k] = 0;
            rec.logprobs[P + k] = nan;
            rec.versions[P + k] = -1;
        }
    }
    for (size_t k = P; k < rec.versions.size(); ++k) {
        if (!rec.loss_mask[k]) continue;
        rec.version_min = std::min(rec.version_min, rec.versions[k]);
        rec.version_max = std::max(rec.version_max, rec.versions[k]);
    }
    return rec;
}

}  // namespace tagflow::sched
