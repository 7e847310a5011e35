// SPDX-License-Identifier: Apache-2.0
// rl_trainer: the training half of one RL step, for every algorithm (--algo grpo, ppo, rloo,
// reinforce_pp): reference log-probs (KL), critic values (ppo), advantages over the whole
// batch, the proximal log-probs and off-policy correction (--old-logprobs recompute,
// --rollout-is, --rollout-rs), the actor update on the train group and the critic update on the critic group, with
// the per-sample data exchanged between those groups. Built on train/workers.hpp.
// Also make_policy(), the policy every mode trains, and rollout_params(), how every mode samples
// one training sample. Does not generate, write the run file or
// sync weights (the schedulers do).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/run_file.hpp"
#include "model/hf_export.hpp"
#include "model/llama.hpp"
#include "rollout/engine.hpp"
#include "step/exchange.hpp"

namespace tagflow::config {
struct Options;
}
namespace tagflow::cluster {
struct Roles;
}
namespace tagflow::rollout {
class Task;
}

namespace tagflow::sched {

/// The policy every scheduling mode trains: a Hugging Face checkpoint (--model; throws
/// tagflow::Error when its vocabulary or positions are too small for `task`) or a fresh
/// Llama-family decoder sized by the options with the task's vocabulary (--tokenizer's, when
/// given: model::apply_tokenizer_vocab) and `positions` positions. Same weights on every rank
/// (same seed).
model::LlamaModel make_policy(const config::Options& opt, const rollout::Task& task, int64_t positions);

/// How the checkpoints write policy/ (model/hf_export.hpp): --export-dtype, --tokenizer's (else
/// --model's) tokenizer files, the run's sampling defaults (temperature, top-p, top-k, `max_new`);
/// the task's EOS as the stop id of a model without tokenizer.json. ConfigError naming
/// --export-dtype or --tokenizer for a bad value (train_command calls it before anything is written).
model::HfExport policy_export(const config::Options& opt, const rollout::Task& task, int32_t max_new);

/// The sampling parameters of training sample `id` in every mode: the options' temperature /
/// top-p / top-k, a random stream from the run seed and the id (so a sample does not depend on
/// the rank count or the batch it ran in), at most `max_new` tokens ending at the task's EOS —
/// or, with --response-lengths lognormal:M:R, exactly its drawn length (sched_policy::lognormal_length,
/// capped at max_new) with no stop token.
rollout::GenParams rollout_params(const config::Options& opt, const rollout::Task& task, int32_t max_new, int64_t id);

/// What one step's training reports (valid on the train root; the critic fields on the
/// critic group's first rank).
struct TrainReport {
    double loss = 0, kl = 0, entropy = 0, clip_frac = 0, logprob_diff_mean = 0, grad_norm = 0;
    double value_loss = 0, explained_var = 0;
    double kl_coef = 0;  ///< the KL coefficient in force after this step (--kl-ctrl adaptive changes it)
    int64_t tokens = 0;
    /// The actor update's input slots over the train group (train::ActorStats): holding a token,
    /// and all of them, padding included (--pack on removes most of it). 0 without an actor.
    int64_t real_tokens = 0, token_slots = 0;
    /// Optimiser updates dropped for a non-finite loss or gradient norm (train::ActorStats::
    /// skipped_steps): the actor's on the train root plus the critic's on the critic group's
    /// first rank, 0 elsewhere, so a sum over all ranks counts each group once.
    int32_t skipped_updates = 0;
    /// Off-policy correction (--old-logprobs recompute; train/rollout_correction.hpp), over the
    /// whole train group: mean importance weight the policy loss used (token or sequence level;
    /// --rollout-is off: the token-level weights it would use), largest pi_old / pi_rollout before
    /// truncation, sequences rejected by --rollout-rs. -1 with --old-logprobs rollout.
    double is_weight_mean = -1, is_weight_max = -1;
    int32_t rs_rejected = -1;
    int64_t rs_rejected_tokens = -1;           // response tokens the rejection (any level, veto) left out
    std::vector<io::ConsumedRecord> consumed;  ///< this rank's samples used by the actor
    std::vector<float> advantages;             ///< every sample's sequence advantage, in input order (every rank)
};

/// A train group other than the run's fixed one (async modes): `comm` holds exactly the ranks
/// of a training step (null on other ranks, which never call train_step), and every exchange of
/// train_step stays inside it. Its first `actors` ranks hold the actor (0: all of them); for
/// ppo the critic lives on its ranks `critics` (empty: on the actor ranks).
struct TrainGroup {
    MPI_Comm comm = MPI_COMM_NULL;
    int actors = 0;
    std::vector<int> critics;
};

/// The actor's learning rate of 0-based step `step`: --lr under --lr-warmup-steps and
/// --lr-schedule (cosine: to --min-lr-ratio of it at --steps); train/lr_schedule.hpp. The critic's
/// rate follows the same curve from --critic-lr. The schedulers write it to /steps `lr`.
double step_lr(const config::Options& opt, int64_t step);

class RlTrainer {
public:
    /// `policy` is this rank's policy module (trained in place on train ranks).
    RlTrainer(const config::Options& opt, cluster::Roles& roles, model::LlamaModel policy);
    /// Same on the train group `group` (async modes): the constructor and train_step are then
    /// COLLECTIVE over group.comm only. A sample's advantage is multiplied by its `weight`.
    RlTrainer(const config::Options& opt, cluster::Roles& roles, model::LlamaModel policy, const TrainGroup& group);
    ~RlTrainer();

