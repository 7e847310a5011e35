// SPDX-License-Identifier: Apache-2.0
// rl_trainer: who computes what. Sample i of a step (prompt j of the step) belongs to train
// rank j % n_train and to critic rank j % n_critic. Reference log-probs are computed by the
// sample's train rank (all-gathered only when the KL goes into the rewards), values by its
// critic rank (all-gathered, since the critic may sit on other ranks than the actor), and then
// every rank computes the same advantages for the whole batch (pure and cheap).
#include "step/rl_trainer.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <sstream>

#include "cluster/roles.hpp"
#include "common/error.hpp"
#include "common/mpi_env.hpp"
#include "config/options.hpp"
#include "model/value_model.hpp"
#include "rollout/sampling.hpp"
#include "rollout/task.hpp"
#include "sched/sched_policy.hpp"
#include "train/algorithms.hpp"
#include "train/collectives_mpi.hpp"
#include "train/delta_sync.hpp"
#include "train/lr_schedule.hpp"
#include "train/workers.hpp"

namespace tagflow::sched {

namespace {

// The train group's collectives, bracketed by the wait hook while one is set
// (RlTrainer::set_wait_hook): inside a collective this rank computes nothing — it waits for the
// group's slowest member, then for the reduction — which the schedulers book as idle.
class WaitTimedCollectives final : public train::Collectives {
public:
    WaitTimedCollectives(MPI_Comm comm, size_t bucket, const std::function<void(bool)>& hook)
        : inner_(comm, bucket), hook_(hook) {}
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    std::string name() const override { return inner_.name(); }
    size_t bucket_bytes() const override { return inner_.bucket_bytes(); }
    train::SyncStats allreduce_sum(const std::vector<at::Tensor>& tensors) override {
        return timed([&] { return inner_.allreduce_sum(tensors); });
    }
    train::SyncStats broadcast(const std::vector<at::Tensor>& tensors, int root) override {
        return timed([&] { return inner_.broadcast(tensors, root); });
    }
    train::SyncStats reduce_scatter_sum(const at::Tensor& send, const std::vector<int64_t>& counts,
                                        const at::Tensor& recv) override {
        return timed([&] { return inner_.reduce_scatter_sum(send, counts, recv); });
    }
    train::SyncStats allgather(const at::Tensor& mine, const std::vector<int64_t>& counts,
                               const at::Tensor& out) override {
        return timed([&] { return inner_.allgather(mine, counts, out); });
    }

private:
    template <class F>
    train::SyncStats timed(F&& collective) {
        if (!hook_ || inner_.size() == 1) return collective();
        hook_(true);
        train::SyncStats st = collective();
        hook_(false);
        return st;
    }
    train::MpiCollectives inner_;
    const std::function<void(bool)>& hook_;
};

// The rate of `step` on the curve of --lr-warmup-steps / --lr-schedule with peak `peak`.
double scheduled(const config::Options& opt, double peak, int64_t step) {
    train::LrSchedule s;
    s.lr = peak;
    s.warmup_steps = opt.lr_warmup_steps;
    s.cosine = opt.lr_schedule == "cosine";
    s.min_lr_ratio = opt.min_lr_ratio;
    s.total_steps = opt.steps;
    return train::lr_at(s, step);
}

}  // namespace

double step_lr(const config::Options& opt, int64_t step) { return scheduled(opt, opt.lr, step); }

struct RlTrainer::Impl {
    const config::Options& opt;
    cluster::Roles& roles;
    model::LlamaModel policy;
    train::AdvConfig adv;
    bool kl_in_loss = false, kl_in_reward = false;
    train::KlController kl_ctrl;  // --kl-ctrl adaptive: the reward KL coefficient, updated every step
    train::UpdateSchedule schedule;
    bool recompute = false;  // --old-logprobs recompute: pi_old is the trainer's forward before the update
    bool measure = false;    // --old-logprobs measure: that forward only for the /steps figures
    train::RolloutCorrectionConfig correction;
    std::unique_ptr<train::ActorWorker> actor;
    std::unique_ptr<train::ReferenceWorker> ref;
    std::unique_ptr<train::CriticWorker> critic;
    std::function<void(bool)> wait_hook;  // set_wait_hook; the collectives below call it
    std::unique_ptr<WaitTimedCollectives> train_comm, critic_comm;
    // Who trains: the run's roles, or (async modes) one train group that also holds the critic.
    MPI_Comm exch = MPI_COMM_WORLD;  // the per-sample exchanges; ranks below are its ranks
    std::vector<int> train_ranks, critic_ranks;
    int me = 0;
    bool in_train = false, in_critic = false;
    MPI_Comm train_c = MPI_COMM_NULL, critic_c = MPI_COMM_NULL;
    Comm actor_own, critic_own;  // async modes with the critic on ranks of its own
    size_t bucket = 0;           // --bucket-mb in bytes (the collectives' buckets)

