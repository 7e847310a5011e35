// SPDX-License-Identifier: Apache-2.0
// engine: the ONE interface every training backend implements (veRL 0.7's BaseEngine): given
// a module (policy or critic) and its forward, a TrainEngine runs micro-batched forward/backward
// with gradient accumulation over right-padded or packed sequences (TrainEngineConfig::pack), sums gradients over a data-parallel
// group through train::Collectives, takes clipped AdamW steps, and saves/loads weights plus
// optimiser state. Also here: the training-sequence type every worker consumes, its packing
// into micro-batches, and the global counts losses are normalised by.
// Does not know any RL loss (train/losses.hpp, train/workers.hpp) and does not include MPI or
// CUDA: the LibTorch backend (train/torch_engine.hpp) runs on whatever device it is given.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "train/collectives.hpp"
#include "train/packing.hpp"

namespace tagflow::train {

/// What a TrainEngine trains: the module (its parameters are trained in place, so the caller's
/// handle sees every step) and its forward, tokens [B,T] int64 on the module's device ->
/// logits [B,T,V] (a policy) or values [B,T] (a critic). See workers.hpp for ready handles.
struct ModelHandle {
    std::shared_ptr<torch::nn::Module> module;
    std::function<torch::Tensor(const torch::Tensor&)> forward;
    /// Optional: the output at some positions only (tokens [B,T], rows [N] indexing [B*T]) -> [N,...];
    /// forward_backward(..., rows_only) uses it (a policy: the projection on the response tokens only).
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> forward_rows;
    /// Optional: packed rows (TrainEngineConfig::pack): tokens, positions, segments [B,T] int64 and
    /// rows (undefined = every position) -> the output at those positions ([B,T,...] or [N,...]).
    /// Each segment is one sequence: it sees only itself, its positions restart at 0.
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>
        forward_packed;
    std::string kind = "model";  ///< "policy", "value", ... (messages only)
};

struct OptimConfig {
    double lr = 1e-6;
    double beta1 = 0.9, beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.01;  ///< AdamW decay on matrices only (not biases, norms)
    double grad_clip = 1.0;      ///< max global L2 norm; <= 0 disables clipping
};

/// Where the AdamW state lives across a data-parallel group (ZeRO; TrainEngine::set_group).
enum class Shard {
    kOff,        ///< every rank holds all of it: gradients all-reduced, torch::optim::AdamW
    kOptimizer,  ///< stage 1: gradients all-reduced; each rank keeps and steps the moments of its share
                 ///< of the flat parameter vector (FlatAdamW), then the parameters are all-gathered
    kGradients,  ///< stage 2: as kOptimizer, but the gradients are reduce-scattered: each rank keeps
                 ///< the summed gradients of its share only, and frees the whole ones after the sum
};
/// "off" | "optimizer" | "gradients" -> Shard; throws ConfigError naming the option otherwise.
Shard parse_shard(const std::string& s);

struct TrainEngineConfig {
    OptimConfig optim;
    Shard shard = Shard::kOff;
    int64_t micro_batch = 8;  ///< sequences per forward/backward (>= 1)
    /// Token slots (rows x row length, padding included) per micro-batch; 0 = no budget. Padded:
    /// a longer sequence goes alone. Packed: replaces micro_batch, and a sequence longer than the
    /// budget is an error.
    int64_t micro_batch_tokens = 0;
    /// Packed micro-batches (plan_packed_micro_batches): several sequences per row, no padding but
    /// at a row's end; needs ModelHandle::forward_packed. false: right-padded, in batch order.
    bool pack = false;
    bool bf16 = false;           ///< bf16 autocast for the forward (CPU or CUDA autocast by device)
    std::string device = "cpu";  ///< a torch device string, e.g. "cuda:0" in a CUDA LibTorch build
    bool trainable = true;       ///< false: frozen (reference model): no gradients, no optimiser
};

/// One training sequence: prompt + response. Per-response-token fields have one entry per
/// response token (tokens.size() - prompt_len) or are empty when unused; `advantages` may
/// also have exactly one entry, broadcast over the response (sequence-level estimators).
struct TrainSeq {
    std::vector<int32_t> tokens;
    int32_t prompt_len = 0;               ///< >= 1: the first response token is predicted from the prompt
    std::vector<uint8_t> loss_mask;       ///< per response token; empty = all 1
    std::vector<float> old_logprobs;      ///< pi_old of the PPO ratio (actor): rollout or recomputed
    std::vector<float> rollout_logprobs;  ///< behaviour (rollout-engine) log-probs; empty = old_logprobs
    std::vector<float> ref_logprobs;      ///< reference log-probs (actor KL loss)
    std::vector<float> advantages;        ///< actor
    std::vector<float> returns;           ///< critic targets
    std::vector<float> old_values;        ///< critic values at rollout time (value clipping)
    std::vector<float> is_weights;        ///< policy-loss importance weights (rollout_correction.hpp); empty = 1
    float weight = 1.0f;                  ///< multiplies this sequence's loss (0 = dropped)

