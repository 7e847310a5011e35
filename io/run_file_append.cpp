// SPDX-License-Identifier: Apache-2.0
// run_file_append: the collective appends of RunFile. One allgather of the per-rank row
// counts gives every rank its offset and the new size; then, per column, every rank calls
// H5Dset_extent with the same size and one collective H5Dwrite with its own hyperslab.
#include <algorithm>

#include "io/run_file_impl.hpp"

namespace tagflow::io {

using schema::TableId;

namespace {

template <class Rec, class T>
std::vector<T> column(const std::vector<Rec>& rows, T Rec::*member) {
    std::vector<T> v;
    v.reserve(rows.size());
    for (const Rec& r : rows) v.push_back(r.*member);
    return v;
}

template <class Rec, class F>
auto column_of(const std::vector<Rec>& rows, F f) {
    std::vector<decltype(f(rows.front()))> v;
    v.reserve(rows.size());
    for (const Rec& r : rows) v.push_back(f(r));
    return v;
}

// The /syncs gbps column: as given, or bytes / (t_end - t_start) / 1e9 (0 for no duration).
float sync_gbps(const SyncRecord& r) {
    if (r.gbps >= 0) return r.gbps;
    double sec = r.t_end - r.t_start;
    return sec > 0 ? static_cast<float>(static_cast<double>(r.bytes) / sec / 1e9) : 0.f;
}

void check_all_written(const std::vector<bool>& written, TableId t) {
    for (size_t i = 0; i < written.size(); ++i)
        if (!written[i])
            throw InternalError(std::string("RunFile: column ") + schema::tables()[t].columns[i].name + " not written");
}

}  // namespace

// ---- Impl helpers ----

std::vector<int64_t> RunFile::Impl::allgather(const std::vector<int64_t>& local) const {
    std::vector<int64_t> all(local.size() * static_cast<size_t>(nranks));
    TAGFLOW_MPI_CHECK(MPI_Allgather(local.data(), static_cast<int>(local.size()), MPI_INT64_T, all.data(),
                                    static_cast<int>(local.size()), MPI_INT64_T, comm.get()));
    return all;
}

Slot RunFile::Impl::slot(hsize_t base, const std::vector<int64_t>& counts, size_t stride, size_t k) const {
    Slot s;
    hsize_t before = 0;
    for (int r = 0; r < nranks; ++r) {
        hsize_t c = static_cast<hsize_t>(counts[static_cast<size_t>(r) * stride + k]);
        if (r < rank) before += c;
        if (r == rank) s.count = c;
        s.total += c;
    }
    s.start = base + before;
    s.new_size = base + s.total;
    return s;
}

void RunFile::Impl::put_strings(TableId t, const char* name, const std::vector<std::string>& v, const Slot& s,
                                std::vector<bool>& written) {
    size_t i = schema::column_index(t, name);
    const schema::Column& c = schema::tables()[t].columns[i];
    if (c.type != schema::ColType::kStr)
        throw InternalError(std::string("RunFile: column ") + name + " is not a string");
    if (v.size() != s.count) throw InternalError(std::string("RunFile: bad row count for ") + name);
    std::vector<char> buf = pack_fixed_strings(v, c.str_len);
    record(write_slab(tables[t].cols[i].get(), dxpl.get(), tables[t].types[i].get(), s.new_size, s.start, s.count,
                      buf.data()));
    written[i] = true;
}

void RunFile::Impl::record(H5D_mpio_actual_io_mode_t mode) noexcept {
    if (mode == H5D_MPIO_NO_COLLECTIVE) ++stats.independent_writes;
    else ++stats.collective_writes;
}

// Appends rows of a table without ragged columns: `fill(slot, written)` writes each column.
template <class Rec, class Fill>
static void append_table(RunFile::Impl& im, const char* what, TableId t, const std::vector<Rec>& rows, Fill fill) {
    im.collective(what, [&] {
        std::vector<int64_t> counts = im.allgather({static_cast<int64_t>(rows.size())});
        Slot s = im.slot(im.tables[t].rows, counts, 1, 0);
        if (s.total == 0) return;
        std::vector<bool> written(schema::tables()[t].columns.size(), false);
        fill(s, written);
        check_all_written(written, t);
        im.tables[t].rows = s.new_size;
    });
}

// ---- appends ----

void RunFile::append_samples(const std::vector<SampleRecord>& rows) {
    Impl& im = *impl_;
    im.collective("append_samples", [&] {
        int64_t ntok = 0, ntext = 0, nextras = 0;
        std::string bad;
        for (const SampleRecord& r : rows) {
            ntext += static_cast<int64_t>(r.prompt_text.size() + r.response_text.size());
            nextras += static_cast<int64_t>(r.reward_extras.size());
            size_t n = r.tokens.size();
            if (bad.empty() && (r.logprobs.size() != n || r.versions.size() != n || r.loss_mask.size() != n))
                bad = "sample id " + std::to_string(r.id) + " has tokens/logprobs/versions/" + "loss_mask of lengths " +
                      std::to_string(n) + "/" + std::to_string(r.logprobs.size()) + "/" +
                      std::to_string(r.versions.size()) + "/" + std::to_string(r.loss_mask.size());
            ntok += static_cast<int64_t>(n);
        }
        std::vector<int64_t> c =
            im.allgather({static_cast<int64_t>(rows.size()), ntok, bad.empty() ? 0 : 1, ntext, nextras});
        std::string bad_ranks;
        for (int r = 0; r < im.nranks; ++r)
            if (c[static_cast<size_t>(r) * 5 + 2]) bad_ranks += " " + std::to_string(r);
        if (!bad_ranks.empty())  // thrown on every rank, before anything is written
            throw Error("RunFile::append_samples: invalid samples on rank(s)" + bad_ranks +
                        (bad.empty() ? "" : ": " + bad));

        Impl::Table& st = im.tables[schema::kSamples];
        Impl::Table& tt = im.tables[schema::kTokens];
        Impl::Table& xt = im.tables[schema::kText];
        Impl::Table& et = im.tables[schema::kExtras];
        Slot s = im.slot(st.rows, c, 5, 0);
        Slot ts = im.slot(tt.rows, c, 5, 1);
        Slot xs = im.slot(xt.rows, c, 5, 3);
        Slot es = im.slot(et.rows, c, 5, 4);
        if (s.total == 0) return;

        std::vector<bool> w(schema::tables()[schema::kSamples].columns.size(), false);
        const TableId S = schema::kSamples;
        im.put(S, "id", column(rows, &SampleRecord::id), s, w);
        im.put(S, "group", column(rows, &SampleRecord::group), s, w);
        im.put(S, "prompt_index", column(rows, &SampleRecord::prompt_index), s, w);
        im.put_strings(S, "task", column(rows, &SampleRecord::task), s, w);
        im.put(S, "reward", column(rows, &SampleRecord::reward), s, w);
        im.put(S, "finish_reason",
               column_of(rows, [](const SampleRecord& r) { return static_cast<uint8_t>(r.finish_reason); }), s, w);
        im.put(S, "rank", column(rows, &SampleRecord::rank), s, w);
        im.put(S, "version_min", column(rows, &SampleRecord::version_min), s, w);
        im.put(S, "version_max", column(rows, &SampleRecord::version_max), s, w);
        im.put(S, "t_done", column(rows, &SampleRecord::t_done), s, w);
        im.put(S, "tree_node", column(rows, &SampleRecord::tree_node), s, w);
        // Text: per row three offsets into the flat /samples/text, global like token_offsets.
        std::vector<int64_t> text_start, response_start, text_end;
        std::vector<uint8_t> text;
        text_start.reserve(rows.size());
        response_start.reserve(rows.size());
        text_end.reserve(rows.size());
        text.reserve(xs.count);
        int64_t at = static_cast<int64_t>(xs.start);
        for (const SampleRecord& r : rows) {
            text_start.push_back(at);
            response_start.push_back(at += static_cast<int64_t>(r.prompt_text.size()));
            text_end.push_back(at += static_cast<int64_t>(r.response_text.size()));
            text.insert(text.end(), r.prompt_text.begin(), r.prompt_text.end());
            text.insert(text.end(), r.response_text.begin(), r.response_text.end());
        }
        im.put(S, "text_start", text_start, s, w);
        im.put(S, "response_text_start", response_start, s, w);
        im.put(S, "text_end", text_end, s, w);
        // Reward extras: per row two offsets into the flat /samples/reward_extras, likewise.
        std::vector<int64_t> extras_start, extras_end;
        std::vector<uint8_t> extras;
        extras.reserve(es.count);
        at = static_cast<int64_t>(es.start);
        for (const SampleRecord& r : rows) {
            extras_start.push_back(at);
            extras_end.push_back(at += static_cast<int64_t>(r.reward_extras.size()));
            extras.insert(extras.end(), r.reward_extras.begin(), r.reward_extras.end());
        }
        im.put(S, "extras_start", extras_start, s, w);
        im.put(S, "extras_end", extras_end, s, w);
        check_all_written(w, S);
        std::vector<bool> wx(1, false);
        im.put(schema::kText, "text", text, xs, wx);
        std::vector<bool> we(1, false);
        im.put(schema::kExtras, "reward_extras", extras, es, we);

        // token_offsets[k+1] = end of sample k, global over ranks and appends.
        std::vector<int64_t> ends;
        ends.reserve(rows.size());
        int64_t end = static_cast<int64_t>(ts.start);
        for (const SampleRecord& r : rows) ends.push_back(end += static_cast<int64_t>(r.tokens.size()));
        im.record(write_slab(im.token_offsets.get(), im.dxpl.get(), H5T_NATIVE_INT64, s.new_size + 1, s.start + 1,
                             s.count, ends.data()));

        std::vector<int32_t> tokens, versions;
        std::vector<float> logprobs;
        std::vector<uint8_t> mask;
        tokens.reserve(ts.count);
        versions.reserve(ts.count);
        logprobs.reserve(ts.count);
        mask.reserve(ts.count);
        for (const SampleRecord& r : rows) {
            tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
            logprobs.insert(logprobs.end(), r.logprobs.begin(), r.logprobs.end());
            versions.insert(versions.end(), r.versions.begin(), r.versions.end());
            mask.insert(mask.end(), r.loss_mask.begin(), r.loss_mask.end());
        }
        std::vector<bool> wt(schema::tables()[schema::kTokens].columns.size(), false);
        const TableId T = schema::kTokens;
        im.put(T, "tokens", tokens, ts, wt);
        im.put(T, "logprobs", logprobs, ts, wt);
        im.put(T, "versions", versions, ts, wt);
        im.put(T, "loss_mask", mask, ts, wt);
        check_all_written(wt, T);
        st.rows = s.new_size;
        tt.rows = ts.new_size;
        xt.rows = xs.new_size;
        et.rows = es.new_size;
    });
}

int64_t RunFile::append_tree(const std::vector<TreeNodeRecord>& rows) {
    Impl& im = *impl_;
    int64_t first_row = -1;
    im.collective("append_tree", [&] {
        const TableId R = schema::kTree, T = schema::kTreeTokens;
        Impl::Table& rt = im.tables[R];
        Impl::Table& tt = im.tables[T];
        int64_t ntok = 0;
        std::string bad;
        for (size_t i = 0; i < rows.size() && bad.empty(); ++i) {
            const TreeNodeRecord& r = rows[i];
            const size_t n = r.tokens.size();
            const std::string row = "tree row " + std::to_string(i) + " of this rank";
            if (n == 0 || r.logprobs.size() != n || r.versions.size() != n || r.loss_mask.size() != n)
                bad = row + " has tokens/logprobs/versions/loss_mask of lengths " + std::to_string(n) + "/" +
                      std::to_string(r.logprobs.size()) + "/" + std::to_string(r.versions.size()) + "/" +
                      std::to_string(r.loss_mask.size()) + " (need equal, > 0)";
            else if (r.parent >= 0 && r.parent_in_batch >= 0)
                bad = row + " names both a parent row and a parent in the batch";
            else if (r.parent < -1 || r.parent >= static_cast<int64_t>(rt.rows))
                bad = row + " has parent " + std::to_string(r.parent) + ", not an earlier row (" +
                      std::to_string(rt.rows) + " rows written)";
            else if (r.parent_in_batch < -1 || r.parent_in_batch >= static_cast<int64_t>(i))
                bad = row + " has parent_in_batch " + std::to_string(r.parent_in_batch) +
                      " (must be an earlier row of the same call)";
            else if (r.depth < 0 || (r.parent < 0 && r.parent_in_batch < 0 && r.depth != 0))
                bad = row + " has depth " + std::to_string(r.depth) + " (a root row has depth 0)";
            ntok += static_cast<int64_t>(n);
        }
        std::vector<int64_t> c = im.allgather({static_cast<int64_t>(rows.size()), ntok, bad.empty() ? 0 : 1});
        std::string bad_ranks;
        for (int r = 0; r < im.nranks; ++r)
            if (c[static_cast<size_t>(r) * 3 + 2]) bad_ranks += " " + std::to_string(r);
        if (!bad_ranks.empty())  // thrown on every rank, before anything is written
            throw Error("RunFile::append_tree: invalid rows on rank(s)" + bad_ranks + (bad.empty() ? "" : ": " + bad));
        Slot s = im.slot(rt.rows, c, 3, 0);
        Slot ts = im.slot(tt.rows, c, 3, 1);
        if (s.total == 0) return;

        std::vector<int64_t> parent, depth, start, end;
        parent.reserve(rows.size());
        depth.reserve(rows.size());
        start.reserve(rows.size());
        end.reserve(rows.size());
        int64_t pos = static_cast<int64_t>(ts.start);
        for (const TreeNodeRecord& r : rows) {
            parent.push_back(r.parent_in_batch >= 0 ? static_cast<int64_t>(s.start) + r.parent_in_batch : r.parent);
            depth.push_back(r.depth);
            start.push_back(pos);
            end.push_back(pos += static_cast<int64_t>(r.tokens.size()));
        }
        std::vector<bool> w(schema::tables()[R].columns.size(), false);
        im.put(R, "parent", parent, s, w);
        im.put(R, "depth", depth, s, w);
        im.put(R, "token_start", start, s, w);
        im.put(R, "token_end", end, s, w);
        im.put(R, "rank", column(rows, &TreeNodeRecord::rank), s, w);
        im.put(R, "t_start", column(rows, &TreeNodeRecord::t_start), s, w);
        im.put(R, "t_end", column(rows, &TreeNodeRecord::t_end), s, w);
        check_all_written(w, R);

        std::vector<int32_t> tokens, versions;
        std::vector<float> logprobs;
        std::vector<uint8_t> mask;
        tokens.reserve(ts.count);
        versions.reserve(ts.count);
        logprobs.reserve(ts.count);
        mask.reserve(ts.count);
        for (const TreeNodeRecord& r : rows) {
            tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
            logprobs.insert(logprobs.end(), r.logprobs.begin(), r.logprobs.end());
            versions.insert(versions.end(), r.versions.begin(), r.versions.end());
            mask.insert(mask.end(), r.loss_mask.begin(), r.loss_mask.end());
        }
        std::vector<bool> wt(schema::tables()[T].columns.size(), false);
        im.put(T, "tokens", tokens, ts, wt);
        im.put(T, "logprobs", logprobs, ts, wt);
        im.put(T, "versions", versions, ts, wt);
        im.put(T, "loss_mask", mask, ts, wt);
        check_all_written(wt, T);
        rt.rows = s.new_size;
        tt.rows = ts.new_size;
        if (s.count > 0) first_row = static_cast<int64_t>(s.start);
    });
    return first_row;
}

void RunFile::append_consumed(const std::vector<ConsumedRecord>& rows) {
    const TableId T = schema::kConsumed;
    append_table(*impl_, "append_consumed", T, rows, [&](const Slot& s, std::vector<bool>& w) {
        impl_->put(T, "id", column(rows, &ConsumedRecord::id), s, w);
        impl_->put(T, "step", column(rows, &ConsumedRecord::step), s, w);
        impl_->put(T, "advantage", column(rows, &ConsumedRecord::advantage), s, w);
        impl_->put(T, "weight", column(rows, &ConsumedRecord::weight), s, w);
    });
}

void RunFile::append_steps(const std::vector<StepRecord>& rows) {
    const TableId T = schema::kSteps;
    append_table(*impl_, "append_steps", T, rows, [&](const Slot& s, std::vector<bool>& w) {
        Impl& im = *impl_;
        using R = StepRecord;
        im.put(T, "step", column(rows, &R::step), s, w);
        im.put(T, "t_start", column(rows, &R::t_start), s, w);
        im.put(T, "t_end", column(rows, &R::t_end), s, w);
        im.put(T, "policy_version", column(rows, &R::policy_version), s, w);
        im.put(T, "samples", column(rows, &R::samples), s, w);
        im.put(T, "tokens", column(rows, &R::tokens), s, w);
        im.put(T, "reward_mean", column(rows, &R::reward_mean), s, w);
        im.put(T, "reward_std", column(rows, &R::reward_std), s, w);
        im.put(T, "loss", column(rows, &R::loss), s, w);
        im.put(T, "kl", column(rows, &R::kl), s, w);
        im.put(T, "entropy", column(rows, &R::entropy), s, w);
        im.put(T, "clip_frac", column(rows, &R::clip_frac), s, w);
        im.put(T, "logprob_diff_mean", column(rows, &R::logprob_diff_mean), s, w);
        im.put(T, "staleness_mean", column(rows, &R::staleness_mean), s, w);
        im.put(T, "staleness_max", column(rows, &R::staleness_max), s, w);
        im.put(T, "samples_per_s", column(rows, &R::samples_per_s), s, w);
        im.put(T, "idle_frac", column(rows, &R::idle_frac), s, w);
        im.put(T, "stale_dropped", column(rows, &R::stale_dropped), s, w);
        im.put(T, "stale_weighted", column(rows, &R::stale_weighted), s, w);
        im.put(T, "skipped_updates", column(rows, &R::skipped_updates), s, w);
        im.put(T, "is_weight_mean", column(rows, &R::is_weight_mean), s, w);
        im.put(T, "is_weight_max", column(rows, &R::is_weight_max), s, w);
        im.put(T, "rs_rejected", column(rows, &R::rs_rejected), s, w);
        im.put(T, "rs_rejected_tokens", column(rows, &R::rs_rejected_tokens), s, w);
        im.put(T, "train_real_tokens", column(rows, &R::train_real_tokens), s, w);
        im.put(T, "train_token_slots", column(rows, &R::train_token_slots), s, w);
        im.put(T, "lr", column(rows, &R::lr), s, w);
        im.put(T, "train_members", column(rows, &R::train_members), s, w);
        im.put_strings(T, "train_group", column(rows, &R::train_group), s, w);
        im.put(T, "regroup", column_of(rows, [](const R& r) { return static_cast<uint8_t>(r.regroup); }), s, w);
        im.put(T, "predicted_s", column(rows, &R::predicted_s), s, w);
        im.put(T, "predicted_current_s", column(rows, &R::predicted_current_s), s, w);
        im.put(T, "resplit_s", column(rows, &R::resplit_s), s, w);
        im.put(T, "resplit_bytes", column(rows, &R::resplit_bytes), s, w);
    });
}

void RunFile::append_eval(const std::vector<EvalRecord>& rows) {
    const TableId T = schema::kEval;
    append_table(*impl_, "append_eval", T, rows, [&](const Slot& s, std::vector<bool>& w) {
        impl_->put(T, "step", column(rows, &EvalRecord::step), s, w);
        impl_->put_strings(T, "task", column(rows, &EvalRecord::task), s, w);
        impl_->put(T, "score", column(rows, &EvalRecord::score), s, w);
        impl_->put(T, "n", column(rows, &EvalRecord::n), s, w);
        impl_->put_strings(T, "data_source", column(rows, &EvalRecord::data_source), s, w);
        impl_->put(T, "k", column(rows, &EvalRecord::k), s, w);
    });
}

void RunFile::append_syncs(const std::vector<SyncRecord>& rows) {
    const TableId T = schema::kSyncs;
    append_table(*impl_, "append_syncs", T, rows, [&](const Slot& s, std::vector<bool>& w) {
        impl_->put(T, "version", column(rows, &SyncRecord::version), s, w);
        impl_->put(T, "bytes", column(rows, &SyncRecord::bytes), s, w);
        impl_->put(T, "t_start", column(rows, &SyncRecord::t_start), s, w);
        impl_->put(T, "t_end", column(rows, &SyncRecord::t_end), s, w);
        impl_->put_strings(T, "mode", column(rows, &SyncRecord::mode), s, w);
        impl_->put(T, "dense_bytes",
                   column_of(rows, [](const SyncRecord& r) { return r.dense_bytes < 0 ? r.bytes : r.dense_bytes; }), s,
                   w);
        impl_->put(T, "buckets", column(rows, &SyncRecord::buckets), s, w);
        impl_->put(T, "gbps", column_of(rows, [](const SyncRecord& r) { return sync_gbps(r); }), s, w);
    });
}

void RunFile::append_timeline(const std::vector<SpanRecord>& rows) {
    const TableId T = schema::kTimeline;
    append_table(*impl_, "append_timeline", T, rows, [&](const Slot& s, std::vector<bool>& w) {
        impl_->put(T, "rank", column(rows, &SpanRecord::rank), s, w);
        impl_->put(T, "kind", column_of(rows, [](const SpanRecord& r) { return static_cast<uint8_t>(r.kind); }), s, w);
        impl_->put(T, "t_start", column(rows, &SpanRecord::t_start), s, w);
        impl_->put(T, "t_end", column(rows, &SpanRecord::t_end), s, w);
        impl_->put(T, "step", column(rows, &SpanRecord::step), s, w);
    });
}

void RunFile::append_ranks(const std::vector<RankRecord>& rows) {
    const TableId T = schema::kRanks;
    append_table(*impl_, "append_ranks", T, rows, [&](const Slot& s, std::vector<bool>& w) {
        impl_->put(T, "rank", column(rows, &RankRecord::rank), s, w);
        impl_->put_strings(T, "host", column(rows, &RankRecord::host), s, w);
        impl_->put_strings(T, "tags", column(rows, &RankRecord::tags), s, w);
        impl_->put_strings(T, "tag_source", column(rows, &RankRecord::tag_source), s, w);
        impl_->put(T, "gpus", column(rows, &RankRecord::gpus), s, w);
        impl_->put(T, "clock_offset", column(rows, &RankRecord::clock_offset), s, w);
        impl_->put(T, "clock_error", column(rows, &RankRecord::clock_error), s, w);
    });
}

void RunFile::append_resumes(const std::vector<ResumeRecord>& rows) {
    const TableId T = schema::kResumes;
    append_table(*impl_, "append_resumes", T, rows, [&](const Slot& s, std::vector<bool>& w) {
        impl_->put(T, "from_step", column(rows, &ResumeRecord::from_step), s, w);
        impl_->put(T, "t", column(rows, &ResumeRecord::t), s, w);
        impl_->put(T, "rows_discarded", column(rows, &ResumeRecord::rows_discarded), s, w);
    });
}

}  // namespace tagflow::io