    Impl(const config::Options& o, cluster::Roles& r, model::LlamaModel p, const TrainGroup* g)
        : opt(o), roles(r), policy(std::move(p)) {
        if (g) {
            exch = g->comm;
            if (g->comm != MPI_COMM_NULL) {
                int n = 0;
                TAGFLOW_MPI_CHECK(MPI_Comm_size(g->comm, &n));
                TAGFLOW_MPI_CHECK(MPI_Comm_rank(g->comm, &me));
                const int actors = g->actors > 0 ? g->actors : n;
                for (int k = 0; k < actors; ++k) train_ranks.push_back(k);
                critic_ranks = g->critics.empty() ? train_ranks : g->critics;
                in_train = me < actors;
                in_critic = std::count(critic_ranks.begin(), critic_ranks.end(), me) > 0;
                train_c = critic_c = g->comm;
                if (actors < n || !g->critics.empty()) {  // the actor's and the critic's own communicators
                    MPI_Comm a = MPI_COMM_NULL, c = MPI_COMM_NULL;
                    TAGFLOW_MPI_CHECK(MPI_Comm_split(g->comm, in_train ? 0 : MPI_UNDEFINED, me, &a));
                    TAGFLOW_MPI_CHECK(MPI_Comm_split(g->comm, in_critic ? 0 : MPI_UNDEFINED, me, &c));
                    actor_own = Comm::adopt(a);
                    critic_own = Comm::adopt(c);
                    train_c = a;
                    critic_c = c;
                }
            }
        } else {
            train_ranks = roles.train_ranks;
            critic_ranks = roles.critic_ranks;
            me = roles.world_rank;
            in_train = roles.is_train();
            in_critic = roles.is_critic();
            train_c = roles.train.get();
            critic_c = roles.critic.get();
        }
        adv.estimator = train::parse_adv_estimator(opt.algo);
        adv.norm_adv_by_std = opt.norm_adv_by_std_in_grpo;
        adv.grpo_unbiased_std = opt.grpo_std == "unbiased";
        adv.gamma = opt.gamma;
        adv.lam = opt.lam;
        // Separate estimators for the reward penalty (veRL algorithm.kl_penalty) and the loss
        // (veRL actor.kl_loss_type); each defaults to --kl-estimator.
        adv.kl_mode = train::parse_kl_mode(opt.kl_penalty.empty() ? opt.kl_estimator : opt.kl_penalty);
        const train::KlMode kl_loss_mode =
            train::parse_kl_mode(opt.kl_loss_type.empty() ? opt.kl_estimator : opt.kl_loss_type);
        kl_in_loss = opt.kl_coef > 0 && opt.kl_in == "loss";
        kl_in_reward = opt.kl_coef > 0 && opt.kl_in == "reward";
        adv.kl_in_reward = kl_in_reward;
        adv.kl_coef = opt.kl_coef;
        kl_ctrl.coef = opt.kl_coef;
        kl_ctrl.target = opt.kl_target;
        kl_ctrl.horizon = opt.kl_ctrl == "adaptive" ? opt.kl_horizon : 0.0;
        const double norm_tokens = opt.loss_scale_factor > 0 ? opt.loss_scale_factor : opt.max_new_tokens;
        recompute = opt.old_logprobs == "recompute";
        measure = opt.old_logprobs == "measure";
        correction.is = train::parse_is_level(opt.rollout_is);
        correction.is_threshold = opt.rollout_is_threshold;
        correction.rs = train::parse_rs_level(opt.rollout_rs);
        correction.rs_upper = opt.rollout_rs_threshold;
        correction.rs_lower = opt.rollout_rs_threshold_lower;
        correction.veto = opt.rollout_token_veto_threshold;
        correction.batch_normalize = opt.rollout_is_batch_normalize;
        schedule.mini_batches = opt.mini_batches;
        schedule.epochs = opt.ppo_epochs;
        bucket = static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0);