    size_t n_resp() const { return tokens.size() > static_cast<size_t>(prompt_len) ? tokens.size() - prompt_len : 0; }
};

/// Builds a TrainSeq from what the scheduler has per sample (old_logprobs = rollout_logprobs).
TrainSeq make_train_seq(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response,
                        const std::vector<float>& rollout_logprobs);

/// Global normalisers of a loss: response tokens whose loss_mask is 1 (x weight is NOT
/// applied) and sequences with at least one such token. Losses divide by these, so the
/// caller must pass counts over the WHOLE data-parallel batch (see allreduce_counts).
struct BatchCounts {
    double tokens = 0;
    double seqs = 0;
};
BatchCounts count_batch(const std::vector<TrainSeq>& batch);
/// COLLECTIVE over comm (nullptr = one rank): the counts summed over the group, moved
/// through a tensor on `device` (the engine's; NCCL collectives need device tensors).
BatchCounts allreduce_counts(const BatchCounts& local, Collectives* comm, const torch::Device& device = torch::kCPU);

/// One micro-batch on the engine's device. Right-padded: row b holds batch[begin + b]. Packed:
/// row `row[k]` holds sequence batch[index[k]] from slot `offset[k]` on, after the ones before it.
/// Slot offset + t holds the sequence's input token t and predicts token t + 1, so response token j
/// sits at slot offset + prompt_len - 1 + j. Float fields are [n,T] (0 outside the response) and
/// undefined when the batch lacks them.
struct MicroBatch {
    torch::Tensor inputs, targets;  ///< [n,T] int64
    torch::Tensor mask;             ///< [n,T] float: 1 at response tokens with loss_mask 1
    torch::Tensor old_logp, rollout_logp, ref_logp, adv, returns, old_values;
    torch::Tensor is_w;                ///< importance weights of the policy loss (undefined: none)
    torch::Tensor weight;              ///< [n,1] float (packed: [n,T], each sequence's weight on its slots)
    size_t begin = 0, end = 0;         ///< padded: rows are batch[begin, end)
    std::vector<size_t> index;         ///< batch index of each sequence here (padded: begin..end-1)
    std::vector<int64_t> row, offset;  ///< where each sequence's slot 0 is (padded: row k, offset 0)
    bool packed = false;
    /// Packed only: [n,T] int64. positions restart at 0 per sequence; seq_id is k (the sequence's
    /// place in `index`) on its slots and index.size() on padding slots.
    torch::Tensor positions, seq_id;
    int64_t real_tokens = 0;  ///< slots holding a token of some sequence (the rest is padding)
    int64_t slots() const { return inputs.defined() ? inputs.numel() : 0; }
};

/// Splits [0, batch.size()) into consecutive micro-batches of at most `max_seqs` sequences
/// and (when max_tokens > 0) at most max_tokens padded tokens; a longer sequence goes alone.
std::vector<std::pair<size_t, size_t>> split_micro_batches(const std::vector<TrainSeq>& batch, int64_t max_seqs,
                                                           int64_t max_tokens);
/// Packs batch[begin, end). A field is packed when some sequence has it, and then every
/// sequence must have it with the right length. Throws tagflow::Error naming the sample.
MicroBatch pack_micro_batch(const std::vector<TrainSeq>& batch, size_t begin, size_t end, const torch::Device& device);
/// The response part of per-slot values [n,T] (any device) appended to `out`, one vector per row.
void unpack_response(const torch::Tensor& per_slot, const std::vector<TrainSeq>& batch, size_t begin,
                     std::vector<std::vector<float>>& out);
/// The same for any micro-batch (padded or packed): out[mb.index[k]] gets sequence k's response
/// values; `out` is grown to batch.size() when shorter.
void unpack_response(const torch::Tensor& per_slot, const std::vector<TrainSeq>& batch, const MicroBatch& mb,
                     std::vector<std::vector<float>>& out);

// balance_by_slots (which train rank trains each sequence) and the rows packing fills:
// train/packing.hpp, without LibTorch.

/// Rows of one packed micro-batch: rows[r] lists the batch indices concatenated in row r.
struct PackPlan {
    std::vector<std::vector<size_t>> rows;
};
/// The packed micro-batches of `batch`: every sequence (its tokens - 1 input slots) goes whole into
/// a row of L slots, L = the longest sequence's, first-fit by decreasing length (ties in batch
/// order); consecutive rows form a micro-batch of at most max_tokens / L rows (max_tokens = 0: at
/// most max_seqs rows). Deterministic. Throws ConfigError when 0 < max_tokens < L, naming both.
std::vector<PackPlan> plan_packed_micro_batches(const std::vector<TrainSeq>& batch, int64_t max_seqs,
                                                int64_t max_tokens);
/// Packs one plan (rows as long as the fullest row) with the same fields and checks as
/// pack_micro_batch.
MicroBatch pack_rows(const std::vector<TrainSeq>& batch, const PackPlan& plan, const torch::Device& device);

/// Called once per micro-batch with the module's fp32 output (logits [n,T,V] or values
/// [n,T]); returns the micro-batch loss (already normalised by global counts) or an
/// undefined tensor in forward-only passes.
using LossFn = std::function<torch::Tensor(const MicroBatch& mb, const torch::Tensor& out)>;

class TrainEngine {
public:
    virtual ~TrainEngine() = default;
    virtual std::string backend() const = 0;  ///< e.g. "torch"
    virtual torch::Device device() const = 0;
    virtual const TrainEngineConfig& config() const = 0;
    virtual torch::nn::Module& module() = 0;

