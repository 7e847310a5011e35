// SPDX-License-Identifier: Apache-2.0
// options_check: see options_check.hpp.
#include "config/options_check.hpp"

#include <cmath>
#include <string>

#include "common/error.hpp"
#include "config/option_checks.hpp"

namespace tagflow::config {
namespace {

// The objective options (share/doc/train.md "Objectives").
void check_objectives(const Options& o) {
    check_range<double>("clip-ratio-low", o.clip_ratio_low, 0.0, 1.0);
    check_range<double>("clip-ratio-high", o.clip_ratio_high, 0.0, 10.0);
    check_range<double>("clip-ratio-c", o.clip_ratio_c, 0.0, 1e6);
    if (o.clip_ratio_c != 0.0 && !(o.clip_ratio_c > 1.0))
        throw ConfigError("--clip-ratio-c " + std::to_string(o.clip_ratio_c) + ": must be > 1 (or 0 = off)");
    check_choice("grpo-std", o.grpo_std, {"unbiased", "population"});
    if (!o.kl_penalty.empty()) check_choice("kl-penalty", o.kl_penalty, {"kl", "mse", "low_var_kl", "abs"});
    if (!o.kl_loss_type.empty()) check_choice("kl-loss-type", o.kl_loss_type, {"kl", "mse", "low_var_kl", "abs"});
    check_choice("kl-ctrl", o.kl_ctrl, {"fixed", "adaptive"});
    check_range<double>("kl-target", o.kl_target, 1e-9, 1e6);
    check_range<double>("kl-horizon", o.kl_horizon, 1.0, 1e12);
    if (o.kl_ctrl == "adaptive" && !(o.kl_coef > 0 && o.kl_in == "reward"))
        throw ConfigError("--kl-ctrl adaptive: adapts the reward penalty; needs --kl-in reward and --kl-coef > 0");
    check_range<double>("loss-scale-factor", o.loss_scale_factor, 0.0, 1e9);
    if (o.loss_agg == "seq-mean-token-sum-norm" && o.loss_scale_factor == 0 && o.max_new_tokens == 0)
        throw ConfigError(
            "--loss-agg seq-mean-token-sum-norm: needs a constant token count, --loss-scale-factor N "
            "or --max-new-tokens N");
    for (double v :
         {o.clip_ratio_low, o.clip_ratio_high, o.clip_ratio_c, o.kl_target, o.kl_horizon, o.loss_scale_factor})
        if (!std::isfinite(v)) throw ConfigError("a floating-point objective option is not finite");
}

// The off-policy correction options (share/doc/train.md "Off-policy correction").
void check_correction(const Options& o) {
    check_choice("old-logprobs", o.old_logprobs, {"recompute", "rollout", "measure"});
    check_choice("rollout-is", o.rollout_is, {"off", "token", "sequence"});
    check_choice("rollout-rs", o.rollout_rs, {"off", "token", "sequence", "geometric"});
    check_range<double>("rollout-is-threshold", o.rollout_is_threshold, 1e-6, 1e9);
    check_range<double>("rollout-rs-threshold", o.rollout_rs_threshold, 0.0, 1e9);
    check_range<double>("rollout-rs-threshold-lower", o.rollout_rs_threshold_lower, 0.0, 1e9);
    check_range<double>("rollout-token-veto-threshold", o.rollout_token_veto_threshold, 0.0, 1.0);
    const double upper = o.rollout_rs_threshold > 0 ? o.rollout_rs_threshold : o.rollout_is_threshold;
    const double lower = o.rollout_rs_threshold_lower > 0 ? o.rollout_rs_threshold_lower : 1.0 / upper;
    if (o.rollout_rs != "off" && !(lower < upper))
        throw ConfigError("--rollout-rs " + o.rollout_rs + ": the band [" + std::to_string(lower) + ", " +
                          std::to_string(upper) + "] is empty (lower must be below upper)");
    if (o.rollout_is_batch_normalize && o.rollout_is == "off")
        throw ConfigError(
            "--rollout-is-batch-normalize: needs --rollout-is token or sequence (with off there is "
            "no importance weight to normalise)");
    if (o.old_logprobs != "recompute" &&
        (o.rollout_is != "off" || o.rollout_rs != "off" || o.rollout_token_veto_threshold > 0))
        throw ConfigError(
            "--rollout-is/--rollout-rs/--rollout-token-veto-threshold: need --old-logprobs recompute "
            "(with " +
            o.old_logprobs + " the PPO ratio's pi_old is the behaviour policy and every weight is 1)");
}

}  // namespace

void validate_options(const Options& o) {
    if (o.out.empty()) throw ConfigError("--out: missing (the run directory is required)");
    check_range<int64_t>("steps", o.steps, 1, 1000000000);
    check_range<int64_t>("seed", o.seed, 0, (int64_t{1} << 62));
    check_range<int32_t>("train-threshold", o.train_threshold, 0, 1 << 30);
    check_range<double>("min-rollout-frac", o.min_rollout_frac, 0.0, 1.0);
    check_range<double>("rollout-ahead", o.rollout_ahead, 0.0, 1000.0);
    check_range<int32_t>("rebalance-every", o.rebalance_every, 0, 1000000);
    if (o.rollout_ahead > 0 && o.rollout_ahead < 1) {
        std::ostringstream m;  // the generators together would start less than a step per version: no step, ever
        m << "--rollout-ahead " << o.rollout_ahead << ": must be 0 (no cap) or at least 1 (below 1 the generating "
          << "ranks together start fewer samples per version than a training step needs, and the run would wait)";
        throw ConfigError(m.str());
    }
    check_range<int32_t>("staleness", o.staleness, 0, 1 << 20);
    check_choice("stale", o.stale, {"drop", "weight"});
    check_choice("admission", o.admission, {"staleness", "off"});
    check_range<double>("late-wait", o.late_wait, 0.0, 10.0);
    parse_response_lengths(o.response_lengths);
    check_range<int32_t>("digits", o.digits, 0, 32);
    check_range<int32_t>("threads", o.threads, 0, 1024);
    check_range<int32_t>("d-model", o.d_model, 8, 8192);
    check_range<int32_t>("layers", o.layers, 1, 128);
    check_range<int32_t>("heads", o.heads, 1, 256);
    if (o.d_model % o.heads != 0)
        throw ConfigError("--heads " + std::to_string(o.heads) + ": must divide --d-model " +
                          std::to_string(o.d_model));
    check_range<int32_t>("kv-heads", o.kv_heads, 0, 256);
    if (o.kv_heads > 0 && o.heads % o.kv_heads != 0)
        throw ConfigError("--kv-heads " + std::to_string(o.kv_heads) + ": must divide --heads " +
                          std::to_string(o.heads));
    if ((o.d_model / o.heads) % 2 != 0)
        throw ConfigError("--d-model / --heads = " + std::to_string(o.d_model / o.heads) +
                          ": the head size must be even (rotary embeddings)");
    check_range<int32_t>("d-ff", o.d_ff, 1, 65536);
    check_range<double>("rope-theta", o.rope_theta, 1.0, 1e12);
    check_range<int32_t>("prompts-per-step", o.prompts_per_step, 1, 1 << 20);
    check_range<int32_t>("group-size", o.group_size, 2, 4096);
    check_range<double>("temperature", o.temperature, 1e-3, 100.0);
    if (!(o.top_p > 0.0 && o.top_p <= 1.0))
        throw ConfigError("--top-p " + std::to_string(o.top_p) + ": must be in (0, 1]");
    check_range<int32_t>("max-new-tokens", o.max_new_tokens, 0, 1 << 16);
    check_range<int32_t>("top-k", o.top_k, 0, 1 << 20);
    check_range<int32_t>("max-batch", o.max_batch, 1, 1 << 20);
    check_choice("algo", o.algo, {"grpo", "ppo", "rloo", "reinforce_pp", "reinforce_pp_baseline"});
    check_choice("kl-in", o.kl_in, {"loss", "reward"});
    check_choice("kl-estimator", o.kl_estimator, {"kl", "mse", "low_var_kl", "abs"});
    check_choice("loss-agg", o.loss_agg,
                 {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"});
    check_objectives(o);
    check_correction(o);
    check_range<double>("critic-lr", o.critic_lr, 0.0, 10.0);
    check_range<double>("gamma", o.gamma, 0.0, 1.0);
    check_range<double>("lam", o.lam, 0.0, 1.0);
    check_range<double>("value-clip", o.value_clip, 0.0, 1e6);
    check_range<int32_t>("ppo-epochs", o.ppo_epochs, 1, 1000);
    check_range<int32_t>("mini-batches", o.mini_batches, 1, 1 << 16);
    check_range<double>("lr", o.lr, 0.0, 10.0);
    check_range<int64_t>("lr-warmup-steps", o.lr_warmup_steps, 0, 1000000000);
    check_choice("lr-schedule", o.lr_schedule, {"constant", "cosine"});
    check_range<double>("min-lr-ratio", o.min_lr_ratio, 0.0, 1.0);
    check_range<double>("clip-eps", o.clip_eps, 0.0, 10.0);
    check_range<double>("kl-coef", o.kl_coef, 0.0, 100.0);
    check_range<double>("entropy-coef", o.entropy_coef, 0.0, 10.0);
    check_range<double>("weight-decay", o.weight_decay, 0.0, 10.0);
    check_range<double>("grad-clip", o.grad_clip, 0.0, 1e6);
    check_range<int32_t>("max-bad-steps", o.max_bad_steps, 1, 1 << 20);
    check_range<int32_t>("micro-batch", o.micro_batch, 0, 1 << 20);
    check_range<int64_t>("micro-batch-tokens", o.micro_batch_tokens, 0, int64_t{1} << 32);
    check_choice("pack", o.pack, {"on", "off"});
    check_choice("shard", o.shard, {"off", "optimizer", "gradients"});
    if (o.pack == "on" && o.micro_batch_tokens > 0 && o.micro_batch_tokens < o.max_new_tokens)
        throw ConfigError("--micro-batch-tokens " + std::to_string(o.micro_batch_tokens) + " is smaller than " +
                          "--max-new-tokens " + std::to_string(o.max_new_tokens) +
                          ": a full-length response would not fit one packed micro-batch");
    check_range<int32_t>("eval-every", o.eval_every, 0, 1000000000);
    check_range<int32_t>("eval-prompts", o.eval_prompts, 1, 1 << 20);
    check_range<int32_t>("val-samples", o.val_samples, 1, 1024);
    check_range<double>("val-temperature", o.val_temperature, 1e-6, 100.0);
    check_range<int32_t>("val-max-tokens", o.val_max_tokens, 0, 1 << 20);
    check_range<double>("bucket-mb", o.bucket_mb, 1.0 / 1024, 4096.0);
    check_choice("resume-mode", o.resume_mode, {"keep", "recompute"});
    check_range<int64_t>("resume-window", o.resume_window, 0, int64_t{1} << 40);
    check_range<int64_t>("resume-min-tokens", o.resume_min_tokens, 0, int64_t{1} << 40);
    if (o.resume_mode != "recompute" && (o.resume_window > 0 || o.resume_min_tokens > 0))
        throw ConfigError(std::string(o.resume_window > 0 ? "--resume-window" : "--resume-min-tokens") +
                          ": needs --resume-mode recompute (keep recomputes nothing)");
    check_range<double>("min-gflops", o.min_gflops, 0.0, 1e7);
    check_range<double>("train-timeout", o.train_timeout, 0.0, 1e7);
    check_range<double>("gateway-session-idle", o.gateway_session_idle, 0.1, 1e7);
    if (!o.gateway.empty()) {
        if (!o.mode.is_async())
            throw ConfigError(
                "--gateway: needs --mode disaggregated or multiplex (the gateway lives on a rank that "
                "only rolls out; sync mode has none)");
        // HOST:PORT, [V6]:PORT, :PORT or PORT (host 127.0.0.1).
        std::string host = "127.0.0.1", port = o.gateway;
        if (!o.gateway.empty() && o.gateway.front() == '[') {
            const size_t rb = o.gateway.find("]:");
            if (rb == std::string::npos) throw ConfigError("--gateway " + o.gateway + ": expected [IPv6]:PORT");
            host = o.gateway.substr(1, rb - 1);
            port = o.gateway.substr(rb + 2);
        } else if (const size_t c = o.gateway.rfind(':'); c != std::string::npos) {
            if (o.gateway.find(':') != c)
                throw ConfigError("--gateway " + o.gateway + ": write IPv6 addresses as [ADDR]:PORT");
            if (c > 0) host = o.gateway.substr(0, c);
            port = o.gateway.substr(c + 1);
        }
        if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
            std::stoi(port) > 65535)
            throw ConfigError("--gateway " + o.gateway + ": the port must be a number in [0, 65535]");
        const bool loopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
        if (!loopback && !o.gateway_any)
            throw ConfigError("--gateway " + o.gateway +
                              ": binds beyond loopback; add --gateway-any to serve other "
                              "hosts (the bearer token is then the only protection, no TLS)");
    } else if (o.gateway_only) {
        throw ConfigError("--gateway-only: needs --gateway HOST:PORT");
    }
    if (!o.chat_template.empty() && o.model.empty())
        throw ConfigError("--chat-template " + o.chat_template + ": needs --model DIR with a tokenizer.json");
    check_range<int32_t>("ckpt-every", o.ckpt_every, 0, 1000000000);
    check_range<int64_t>("epochs", o.epochs, 0, int64_t{1} << 40);
    check_range<int64_t>("max-prompt-tokens", o.max_prompt_tokens, 0, 1 << 24);
    check_range<double>("reward-timeout", o.reward_timeout, 1e-3, 1e6);
    check_range<int32_t>("reward-workers", o.reward_workers, 1, 256);
    check_choice("reward-error", o.reward_error, {"fail", "zero"});
    {
        const int sources = !o.reward.empty() + !o.reward_fn.empty() + !o.reward_url.empty();
        if (sources > 1) throw ConfigError("--reward, --reward-fn, --reward-url: choose one");
        const char* const needs_data[] = {"epochs",    "max-prompt-tokens", "reward",
                                          "reward-fn", "reward-url",        "val-data"};
        const bool set[] = {o.epochs > 0,         o.max_prompt_tokens > 0, !o.reward.empty(),
                            !o.reward_fn.empty(), !o.reward_url.empty(),   !o.val_data.empty()};
        for (size_t k = 0; k < sizeof set / sizeof set[0]; ++k)
            if (set[k] && o.data.empty())
                throw ConfigError(std::string("--") + needs_data[k] +
                                  ": needs --data FILE (the built-in tasks have "
                                  "their own prompts and rewards)");
        if (!o.reward.empty() && o.reward.rfind("builtin:", 0) != 0)
            throw ConfigError("--reward " + o.reward +
                              ": expected builtin:NAME (exact, gsm8k, math); a Python "
                              "function is --reward-fn FILE.py[:NAME], an HTTP endpoint --reward-url URL");
        if (!o.reward_token_file.empty() && o.reward_url.empty())
            throw ConfigError("--reward-token-file: needs --reward-url");
        if (!o.data.empty() && o.gateway_only)
            throw ConfigError("--data and --gateway-only: choose one source of prompts");
        if (!o.data.empty() && !o.gateway.empty())
            throw ConfigError("--data and --gateway: choose one source of prompts");
    }
    if (o.export_dtype != "auto" && o.export_dtype != "bf16" && o.export_dtype != "fp32")
        throw ConfigError("--export-dtype " + o.export_dtype + ": expected bf16, fp32 or auto");
    if (o.resume && o.no_resume) throw ConfigError("--resume and --no-resume: choose one");
    check_range<double>("heartbeat-timeout", o.heartbeat_timeout, 0.0, 1e6);
    if (o.heartbeat_timeout > 0 && o.heartbeat_timeout < 3) {
        std::ostringstream m;
        m << "--heartbeat-timeout " << o.heartbeat_timeout
          << ": must be 0 (off) or at least 3 s (heartbeats come every second)";
        throw ConfigError(m.str());
    }
    for (double v : {o.temperature, o.top_p, o.lr, o.clip_eps, o.bucket_mb, o.rope_theta, o.critic_lr, o.gamma, o.lam,
                     o.value_clip})
        if (!std::isfinite(v)) throw ConfigError("a floating-point option is not finite");
}

}  // namespace tagflow::config