        train::TrainEngineConfig ec;
        ec.optim.lr = opt.lr;
        ec.optim.beta1 = 0.9;
        ec.optim.beta2 = 0.99;
        ec.optim.weight_decay = opt.weight_decay;
        ec.optim.grad_clip = opt.grad_clip;
        ec.micro_batch = opt.micro_batch > 0 ? opt.micro_batch : std::numeric_limits<int32_t>::max();
        ec.bf16 = opt.bf16;
        ec.micro_batch_tokens = opt.micro_batch_tokens;
        ec.pack = opt.pack == "on";
        ec.shard = train::parse_shard(opt.shard);
        if (in_train) {
            train_comm = std::make_unique<WaitTimedCollectives>(train_c, bucket, wait_hook);
            if (opt.kl_coef > 0) {
                train::TrainEngineConfig rc = ec;
                rc.trainable = false;
                ref = std::make_unique<train::ReferenceWorker>(
                    train::make_engine(train::policy_handle(train::clone_llama(policy)), rc), opt.temperature);
            }
            train::ActorConfig ac;
            ac.clip_eps = opt.clip_ratio_low > 0 ? opt.clip_ratio_low : opt.clip_eps;
            ac.clip_eps_high = opt.clip_ratio_high > 0 ? opt.clip_ratio_high : opt.clip_eps;
            ac.dual_clip = opt.clip_ratio_c;
            ac.entropy_coef = opt.entropy_coef;
            ac.kl_loss_coef = kl_in_loss ? opt.kl_coef : 0.0;
            ac.kl_loss_mode = kl_loss_mode;
            ac.loss_agg = train::parse_loss_agg(opt.loss_agg);
            ac.loss_norm_tokens = norm_tokens;
            ac.temperature = opt.temperature;
            policy->model->activation_checkpointing = opt.activation_checkpointing;
            actor = std::make_unique<train::ActorWorker>(train::make_engine(train::policy_handle(policy), ec), ac);
            actor->engine().set_group(train_comm.get());  // --shard: the AdamW state split over the train group
        }
        if (adv.estimator == train::AdvEstimator::kGae && in_critic) {
            critic_comm = std::make_unique<WaitTimedCollectives>(critic_c, bucket, wait_hook);
            // veRL starts the critic from the actor's weights; its value head starts at 0.
            model::ValueModel vm(policy->config(), static_cast<uint64_t>(opt.seed) + 17);
            vm->init_from_policy(*policy);
            vm->model->activation_checkpointing = opt.activation_checkpointing;
            train::TrainEngineConfig cc = ec;
            cc.optim.lr = opt.critic_lr;
            train::CriticConfig crc;
            crc.clip_range = opt.value_clip;
            crc.loss_agg = train::parse_loss_agg(opt.loss_agg);
            crc.loss_norm_tokens = norm_tokens;
            critic = std::make_unique<train::CriticWorker>(train::make_engine(train::value_handle(vm), cc), crc);
            critic->engine().set_group(critic_comm.get());
        }
    }

    // The sequences of `seqs` whose owner is this rank, with their indices.
    std::vector<size_t> mine(const std::vector<int>& owner) const {
        std::vector<size_t> idx;
        for (size_t i = 0; i < owner.size(); ++i)
            if (owner[i] == me) idx.push_back(i);
        return idx;
    }
    static std::vector<train::TrainSeq> select(const std::vector<train::TrainSeq>& seqs,
                                               const std::vector<size_t>& idx) {
        std::vector<train::TrainSeq> out;
        out.reserve(idx.size());
        for (size_t i : idx) out.push_back(seqs[i]);
        return out;
    }

