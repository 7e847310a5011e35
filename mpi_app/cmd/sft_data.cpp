// SPDX-License-Identifier: Apache-2.0
// sft_data: see the header. Rank 0 indexes both files and checks every training row (its prompt
// rendered and its response tokenized, as the training steps will); the other ranks receive the
// indexes (data::Dataset::to_bytes) and the lengths, so a 2 GB file is read once per node, not
// once per rank, at start. Each rank reads and tokenizes only its own rows of a step.
#include "cmd/sft_data.hpp"

#include <mpi.h>

#include <algorithm>

#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "data/scorers.hpp"
#include "model/hf_export.hpp"

namespace tagflow::cmd {
namespace {

// Same verdict on every rank: nothing, or the lowest failing rank's message as a ConfigError.
void agree(const std::string& error) {
    const int size = Comm::world().size(), rank = Comm::world().rank();
    int first = error.empty() ? size : rank;
    TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == size) return;
    std::string msg = error;
    int len = static_cast<int>(msg.size());
    TAGFLOW_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD));
    msg.resize(static_cast<size_t>(len));
    TAGFLOW_MPI_CHECK(MPI_Bcast(msg.data(), len, MPI_CHAR, first, MPI_COMM_WORLD));
    throw ConfigError(msg);
}

template <class F>
void on_every_rank(F&& f) {
    std::string error;
    try {
        f();
    } catch (const Error& e) {  // ConfigError, or a tagflow::Error from a file the loaders refuse
        error = *e.what() ? e.what() : "bad input";
    }
    agree(error);
}

void bcast_string(std::string& s) {
    int64_t n = static_cast<int64_t>(s.size());
    TAGFLOW_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD));
    s.resize(static_cast<size_t>(n));
    for (int64_t off = 0; off < n; off += 1 << 30) {
        const int part = static_cast<int>(std::min<int64_t>(n - off, 1 << 30));
        TAGFLOW_MPI_CHECK(MPI_Bcast(s.data() + off, part, MPI_CHAR, 0, MPI_COMM_WORLD));
    }
}

std::string first_stop(const data::Row& row, const text::Tokenizer& tok, int32_t* id) {
    const std::vector<int32_t> stops = row.prompt.is_string() ? tok.stop_ids() : tok.chat_stop_ids();
    if (stops.empty())
        return std::string("the tokenizer has no ") +
               (row.prompt.is_string() ? "eos token" : "chat end-of-turn token") + " to end a response with";
    *id = stops.front();
    return "";
}

}  // namespace

SftSeq sft_sequence(const data::Row& row, const text::Tokenizer& tok) {
    SftSeq s;
    s.ids = data::prompt_ids(row, tok);
    s.prompt_len = s.ids.size();
    const std::vector<int32_t> resp = tok.encode(row.response, false);
    s.ids.insert(s.ids.end(), resp.begin(), resp.end());
    int32_t stop = 0;
    const std::string why = first_stop(row, tok, &stop);
    if (!why.empty()) throw ConfigError(why);
    s.ids.push_back(stop);
    return s;
}

