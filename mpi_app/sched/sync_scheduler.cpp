// SPDX-License-Identifier: Apache-2.0
#include "sched/sync_scheduler.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "cluster/roles.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config/options.hpp"
#include "io/run_file.hpp"
#include "model/policy.hpp"
#include "profile/timeline.hpp"
#include "rollout/generate.hpp"
#include "rollout/task.hpp"
#include "sched/exchange.hpp"
#include "train/grpo.hpp"
#include "train/weight_sync.hpp"

namespace tagflow::sched {
namespace {

using io::SpanKind;

// Values the train root shares with every rank after a step (one MPI_Allreduce SUM where only
// the train root contributes them, plus every rank's idle seconds).
enum StatSlot {
    kLoss, kKl, kEntropy, kClip, kLpDiff, kTokens, kEval, kSyncBytes, kSyncT0, kSyncT1, kIdle, kNumStats
};

class SyncScheduler final : public Scheduler {
 public:
    SyncScheduler(const config::Options& opt, cluster::Roles& roles, io::RunFile& run, double t0_unix,
                  std::unique_ptr<rollout::Task> task)
        : opt_(opt), roles_(roles), run_(run), clock_(t0_unix), timeline_(clock_, roles.world_rank),
          task_(std::move(task)) {
        model::PolicyConfig pc;
        pc.vocab = task_->vocab_size();
        pc.d_model = opt.d_model;
        pc.n_layers = opt.layers;
        pc.n_heads = opt.heads;
        pc.d_ff = opt.d_ff;
        max_new_ = opt.max_new_tokens > 0 ? opt.max_new_tokens : task_->max_response_tokens();
        pc.max_seq = task_->max_prompt_tokens() + max_new_;
        policy_ = model::Policy(pc, static_cast<uint64_t>(opt.seed));
        if (roles.is_train()) {
            train::GrpoConfig gc;
            gc.lr = opt.lr;
            gc.clip_eps = opt.clip_eps;
            gc.kl_coef = opt.kl_coef;
            gc.entropy_coef = opt.entropy_coef;
            gc.weight_decay = opt.weight_decay;
            gc.grad_clip = opt.grad_clip;
            gc.temperature = opt.temperature;
            gc.micro_batch = opt.micro_batch > 0 ? opt.micro_batch : std::numeric_limits<int32_t>::max();
            gc.bf16 = opt.bf16;
            learner_ = std::make_unique<train::GrpoLearner>(policy_, gc);
        }
        // Per-rank sampling stream: reproducible for a given seed and rank count.
        gen_ = at::detail::createCPUGenerator(static_cast<uint64_t>(opt.seed) * 1000003ull +
                                              static_cast<uint64_t>(roles.world_rank) + 1);
        bucket_bytes_ = static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0);
        if (roles.world_rank == 0)
            print0("model: %lld parameters (d_model %d, layers %d, heads %d, d_ff %d, vocab %lld, max_seq %lld)\n",
                   static_cast<long long>(policy_->num_parameters()), opt.d_model, opt.layers, opt.heads,
                   opt.d_ff, static_cast<long long>(pc.vocab), static_cast<long long>(pc.max_seq));
    }

    RunSummary run() override {
        RunSummary sum;
        sum.best_constant = task_->best_constant_score(opt_.eval_prompts);
        // Version 0: every rollout rank starts from the train root's initial weights.
        sync_weights(0);
        double eval0 = evaluate_local(0);
        std::vector<io::EvalRecord> evals;
        if (is_eval_rank()) evals.push_back({0, task_->name(), static_cast<float>(eval0), opt_.eval_prompts});
        TAGFLOW_MPI_CHECK(MPI_Bcast(&eval0, 1, MPI_DOUBLE, roles_.rollout_ranks.front(), MPI_COMM_WORLD));
        sum.first_eval = sum.best_eval = sum.last_eval = eval0;
        std::vector<io::SyncRecord> syncs;
        if (roles_.is_train_root()) syncs.push_back({0, param_bytes(), last_sync_t0_, last_sync_t1_, "mpi_bcast"});
        write_rows({}, {}, {}, evals, syncs);
        print0("step %5d/%-5lld eval %.3f (held-out greedy; best constant output %.3f)\n", 0,
               static_cast<long long>(opt_.steps), eval0, sum.best_constant);

        double total_samples = 0;
        for (int32_t s = 0; s < opt_.steps; ++s) {
            StepOut o = step(s);
            total_samples += static_cast<double>(o.row.samples);
            if (s == 0) sum.first_reward = o.row.reward_mean;
            sum.last_reward = o.row.reward_mean;
            if (o.eval >= 0) {
                sum.last_eval = o.eval;
                sum.best_eval = std::max(sum.best_eval, o.eval);
            }
            char evs[32] = "";
            if (o.eval >= 0) snprintf(evs, sizeof evs, "  eval %.3f", o.eval);
            print0("step %5d/%-5lld reward %.3f ± %.3f%s  loss %+.4f  samples/s %7.1f  idle %4.1f%%  elapsed %6.1fs\n",
                   s + 1, static_cast<long long>(opt_.steps), o.row.reward_mean, o.row.reward_std, evs,
                   o.row.loss, o.row.samples_per_s, 100.0 * o.row.idle_frac, clock_.now());
        }
        sum.steps = opt_.steps;
        sum.elapsed = clock_.now();
        sum.samples_per_s = total_samples / std::max(1e-9, sum.elapsed);
        // The last io spans reach the file too.
        run_.append_timeline(timeline_.take());
        run_.flush();
        return sum;
    }

