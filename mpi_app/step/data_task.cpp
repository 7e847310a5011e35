// SPDX-License-Identifier: Apache-2.0
// data_task: see the header.
#include "step/data_task.hpp"

#include <mpi.h>

#include <algorithm>
#include <optional>

#include "common/error.hpp"
#include "ckpt/checkpoint_mpi.hpp"
#include "common/mpi_env.hpp"
#include "data/scorers.hpp"
#include "step/run_tokenizer.hpp"

namespace tagflow::sched {
namespace {

std::string dump(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// Runs `f` on this rank; every rank then throws the lowest failing rank's ConfigError.
template <class F>
void agree(F&& f) {
    std::string error;
    bool failed = false;
    try {
        f();
    } catch (const Error& e) {
        error = *e.what() ? e.what() : "--data: failed";
        failed = true;
    }
    Comm world = Comm::world();
    int first = failed ? world.rank() : world.size();
    TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == world.size()) return;
    int len = static_cast<int>(error.size());
    TAGFLOW_MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD));
    error.resize(static_cast<size_t>(len));
    TAGFLOW_MPI_CHECK(MPI_Bcast(error.data(), len, MPI_CHAR, first, MPI_COMM_WORLD));
    throw ConfigError(error);
}

}  // namespace

DataTask::DataTask(data::Dataset ds, std::shared_ptr<const text::Tokenizer> tok, const config::Options& opt)
    : ds_(std::move(ds)), tok_(std::move(tok)), opt_(opt) {
    for (int32_t id : tok_->stop_ids()) stop_ids_.push_back(id);
    for (int32_t id : tok_->chat_stop_ids())
        if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) stop_ids_.push_back(id);
    if (stop_ids_.empty()) throw ConfigError("--data: the tokenizer " + tok_->name() + " has no stop token");
    for (uint32_t n : ds_.prompt_tokens()) max_prompt_ = std::max(max_prompt_, static_cast<int32_t>(n));
    if (opt.max_new_tokens > 0) max_new_ = opt.max_new_tokens;
}

void DataTask::set_val(data::Dataset val) {
    // The model's positions must hold the longest validation prompt too.
    for (uint32_t n : val.prompt_tokens()) max_prompt_ = std::max(max_prompt_, static_cast<int32_t>(n));
    val_.emplace(std::move(val));
}

std::vector<data::Row> DataTask::val_rows(uint64_t part, uint64_t parts) const {
    std::vector<data::Row> rows;
    if (!val_ || parts == 0) return rows;
    for (uint64_t i = part; i < val_->size(); i += parts) rows.push_back(val_->row(i));
    return rows;
}

DataTask::~DataTask() = default;

std::vector<int32_t> DataTask::train_prompt(int64_t) const {
    throw InternalError("DataTask::train_prompt: a --data run's prompts are tickets (ticket_prompt)");
}
std::vector<int32_t> DataTask::eval_prompt(int64_t) const {
    throw InternalError("DataTask::eval_prompt: a --data run has no held-out prompts");
}
float DataTask::reward(const std::vector<int32_t>&, const std::vector<int32_t>&) const {
    throw InternalError("DataTask::reward: a --data run scores through its reward::Scorer");
}

std::string DataTask::render(const std::vector<int32_t>& tokens) const {
    std::vector<int32_t> known;
    known.reserve(tokens.size());
    for (int32_t id : tokens)
        if (id >= 0 && id < tok_->vocab_size()) known.push_back(id);
    return tok_->decode(known, /*skip_special=*/false);
}

std::vector<int32_t> DataTask::row_prompt(uint64_t row) const { return data::prompt_ids(ds_.row(row), *tok_); }

reward::Request DataTask::reward_request(uint64_t id, uint64_t row, const std::vector<int32_t>& response) const {
    const data::Row r = ds_.row(row);
    std::vector<int32_t> ids;
    for (int32_t t : response) {
        if (std::find(stop_ids_.begin(), stop_ids_.end(), t) != stop_ids_.end()) break;
        if (t >= 0 && t < tok_->vocab_size()) ids.push_back(t);
    }
    reward::Request q;
    q.id = id;
    q.row = static_cast<int64_t>(row);
    q.data_source = r.data_source;
    q.solution_str = tok_->decode(ids, /*skip_special=*/true);
    q.ground_truth = dump(r.ground_truth);
    q.extra_info = dump(r.extra_info);
    return q;
}

void DataTask::start_scorer() { scorer_ = new_scorer(); }
void DataTask::start_val_scorer() { val_scorer_ = new_scorer(); }

