// SPDX-License-Identifier: Apache-2.0
// run_file_schema: the schema v1 table (share/doc/hdf5-schema.md).
#include "io/run_file_schema.hpp"

#include <cstring>

#include "common/error.hpp"
#include "io/run_file.hpp"

namespace tagflow::io::schema {
namespace {

template <class E>
std::string enum_list(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) {
        if (i) s += ',';
        s += to_string(static_cast<E>(i));
    }
    return s;
}

std::vector<Table> make_tables() {
    const char* T = kSecondsSinceT0;
    using C = ColType;
    std::vector<Table> t;
    t.push_back({kSamples,
                 "/samples",
                 kRowChunk,
                 {{"id", C::kI64},
                  {"group", C::kI64},
                  {"prompt_index", C::kI64},
                  {"task", C::kStr, kTaskLen},
                  {"reward", C::kF32},
                  {"finish_reason", C::kU8, 0, nullptr, enum_list<FinishReason>(3)},
                  {"rank", C::kI32},
                  {"version_min", C::kI32},
                  {"version_max", C::kI32},
                  {"t_done", C::kF64, 0, T},
                  {"tree_node", C::kI64},
                  // Byte offsets into /samples/text: prompt text [text_start, response_text_start),
                  // response text [response_text_start, text_end); -1 in rows written before them.
                  {"text_start", C::kI64, 0, "B", "", true},
                  {"response_text_start", C::kI64, 0, "B", "", true},
                  {"text_end", C::kI64, 0, "B", "", true},
                  // Byte offsets into /samples/reward_extras: the keys other than `score` of the dict
                  // the sample's reward returned, as JSON object text; empty when it returned a number
                  // (or none); -1 in rows written before them.
                  {"extras_start", C::kI64, 0, "B", "", true},
                  {"extras_end", C::kI64, 0, "B", "", true}}});
    t.push_back(
        {kTokens,
         "/samples",
         kTokenChunk,
         {{"tokens", C::kI32}, {"logprobs", C::kF32, 0, "nats"}, {"versions", C::kI32}, {"loss_mask", C::kU8}}});
    t.push_back({kConsumed,
                 "/consumed",
                 kRowChunk,
                 {{"id", C::kI64}, {"step", C::kI32}, {"advantage", C::kF32}, {"weight", C::kF32}}});
    t.push_back({kSteps,
                 "/steps",
                 kRowChunk,
                 {{"step", C::kI32},
                  {"t_start", C::kF64, 0, T},
                  {"t_end", C::kF64, 0, T},
                  {"policy_version", C::kI32},
                  {"samples", C::kI64},
                  {"tokens", C::kI64},
                  {"reward_mean", C::kF32},
                  {"reward_std", C::kF32},
                  {"loss", C::kF32},
                  {"kl", C::kF32},
                  {"entropy", C::kF32, 0, "nats"},
                  {"clip_frac", C::kF32, 0, "fraction"},
                  {"logprob_diff_mean", C::kF32, 0, "nats"},
                  {"staleness_mean", C::kF32, 0, "versions"},
                  {"staleness_max", C::kI32, 0, "versions"},
                  {"samples_per_s", C::kF32, 0, "1/s"},
                  {"idle_frac", C::kF32, 0, "fraction"},
                  {"stale_dropped", C::kI64, 0, "samples", "", true},
                  {"stale_weighted", C::kI64, 0, "samples", "", true},
                  {"skipped_updates", C::kI32, 0, "updates", "", true},
                  {"is_weight_mean", C::kF64, 0, "ratio", "", true},
                  {"is_weight_max", C::kF64, 0, "ratio", "", true},
                  {"rs_rejected", C::kI32, 0, "samples", "", true},
                  {"rs_rejected_tokens", C::kI64, 0, "tokens", "", true},
                  {"train_real_tokens", C::kI64, 0, "tokens", "", true},
                  {"train_token_slots", C::kI64, 0, "tokens", "", true},
                  {"lr", C::kF64, 0, nullptr, "", true},
                  {"train_members", C::kI32, 0, "ranks", "", true},
                  {"train_group", C::kStr, kTrainGroupLen, nullptr, "", true},
                  {"regroup", C::kU8, 0, nullptr, enum_list<Regroup>(4), true},
                  {"predicted_s", C::kF64, 0, "s", "", true},
                  {"predicted_current_s", C::kF64, 0, "s", "", true},
                  {"resplit_s", C::kF64, 0, "s", "", true},
                  {"resplit_bytes", C::kI64, 0, "B", "", true}}});
    t.push_back({kEval,
                 "/eval",
                 kRowChunk,
                 {{"step", C::kI32},
                  {"task", C::kStr, kTaskLen},
                  {"score", C::kF32},
                  {"n", C::kI32},
                  // the rows' data_source ("" = every row); 0 greedy, K mean@K sampled (-1: not recorded)
                  {"data_source", C::kStr, kDataSourceLen, nullptr, "", true},
                  {"k", C::kI32, 0, nullptr, "", true}}});
    t.push_back({kSyncs,
                 "/syncs",
                 kRowChunk,
                 {{"version", C::kI32},
                  {"bytes", C::kI64, 0, "B"},
                  {"t_start", C::kF64, 0, T},
                  {"t_end", C::kF64, 0, T},
                  {"mode", C::kStr, kModeLen},
                  {"dense_bytes", C::kI64, 0, "B"},
                  {"buckets", C::kI32},
                  {"gbps", C::kF32, 0, "GB/s"}}});
    t.push_back({kTimeline,
                 "/timeline",
                 kRowChunk,
                 {{"rank", C::kI32},
                  {"kind", C::kU8, 0, nullptr, enum_list<SpanKind>(7)},
                  {"t_start", C::kF64, 0, T},
                  {"t_end", C::kF64, 0, T},
                  {"step", C::kI32}}});
    t.push_back({kRanks,
                 "/ranks",
                 kRowChunk,
                 {{"rank", C::kI32},
                  {"host", C::kStr, kHostLen},
                  {"tags", C::kStr, kTagsLen},
                  {"tag_source", C::kStr, kTagSourceLen},
                  {"gpus", C::kI32},
                  {"clock_offset", C::kF64, 0, "s"},
                  {"clock_error", C::kF64, 0, "s", "", true}}});
    t.push_back(
        {kResumes, "/resumes", kRowChunk, {{"from_step", C::kI32}, {"t", C::kF64, 0, T}, {"rows_discarded", C::kI64}}});
    t.push_back({kTree,
                 "/tree",
                 kRowChunk,
                 {{"parent", C::kI64},
                  {"depth", C::kI64, 0, "tokens"},
                  {"token_start", C::kI64},
                  {"token_end", C::kI64},
                  {"rank", C::kI32},
                  {"t_start", C::kF64, 0, T},
                  {"t_end", C::kF64, 0, T}}});
    t.push_back(
        {kTreeTokens,
         "/tree",
         kTokenChunk,
         {{"tokens", C::kI32}, {"logprobs", C::kF32, 0, "nats"}, {"versions", C::kI32}, {"loss_mask", C::kU8}}});
    t.push_back({kText, "/samples", kTokenChunk, {{"text", C::kU8, 0, "UTF-8", "", true}}});
    t.push_back({kExtras, "/samples", kTokenChunk, {{"reward_extras", C::kU8, 0, "UTF-8", "", true}}});
    return t;
}

}  // namespace

const std::vector<Table>& tables() {
    static const std::vector<Table> t = make_tables();
    return t;
}

const std::vector<const char*>& groups() {
    static const std::vector<const char*> g = {"/samples",  "/consumed", "/steps",   "/eval", "/syncs",
                                               "/timeline", "/ranks",    "/resumes", "/tree"};
    return g;
}

size_t column_index(TableId t, const char* name) {
    const auto& cols = tables()[t].columns;
    for (size_t i = 0; i < cols.size(); ++i)
        if (std::strcmp(cols[i].name, name) == 0) return i;
    throw InternalError(std::string("run file schema: no column ") + name);
}

}  // namespace tagflow::io::schema