 private:
    struct StepOut {
        io::StepRecord row;
        double eval = -1;
    };

    // COLLECTIVE (sync communicator): train root -> every rollout rank, flat buckets.
    train::SyncStats sync_weights(int32_t step) {
        train::SyncStats st;
        if (roles_.sync.is_null()) return st;
        profile::Span span(timeline_, SpanKind::kWeightSync, step);
        st = train::broadcast_tensors(params(), roles_.sync.get(), 0, bucket_bytes_);
        last_sync_t0_ = clock_.now() - st.seconds;
        last_sync_t1_ = clock_.now();
        return st;
    }

    std::vector<at::Tensor> params() {
        std::vector<at::Tensor> ps;
        for (auto& p : policy_->parameters()) ps.push_back(p.data());
        return ps;
    }

    // Held-out greedy evaluation is generation, so it runs on a rollout rank (the first one,
    // which holds the newest weights right after the sync); -1 on every other rank.
    bool is_eval_rank() const { return roles_.world_rank == roles_.rollout_ranks.front(); }
    double evaluate_local(int32_t step) {
        if (!is_eval_rank()) return -1;
        torch::NoGradGuard ng;
        profile::Span span(timeline_, SpanKind::kRollout, step);
        return rollout::evaluate(policy_, *task_, opt_.eval_prompts);
    }

    std::vector<RolloutSample> generate(int32_t s) {
        std::vector<RolloutSample> mine;
        if (!roles_.is_rollout()) return mine;
        profile::Span span(timeline_, SpanKind::kRollout, s);
        const int n_roll = static_cast<int>(roles_.rollout_ranks.size());
        const int my = roles_.rollout.rank();
        const int64_t P = opt_.prompts_per_step, G = opt_.group_size;
        std::vector<std::vector<int32_t>> prompts;
        std::vector<int64_t> groups;
        for (int64_t j = my; j < P; j += n_roll) {
            int64_t g = static_cast<int64_t>(s) * P + j;
            auto p = task_->train_prompt(g);
            for (int64_t k = 0; k < G; ++k) {
                prompts.push_back(p);
                groups.push_back(g);
            }
        }
        if (prompts.empty()) return mine;
        rollout::SamplingParams sp;
        sp.temperature = opt_.temperature;
        sp.top_p = opt_.top_p;
        sp.max_tokens = max_new_;
        sp.eos = task_->eos_token();
        auto comps = rollout::generate(policy_, prompts, sp, gen_);
        double t_done = clock_.now();
        for (size_t i = 0; i < comps.size(); ++i) {
            RolloutSample r;
            r.group = groups[i];
            r.id = groups[i] * G + static_cast<int64_t>(i % static_cast<size_t>(G));
            r.rank = roles_.world_rank;
            r.version = s;
            r.prompt = prompts[i];
            r.response = std::move(comps[i].response);
            r.logprobs = std::move(comps[i].logprobs);
            r.hit_eos = comps[i].hit_eos;
            r.reward = task_->reward(r.prompt, r.response);
            r.t_done = t_done;
            mine.push_back(std::move(r));
        }
        return mine;
    }

