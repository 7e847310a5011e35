// SPDX-License-Identifier: Apache-2.0
// sync_rollout: the sync scheduler's generation (tasks, agents, --data tickets), rewards, evaluation
// and --val-data validation. The class is in sync_scheduler_impl.hpp.
#include "sched/sync_scheduler_impl.hpp"

namespace tagflow::sched::sync_impl {

double SyncScheduler::evaluate_local(int32_t step) {
    if (!is_eval_rank()) return -1;
    torch::NoGradGuard ng;
    profile::Span span(timeline_, SpanKind::kRollout, step);
    // Multi-turn tasks: greedy sessions with the tool (sched/agent_rollout.hpp).
    if (const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_))
        return evaluate_agent_task(*engine_, *task_, *loop, opt_.eval_prompts);
    return rollout::evaluate(policy_, *task_, opt_.eval_prompts, opt_.max_batch);
}

// --val-data, COLLECTIVE over MPI_COMM_WORLD: every rollout rank answers its rows with the
// newest weights (step/validation.hpp), the sums are added on every rank; the eval rank adds
// the /eval rows of `step` to *evals. A reward that fails under --reward-error fail: nullopt on
// every rank and reward_error_ holds the lowest rank's cause.
std::optional<ValResult> SyncScheduler::validate_data(int32_t step, std::vector<io::EvalRecord>* evals) {
    ValResult local;
    if (roles_.is_rollout() && reward_error_.empty()) {
        torch::NoGradGuard ng;
        profile::Span span(timeline_, SpanKind::kRollout, step);
        const ValOptions vo = val_options(opt_, opt_.val_max_tokens > 0 ? opt_.val_max_tokens : max_new_,
                                          policy_->config().max_position_embeddings);
        try {
            local = validate(*engine_, data_->tokenizer(), val_rows_, data_->scorer(), vo);
        } catch (const Error& e) {
            reward_error_ = e.what();
        }
    }
    const std::string failed = agree_reward_error();
    if (!failed.empty()) {
        reward_error_ = failed;
        return std::nullopt;
    }
    ValResult all;
    {
        profile::Span wait(timeline_, SpanKind::kIdle, step);
        all = reduce_validation(local, MPI_COMM_WORLD);
    }
    rewards_failed_ += static_cast<uint64_t>(local.failed);
    if (is_eval_rank())
        for (io::EvalRecord& e : eval_records(all, step, val_task_name(opt_.val_data))) evals->push_back(e);
    return all;
}

std::vector<RolloutSample> SyncScheduler::generate(int32_t s) {
    std::vector<RolloutSample> mine;
    if (!roles_.is_rollout()) return mine;
    profile::Span span(timeline_, SpanKind::kRollout, s);
    const int n_roll = static_cast<int>(roles_.rollout_ranks.size());
    const int my = roles_.rollout.rank();
    const int64_t P = opt_.prompts_per_step, G = opt_.group_size;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<int64_t> groups;
    const int64_t n_groups = data_ ? static_cast<int64_t>(tickets_.size()) : P;
    for (int64_t j = my; j < n_groups; j += n_roll) {
        // --data: the group is its ticket, epoch x rows + row (so /samples' group names the epoch).
        int64_t g = data_ ? group_of(tickets_[static_cast<size_t>(j)]) : static_cast<int64_t>(s) * P + j;
        auto p = data_ ? data_->row_prompt(tickets_[static_cast<size_t>(j)].row) : task_->train_prompt(g);
        for (int64_t k = 0; k < G; ++k) {
            prompts.push_back(p);
            groups.push_back(g);
        }
    }
    if (prompts.empty()) return mine;
    // Multi-turn tasks: sessions through the agent loop, every turn in traj_ (sched/agent_rollout.hpp).
    if (const rollout::AgentLoop* loop = rollout::as_agent_loop(*task_))
        return generate_agent_samples(
            *engine_, *task_, *loop, opt_, prompts, groups, max_new_, s, roles_.world_rank,
            [this] { return clock_.now(); }, traj_, traj_leaf_);
    // One request per sample; its random stream depends only on the run seed and the
    // sample id, so samples do not change with the rank count or the batch they ran in.
    std::vector<int64_t> ids(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        ids[i] = groups[i] * G + static_cast<int64_t>(i % static_cast<size_t>(G));
        rollout::GenRequest rq;
        rq.id = static_cast<int64_t>(i);
        rq.prompt = prompts[i];
        rq.params = rollout_params(opt_, *task_, max_new_, ids[i]);
        if (data_ && !rq.params.stop_ids.empty()) rq.params.stop_ids = data_->stop_ids();
        engine_->submit(std::move(rq));
    }
    mine.resize(prompts.size());
    const double t_gen = clock_.now();
    engine_->run([&](const rollout::GenResult& g) {
        RolloutSample& r = mine[static_cast<size_t>(g.id)];
        const auto i = static_cast<size_t>(g.id);
        r.group = groups[i];
        r.id = ids[i];
        r.rank = roles_.world_rank;
        r.version = s;
        r.prompt = prompts[i];
        r.response = g.response;
        r.logprobs = g.logprobs;
        r.hit_eos = g.finish == FinishReason::kStop;
        if (data_)  // scored while the engine goes on (reward/scorer.hpp); collected below
            data_->scorer().submit({data_->reward_request(i, row_of(r.group), r.response)});
        else r.reward = task_->reward(r.prompt, r.response);
        r.t_done = clock_.now();
        // Token-level record of the request (prompt shared by its group in the prefix tree).
        std::vector<int32_t> versions(r.response.size(), s);
        traj::Request tr;
        tr.input = r.prompt;
        tr.output = r.response;
        tr.logprobs = r.logprobs;
        tr.versions = versions;
        tr.rank = r.rank;
        tr.t_start = t_gen;
        tr.t_end = r.t_done;
        traj_leaf_[r.id] = traj_.insert(tr).traj;
    });
    if (data_) collect_rewards(mine);
    return mine;
}

// --data: waits for this rank's rewards (submitted as the samples finished). A failed one is
// scored 0 (--reward-error zero, counted) or kept in reward_error_ (fail).
void SyncScheduler::collect_rewards(std::vector<RolloutSample>& mine) {
    std::vector<reward::Result> res;
    data_->scorer().drain(res);
    size_t failed = 0;
    for (const reward::Result& q : res) {
        RolloutSample& r = mine.at(static_cast<size_t>(q.id));
        r.reward = q.score;
        r.extras = stored_extras(q);
        if (data_->scorer().fatal(q)) {
            if (reward_error_.empty()) reward_error_ = q.cause;
        } else if (!q.ok) {
            ++failed;
            log_warn("%s (scored 0, --reward-error zero)", q.cause.c_str());
        }
    }
    rewards_failed_ += failed;
}

// COLLECTIVE: the lowest rank's reward_error_, on every rank ("" when none failed).
std::string SyncScheduler::agree_reward_error() {
    int first = reward_error_.empty() ? roles_.world_size : roles_.world_rank;
    TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == roles_.world_size) return {};
    return ckpt::bcast_string(MPI_COMM_WORLD, first, reward_error_);
}

}  // namespace tagflow::sched::sync_impl
