// SPDX-License-Identifier: Apache-2.0
// options: Boost.Program_options declarations, the three sources, JSON. The checks of the parsed
// values are options_check.cpp's.
#include "config/options.hpp"

#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>

#include "config/option_checks.hpp"
#include "config/options_check.hpp"

extern char** environ;

namespace po = boost::program_options;

namespace tagflow::config {

// Boost.Program_options parses --mode (command line, TAGFLOW_MODE, config file) through this
// (found by argument-dependent lookup): one line naming the option and the choices.
void validate(boost::any& v, const std::vector<std::string>& values, Mode*, int) {
    po::validators::check_first_occurrence(v);
    const std::string& name = po::validators::get_single_string(values);
    if (!is_mode_name(name)) throw ConfigError("--mode " + name + ": unknown mode (" + mode_names() + ")");
    v = boost::any(Mode(name));
}

namespace {

// TAGFLOW_* variables that are not options but are allowed in the environment.
// TAGFLOW_RUN is the run file the notebooks open.
// TAGFLOW_TEST_*: tests only (profile/clock_sync.hpp; train/collectives_mpi.cpp; sched/async_resplit.cpp).
const char* const kNonOptionEnv[] = {"TAGFLOW_TAG_SOURCE",
                                     "TAGFLOW_REEXEC",
                                     "TAGFLOW_RUN",
                                     "TAGFLOW_TEST_CLOCK_SKEW_S",
                                     "TAGFLOW_TEST_SIGNAL_IN_REDUCE_SCATTER",
                                     "TAGFLOW_TEST_TRAIN_GROUPS"};

po::options_description describe(Options& o) {
    po::options_description run("Run");
    // clang-format off
    run.add_options()
        ("help,h", "print this help and exit")
        ("config", po::value<std::string>(&o.config_file), "config file (Boost.Program_options INI syntax: key = value)")
        ("out", po::value<std::string>(&o.out), "run directory (required); the run file is OUT/tagflow.h5")
        ("overwrite", val(&o.overwrite)->implicit_value(true), "replace an existing OUT/tagflow.h5")
        ("ckpt-every", val(&o.ckpt_every), "write a checkpoint (OUT/checkpoint) every N training steps; 0 = only "
                                           "when SIGTERM/SIGUSR1 arrives and at the end")
        ("resume", val(&o.resume)->implicit_value(true), "resume from OUT/checkpoint (an error when there is none); "
                                                        "without --resume/--no-resume a run resumes when OUT/checkpoint exists")
        ("no-resume", val(&o.no_resume)->implicit_value(true), "ignore OUT/checkpoint and start afresh (with --overwrite, "
                                                              "which also deletes the old checkpoint)")
        ("steps", val(&o.steps), "training steps")
        ("seed", val(&o.seed), "random seed (model init, prompts, sampling)")
        ("mode", val(&o.mode), "scheduling mode: sync (all ranks roll out, then train), disaggregated (fixed split: "
                                 "train ranks only train, the others only roll out) or multiplex (multi-tag ranks "
                                 "roll out and are preempted into the train group when enough samples are ready). "
                                 "Without --mode: multiplex, or the mode of the checkpoint a run resumes")
        ("task", val(&o.task), "task: reverse or sort (built in), or one registered with rollout::register_task")
        ("digits", val(&o.digits), "digits per prompt of the digit tasks (0 = the task's default: reverse and sort 5, addition 3)")
        ("threads", val(&o.threads), "torch threads per rank (0 = cores available to the rank / ranks sharing them)");
    // clang-format on
    po::options_description tags("Tags (capability of each rank: rollout, train, critic)");
    // clang-format off
    tags.add_options()
        ("tags", val(&o.tags), "tags for every rank, e.g. rollout,train (the SPANK plugin sets TAGFLOW_TAGS)")
        ("rank-tags", val(&o.rank_tags), "per-rank tags, e.g. \"0=rollout;1=rollout,train\"; unlisted ranks get rollout,train");
    // clang-format on
    po::options_description model("Model (Llama-family decoder: RMSNorm, RoPE, SwiGLU, GQA)");
    // clang-format off
    model.add_options()
        ("model", val(&o.model), "start from this Hugging Face checkpoint dir (config.json + *.safetensors); "
                                 "its config.json replaces the size options below; its tokenizer.json (if any) is the "
                                 "gateway's tokenizer and decodes the run file's gateway sample texts")
        ("chat-template", val(&o.chat_template),
         "with --model DIR holding a tokenizer.json: this Jinja file instead of its tokenizer_config.json's "
         "chat template (the gateway's /v1/chat/completions)")
        ("d-model", val(&o.d_model), "hidden size")
        ("layers", val(&o.layers), "decoder layers")
        ("heads", val(&o.heads), "attention heads (must divide d-model)")
        ("kv-heads", val(&o.kv_heads), "key/value heads for grouped-query attention (0 = heads; must divide heads)")
        ("d-ff", val(&o.d_ff), "SwiGLU MLP intermediate size")
        ("rope-theta", val(&o.rope_theta), "RoPE base frequency")
        ("abs-positions", val(&o.abs_positions)->implicit_value(true),
         "add learned absolute position embeddings to RoPE (tagflow extension, saved as "
         "model.embed_positions.weight; RoPE-only models learn the digit tasks far more slowly)")
        ("tokenizer", val(&o.tokenizer), "a tokenizer.json (or a directory holding one): a new model takes its vocabulary "
                                         "and bos/eos ids from it; the checkpoint's policy/ carries its files "
                                         "(default: --model's own tokenizer files, if any)")
        ("export-dtype", val(&o.export_dtype), "dtype of the checkpoint's policy/ weights: bf16, fp32, or auto (bf16 "
                                               "when --model's torch_dtype is bfloat16, else fp32)");
    // clang-format on
    po::options_description rollout("Rollout");
    // clang-format off
    rollout.add_options()
        ("prompts-per-step", val(&o.prompts_per_step), "prompts per training step, over all rollout ranks")
        ("group-size", val(&o.group_size), "responses per prompt (GRPO group size G)")
        ("temperature", val(&o.temperature), "sampling temperature (> 0)")
        ("top-p", val(&o.top_p), "nucleus sampling threshold in (0, 1]")
        ("top-k", val(&o.top_k), "sample among the k most likely tokens (0 = no limit)")
        ("max-new-tokens", val(&o.max_new_tokens), "response token limit (0 = the task's own limit)")
        ("response-lengths", val(&o.response_lengths),
         "policy (EOS ends a response) or lognormal:MEDIAN:P99RATIO (every response is exactly a length "
         "drawn per sample, capped at --max-new-tokens; EOS does not stop it: a fixed length distribution "
         "for throughput benchmarks; single-turn tasks)")
        ("max-batch", val(&o.max_batch), "rollout engine slots per rank: sequences decoding together "
                                         "(a finished one's slot is refilled at once)");
    // clang-format on
    po::options_description data("Data and rewards (share/doc/data.md, share/doc/rewards.md)");
    // clang-format off
    data.add_options()
        ("data", val(&o.data), "train on the prompts of this JSON Lines file (plain or .gz; veRL's rows: prompt, "
                               "data_source, reward_model.ground_truth, extra_info) instead of --task's; needs a text "
                               "tokenizer (--model DIR with tokenizer.json, or --tokenizer)")
        ("epochs", val(&o.epochs), "passes over --data, each in a seeded shuffle, every row trained once per epoch "
                                   "(0 = until --steps); the run ends after the last epoch or at --steps; in the "
                                   "async modes a group dropped as stale is requeued, so every row still trains once")
        ("max-prompt-tokens", val(&o.max_prompt_tokens), "--data rows whose rendered prompt is longer are skipped "
                                                         "and counted (0 = no limit)")
        ("reward", val(&o.reward), "builtin:NAME (exact, gsm8k, math) for every --data row; default: each row's "
                                   "data_source picks a built-in scorer")
        ("reward-fn", val(&o.reward_fn), "FILE.py[:NAME]: a Python function with veRL's signature "
                                         "(data_source, solution_str, ground_truth, extra_info), default NAME "
                                         "compute_score, run in a pool of worker processes on every rollout rank")
        ("reward-url", val(&o.reward_url), "HTTP(S) endpoint scoring POSTed JSON batches (share/doc/rewards.md)")
        ("reward-token-file", val(&o.reward_token_file), "bearer token for --reward-url (a file of mode 600)")
        ("reward-timeout", val(&o.reward_timeout), "seconds per sample (--reward-fn) or per request (--reward-url)")
        ("reward-workers", val(&o.reward_workers), "Python worker processes per rollout rank (--reward-fn)")
        ("reward-error", val(&o.reward_error), "fail (a failed reward: checkpoint, one line naming the row, exit 1; "
                                               "resumable) or zero (scored 0 and counted)");
    // clang-format on
    po::options_description train("Train");
    // clang-format off
    train.add_options()
        ("algo", val(&o.algo), "grpo, ppo (GAE with a learned critic on the ranks tagged critic, else with "
                               "the actor), rloo or reinforce_pp (REINFORCE++)")
        ("lr", val(&o.lr), "AdamW learning rate (the peak, with --lr-warmup-steps or --lr-schedule cosine)")
        ("lr-warmup-steps", val(&o.lr_warmup_steps), "raise --lr and --critic-lr linearly over the first N steps "
                                                      "(step s at (s+1)/N of the rate; 0 = no warm-up)")
        ("lr-schedule", val(&o.lr_schedule), "after the warm-up: constant, or cosine (a half-cosine decay that "
                                             "reaches --min-lr-ratio of the rate at --steps)")
        ("min-lr-ratio", val(&o.min_lr_ratio), "the floor of --lr-schedule cosine, as a fraction of the rate")
        ("clip-eps", val(&o.clip_eps), "PPO clip range epsilon")
        ("kl-coef", val(&o.kl_coef), "KL to the frozen initial policy (0 = off, no reference model)")
        ("kl-in", val(&o.kl_in), "where the KL goes: loss (a term of the actor loss) or reward (a per-token "
                                 "penalty in the rewards)")
        ("kl-estimator", val(&o.kl_estimator), "kl (k1), mse (k2), low_var_kl (k3) or abs")
        ("loss-agg", val(&o.loss_agg), "token-mean, seq-mean-token-sum or seq-mean-token-mean")
        ("critic-lr", val(&o.critic_lr), "critic AdamW learning rate (ppo)")
        ("gamma", val(&o.gamma), "discount (ppo, reinforce_pp)")
        ("lam", val(&o.lam), "GAE lambda (ppo)")
        ("value-clip", val(&o.value_clip), "critic value clipping range around the rollout values (0 = off)")
        ("ppo-epochs", val(&o.ppo_epochs), "passes over each step's samples")
        ("mini-batches", val(&o.mini_batches), "optimiser steps per pass (the step's samples split evenly)")
        ("entropy-coef", val(&o.entropy_coef), "bonus on the mean token entropy (keeps exploring; 0 = off)")
        ("weight-decay", val(&o.weight_decay), "AdamW weight decay")
        ("grad-clip", val(&o.grad_clip), "global gradient-norm clip (0 = off)")
        ("allow-shared-dir", val(&o.allow_shared_dir)->implicit_value(true),
         "accept an --out directory owned by another user or writable by others without the sticky bit "
         "(anyone who can write there can plant links; share/doc/hostile-input.md)")
        ("max-bad-steps", val(&o.max_bad_steps),
         "stop the run (after a checkpoint of the last good weights) when this many steps in a row had "
         "an update dropped for a NaN/inf loss or gradient norm")
        ("micro-batch", val(&o.micro_batch), "sequences per forward/backward (0 = the whole local batch)")
        ("micro-batch-tokens", val(&o.micro_batch_tokens),
         "token slots (rows x row length, padding included) per forward/backward; with --pack on it replaces "
         "--micro-batch and must hold the longest sequence (0 = by --micro-batch)")
        ("pack", val(&o.pack), "on: pack several sequences per row (attention and positions per sequence, no "
                               "padding); off: one right-padded sequence per row")
        ("bf16", val(&o.bf16)->implicit_value(true), "bf16 autocast for the trainer's matmuls")
        ("activation-checkpointing", val(&o.activation_checkpointing)->implicit_value(true),
         "keep only each decoder layer's input during the trainer's forward and recompute the layer in the "
         "backward: less memory for long sequences, about one more forward of compute (policy and critic)")
        ("shard", val(&o.shard),
         "off: every train rank keeps all of the AdamW state; optimizer: each keeps its share of the moments "
         "(ZeRO stage 1); gradients: its share of the gradients too (ZeRO stage 2)")
        ("shuffle-advantages", val(&o.shuffle_advantages)->implicit_value(true),
         "control experiment: shuffle advantages across samples (must not learn)")
        // Objectives (share/doc/train.md "Objectives"): veRL's names and defaults.
        ("clip-ratio-low", val(&o.clip_ratio_low), "PPO lower clip range: ratio >= 1 - this (0 = --clip-eps)")
        ("clip-ratio-high", val(&o.clip_ratio_high), "PPO upper clip range: ratio <= 1 + this (0 = --clip-eps; "
                                                     "DAPO's clip-higher e.g. 0.28)")
        ("clip-ratio-c", val(&o.clip_ratio_c), "dual-clip PPO: the loss of a token with A < 0 is at most -A * this "
                                               "(> 1; 0 = off)")
        ("norm-adv-by-std-in-grpo", val(&o.norm_adv_by_std_in_grpo)->implicit_value(true),
         "grpo: divide by the group's std (false: Dr.GRPO, with --loss-agg seq-mean-token-sum-norm)")
        ("grpo-std", val(&o.grpo_std), "grpo: unbiased (n - 1, as veRL, TRL, OpenRLHF) or population (n) std")
        ("kl-penalty", val(&o.kl_penalty), "KL estimator of the reward penalty (--kl-in reward): kl, mse, "
                                           "low_var_kl, abs (default: --kl-estimator)")
        ("kl-loss-type", val(&o.kl_loss_type), "KL estimator of the KL loss (--kl-in loss): kl, mse, low_var_kl, "
                                               "abs (default: --kl-estimator)")
        ("kl-ctrl", val(&o.kl_ctrl), "fixed or adaptive (--kl-in reward: the coefficient follows --kl-target, "
                                     "Ziegler et al. 2019, as veRL's kl_ctrl)")
        ("kl-target", val(&o.kl_target), "adaptive KL controller: target KL per token")
        ("kl-horizon", val(&o.kl_horizon), "adaptive KL controller: horizon in samples")
        ("loss-scale-factor", val(&o.loss_scale_factor),
         "--loss-agg seq-mean-token-sum-norm: the constant token count each sequence's sum is divided by "
         "(0 = --max-new-tokens)")
        // Off-policy correction (share/doc/train.md "Off-policy correction"): veRL's rollout_correction.
        ("old-logprobs", val(&o.old_logprobs),
         "the PPO ratio's pi_old: rollout (the rollout-time log-probs) or recompute (the trainer's forward "
         "with the current weights before the update: decoupled PPO's proximal policy, as veRL and AReaL; "
         "one more forward per step, and needed by --rollout-is/--rollout-rs) or measure (rollout's loss, "
         "but that forward is taken to report in /steps the weights --rollout-is token would use)")
        ("rollout-is", val(&o.rollout_is),
         "truncated importance weights min(pi_old / pi_rollout, C) on the policy loss: off, token or sequence "
         "(needs --old-logprobs recompute)")
        ("rollout-is-threshold", val(&o.rollout_is_threshold), "C, the cap of the importance weights")
        ("rollout-is-cap", val(&o.rollout_is_cap), "the same as --rollout-is-threshold")
        ("rollout-is-batch-normalize", val(&o.rollout_is_batch_normalize)->implicit_value(true),
         "divide the importance weights by the train group's mean weight of the step, so that they average "
         "1 (veRL's rollout_is_batch_normalize; needs --rollout-is token or sequence)")
        ("rollout-rs", val(&o.rollout_rs),
         "reject (leave out of the loss) what pi_old / pi_rollout puts outside [lower, upper]: off, token "
         "(each token by its own ratio), sequence (the whole sequence by the product over its tokens) or "
         "geometric (by their geometric mean); needs --old-logprobs recompute")
        ("rollout-rs-threshold", val(&o.rollout_rs_threshold), "upper bound of --rollout-rs (0 = --rollout-is-threshold)")
        ("rollout-rs-threshold-lower", val(&o.rollout_rs_threshold_lower),
         "lower bound of --rollout-rs (0 = 1 / the upper bound)")
        ("rollout-token-veto-threshold", val(&o.rollout_token_veto_threshold),
         "reject a whole sequence holding a token whose pi_old / pi_rollout is below this (veRL's veto, e.g. "
         "1e-4; 0 = off); needs --old-logprobs recompute");
    // clang-format on
    po::options_description eval("Evaluation");
    // clang-format off
    eval.add_options()
        ("eval-every", val(&o.eval_every), "held-out greedy evaluation every N steps (0 = only at the end)")
        ("eval-prompts", val(&o.eval_prompts), "held-out prompts per evaluation")
        ("val-data", val(&o.val_data), "with --data: score these JSON Lines rows (greedy; mean@K with --val-samples) "
                                       "at the start, every --eval-every steps and at the end, into /eval per "
                                       "data_source (sync mode)")
        ("val-samples", val(&o.val_samples), "K: also sample K responses per --val-data row and report mean@K")
        ("val-temperature", val(&o.val_temperature), "sampling temperature of --val-samples")
        ("val-max-tokens", val(&o.val_max_tokens), "--val-data response budget (0 = the run's --max-new-tokens)");
    // clang-format on
    po::options_description sys("Weight sync and system");
    // clang-format off
    sys.add_options()
        ("bucket-mb", val(&o.bucket_mb), "weight-sync / gradient all-reduce bucket size in MiB")
        ("sync-delta", val(&o.sync_delta)->implicit_value(true),
         "weight sync sends only the weights that changed since the version the rollout ranks hold (every "
         "mode: sync's broadcast, and the async modes' sends, per receiver's version)")
        ("resume-mode", val(&o.resume_mode),
         "disaggregated/multiplex: generations in flight when new weights arrive resume with their KV caches "
         "kept (keep: free, tokens attend to old-weight keys/values) or recomputed under the new weights "
         "(recompute: a prefill of what is in flight per update)")
        ("resume-window", val(&o.resume_window),
         "with --resume-mode recompute: recompute only the last N cached tokens of each sequence (0 = all)")
        ("resume-min-tokens", val(&o.resume_min_tokens),
         "with --resume-mode recompute: recompute only sequences holding at least N tokens (prompt + "
         "response so far; 0 = every sequence)")
        ("train-threshold", val(&o.train_threshold),
         "disaggregated/multiplex: fresh samples (of complete groups) that trigger a training step "
         "(0 = prompts-per-step x group-size)")
        ("min-rollout-frac", val(&o.min_rollout_frac),
         "multiplex: at least this fraction of the ranks never leaves rollout")
        ("rollout-ahead", val(&o.rollout_ahead),
         "multiplex, when every generating rank also trains: each starts at most this many times its share of "
         "--train-threshold (threshold / generating ranks) in new samples per policy version; paused "
         "generations still resume (0 = no limit: keep --max-batch sequences in flight; with rollout-only "
         "ranks nobody is limited)")
        ("train-priority", val(&o.train_priority),
         "multiplex: train priority per tag set, e.g. \"rollout,train,critic=2;rollout,train=1\" (default 1 "
         "for every rank tagged train): the lowest-priority multi-tag ranks are the ones kept in rollout for "
         "--min-rollout-frac, and priority 0 keeps a rank in rollout for the whole run")
        ("rebalance-every", val(&o.rebalance_every),
         "multiplex: every N steps the coordinator chooses which multi-tag ranks form the train group from "
         "the generation and training rates measured over those steps (a joining rank gets the optimiser "
         "state from the coordinator; a leaving one generates and receives weights); 0 = the group "
         "--train-priority and --min-rollout-frac give, for the whole run")
        ("staleness", val(&o.staleness),
         "disaggregated/multiplex: samples whose oldest token is more than this many versions behind the "
         "trained version are stale")
        ("admission", val(&o.admission),
         "disaggregated/multiplex: staleness (a generating rank starts a new prompt group only while, at the "
         "measured samples trained per policy version, it will be trained within --staleness versions; "
         "otherwise it waits, idle) or off (generate without bound; what goes stale is dropped)")
        ("stale", val(&o.stale), "what happens to stale samples: drop (consumed with weight 0) or weight "
                                 "(trained with advantage weight (staleness + 1) / (age + 1), age = versions behind; "
                                 "dropped below 0.25)")
        ("late-wait", val(&o.late_wait),
         "disaggregated/multiplex: once --train-threshold is met, wait for incomplete prompt groups this "
         "step could still train and the next would drop as stale, generating meanwhile, for at most their "
         "share of the batch, and at most this fraction, of a step's measured cycle (0 = start the step at "
         "once; default 0.5)")
        ("train-timeout", val(&o.train_timeout),
         "disaggregated/multiplex: also start a training step when this many seconds passed since the last "
         "one and at least one usable sample is waiting (0 = only --train-threshold)")
        ("gateway", val(&o.gateway),
         "disaggregated/multiplex: serve an OpenAI-compatible API on HOST:PORT (default host 127.0.0.1; "
         "port 0 = any free port) from a rank that only rolls out; token in OUT/gateway.token, URL in "
         "OUT/gateway.url (share/doc/gateway.md)")
        ("gateway-any", val(&o.gateway_any)->implicit_value(true),
         "allow --gateway to bind an address other than loopback (0.0.0.0, [::], a NIC)")
        ("gateway-only", val(&o.gateway_only)->implicit_value(true),
         "with --gateway: generate no built-in task prompts; train only on gateway sessions")
        ("gateway-session-idle", val(&o.gateway_session_idle),
         "with --gateway: seconds after which an idle session without a reward is forgotten (its routing, "
         "its open group; a later reward for it gets 404)")
        ("gemm-check", val(&o.gemm_check)->implicit_value(true), "measure fp32 GEMM GFLOP/s at start")
        ("min-gflops", val(&o.min_gflops), "warn when the GEMM check is below this many GFLOP/s per rank")
        ("heartbeat-timeout", val(&o.heartbeat_timeout),
         "seconds without a heartbeat after which a rank counts as lost and the job is ended, naming it "
         "(0 = no watchdog; heartbeats go to OUT/.heartbeat/)");
    // clang-format on
    po::options_description all("tagflow train options");
    all.add(run).add(tags).add(model).add(rollout).add(data).add(train).add(eval).add(sys);
    return all;
}

std::string json_escape(const std::string& s) {
    std::string r;
    for (char c : s) {
        switch (c) {
            case '"': r += "\\\""; break;
            case '\\': r += "\\\\"; break;
            case '\n': r += "\\n"; break;
            case '\t': r += "\\t"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char b[8];
                    snprintf(b, sizeof b, "\\u%04x", c);
                    r += b;
                } else {
                    r += c;
                }
        }
    }
    return r;
}

std::string json_literal(const boost::any& v) {
    if (v.empty()) return "null";
    if (auto p = boost::any_cast<std::string>(&v)) return json_string(*p);
    if (auto p = boost::any_cast<Mode>(&v)) return json_string(p->name());
    if (auto p = boost::any_cast<bool>(&v)) return *p ? "true" : "false";
    if (auto p = boost::any_cast<int32_t>(&v)) return std::to_string(*p);
    if (auto p = boost::any_cast<int64_t>(&v)) return std::to_string(*p);
    if (auto p = boost::any_cast<double>(&v)) {
        char b[64];
        snprintf(b, sizeof b, "%.17g", *p);
        return b;
    }
    return "null";
}

// Rewrites a Boost error as one line naming the option and where the value came from.
std::string describe_error(const po::error& e, const std::string& origin) {
    std::string msg = e.what();
    if (auto u = dynamic_cast<const po::unknown_option*>(&e))
        return origin + "unknown option '" + u->get_option_name() + "' (see `tagflow train --help`)";
    // A huge value would push the option's name past the end of the error line: leave it out.
    if (auto w = dynamic_cast<const po::error_with_option_name*>(&e); w != nullptr && msg.size() > 300) {
        po::error_with_option_name shorter = *w;
        shorter.set_substitute("value", "(too long to show)");
        return origin + shorter.what();
    }
    return origin + msg;
}

}  // namespace