    StepOut step(int32_t s) {
        StepOut out;
        const double t_start = clock_.now();
        const int64_t P = opt_.prompts_per_step, G = opt_.group_size;

        std::vector<RolloutSample> mine = generate(s);
        // Waiting for the other ranks' samples is idle time.
        double idle = 0;
        std::vector<RolloutSample> all;
        {
            profile::Span span(timeline_, SpanKind::kIdle, s);
            all = allgather_samples(mine, MPI_COMM_WORLD);
            idle += span.end();
        }
        std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
        if (static_cast<int64_t>(all.size()) != P * G)
            throw InternalError("step " + std::to_string(s) + ": got " + std::to_string(all.size()) +
                                " samples, expected " + std::to_string(P * G));

        std::vector<float> rewards;
        double resp_tokens = 0;
        for (const auto& r : all) {
            rewards.push_back(r.reward);
            resp_tokens += static_cast<double>(r.response.size());
        }
        std::vector<float> adv = train::group_advantages(rewards, static_cast<int>(G), true);
        if (opt_.shuffle_advantages) {
            // Control experiment: same values, wrong samples. Same permutation on every rank.
            std::mt19937_64 rng(static_cast<uint64_t>(opt_.seed) * 7919u + static_cast<uint64_t>(s));
            std::shuffle(adv.begin(), adv.end(), rng);
        }

        double stats[kNumStats] = {0};
        std::vector<io::ConsumedRecord> consumed;
        if (roles_.is_train()) {
            profile::Span span(timeline_, SpanKind::kTrain, s);
            const int n_train = static_cast<int>(roles_.train_ranks.size());
            const int my = roles_.train.rank();
            std::vector<train::TrainSample> batch;
            for (size_t i = 0; i < all.size(); ++i) {
                int64_t j = all[i].group - static_cast<int64_t>(s) * P;
                if (j % n_train != my) continue;
                rollout::Completion c;
                c.response = all[i].response;
                c.logprobs = all[i].logprobs;
                c.hit_eos = all[i].hit_eos;
                batch.push_back(train::make_train_sample(all[i].prompt, c, adv[i]));
                consumed.push_back({all[i].id, s, adv[i], 1.0f});
            }
            train::StepStats st = learner_->accumulate(batch, std::max(1.0, resp_tokens));
            train::allreduce_sum(learner_->gradients(), roles_.train.get(), bucket_bytes_);
            learner_->step();
            double local[6] = {st.loss,
                               st.kl * static_cast<double>(st.tokens),
                               st.entropy * static_cast<double>(st.tokens),
                               st.clip_frac * static_cast<double>(st.tokens),
                               st.logprob_diff_mean * static_cast<double>(st.tokens),
                               static_cast<double>(st.tokens)};
            TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, local, 6, MPI_DOUBLE, MPI_SUM, roles_.train.get()));
            double tok = std::max(1.0, local[5]);
            stats[kLoss] = local[0];
            stats[kKl] = local[1] / tok;
            stats[kEntropy] = local[2] / tok;
            stats[kClip] = local[3] / tok;
            stats[kLpDiff] = local[4] / tok;
            stats[kTokens] = local[5];
        }
        train::SyncStats ss = sync_weights(s + 1);
        const bool eval_now = (opt_.eval_every > 0 && (s + 1) % opt_.eval_every == 0) || s + 1 == opt_.steps;
        const double eval = eval_now ? evaluate_local(s) : -1;
        // Summed over ranks below: -1 from nobody when there is no evaluation this step.
        stats[kEval] = (eval_now && is_eval_rank()) ? eval + 1.0 : 0.0;
        if (roles_.is_train_root()) {
            stats[kSyncBytes] = static_cast<double>(ss.bytes);
            stats[kSyncT0] = last_sync_t0_;
            stats[kSyncT1] = last_sync_t1_;
        } else {
            for (int k = 0; k < kIdle; ++k)
                if (k != kEval) stats[k] = 0;  // only the root's values count
        }
        {
            profile::Span span(timeline_, SpanKind::kIdle, s);
            stats[kIdle] = idle + span.end();  // the waits before this collective are included below
            TAGFLOW_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, stats, kNumStats, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        }
        const double t_end = clock_.now();