std::unique_ptr<reward::Scorer> DataTask::new_scorer() const {
    const reward::ErrorPolicy policy = reward::parse_error_policy(opt_.reward_error);
    if (!opt_.reward_fn.empty() || !opt_.reward_url.empty()) {
        reward::Options ro;
        ro.fn = opt_.reward_fn;
        ro.url = opt_.reward_url;
        ro.token_file = opt_.reward_token_file;
        ro.timeout_s = opt_.reward_timeout;
        ro.workers = opt_.reward_workers;
        ro.on_error = policy;
        return reward::make_scorer(ro);
    }
    // Built-in: --reward builtin:NAME for every row, else each row's data_source (checked to have one).
    const data::ScoreFn fixed = opt_.reward.empty() ? nullptr : data::parse_reward_spec(opt_.reward);
    const std::string name = fixed ? data::scorer_name(fixed) : std::string("builtin by data_source");
    return reward::make_function_scorer(
        name,
        [fixed](const reward::Request& q, std::string&) {
            const data::ScoreFn fn = fixed ? fixed : data::default_scorer(q.data_source);
            if (!fn) throw Error("data_source '" + q.data_source + "' has no built-in scorer");
            return fn(q.data_source, q.solution_str, nlohmann::ordered_json::parse(q.ground_truth),
                      nlohmann::ordered_json::parse(q.extra_info));
        },
        policy);
}

reward::Scorer& DataTask::scorer() {
    if (!scorer_) throw InternalError("DataTask::scorer: not started on this rank");
    return *scorer_;
}

reward::Scorer& DataTask::val_scorer() {
    if (!val_scorer_) throw InternalError("DataTask::val_scorer: not started on this rank");
    return *val_scorer_;
}

std::unique_ptr<DataTask> open_data_task_on_every_rank(const config::Options& opt, bool rollout_rank, bool val_rank) {
    Comm world = Comm::world();
    std::shared_ptr<const text::Tokenizer> tok = run_tokenizer(opt);
    const bool text_tokenizer = !opt.tokenizer.empty() || (!opt.model.empty() && text::has_hf_tokenizer(opt.model));
    if (!text_tokenizer)
        throw ConfigError("--data " + opt.data +
                          ": needs a text tokenizer (--model DIR holding a tokenizer.json, "
                          "or --tokenizer PATH)");
    // Rank 0 indexes the file once (one pass, every row checked); the index goes to the others.
    std::string bytes, val_bytes;
    std::optional<data::Dataset> local, local_val;
    agree([&] {
        if (world.rank() != 0) return;
        data::DatasetOptions o;
        o.tokenizer = tok;
        o.max_prompt_tokens = opt.max_prompt_tokens;
        // Every row needs a scorer: a built-in one by data_source, unless a --reward option scores all.
        auto check_scorers = [&](const data::Dataset& ds, const char* option, const std::string& path) {
            if (!opt.reward.empty() || !opt.reward_fn.empty() || !opt.reward_url.empty()) return;
            for (const auto& [source, n] : ds.data_sources())
                if (!data::default_scorer(source))
                    throw ConfigError(std::string(option) + " " + path + ": " + std::to_string(n) +
                                      " rows of data_source '" + source +
                                      "' have no built-in scorer; give --reward builtin:NAME, --reward-fn FILE.py or "
                                      "--reward-url URL");
        };
        data::Dataset ds = data::Dataset::open(opt.data, o);
        check_scorers(ds, "--data", opt.data);
        if (!opt.val_data.empty()) {
            data::Dataset val = data::Dataset::open(opt.val_data, o);
            check_scorers(val, "--val-data", opt.val_data);
            val_bytes = val.to_bytes();
            local_val.emplace(std::move(val));
        }
        if (!opt.reward.empty()) (void)data::parse_reward_spec(opt.reward);
        bytes = ds.to_bytes();
        local.emplace(std::move(ds));
    });
    bytes = ckpt::bcast_string(MPI_COMM_WORLD, 0, bytes);
    if (!opt.val_data.empty()) val_bytes = ckpt::bcast_string(MPI_COMM_WORLD, 0, val_bytes);
    std::unique_ptr<DataTask> task;
    agree([&] {
        if (!local) local.emplace(data::Dataset::from_bytes(opt.data, bytes));  // reads rows by offset
        task = std::make_unique<DataTask>(std::move(*local), tok, opt);
        if (opt.epochs > 0 &&
            task->dataset().size() * static_cast<uint64_t>(opt.epochs) > static_cast<uint64_t>(kAttemptStride))
            throw ConfigError("--data " + opt.data + " --epochs " + std::to_string(opt.epochs) +
                              ": more than 2^32 prompt groups (rows x epochs)");
        if (!opt.val_data.empty()) {
            if (!local_val) local_val.emplace(data::Dataset::from_bytes(opt.val_data, val_bytes));
            task->set_val(std::move(*local_val));
        }
    });
    agree([&] {
        if (rollout_rank) task->start_scorer();
        if (val_rank && task->has_val()) task->start_val_scorer();
    });
    return task;
}

int64_t data_steps(const config::Options& opt, uint64_t rows) {
    if (opt.epochs <= 0) return opt.steps;
    const uint64_t groups = rows * static_cast<uint64_t>(opt.epochs);
    const uint64_t P = static_cast<uint64_t>(opt.prompts_per_step);
    return std::min<int64_t>(opt.steps, static_cast<int64_t>((groups + P - 1) / P));
}

}  // namespace tagflow::sched