std::string json_string(const std::string& s) { return "\"" + json_escape(s) + "\""; }

std::string env_name(const std::string& option) {
    std::string r = "TAGFLOW_";
    for (char c : option) r += (c == '-') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return r;
}

std::map<std::string, std::string> tagflow_environment() {
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
        std::string kv(*e);
        if (kv.rfind("TAGFLOW_", 0) != 0) continue;
        auto eq = kv.find('=');
        if (eq == std::string::npos) continue;
        env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    return env;
}

ParseResult parse_train(int argc, const char* const* argv, const std::map<std::string, std::string>& env) {
    ParseResult r;
    Options& o = r.options;
    po::options_description desc = describe(o);
    po::variables_map vm;

    // 1. command line (stored first: po::store never overwrites a stored value).
    po::parsed_options cli(&desc);
    try {
        cli = po::command_line_parser(argc, argv).options(desc).run();
    } catch (const po::error& e) {
        throw ConfigError(describe_error(e, ""));
    }
    for (const auto& opt : cli.options)
        if (opt.position_key >= 0)
            throw ConfigError("unexpected argument '" + opt.value.at(0) + "' (options start with --)");
    try {
        po::store(cli, vm);
    } catch (const po::error& e) {
        throw ConfigError(describe_error(e, ""));
    }
    if (vm.count("help")) {
        std::ostringstream h;
        h << "usage: tagflow train --out DIR [options]\n"
          << "Every option can also be set in a --config file (key = value) or as TAGFLOW_<NAME>\n"
          << "(e.g. TAGFLOW_STEPS=100); the command line wins over the environment, which wins\n"
          << "over the config file.\n\n"
          << desc;
        r.help = true;
        r.help_text = h.str();
        return r;
    }
    bool tags_on_cli = vm.count("tags") && !vm["tags"].defaulted();

    // 2. environment: TAGFLOW_<OPTION>, stored one by one so an error names the variable.
    for (const auto& [k, v] : env) {
        bool ignored = false;
        for (const char* n : kNonOptionEnv) ignored = ignored || k == n;
        if (ignored) continue;
        std::string name;
        for (const auto& d : desc.options())
            if (env_name(d->long_name()) == k) name = d->long_name();
        if (name.empty() || name == "help") throw ConfigError("environment variable " + k + ": not a tagflow option");
        po::parsed_options envp(&desc);
        po::option opt(name, {v});
        opt.original_tokens = {k + "=" + v};
        envp.options.push_back(opt);
        try {
            // Parsed into a scratch map as well: po::store skips an option the command line set,
            // and a bad value must be an error even when it is overridden.
            po::variables_map scratch;
            po::store(envp, scratch);
            po::store(envp, vm);
        } catch (const po::error& e) {
            const std::string shown =
                v.size() > 60 ? v.substr(0, 60) + "...' (" + std::to_string(v.size()) + " bytes)" : v + "'";
            throw ConfigError("environment variable " + k + "='" + shown + ": invalid value for --" + name);
        }
    }
    bool tags_in_env = env.count("TAGFLOW_TAGS") > 0;

    // 3. config file.
    std::string cfg = vm.count("config") ? vm["config"].as<std::string>() : std::string();
    if (!cfg.empty()) {
        // A directory opens and reads as empty, a FIFO blocks: only regular files are read.
        struct stat st {};
        if (::stat(cfg.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
            throw ConfigError("--config " + cfg + ": not a regular file");
        std::ifstream in(cfg);
        if (!in) throw ConfigError("--config " + cfg + ": cannot open file");
        try {
            const po::parsed_options parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/false);
            po::variables_map scratch;  // every value checked, also those the command line or environment override
            po::store(parsed, scratch);
            po::store(parsed, vm);
        } catch (const po::error& e) {
            throw ConfigError(describe_error(e, "--config " + cfg + ": "));
        }
    }
    try {
        po::notify(vm);
    } catch (const po::error& e) {
        throw ConfigError(describe_error(e, ""));
    }
    o.mode_given = vm.count("mode") && !vm["mode"].defaulted();
    auto given = [&](const char* name) { return vm.count(name) && !vm[name].defaulted(); };
    if (given("rollout-is-cap")) {  // the name for veRL's rollout_is_threshold
        check_range<double>("rollout-is-cap", o.rollout_is_cap, 1e-6, 1e9);
        if (given("rollout-is-threshold") && o.rollout_is_threshold != o.rollout_is_cap)
            throw ConfigError("--rollout-is-cap and --rollout-is-threshold: two values for the same cap; give one");
        o.rollout_is_threshold = o.rollout_is_cap;
    }
    if (tags_on_cli) o.tags_origin = "option";
    else if (tags_in_env) o.tags_origin = "env";
    else if (!o.tags.empty()) o.tags_origin = "option";  // from the config file
    auto ts = env.find("TAGFLOW_TAG_SOURCE");
    if (ts != env.end()) o.tag_source = ts->second;
    // Stored in /ranks: only what the SPANK plugin exports (tf_source_name), nothing arbitrary.
    if (!o.tag_source.empty() && o.tag_source != "map" && o.tag_source != "option" && o.tag_source != "default")
        throw ConfigError("environment variable TAGFLOW_TAG_SOURCE='" + o.tag_source.substr(0, 40) +
                          (o.tag_source.size() > 40 ? "...'" : "'") + ": expected map, option or default");
    validate_options(o);

    for (const auto& d : desc.options()) {
        const std::string& n = d->long_name();
        if (n == "help") continue;
        r.resolved.emplace_back(n, vm.count(n) ? json_literal(vm[n].value()) : "null");
    }
    return r;
}

std::string to_json(const ParseResult& r) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, v] : r.resolved) {
        if (!first) s += ", ";
        first = false;
        s += json_string(k) + ": " + v;
    }
    s += "}";
    return s;
}

