// SPDX-License-Identifier: Apache-2.0
// rl_trainer: who computes what. Sample i of a step (prompt j of the step) belongs to train
// rank j % n_train and to critic rank j % n_critic. Reference log-probs are computed by the
// sample's train rank (all-gathered only when the KL goes into the rewards), values by its
// critic rank (all-gathered, since the critic may sit on other ranks than the actor), and then
// every rank computes the same advantages for the whole batch (pure and cheap).
#include "sched/rl_trainer.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <random>

#include "cluster/roles.hpp"
#include "common/error.hpp"
#include "config/options.hpp"
#include "model/value_model.hpp"
#include "train/algorithms.hpp"
#include "train/collectives_mpi.hpp"
#include "train/workers.hpp"

namespace tagflow::sched {

struct RlTrainer::Impl {
    const config::Options& opt;
    cluster::Roles& roles;
    model::LlamaModel policy;
    train::AdvConfig adv;
    bool kl_in_loss = false, kl_in_reward = false;
    train::UpdateSchedule schedule;
    std::unique_ptr<train::ActorWorker> actor;
    std::unique_ptr<train::ReferenceWorker> ref;
    std::unique_ptr<train::CriticWorker> critic;
    std::unique_ptr<train::MpiCollectives> train_comm, critic_comm;

    Impl(const config::Options& o, cluster::Roles& r, model::LlamaModel p) : opt(o), roles(r), policy(std::move(p)) {
        adv.estimator = train::parse_adv_estimator(opt.algo);
        adv.norm_adv_by_std = true;
        adv.gamma = opt.gamma;
        adv.lam = opt.lam;
        adv.kl_mode = train::parse_kl_mode(opt.kl_estimator);
        kl_in_loss = opt.kl_coef > 0 && opt.kl_in == "loss";
        kl_in_reward = opt.kl_coef > 0 && opt.kl_in == "reward";
        adv.kl_in_reward = kl_in_reward;
        adv.kl_coef = opt.kl_coef;
        schedule.mini_batches = opt.mini_batches;
        schedule.epochs = opt.ppo_epochs;
        const size_t bucket = static_cast<size_t>(opt.bucket_mb * 1024.0 * 1024.0);

        train::EngineConfig ec;
        ec.optim.lr = opt.lr;
        ec.optim.beta1 = 0.9;
        ec.optim.beta2 = 0.99;
        ec.optim.weight_decay = opt.weight_decay;
        ec.optim.grad_clip = opt.grad_clip;
        ec.micro_batch = opt.micro_batch > 0 ? opt.micro_batch : std::numeric_limits<int32_t>::max();
        ec.bf16 = opt.bf16;
        if (roles.is_train()) {
            train_comm = std::make_unique<train::MpiCollectives>(roles.train.get(), bucket);
            if (opt.kl_coef > 0) {
                train::EngineConfig rc = ec;
                rc.trainable = false;
                ref = std::make_unique<train::ReferenceWorker>(
                    train::make_engine(train::policy_handle(train::clone_llama(policy)), rc), opt.temperature);
            }
            train::ActorConfig ac;
            ac.clip_eps = opt.clip_eps;
            ac.entropy_coef = opt.entropy_coef;
            ac.kl_loss_coef = kl_in_loss ? opt.kl_coef : 0.0;
            ac.kl_loss_mode = adv.kl_mode;
            ac.loss_agg = train::parse_loss_agg(opt.loss_agg);
            ac.temperature = opt.temperature;
            actor = std::make_unique<train::ActorWorker>(train::make_engine(train::policy_handle(policy), ec), ac);
        }
        if (adv.estimator == train::AdvEstimator::kGae && roles.is_critic()) {
            critic_comm = std::make_unique<train::MpiCollectives>(roles.critic.get(), bucket);
            // veRL starts the critic from the actor's weights; its value head starts at 0.
            model::ValueModel vm(policy->config(), static_cast<uint64_t>(opt.seed) + 17);
            vm->init_from_policy(*policy);
            train::EngineConfig cc = ec;
            cc.optim.lr = opt.critic_lr;
            train::CriticConfig crc;
            crc.clip_range = opt.value_clip;
            crc.loss_agg = train::parse_loss_agg(opt.loss_agg);
            critic = std::make_unique<train::CriticWorker>(train::make_engine(train::value_handle(vm), cc), crc);
        }
    }

    // The sequences of `seqs` whose owner is this rank, with their indices.
    std::vector<size_t> mine(const std::vector<int>& owner) const {
        std::vector<size_t> idx;
        for (size_t i = 0; i < owner.size(); ++i)
            if (owner[i] == roles.world_rank) idx.push_back(i);
        return idx;
    }
    static std::vector<train::TrainSeq> select(const std::vector<train::TrainSeq>& seqs, const std::vector<size_t>& idx) {
        std::vector<train::TrainSeq> out;
        out.reserve(idx.size());
        for (size_t i : idx) out.push_back(seqs[i]);
        return out;
    }