    // --old-logprobs recompute (decoupled PPO): pi_old = this rank's forward with the current
    // weights, then the importance weights and rejections against the rollout-time log-probs;
    // their statistics over the train group (one all-gather; nothing with a group of one).
    // --old-logprobs measure: the same forward and figures (the weights --rollout-is token would
    // use), then pi_old goes back to the rollout log-probs: the loss is the uncorrected one.
    void correct(std::vector<train::TrainSeq>& local, TrainReport& rep) {
        std::vector<std::vector<float>> lp = actor->compute_log_probs(local);
        for (size_t k = 0; k < local.size(); ++k) local[k].old_logprobs = std::move(lp[k]);
        train::RolloutCorrectionConfig cfg = correction;
        if (measure) cfg = train::RolloutCorrectionConfig{train::IsLevel::kOff, correction.is_threshold};
        const train::CorrectionStats cs = train::apply_rollout_correction(local, cfg);
        if (measure)
            for (train::TrainSeq& t : local) t.old_logprobs = t.rollout_logprobs;
        constexpr int kStats = 7;
        double mine[kStats] = {cs.weight_sum,
                               cs.weight_count,
                               cs.ratio_max,
                               static_cast<double>(cs.rejected),
                               static_cast<double>(cs.rejected_tokens),
                               cs.norm_sum,
                               cs.norm_count};
        int n = 1;
        TAGFLOW_MPI_CHECK(MPI_Comm_size(train_c, &n));
        std::vector<double> all(kStats * static_cast<size_t>(n));
        if (n > 1) {
            if (wait_hook) wait_hook(true);
            TAGFLOW_MPI_CHECK(MPI_Allgather(mine, kStats, MPI_DOUBLE, all.data(), kStats, MPI_DOUBLE, train_c));
            if (wait_hook) wait_hook(false);
        } else {
            std::copy(mine, mine + kStats, all.begin());
        }
        double sum = 0, count = 0, max = 0, rejected = 0, rejected_tokens = 0, norm_sum = 0, norm_count = 0;
        for (size_t r = 0; r < all.size(); r += kStats) {
            sum += all[r];
            count += all[r + 1];
            max = std::max(max, all[r + 2]);
            rejected += all[r + 3];
            rejected_tokens += all[r + 4];
            norm_sum += all[r + 5];
            norm_count += all[r + 6];
        }
        // --rollout-is-batch-normalize: the group's weights average 1; /steps keeps the mean before.
        if (cfg.batch_normalize && cfg.is != train::IsLevel::kOff)
            train::scale_is_weights(local, train::batch_norm_factor(norm_sum, norm_count));
        rep.is_weight_mean = count > 0 ? sum / count : 1.0;
        rep.is_weight_max = max;
        rep.rs_rejected = static_cast<int32_t>(rejected);
        rep.rs_rejected_tokens = static_cast<int64_t>(rejected_tokens);
    }