std::string to_table(const ParseResult& r) {
    std::string s;
    for (const auto& [k, v] : r.resolved) {
        char line[512];
        snprintf(line, sizeof line, "  %-20s %s\n", k.c_str(), v.c_str());
        s += line;
    }
    return s;
}

ResponseLengths parse_response_lengths(const std::string& spec) {
    ResponseLengths r;
    if (spec == "policy") return r;
    const std::string what = "--response-lengths '" + spec + "': ";
    if (spec.rfind("lognormal:", 0) != 0) throw ConfigError(what + "expected policy or lognormal:MEDIAN:P99RATIO");
    const std::string rest = spec.substr(10);
    const size_t colon = rest.find(':');
    if (colon == std::string::npos)
        throw ConfigError(what + "expected lognormal:MEDIAN:P99RATIO (e.g. lognormal:32:10)");
    auto num = [&](const std::string& t, const char* name, double lo) {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(t.c_str(), &end);
        if (t.empty() || errno != 0 || *end != '\0' || !std::isfinite(x) || x < lo || x > 1e6)
            throw ConfigError(what + name + " '" + t + "' must be a number in [" +
                              std::to_string(static_cast<int>(lo)) + ", 1e6]");
        return x;
    };
    r.median = num(rest.substr(0, colon), "MEDIAN", 1);
    r.p99_ratio = num(rest.substr(colon + 1), "P99RATIO", 1);
    r.forced = true;
    return r;
}

}  // namespace tagflow::config