    /// The module's forward on tokens [B,T] (moved to device), bf16 autocast when configured;
    /// output in fp32. Gradients flow unless the caller holds a NoGradGuard.
    virtual torch::Tensor forward(const torch::Tensor& tokens) = 0;
    /// Micro-batches `batch` (TrainEngineConfig::micro_batch / micro_batch_tokens / pack), runs forward and
    /// `fn` on each, and with `train` adds the gradient of each returned loss to the gradients
    /// (gradient accumulation); without `train` runs under NoGradGuard. Returns the sum of the
    /// returned losses (0 for undefined ones). With `rows_only`, when the model handle has
    /// forward_rows, `fn` gets the output at the positions where MicroBatch::mask > 0 only, in
    /// row-major order ([N,V] for a policy; see loss_rows()), instead of [n,T,V].
    virtual double forward_backward(const std::vector<TrainSeq>& batch, const LossFn& fn, bool train = true,
                                    bool rows_only = false) = 0;
    /// Adds d loss / d params to the gradients.
    virtual void backward(const torch::Tensor& loss) = 0;
    /// The data-parallel group a sharded engine (TrainEngineConfig::shard) splits its AdamW state
    /// over; nullptr (the default) or one rank: this rank holds all of it. Call before the first
    /// step or load, with the group allreduce_grads will get. Unsharded engines ignore it.
    virtual void set_group(Collectives* group) = 0;
    /// COLLECTIVE over comm: gradients <- sum over the group (nullptr or size 1: nothing). With
    /// Shard::kGradients, only this rank's share of the sum is kept (the whole gradients are
    /// freed): gradients() is then empty until the next backward.
    virtual SyncStats allreduce_grads(Collectives* comm) = 0;
    /// Clips the global gradient norm, AdamW step, zeroes gradients. Returns the norm before
    /// clipping. Call allreduce_grads first when data-parallel. Sharded: COLLECTIVE over the
    /// group (the norm's sum for kGradients, then the all-gather of the updated parameters). A non-finite norm (NaN or inf
    /// gradients) skips the update: gradients zeroed, weights, optimiser state and global_step()
    /// unchanged, and the non-finite norm returned so the caller can count the skip.
    virtual double step() = 0;
    virtual void zero_grad() = 0;
    virtual void set_lr(double lr) = 0;
    virtual double lr() const = 0;
    virtual int64_t global_step() const = 0;  ///< optimiser steps taken (restored by load)
    virtual std::vector<torch::Tensor> parameters() const = 0;
    /// parameters() order; defined, except after a reduce-scatter (Shard::kGradients) where they
    /// are undefined until the next backward.
    virtual std::vector<torch::Tensor> gradients() const = 0;