    TrainReport step(int32_t s, const std::vector<RolloutSample>& all) {
        TrainReport rep;
        const size_t N = all.size();
        const auto n_train = static_cast<int64_t>(train_ranks.size());
        const auto n_critic = static_cast<int64_t>(critic_ranks.size());
        std::vector<train::TrainSeq> seqs(N);
        std::vector<int> train_owner(N), critic_owner(N);
        std::vector<size_t> lengths(N);
        std::vector<int64_t> slots(N);
        for (size_t i = 0; i < N; ++i) {
            seqs[i] = train::make_train_seq(all[i].prompt, all[i].response, all[i].logprobs);
            seqs[i].loss_mask = all[i].loss_mask;  // multi-turn: tool tokens out of the loss (empty = all in)
            lengths[i] = all[i].response.size();
            slots[i] = static_cast<int64_t>(seqs[i].tokens.size()) - 1;
        }
        // Each rank's share of the step: whole sequences, balanced by token slots (the same on
        // every rank: `all` is), so no rank of the group waits long for another's longer share.
        const std::vector<int> by_train = train::balance_by_slots(slots, static_cast<int>(n_train));
        const std::vector<int> by_critic = train::balance_by_slots(slots, static_cast<int>(n_critic));
        for (size_t i = 0; i < N; ++i) {
            train_owner[i] = train_ranks[static_cast<size_t>(by_train[i])];
            critic_owner[i] = critic_ranks[static_cast<size_t>(by_critic[i])];
        }
        const std::vector<size_t> my_train = mine(train_owner);
        if (opt.pack == "on" && opt.micro_batch_tokens > 0)  // the same decision on every rank (`all` is)
            for (size_t i = 0; i < N; ++i)
                if (static_cast<int64_t>(seqs[i].tokens.size()) - 1 > opt.micro_batch_tokens)
                    throw ConfigError("--micro-batch-tokens " + std::to_string(opt.micro_batch_tokens) +
                                      " is smaller than sample " + std::to_string(all[i].id) + "'s " +
                                      std::to_string(seqs[i].tokens.size() - 1) +
                                      " token slots (prompt + response - 1); packed sequences are never split");

        // Reference log-probs: by the sample's train rank; everyone needs them for KL-in-reward.
        std::vector<std::vector<float>> ref_lp(N);
        if (ref) {
            auto r = ref->compute_ref_log_probs(select(seqs, my_train));
            for (size_t k = 0; k < my_train.size(); ++k) ref_lp[my_train[k]] = std::move(r[k]);
        }
        if (kl_in_reward) allgather_rows(ref_lp, train_owner, lengths, exch);

        // Values (ppo): by the sample's critic rank, then to everyone.
        std::vector<std::vector<float>> values(N);
        const bool gae = adv.estimator == train::AdvEstimator::kGae;
        if (gae) {
            if (critic) {
                const std::vector<size_t> my_critic = mine(critic_owner);
                auto v = critic->compute_values(select(seqs, my_critic));
                for (size_t k = 0; k < my_critic.size(); ++k) values[my_critic[k]] = std::move(v[k]);
            }
            allgather_rows(values, critic_owner, lengths, exch);
        }

        // Advantages of the whole batch, identical on every rank.
        std::vector<train::AdvSample> as(N);
        for (size_t i = 0; i < N; ++i) {
            as[i].group = all[i].group;
            as[i].score = all[i].reward;
            as[i].n_resp = lengths[i];
            as[i].mask = all[i].loss_mask;  // multi-turn: tool tokens take no KL, reward or advantage
            if (gae) as[i].values = values[i];
            if (kl_in_reward) {
                as[i].logprobs = all[i].logprobs;
                as[i].ref_logprobs = ref_lp[i];
            }
        }
        train::AdvResult ar = train::compute_advantages(adv, as);
        if (kl_in_reward && kl_ctrl.horizon > 0) {  // veRL: updated after the penalty is applied
            kl_ctrl.update(ar.kl_seq_mean, static_cast<double>(N));
            adv.kl_coef = kl_ctrl.coef;
        }
        std::vector<float> seq_adv = ar.seq_advantages;
        if (opt.shuffle_advantages) {
            // Control experiment: same values, wrong samples. Same permutation on every rank.
            std::mt19937_64 rng(static_cast<uint64_t>(opt.seed) * 7919u + static_cast<uint64_t>(s));
            std::shuffle(seq_adv.begin(), seq_adv.end(), rng);
            for (size_t i = 0; i < N; ++i) ar.advantages[i] = {seq_adv[i]};
        }
        for (size_t i = 0; i < N; ++i) {
            if (all[i].weight != 1.f) {
                seq_adv[i] *= all[i].weight;
                for (float& a : ar.advantages[i]) a *= all[i].weight;
            }
            seqs[i].advantages = std::move(ar.advantages[i]);
            seqs[i].returns = std::move(ar.returns[i]);
            if (gae) seqs[i].old_values = values[i];
            if (kl_in_loss && !ref_lp[i].empty()) seqs[i].ref_logprobs = ref_lp[i];
        }

        // --lr-warmup-steps / --lr-schedule: this step's rates (a function of the step only, so a
        // resumed run continues the curve; the engines' saved rate is overwritten here).
        if (actor) {
            actor->engine().set_lr(step_lr(opt, s));
            std::vector<train::TrainSeq> local = select(seqs, my_train);
            if (recompute || measure) correct(local, rep);
            train::ActorStats st = actor->update(local, train_comm.get(), schedule);
            rep.loss = st.loss;
            rep.kl = kl_in_reward ? ar.kl_mean : st.kl;
            rep.kl_coef = kl_in_reward ? adv.kl_coef : (kl_in_loss ? opt.kl_coef : 0.0);
            rep.entropy = st.entropy;
            rep.clip_frac = st.clip_frac;
            rep.logprob_diff_mean = st.logprob_diff_mean;
            rep.grad_norm = st.grad_norm;
            if (me == train_ranks.front()) rep.skipped_updates += st.skipped_steps;
            rep.tokens = st.tokens;
            rep.real_tokens = st.real_tokens;
            rep.token_slots = st.token_slots;
            for (size_t i : my_train) rep.consumed.push_back({all[i].id, s, seq_adv[i], all[i].weight});
        }
        rep.advantages = seq_adv;
        if (critic) {
            critic->engine().set_lr(scheduled(opt, opt.critic_lr, s));
            std::vector<train::TrainSeq> local = select(seqs, mine(critic_owner));
            train::CriticStats cs = critic->update(local, critic_comm.get(), schedule);
            rep.value_loss = cs.vf_loss;
            if (me == critic_ranks.front()) rep.skipped_updates += cs.skipped_steps;
            rep.explained_var = cs.vf_explained_var;
        }
        return rep;
    }
};