    TrainReport step(int32_t s, const std::vector<RolloutSample>& all) {
        TrainReport rep;
        const size_t N = all.size();
        const int64_t P = opt.prompts_per_step;
        const auto n_train = static_cast<int64_t>(roles.train_ranks.size());
        const auto n_critic = static_cast<int64_t>(roles.critic_ranks.size());
        std::vector<train::TrainSeq> seqs(N);
        std::vector<int> train_owner(N), critic_owner(N);
        std::vector<size_t> lengths(N);
        for (size_t i = 0; i < N; ++i) {
            seqs[i] = train::make_train_seq(all[i].prompt, all[i].response, all[i].logprobs);
            lengths[i] = all[i].response.size();
            const int64_t j = all[i].group - static_cast<int64_t>(s) * P;
            train_owner[i] = roles.train_ranks[static_cast<size_t>(j % n_train)];
            critic_owner[i] = roles.critic_ranks[static_cast<size_t>(j % n_critic)];
        }
        const std::vector<size_t> my_train = mine(train_owner);

        // Reference log-probs: by the sample's train rank; everyone needs them for KL-in-reward.
        std::vector<std::vector<float>> ref_lp(N);
        if (ref) {
            auto r = ref->compute_ref_log_probs(select(seqs, my_train));
            for (size_t k = 0; k < my_train.size(); ++k) ref_lp[my_train[k]] = std::move(r[k]);
        }
        if (kl_in_reward) allgather_rows(ref_lp, train_owner, lengths, MPI_COMM_WORLD);

        // Values (ppo): by the sample's critic rank, then to everyone.
        std::vector<std::vector<float>> values(N);
        const bool gae = adv.estimator == train::AdvEstimator::kGae;
        if (gae) {
            if (critic) {
                const std::vector<size_t> my_critic = mine(critic_owner);
                auto v = critic->compute_values(select(seqs, my_critic));
                for (size_t k = 0; k < my_critic.size(); ++k) values[my_critic[k]] = std::move(v[k]);
            }
            allgather_rows(values, critic_owner, lengths, MPI_COMM_WORLD);
        }

        // Advantages of the whole batch, identical on every rank.
        std::vector<train::AdvSample> as(N);
        for (size_t i = 0; i < N; ++i) {
            as[i].group = all[i].group;
            as[i].score = all[i].reward;
            as[i].n_resp = lengths[i];
            if (gae) as[i].values = values[i];
            if (kl_in_reward) {
                as[i].logprobs = all[i].logprobs;
                as[i].ref_logprobs = ref_lp[i];
            }
        }
        train::AdvResult ar = train::compute_advantages(adv, as);
        std::vector<float> seq_adv = ar.seq_advantages;
        if (opt.shuffle_advantages) {
            // Control experiment: same values, wrong samples. Same permutation on every rank.
            std::mt19937_64 rng(static_cast<uint64_t>(opt.seed) * 7919u + static_cast<uint64_t>(s));
            std::shuffle(seq_adv.begin(), seq_adv.end(), rng);
            for (size_t i = 0; i < N; ++i) ar.advantages[i] = {seq_adv[i]};
        }
        for (size_t i = 0; i < N; ++i) {
            seqs[i].advantages = std::move(ar.advantages[i]);
            seqs[i].returns = std::move(ar.returns[i]);
            if (gae) seqs[i].old_values = values[i];
            if (kl_in_loss && !ref_lp[i].empty()) seqs[i].ref_logprobs = ref_lp[i];
        }

        if (actor) {
            std::vector<train::TrainSeq> local = select(seqs, my_train);
            train::ActorStats st = actor->update(local, train_comm.get(), schedule);
            rep.loss = st.loss;
            rep.kl = kl_in_reward ? ar.kl_mean : st.kl;
            rep.entropy = st.entropy;
            rep.clip_frac = st.clip_frac;
            rep.logprob_diff_mean = st.logprob_diff_mean;
            rep.grad_norm = st.grad_norm;
            rep.tokens = st.tokens;
            for (size_t i : my_train) rep.consumed.push_back({all[i].id, s, seq_adv[i], 1.0f});
        }
        if (critic) {
            std::vector<train::TrainSeq> local = select(seqs, mine(critic_owner));
            train::CriticStats cs = critic->update(local, critic_comm.get(), schedule);
            rep.value_loss = cs.vf_loss;
            rep.explained_var = cs.vf_explained_var;
        }
        return rep;
    }
};

RlTrainer::RlTrainer(const config::Options& opt, cluster::Roles& roles, model::LlamaModel policy)
    : impl_(std::make_unique<Impl>(opt, roles, std::move(policy))) {}
RlTrainer::~RlTrainer() = default;

TrainReport RlTrainer::train_step(int32_t step, const std::vector<RolloutSample>& all) { return impl_->step(step, all); }

bool RlTrainer::has_critic() const { return impl_->critic != nullptr; }

}  // namespace tagflow::sched