    /// COLLECTIVE over MPI_COMM_WORLD (and the train/critic groups): trains on `all`, every
    /// sample of step `step` sorted by id, the same on every rank.
    TrainReport train_step(int32_t step, const std::vector<RolloutSample>& all);

    /// While set, `hook(true)` / `hook(false)` are called just before / after every collective
    /// of train_step on the train (critic) group (the batch counts, the gradient all-reduce, the
    /// statistics): in them this rank computes nothing — it waits for the group's slowest member,
    /// then for the reduction — and the schedulers book that time as idle, so a stalled member
    /// shows up as idle on the others, not as train. nullptr removes it. Not collective.
    void set_wait_hook(std::function<void(bool waiting)> hook);

    /// --rebalance-every (multiplex): from the next train_step on, this rank trains with `group`,
    /// every rank of which holds the actor (an unsharded one; ppo's critic, if any, on the same
    /// ranks; else InternalError). Not collective: each member of the new group calls it, with
    /// the same group.
    void set_group(const TrainGroup& group);
    /// The actor's whole state as bytes (weights, AdamW moments, step, lr; the critic's likewise
    /// when it lives on the actor ranks; the reward KL coefficient --kl-ctrl adaptive reached),
    /// for a rank that joins the train group;
    /// take_actor_state() there makes its actor continue exactly where this one is. The
    /// parameters get new storage (LibTorch's archive load): re-share them afterwards.
    std::string actor_state() const;
    void take_actor_state(const std::string& bytes);

    bool has_critic() const;
    /// This rank holds the actor (and writes actor_state.pt when it is the first).
    bool has_actor() const;
    /// The critic's state as written to critic_state.pt (AdamW moments included), on the first
    /// critic rank; "" elsewhere. For a checkpoint written by a rank without the critic.
    std::string critic_state() const;
    /// A hash of the critic's weights (train::hash_bits; 0 without a critic):
    /// equal on two ranks = the same critic, bit for bit (--rebalance-every's end-of-run check).
    uint64_t critic_hash() const;
    /// --shard: this rank's shares of the actor's and the critic's AdamW moments, as (file name,
    /// bytes) for a checkpoint written by another rank (the async coordinator); empty unsharded.
    std::vector<std::pair<std::string, std::string>> optim_shards() const;

    /// Checkpoints (mpi_app/ckpt): writes this rank's share of the trainer state into `dir` and
    /// returns the file names it wrote (relative to `dir`): the first train rank writes
    /// actor_state.pt (weights, AdamW moments, step, lr) and reference_state.pt (with a KL
    /// reference), the first critic rank critic_state.pt; with --shard every train and critic rank
    /// also writes its share of the moments (actor_optim.LO-HI.pt, critic_optim.LO-HI.pt).
    /// Throws tagflow::Error on I/O failure.
    std::vector<std::string> save_state(const std::string& dir) const;
    /// Loads those files on every rank that holds the engine (not collective); with sharded
    /// moments, each rank reads the files that overlap its share, whatever group size wrote them. Throws
    /// tagflow::Error naming the file on a missing file or a shape mismatch. The actor's
    /// parameters get new storage (LibTorch's archive load): re-share them afterwards.
    void load_state(const std::string& dir);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tagflow::sched