RlTrainer::RlTrainer(const config::Options& opt, cluster::Roles& roles, model::LlamaModel policy)
    : impl_(std::make_unique<Impl>(opt, roles, std::move(policy), nullptr)) {}
RlTrainer::RlTrainer(const config::Options& opt, cluster::Roles& roles, model::LlamaModel policy,
                     const TrainGroup& group)
    : impl_(std::make_unique<Impl>(opt, roles, std::move(policy), &group)) {}
RlTrainer::~RlTrainer() = default;

TrainReport RlTrainer::train_step(int32_t step, const std::vector<RolloutSample>& all) {
    return impl_->step(step, all);
}

void RlTrainer::set_wait_hook(std::function<void(bool waiting)> hook) { impl_->wait_hook = std::move(hook); }

void RlTrainer::set_group(const TrainGroup& group) {
    Impl& m = *impl_;
    const bool critic_here = !m.critic || m.critic_ranks == m.train_ranks;  // ppo: the critic on the actor ranks
    if (!m.actor || !critic_here || group.comm == MPI_COMM_NULL || !group.critics.empty() ||
        m.actor->engine().sharded())
        throw InternalError(
            "RlTrainer::set_group: only an unsharded actor (and a critic on the same ranks) changes its group");
    int n = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_size(group.comm, &n));
    if (group.actors > 0 && group.actors != n)
        throw InternalError("RlTrainer::set_group: every rank of the new group holds the actor");
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(group.comm, &m.me));
    m.exch = m.train_c = m.critic_c = group.comm;
    m.train_ranks.clear();
    for (int k = 0; k < n; ++k) m.train_ranks.push_back(k);
    m.critic_ranks = m.train_ranks;
    m.in_train = m.in_critic = true;
    m.train_comm = std::make_unique<WaitTimedCollectives>(m.train_c, m.bucket, m.wait_hook);
    m.actor->engine().set_group(m.train_comm.get());
    if (m.critic) {
        m.critic_comm = std::make_unique<WaitTimedCollectives>(m.critic_c, m.bucket, m.wait_hook);
        m.critic->engine().set_group(m.critic_comm.get());
    }
}

namespace {

void put_bytes(std::ostream& out, const std::string& b) {
    const uint64_t n = b.size();
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

std::string get_bytes(std::istream& in) {
    uint64_t n = 0;
    if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || n > (uint64_t{1} << 40))
        throw InternalError("RlTrainer::take_actor_state: truncated state");
    std::string b(n, '\0');
    if (!in.read(b.data(), static_cast<std::streamsize>(n)))
        throw InternalError("RlTrainer::take_actor_state: truncated state");
    return b;
}

std::string engine_bytes(const train::TrainEngine& e) {
    std::ostringstream out(std::ios::binary);
    e.save(out);
    if (!out) throw Error("serialising a trainer state failed");
    return out.str();
}

}  // namespace

std::string RlTrainer::actor_state() const {
    const Impl& m = *impl_;
    if (!m.actor) throw InternalError("RlTrainer::actor_state on a rank without the actor");
    std::ostringstream out(std::ios::binary);
    put_bytes(out, engine_bytes(m.actor->engine()));
    put_bytes(out, m.critic ? engine_bytes(m.critic->engine()) : std::string());  // ppo: the critic beside it
    const double coef = m.adv.kl_coef;  // --kl-ctrl adaptive: the coefficient reached so far
    out.write(reinterpret_cast<const char*>(&coef), sizeof coef);
    if (!out) throw Error("serialising the actor state failed");
    return out.str();
}

void RlTrainer::take_actor_state(const std::string& bytes) {
    Impl& m = *impl_;
    if (!m.actor) throw InternalError("RlTrainer::take_actor_state on a rank without the actor");
    std::istringstream in(bytes, std::ios::binary);
    {
        std::istringstream a(get_bytes(in), std::ios::binary);
        m.actor->engine().load(a);
    }
    const std::string critic = get_bytes(in);
    if (critic.empty() != !m.critic)
        throw InternalError("RlTrainer::take_actor_state: the critic state does not match");
    if (m.critic) {
        std::istringstream c(critic, std::ios::binary);
        m.critic->engine().load(c);
    }
    double coef = 0;
    if (!in.read(reinterpret_cast<char*>(&coef), sizeof coef))
        throw InternalError("RlTrainer::take_actor_state: truncated state");
    m.kl_ctrl.coef = m.adv.kl_coef = coef;
}

