// SPDX-License-Identifier: Apache-2.0
// options: every option of `tagflow train`, its default, and where values come from.
// Precedence (lowest to highest): defaults < config file (--config) < TAGFLOW_* environment
// < command line. Parsing is pure (no MPI): every rank parses the same argv and environment
// and finds the same errors. Does not create anything on disk.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "config/mode.hpp"

namespace tagflow::config {

/// --response-lengths: "policy" (the policy ends a response with EOS, the task's limit caps it) or
/// "lognormal:MEDIAN:P99RATIO" (every response is exactly its drawn length: EOS does not stop it —
/// a fixed length distribution for throughput benchmarks, as vLLM's ignore_eos).
struct ResponseLengths {
    bool forced = false;
    double median = 32, p99_ratio = 10;
};
/// Throws ConfigError with one line naming --response-lengths and the problem.
ResponseLengths parse_response_lengths(const std::string& spec);

struct Options {
    // ---- run ----
    std::string out;          // run directory; the run file is out/tagflow.h5
    std::string config_file;  // --config
    int64_t steps = 400;
    int64_t seed = 1;
    Mode mode;                // --mode; default Mode::kDefault (multiplex)
    bool mode_given = false;  // --mode on the command line, in the environment or the config file
    std::string task = "reverse";
    int32_t digits = 0;   // 0 = the task's own default (reverse, sort: 5; addition: 3)
    int32_t threads = 0;  // torch intra-op threads per rank; 0 = auto
    bool overwrite = false;
    // ---- checkpoints (mpi_app/ckpt, share/doc/checkpoints.md) ----
    int32_t ckpt_every = 10;  // steps between checkpoints in OUT/checkpoint; 0 = only on a signal and at the end
    bool resume = false;      // --resume: a checkpoint must exist (default: resume when one exists)
    bool no_resume = false;   // --no-resume: start afresh even when OUT/checkpoint exists (needs --overwrite)
    // ---- tags ----
    std::string tags;         // --tags / TAGFLOW_TAGS: one list for this rank
    std::string rank_tags;    // --rank-tags "0=rollout;1=rollout,train"
    std::string tags_origin;  // "option" (command line/config) or "env" (TAGFLOW_TAGS); set by parse
    std::string tag_source;   // TAGFLOW_TAG_SOURCE as exported by the SPANK plugin (may be empty)
    // ---- model (a Llama-family decoder; sizes below unless --model gives a checkpoint) ----
    std::string model;          // HF checkpoint dir (config.json + *.safetensors) to start from
    std::string chat_template;  // Jinja file replacing --model's tokenizer_config.json chat template ("" = its own)
    int32_t d_model = 64;
    int32_t layers = 2;
    int32_t heads = 2;
    int32_t kv_heads = 0;  // 0 = heads (no grouped-query attention)
    int32_t d_ff = 256;
    double rope_theta = 10000.0;
    bool abs_positions = true;          // learned absolute positions on top of RoPE (tagflow extension)
    std::string tokenizer;              // --tokenizer: tokenizer.json (or its dir) of a fresh model / of the exports
    std::string export_dtype = "auto";  // bf16, fp32, auto: dtype of the HF directories written (policy/)
    // ---- rollout ----
    int32_t prompts_per_step = 16;
    int32_t group_size = 8;
    double temperature = 1.0;
    double top_p = 1.0;
    int32_t top_k = 0;                        // 0 = no top-k filtering
    int32_t max_new_tokens = 0;               // 0 = the task's own limit
    std::string response_lengths = "policy";  // policy (EOS ends a response) or lognormal:MEDIAN:P99RATIO
    int32_t max_batch = 256;                  // rollout engine slots per rank (continuous batching)
    // ---- train ----
    std::string algo = "grpo";             // grpo, ppo (GAE + critic), rloo, reinforce_pp
    double lr = 5e-4;                      // 3e-3 and 1e-3 collapse entropy and stall below 0.85 on reverse
    int64_t lr_warmup_steps = 0;           // linear warm-up of --lr (and --critic-lr) over this many steps
    std::string lr_schedule = "constant";  // after the warm-up: constant or cosine (to --min-lr-ratio at --steps)
    double min_lr_ratio = 0.0;             // the cosine's floor as a fraction of the peak rate
    double clip_eps = 0.2;
    double kl_coef = 0.0;
    std::string kl_in = "loss";               // loss (actor loss term) or reward (token penalty)
    std::string kl_estimator = "low_var_kl";  // kl (k1), mse (k2), low_var_kl (k3), abs
    std::string loss_agg = "token-mean";      // token-mean, seq-mean-token-sum, seq-mean-token-mean
    double critic_lr = 1e-3;
    double gamma = 1.0;
    double lam = 1.0;
    double value_clip = 0.5;
    int32_t ppo_epochs = 1;
    int32_t mini_batches = 1;
    double entropy_coef = 0.01;  // without it some seeds sit at 0.833 (no EOS) for ~1000 steps
    double weight_decay = 0.0;
    double grad_clip = 1.0;
    int32_t max_bad_steps = 3;       // consecutive steps with a dropped (non-finite) update that stop the run
    bool allow_shared_dir = false;   // accept an --out others may write to (check_run_dir)
    int32_t micro_batch = 0;         // 0 = whole local batch at once
    int64_t micro_batch_tokens = 0;  // token slots per forward/backward (0 = by --micro-batch)
    std::string pack = "on";         // on: several sequences per row, no padding (train/engine.hpp)
    bool bf16 = false;
    bool activation_checkpointing = false;  // recompute each decoder layer in the backward (model/layer_checkpoint.hpp)
    std::string shard = "off";  // off | optimizer | gradients: ZeRO 1/2 over the train group (train/engine.hpp)
    bool shuffle_advantages = false;
    // ---- data and rewards (issue 18; share/doc/data.md, rewards.md) ----
    std::string data;                   // --data FILE: JSON Lines prompts (plain or gzip) instead of --task's
    int64_t epochs = 0;                 // passes over --data; 0 = bounded by --steps only
    int64_t max_prompt_tokens = 0;      // --data rows whose prompt is longer are skipped and counted; 0 = no limit
    std::string reward;                 // builtin:NAME for every row ("" = by each row's data_source)
    std::string reward_fn;              // FILE.py[:NAME], veRL's compute_score signature, in a worker pool
    std::string reward_url;             // HTTP(S) endpoint taking POSTed JSON batches
    std::string reward_token_file;      // bearer token for --reward-url
    double reward_timeout = 30.0;       // s per sample (pool) / per request (URL)
    int32_t reward_workers = 2;         // Python worker processes per rollout rank
    std::string reward_error = "fail";  // fail (checkpoint, exit 1) or zero (score 0, counted)
    // ---- objectives: veRL's names and defaults (share/doc/train.md "Objectives") ----
    double clip_ratio_low = 0;            // PPO lower clip; 0 = --clip-eps
    double clip_ratio_high = 0;           // PPO upper clip; 0 = --clip-eps
    double clip_ratio_c = 3.0;            // dual-clip bound for A < 0 (veRL default 3); 0 = off
    bool norm_adv_by_std_in_grpo = true;  // false: Dr.GRPO advantages (no std division)
    std::string grpo_std = "unbiased";    // unbiased (n - 1, veRL/TRL/OpenRLHF) or population (n)
    std::string kl_penalty;               // estimator of the reward penalty; "" = --kl-estimator
    std::string kl_loss_type;             // estimator of the KL loss; "" = --kl-estimator
    std::string kl_ctrl = "fixed";        // fixed or adaptive (reward penalty only)
    double kl_target = 0.1;               // adaptive: target KL
    double kl_horizon = 10000;            // adaptive: horizon in samples
    double loss_scale_factor = 0;         // seq-mean-token-sum-norm's constant; 0 = --max-new-tokens
    // ---- off-policy correction (share/doc/train.md "Off-policy correction"; veRL rollout_correction) ----
    std::string old_logprobs = "rollout";     // PPO's pi_old: rollout (behaviour) or recompute (trainer forward)
    std::string rollout_is = "off";           // truncated importance weights: off, token, sequence
    double rollout_is_threshold = 2.0;        // C of min(pi_old / pi_behaviour, C)
    double rollout_is_cap = 0;                // --rollout-is-cap: the same as --rollout-is-threshold; 0 = unset
    std::string rollout_rs = "off";           // rejection: off, token, sequence, geometric
    double rollout_rs_threshold = 0;          // upper bound of the band; 0 = --rollout-is-threshold
    double rollout_rs_threshold_lower = 0;    // lower bound; 0 = 1 / upper
    double rollout_token_veto_threshold = 0;  // reject a sequence with a token ratio below this; 0 = off
    bool rollout_is_batch_normalize = false;  // divide the weights by the group's mean weight
    // ---- eval ----
    int32_t eval_every = 10;
    int32_t eval_prompts = 128;
    std::string val_data;          // --val-data FILE: validation rows scored into /eval (needs --data; sync mode)
    int32_t val_samples = 1;       // K of mean@K besides greedy (1 = greedy only)
    double val_temperature = 1.0;  // sampling temperature of --val-samples
    int32_t val_max_tokens = 0;    // validation response budget (0 = --max-new-tokens of the run)
    // ---- weight sync ----
    double bucket_mb = 32.0;
    bool sync_delta = false;  // send only the weights that changed since the receivers' version (every mode)
    // ---- partial rollout: generations in flight across a weight update (async modes) ----
    std::string resume_mode = "keep";  // keep (KV caches kept) or recompute (re-run under the new weights)
    int64_t resume_window = 0;         // recompute: only the last N cached tokens of a sequence (0 = all)
    int64_t resume_min_tokens = 0;     // recompute: only sequences of at least N tokens (0 = all)
    // ---- async modes (disaggregated, multiplex) ----
    int32_t train_threshold = 0;    // samples that trigger a training step; 0 = prompts-per-step x group-size
    double min_rollout_frac = 0.1;  // multiplex: fraction of ranks that never leave rollout
    double rollout_ahead =
        1.0;  // multiplex, all generators train: new samples each starts per version, x its share; 0 = no cap
    std::string train_priority;   // multiplex: "TAGS=P;..." train priority per tag set ("" = all 1)
    int32_t rebalance_every = 0;  // multiplex: re-choose the train group from measured rates every N steps (0 = fixed)
    int32_t staleness = 1;        // eta: max versions a sample's oldest token may lag the trained version
    std::string stale = "drop";   // drop (weight 0) or weight (trained with a decayed weight)
    std::string admission = "staleness";  // staleness: a group starts only if trained within --staleness; off
    double train_timeout = 0;             // s since the last step after which >= 1 usable sample trains anyway; 0 = off
    double late_wait = 0.5;  // fraction of a step's cycle a met threshold waits for groups the next step would drop
    // ---- gateway (async modes; share/doc/gateway.md) ----
    std::string gateway;                // --gateway HOST:PORT: serve the OpenAI-compatible API; "" = off
    bool gateway_any = false;           // allow a --gateway address other than loopback (e.g. 0.0.0.0)
    bool gateway_only = false;          // no built-in task prompts: train only on gateway sessions
    double gateway_session_idle = 600;  // s: a gateway session without a reward is forgotten after this idle time
    // ---- system ----
    bool gemm_check = true;
    double min_gflops = 50.0;         // Netlib ~4, generic kernels ~33, AVX2 ~65-80, AVX-512 ~150
    double heartbeat_timeout = 30.0;  // s of silence after which a rank is lost (health/heartbeat.hpp); 0 = off
};

/// What parse() found: the options, or a request for help.
struct ParseResult {
    Options options;
    bool help = false;
    std::string help_text;  // set when help is true
    /// (name, JSON literal) of every option after resolution, in declaration order.
    std::vector<std::pair<std::string, std::string>> resolved;
};

/// Parses `tagflow train` arguments (argv[0] is the subcommand name), the TAGFLOW_* variables in
/// `env` and the --config file. Throws ConfigError with one line naming the option and problem.
ParseResult parse_train(int argc, const char* const* argv, const std::map<std::string, std::string>& env);

/// The TAGFLOW_* variables of the current process environment.
std::map<std::string, std::string> tagflow_environment();

/// {"name": value, ...} of the resolved options, one line.
std::string to_json(const ParseResult& r);
/// Human-readable two-column table of the resolved options (printed by rank 0 at start).
std::string to_table(const ParseResult& r);

/// `s` as a JSON string literal, quotes included.
std::string json_string(const std::string& s);

/// Environment variable name of an option: "prompts-per-step" -> "TAGFLOW_PROMPTS_PER_STEP".
std::string env_name(const std::string& option);

}  // namespace tagflow::config