    /// Weights + optimiser state + step counter + lr. load() expects an engine built with the
    /// same module shapes; it throws tagflow::Error on a mismatch or unreadable data.
    virtual void save(std::ostream& out) const = 0;
    virtual void load(std::istream& in) = 0;
    /// A sharded engine's save() holds no optimiser state: each rank of the group writes its share
    /// with save_optim_shard() to a file named optim_shard_name(), and load_optim_shards() reads
    /// those that overlap this rank's share, whatever group size wrote them (an unsharded engine
    /// reads them all). load() of an unsharded checkpoint gives a sharded engine its share.
    virtual bool sharded() const = 0;
    /// This rank's share [lo, hi) of the flat parameter vector ([0, n) when not sharded).
    virtual std::pair<int64_t, int64_t> shard_range() const = 0;
    virtual void save_optim_shard(std::ostream& out) const = 0;
    /// Throws tagflow::Error when the files do not cover this rank's share exactly once, or do
    /// not belong to this model (element count, kind) or to one step.
    virtual void load_optim_shards(const std::vector<std::string>& paths) = 0;
    /// save() throws tagflow::Error (nothing written) when a weight is NaN or inf (model::check_finite).
    /// save()/load() through `dir`/engine_state.pt (the directory is created).
    void save_dir(const std::string& dir) const;
    void load_dir(const std::string& dir);
};

/// "<prefix>.<lo>-<hi>.pt": the file of the optimiser shard [lo, hi) of the flat parameter vector.
std::string optim_shard_name(const std::string& prefix, int64_t lo, int64_t hi);
/// [lo, hi) of a file named by optim_shard_name (any prefix when `prefix` is empty; a directory
/// part of `path` is ignored); false for another name.
bool parse_optim_shard_name(const std::string& path, const std::string& prefix, int64_t* lo, int64_t* hi);
/// The shard files of `prefix` in `dir` (full paths, sorted); empty when there are none.
std::vector<std::string> list_optim_shards(const std::string& dir, const std::string& prefix);

/// The LibTorch engine (CPU, or CUDA in a CUDA build: see TrainEngineConfig::device). Moves the
/// module to the device. Throws ConfigError on a bad config.
std::unique_ptr<TrainEngine> make_engine(ModelHandle model, const TrainEngineConfig& cfg);

}  // namespace tagflow::train