bool RlTrainer::has_critic() const { return impl_->critic != nullptr; }
bool RlTrainer::has_actor() const { return impl_->actor != nullptr; }

// ---- checkpoints (mpi_app/ckpt, share/doc/checkpoints.md) ----
namespace {

void save_file(const std::string& dir, const std::string& name, const std::function<void(std::ostream&)>& write) {
    const std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("checkpoint: cannot create " + path + ": " + std::strerror(errno));
    try {
        write(out);
    } catch (const std::exception& ex) {
        throw Error("checkpoint: writing " + path + " failed (" + ex.what() + ")");
    }
    out.flush();
    if (!out) throw Error("checkpoint: writing " + path + " failed: " + std::strerror(errno));
}

void save_engine(const train::TrainEngine& e, const std::string& dir, const std::string& name) {
    save_file(dir, name, [&](std::ostream& out) { e.save(out); });
}

// The moments a sharded checkpoint keeps beside the weights (any group size wrote them).
void load_optim_shards(train::TrainEngine& e, const std::string& dir, const std::string& prefix) {
    const std::vector<std::string> paths = train::list_optim_shards(dir, prefix);
    if (paths.empty()) return;
    try {
        e.load_optim_shards(paths);
    } catch (const Error& err) {
        throw Error("checkpoint " + dir + ": " + err.what());
    }
}

void load_engine(train::TrainEngine& e, const std::string& dir, const std::string& name) {
    const std::string path = dir + "/" + name;
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("checkpoint " + path + ": cannot open");
    try {
        e.load(in);
    } catch (const Error& err) {
        throw Error("checkpoint " + path + ": " + err.what());
    }
}

}  // namespace

std::vector<std::string> RlTrainer::save_state(const std::string& dir) const {
    const Impl& m = *impl_;
    std::vector<std::string> files;
    if (m.actor && !m.train_ranks.empty() && m.me == m.train_ranks.front()) {
        save_engine(m.actor->engine(), dir, "actor_state.pt");
        files.push_back("actor_state.pt");
        if (m.ref) {
            save_engine(m.ref->engine(), dir, "reference_state.pt");
            files.push_back("reference_state.pt");
        }
        if (m.kl_ctrl.horizon > 0) {  // --kl-ctrl adaptive: the coefficient reached so far
            const std::string path = dir + "/kl_ctrl.txt";
            std::ofstream out(path, std::ios::trunc);
            char line[64];
            std::snprintf(line, sizeof line, "%.17g\n", m.adv.kl_coef);
            out << line;
            out.flush();
            if (!out) throw Error("checkpoint: writing " + path + " failed: " + std::strerror(errno));
            files.push_back("kl_ctrl.txt");
        }
    }
    if (m.critic && !m.critic_ranks.empty() && m.me == m.critic_ranks.front()) {
        save_engine(m.critic->engine(), dir, "critic_state.pt");
        files.push_back("critic_state.pt");
    }
    for (const auto& [name, bytes] : optim_shards()) {  // --shard: every rank of the group writes its own
        save_file(dir, name,
                  [&](std::ostream& out) { out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())); });
        files.push_back(name);
    }
    return files;
}

uint64_t RlTrainer::critic_hash() const {
    const Impl& m = *impl_;
    return m.critic ? train::hash_bits(m.critic->engine().parameters()) : 0;
}

std::string RlTrainer::critic_state() const {
    const Impl& m = *impl_;
    if (!m.critic || m.critic_ranks.empty() || m.me != m.critic_ranks.front()) return {};
    std::ostringstream out(std::ios::binary);
    m.critic->engine().save(out);
    if (!out) throw Error("checkpoint: serialising the critic state failed");
    return out.str();
}