SftData SftData::load(const SftDataOptions& o, int rank, int size) {
    SftData d;
    d.o_ = o;
    on_every_rank([&] {
        if (!o.tokenizer.empty()) {
            d.tok_path_ = o.tokenizer;
        } else if (!o.init.empty() && text::has_hf_tokenizer(o.init)) {
            d.tok_path_ = o.init;
        } else {
            throw ConfigError(std::string("--data ") + o.data + ": needs a text tokenizer: --tokenizer PATH " +
                              "(a tokenizer.json or a directory holding one)" +
                              (o.init.empty() ? std::string(" for a fresh model")
                                              : std::string(", or an --init directory with a tokenizer.json (") +
                                                    o.init + " has none)"));
        }
        d.tok_ = text::load_tokenizer(d.tok_path_, o.chat_template);
    });
    // Rank 0 indexes and checks; the others take its index.
    std::string train_bytes, val_bytes;
    int64_t lens[5] = {0, 0, 0, 0, 0};  // longest seq, its line, longest response, longest val prompt, chat
    on_every_rank([&] {
        if (rank != 0) return;
        data::DatasetOptions dopt;
        dopt.tokenizer = d.tok_;
        dopt.max_prompt_tokens = o.max_prompt_tokens;
        dopt.sft = true;
        data::Dataset train = data::Dataset::open(o.data, dopt);
        for (uint64_t i = 0; i < train.size(); ++i) {
            const data::Row r = train.row(i);
            SftSeq s;
            try {
                s = sft_sequence(r, *d.tok_);
            } catch (const Error& e) {
                throw ConfigError(o.data + ":" + std::to_string(r.line) + ": " + e.what());
            }
            if (static_cast<int64_t>(s.ids.size()) > lens[0]) {
                lens[0] = static_cast<int64_t>(s.ids.size());
                lens[1] = static_cast<int64_t>(r.line);
            }
            lens[2] = std::max<int64_t>(lens[2], static_cast<int64_t>(s.ids.size() - s.prompt_len));
            lens[4] |= r.prompt.is_string() ? 0 : 1;
        }
        train_bytes = train.to_bytes();
        if (!o.val_data.empty()) {
            dopt.sft = false;
            data::Dataset val = data::Dataset::open(o.val_data, dopt);
            const uint64_t n =
                o.val_rows > 0 ? std::min<uint64_t>(val.size(), static_cast<uint64_t>(o.val_rows)) : val.size();
            for (uint64_t i = 0; i < n; ++i) {
                lens[3] = std::max<int64_t>(lens[3], val.prompt_tokens().at(i));
                const data::Row r = val.row(i);
                int32_t stop = 0;
                const std::string why = first_stop(r, *d.tok_, &stop);
                if (!why.empty()) throw ConfigError(o.val_data + ":" + std::to_string(r.line) + ": " + why);
                if (r.has_response)
                    lens[2] =
                        std::max<int64_t>(lens[2], static_cast<int64_t>(d.tok_->encode(r.response, false).size()) + 1);
            }
            val_bytes = val.to_bytes();
        }
    });
    TAGFLOW_MPI_CHECK(MPI_Bcast(lens, 5, MPI_INT64_T, 0, MPI_COMM_WORLD));
    bcast_string(train_bytes);
    bcast_string(val_bytes);
    on_every_rank([&] {
        d.train_ = std::make_shared<data::Dataset>(data::Dataset::from_bytes(o.data, train_bytes, true));
        if (!o.val_data.empty()) d.val_ = data::Dataset::from_bytes(o.val_data, val_bytes, false);
    });
    d.longest_seq_ = lens[0];
    d.longest_line_ = static_cast<uint64_t>(lens[1]);
    d.longest_resp_ = static_cast<int32_t>(std::min<int64_t>(lens[2], INT32_MAX));
    d.longest_val_prompt_ = lens[3];
    d.chat_ = lens[4] != 0;
    d.sampler_ = std::make_shared<data::EpochSampler>(d.train_->size(), static_cast<uint64_t>(o.seed),
                                                      static_cast<uint64_t>(o.epochs));
    if (!d.val_) return d;
    d.val_total_ = o.val_rows > 0 ? std::min<int64_t>(static_cast<int64_t>(d.val_->size()), o.val_rows)
                                  : static_cast<int64_t>(d.val_->size());
    for (int64_t i = rank; i < d.val_total_; i += size) d.val_rows_.push_back(d.val_->row(static_cast<uint64_t>(i)));
    // The scorer: checked (and a --reward-fn's import) on every rank before anything is written.
    on_every_rank([&] {
        if (!o.reward_fn.empty()) {
            if (!o.reward.empty()) throw ConfigError("--reward and --reward-fn: give one of them, not both");
            reward::Options ro;
            ro.fn = o.reward_fn;
            ro.workers = o.reward_workers;
            d.scorer_ = reward::make_scorer(ro);
            return;
        }
        data::ScoreFn fixed = o.reward.empty() ? nullptr : data::parse_reward_spec(o.reward);
        if (!fixed)
            for (const auto& [src, n] : d.val_->data_sources())
                if (!data::default_scorer(src))
                    throw ConfigError("--val-data " + o.val_data + ": data_source \"" + src +
                                      "\" has no built-in scorer: give --reward-fn FILE.py[:NAME] or --reward "
                                      "builtin:NAME");
        d.scorer_ = reward::make_function_scorer(
            fixed ? "builtin:" + data::scorer_name(fixed) : std::string("builtin (by data_source)"),
            [fixed](const reward::Request& q, std::string&) {
                data::ScoreFn f = fixed ? fixed : data::default_scorer(q.data_source);
                if (!f) throw Error("data_source \"" + q.data_source + "\" has no built-in scorer");
                return f(q.data_source, q.solution_str, nlohmann::ordered_json::parse(q.ground_truth),
                         nlohmann::ordered_json::parse(q.extra_info));
            });
    });
    return d;
}

std::vector<int32_t> SftData::stop_ids() const { return chat_ ? tok_->chat_stop_ids() : tok_->stop_ids(); }

std::string SftData::scorer_name() const { return scorer_ ? scorer_->describe() : std::string("none"); }

std::vector<SftSeq> SftData::next_batch(int64_t batch, int rank, int size, int64_t* rows_taken) {
    std::vector<data::Ticket> tickets;
    while (static_cast<int64_t>(tickets.size()) < batch) {
        std::optional<data::Ticket> t = sampler_->take();
        if (!t) break;
        tickets.push_back(*t);
    }
    for (const data::Ticket& t : tickets) sampler_->done(t);  // trained in this step, on some rank
    *rows_taken = static_cast<int64_t>(tickets.size());
    std::vector<SftSeq> mine;
    for (size_t j = static_cast<size_t>(rank); j < tickets.size(); j += static_cast<size_t>(size))
        mine.push_back(sft_sequence(train_->row(tickets[j].row), *tok_));
    return mine;
}

}  // namespace tagflow::cmd