        io::StepRecord& row = out.row;
        row.step = s;
        row.t_start = t_start;
        row.t_end = t_end;
        row.policy_version = s + 1;
        row.samples = P * G;
        int64_t tokens = 0;
        for (const auto& r : all) tokens += static_cast<int64_t>(r.prompt.size() + r.response.size());
        row.tokens = tokens;
        double mean = std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(rewards.size());
        double var = 0;
        for (float r : rewards) var += (r - mean) * (r - mean);
        row.reward_mean = static_cast<float>(mean);
        row.reward_std = static_cast<float>(std::sqrt(var / static_cast<double>(rewards.size())));
        row.loss = static_cast<float>(stats[kLoss]);
        row.kl = static_cast<float>(stats[kKl]);
        row.entropy = static_cast<float>(stats[kEntropy]);
        row.clip_frac = static_cast<float>(stats[kClip]);
        row.logprob_diff_mean = static_cast<float>(stats[kLpDiff]);
        row.staleness_mean = 0;  // sync mode trains on the version that generated the samples
        row.staleness_max = 0;
        row.samples_per_s = static_cast<float>(static_cast<double>(row.samples) / std::max(1e-9, t_end - t_start));
        row.idle_frac = static_cast<float>(stats[kIdle] / (roles_.world_size * std::max(1e-9, t_end - t_start)));
        out.eval = stats[kEval] - 1.0;  // -1: no evaluation this step

        std::vector<io::SampleRecord> samples;
        for (const auto& r : mine) samples.push_back(to_record(r));
        std::vector<io::StepRecord> steps;
        if (roles_.world_rank == 0) steps.push_back(row);
        std::vector<io::EvalRecord> evals;
        std::vector<io::SyncRecord> syncs;
        if (eval_now && is_eval_rank())
            evals.push_back({s + 1, task_->name(), static_cast<float>(eval), opt_.eval_prompts});
        if (roles_.is_train_root()) {
            syncs.push_back({s + 1, ss.bytes, last_sync_t0_, last_sync_t1_, "mpi_bcast"});
        }
        {
            profile::Span span(timeline_, SpanKind::kIo, s);
            write_rows(samples, consumed, steps, evals, syncs);
        }
        return out;
    }

    // COLLECTIVE (io communicator): one step's rows of every table, then a flush, so a crash
    // leaves the file readable up to here.
    void write_rows(const std::vector<io::SampleRecord>& samples, const std::vector<io::ConsumedRecord>& consumed,
                    const std::vector<io::StepRecord>& steps, const std::vector<io::EvalRecord>& evals,
                    const std::vector<io::SyncRecord>& syncs) {
        run_.append_samples(samples);
        run_.append_consumed(consumed);
        run_.append_steps(steps);
        run_.append_eval(evals);
        run_.append_syncs(syncs);
        run_.append_timeline(timeline_.take());
        run_.flush();
    }

    int64_t param_bytes() {
        int64_t n = 0;
        for (auto& p : params()) n += p.numel() * static_cast<int64_t>(sizeof(float));
        return n;
    }

    io::SampleRecord to_record(const RolloutSample& r) const {
        io::SampleRecord rec;
        rec.id = r.id;
        rec.group = r.group;
        rec.prompt_index = r.group;
        rec.task = task_->name();
        rec.reward = r.reward;
        rec.finish_reason = r.hit_eos ? io::FinishReason::kStop : io::FinishReason::kLength;
        rec.rank = r.rank;
        rec.version_min = rec.version_max = r.version;
        rec.t_done = r.t_done;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        rec.tokens = r.prompt;
        rec.tokens.insert(rec.tokens.end(), r.response.begin(), r.response.end());
        rec.logprobs.assign(r.prompt.size(), nan);
        rec.logprobs.insert(rec.logprobs.end(), r.logprobs.begin(), r.logprobs.end());
        rec.versions.assign(r.prompt.size(), -1);
        rec.versions.insert(rec.versions.end(), r.response.size(), r.version);
        rec.loss_mask.assign(r.prompt.size(), 0);
        rec.loss_mask.insert(rec.loss_mask.end(), r.response.size(), 1);
        return rec;
    }

    const config::Options& opt_;
    cluster::Roles& roles_;
    io::RunFile& run_;
    profile::Clock clock_;
    profile::Timeline timeline_;
    std::unique_ptr<rollout::Task> task_;
    model::Policy policy_{nullptr};
    std::unique_ptr<train::GrpoLearner> learner_;
    at::Generator gen_;
    size_t bucket_bytes_ = 0;
    int32_t max_new_ = 0;
    double last_sync_t0_ = 0, last_sync_t1_ = 0;
};

}  // namespace

std::unique_ptr<Scheduler> make_sync_scheduler(const config::Options& opt, cluster::Roles& roles,
                                               io::RunFile& run, double t0_unix,
                                               std::unique_ptr<rollout::Task> task) {
    return std::make_unique<SyncScheduler>(opt, roles, run, t0_unix, std::move(task));
}

}  // namespace tagflow::sched