std::vector<std::pair<std::string, std::string>> RlTrainer::optim_shards() const {
    const Impl& m = *impl_;
    std::vector<std::pair<std::string, std::string>> out;
    auto add = [&](const train::TrainEngine& e, const std::string& prefix) {
        const auto [lo, hi] = e.shard_range();
        if (!e.sharded() || lo >= hi) return;  // more ranks than elements: nothing of its own
        std::ostringstream bytes(std::ios::binary);
        e.save_optim_shard(bytes);
        if (!bytes) throw Error("checkpoint: serialising the " + prefix + " shard failed");
        out.emplace_back(train::optim_shard_name(prefix, lo, hi), bytes.str());
    };
    if (m.actor) add(m.actor->engine(), "actor_optim");
    if (m.critic) add(m.critic->engine(), "critic_optim");
    return out;
}

void RlTrainer::load_state(const std::string& dir) {
    Impl& m = *impl_;
    if (m.actor) {
        load_engine(m.actor->engine(), dir, "actor_state.pt");
        load_optim_shards(m.actor->engine(), dir, "actor_optim");
    }
    if (m.ref) load_engine(m.ref->engine(), dir, "reference_state.pt");
    if (m.kl_ctrl.horizon > 0) {  // absent in a checkpoint of a fixed-coefficient run: start from --kl-coef
        std::ifstream in(dir + "/kl_ctrl.txt");
        double c = 0;
        if (in && (in >> c)) {
            if (!std::isfinite(c) || c < 0) throw Error("checkpoint " + dir + "/kl_ctrl.txt: bad KL coefficient");
            m.kl_ctrl.coef = m.adv.kl_coef = c;
        }
    }
    if (m.critic) {
        load_engine(m.critic->engine(), dir, "critic_state.pt");
        load_optim_shards(m.critic->engine(), dir, "critic_optim");
    }
}

rollout::GenParams rollout_params(const config::Options& opt, const rollout::Task& task, int32_t max_new, int64_t id) {
    rollout::GenParams p;
    p.temperature = opt.temperature;
    p.top_p = opt.top_p;
    p.top_k = opt.top_k;
    p.seed = rollout::derive_seed(static_cast<uint64_t>(opt.seed), static_cast<uint64_t>(id));
    const config::ResponseLengths lengths = config::parse_response_lengths(opt.response_lengths);
    if (lengths.forced) {
        p.max_tokens = sched_policy::lognormal_length(lengths.median, lengths.p99_ratio, max_new,
                                                      static_cast<uint64_t>(opt.seed), id);
    } else {
        p.max_tokens = max_new;
        p.stop_ids = {task.eos_token()};
    }
    return p;
}

model::LlamaModel make_policy(const config::Options& opt, const rollout::Task& task, int64_t positions) {
    if (!opt.model.empty()) {
        auto m = model::LlamaModelImpl::from_pretrained(opt.model);
        const model::HfConfig& c = m->config();
        if (c.vocab_size < task.vocab_size())
            throw Error("--model " + opt.model + ": vocab_size " + std::to_string(c.vocab_size) +
                        " is smaller than task " + task.name() + "'s " + std::to_string(task.vocab_size()) + " tokens");
        if (c.max_position_embeddings < positions)
            throw Error("--model " + opt.model + ": max_position_embeddings " +
                        std::to_string(c.max_position_embeddings) + " is below the " + std::to_string(positions) +
                        " positions task " + task.name() + " needs");
        return model::LlamaModel(m);
    }
    model::HfConfig c =
        model::fresh_config({opt.d_model, opt.d_ff, opt.layers, opt.heads, opt.kv_heads}, task.vocab_size(),
                            opt.tokenizer.empty() ? "" : model::resolve_tokenizer_json(opt.tokenizer), positions);
    c.rope_theta = opt.rope_theta;
    c.abs_positions = opt.abs_positions;
    return model::LlamaModel(c, static_cast<uint64_t>(opt.seed));
}

model::HfExport policy_export(const config::Options& opt, const rollout::Task& task, int32_t max_new) {
    model::HfExport e;
    std::string source_dtype;
    if (!opt.model.empty()) source_dtype = model::load_hf_config(opt.model + "/config.json").torch_dtype;
    e.dtype = model::parse_export_dtype(opt.export_dtype, source_dtype);
    e.source_dir = opt.model;
    e.tokenizer_json = model::export_tokenizer(opt.tokenizer, opt.model);
    e.sampling = true;
    e.temperature = opt.temperature;
    e.top_p = opt.top_p;
    e.top_k = opt.top_k;
    e.max_new_tokens = max_new;
    e.stop_ids = {task.eos_token()};
    return e;
}

}  // namespace tagflow::sched
