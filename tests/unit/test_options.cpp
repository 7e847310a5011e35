// SPDX-License-Identifier: Apache-2.0
// Unit tests of `tagflow train` option parsing: sources, precedence, every error path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "config/options.hpp"

using tagflow::ConfigError;
using tagflow::config::parse_train;
using Env = std::map<std::string, std::string>;

namespace {

tagflow::config::ParseResult parse(std::vector<std::string> args, const Env& env = {}) {
    args.insert(args.begin(), "train");
    std::vector<const char*> argv;
    for (auto& a : args) argv.push_back(a.c_str());
    return parse_train(static_cast<int>(argv.size()), argv.data(), env);
}

std::string error_of(std::vector<std::string> args, const Env& env = {}) {
    try {
        parse(std::move(args), env);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

std::string write_config(const std::string& text) {
    char path[] = "/tmp/tagflow_test_cfg_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    std::ofstream(path) << text;
    return path;
}

}  // namespace

TEST(Options, DefaultsNeedOnlyOut) {
    auto r = parse({"--out", "/tmp/x"});
    EXPECT_EQ(r.options.out, "/tmp/x");
    EXPECT_EQ(r.options.mode, "multiplex");
    EXPECT_FALSE(r.options.mode_given);  // train_command may still pick another (sched_policy::default_mode)
    EXPECT_EQ(r.options.task, "reverse");
    EXPECT_GT(r.options.steps, 0);
    EXPECT_FALSE(r.help);
}

TEST(Options, ModeGivenAnywhereIsKept) {
    EXPECT_TRUE(parse({"--out", "o", "--mode", "multiplex"}).options.mode_given);
    auto e = parse({"--out", "o"}, {{"TAGFLOW_MODE", "sync"}});
    EXPECT_TRUE(e.options.mode_given);
    EXPECT_EQ(e.options.mode, "sync");
    const std::string cfg = write_config("mode = disaggregated\n");
    auto c = parse({"--out", "o", "--config", cfg});
    EXPECT_TRUE(c.options.mode_given);
    EXPECT_EQ(c.options.mode, "disaggregated");
    std::remove(cfg.c_str());
    EXPECT_FALSE(parse({"--out", "o", "--steps", "3"}).options.mode_given);
}

TEST(Options, HelpListsEveryOptionWithDefault) {
    auto r = parse({"--help"});
    ASSERT_TRUE(r.help);
    for (const char* name : {"--out", "--steps", "--seed", "--mode", "--tags", "--rank-tags", "--lr", "--group-size",
                             "--bucket-mb", "--config", "--bf16", "--eval-every"})
        EXPECT_NE(r.help_text.find(name), std::string::npos) << name;
    EXPECT_NE(r.help_text.find("(=400)"), std::string::npos) << "defaults are shown";
}

TEST(Options, PrecedenceConfigEnvCli) {
    std::string cfg = write_config("steps = 7\nseed = 3\nlr = 0.5\n# comment\n");
    auto r = parse({"--out", "o", "--config", cfg, "--steps", "9"}, Env{{"TAGFLOW_SEED", "5"}});
    EXPECT_EQ(r.options.steps, 9);        // CLI beats config
    EXPECT_EQ(r.options.seed, 5);         // env beats config
    EXPECT_DOUBLE_EQ(r.options.lr, 0.5);  // config beats default
    auto r2 = parse({"--out", "o", "--seed", "8"}, Env{{"TAGFLOW_SEED", "5"}});
    EXPECT_EQ(r2.options.seed, 8);  // CLI beats env
    std::remove(cfg.c_str());
}

TEST(Options, OutFromEnvironment) {
    auto r = parse({}, Env{{"TAGFLOW_OUT", "/tmp/y"}, {"TAGFLOW_PROMPTS_PER_STEP", "4"}});
    EXPECT_EQ(r.options.out, "/tmp/y");
    EXPECT_EQ(r.options.prompts_per_step, 4);
}

TEST(Options, UnknownOptionNamesIt) {
    std::string e = error_of({"--out", "o", "--stpes", "3"});
    EXPECT_NE(e.find("--stpes"), std::string::npos) << e;
    EXPECT_NE(e.find("unknown option"), std::string::npos) << e;
}

TEST(Options, InvalidValueNamesOption) {
    std::string e = error_of({"--out", "o", "--steps", "many"});
    EXPECT_NE(e.find("steps"), std::string::npos) << e;
    EXPECT_NE(e.find("many"), std::string::npos) << e;
}

TEST(Options, OutOfRangeNamesOptionAndBounds) {
    std::string e = error_of({"--out", "o", "--steps", "0"});
    EXPECT_NE(e.find("--steps 0"), std::string::npos) << e;
    EXPECT_NE(e.find("between"), std::string::npos) << e;
    EXPECT_NE(error_of({"--out", "o", "--top-p", "1.5"}).find("--top-p"), std::string::npos);
    EXPECT_NE(error_of({"--out", "o", "--temperature", "0"}).find("--temperature"), std::string::npos);
    EXPECT_NE(error_of({"--out", "o", "--heads", "3"}).find("--heads 3"), std::string::npos);
    EXPECT_NE(error_of({"--out", "o", "--group-size", "1"}).find("--group-size"), std::string::npos);
}

TEST(Options, MissingOutIsAnError) { EXPECT_NE(error_of({}).find("--out"), std::string::npos); }

TEST(Options, MissingConfigFile) {
    std::string e = error_of({"--out", "o", "--config", "/nonexistent/run.ini"});
    EXPECT_NE(e.find("/nonexistent/run.ini"), std::string::npos) << e;
    EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
}

TEST(Options, UnknownKeyInConfigFile) {
    std::string cfg = write_config("stepz = 3\n");
    std::string e = error_of({"--out", "o", "--config", cfg});
    EXPECT_NE(e.find("stepz"), std::string::npos) << e;
    EXPECT_NE(e.find(cfg), std::string::npos) << e;
    std::remove(cfg.c_str());
}

TEST(Options, BadValueInEnvironmentNamesVariable) {
    std::string e = error_of({"--out", "o"}, Env{{"TAGFLOW_STEPS", "lots"}});
    EXPECT_NE(e.find("TAGFLOW_STEPS"), std::string::npos) << e;
    EXPECT_NE(e.find("lots"), std::string::npos) << e;
}

// A bad value is an error even where a higher-precedence source overrides the option (issue 24).
TEST(Options, OverriddenBadValuesAreStillErrors) {
    std::string e = error_of({"--out", "o", "--steps", "5"}, Env{{"TAGFLOW_STEPS", "abc"}});
    EXPECT_NE(e.find("TAGFLOW_STEPS"), std::string::npos) << e;
    EXPECT_NE(e.find("abc"), std::string::npos) << e;
    std::string cfg = write_config("steps = " + std::string(100000, '9') + "\n");
    e = error_of({"--out", "o", "--steps", "5", "--config", cfg});
    EXPECT_NE(e.find(cfg), std::string::npos) << e;
    EXPECT_NE(e.find("steps"), std::string::npos) << e;
    EXPECT_LT(e.size(), 400u) << "the 100,000-digit value is not echoed";
    e = error_of({"--out", "o", "--config", cfg}, Env{{"TAGFLOW_STEPS", "5"}});
    EXPECT_NE(e.find(cfg), std::string::npos) << e;
    std::remove(cfg.c_str());
    e = error_of({"--out", "o", "--steps", "5"}, Env{{"TAGFLOW_STEPS", std::string(100000, '9')}});
    EXPECT_NE(e.find("TAGFLOW_STEPS"), std::string::npos) << e;
    EXPECT_LT(e.size(), 400u) << e.substr(0, 200);
    EXPECT_EQ(parse({"--out", "o", "--steps", "5"}, Env{{"TAGFLOW_STEPS", "7"}}).options.steps, 5);
}

TEST(Options, UnknownTagflowVariableIsAnError) {
    std::string e = error_of({"--out", "o"}, Env{{"TAGFLOW_STPES", "3"}});
    EXPECT_NE(e.find("TAGFLOW_STPES"), std::string::npos) << e;
}

TEST(Options, PluginVariablesAreAccepted) {
    auto r = parse({"--out", "o"}, Env{{"TAGFLOW_TAGS", "rollout"}, {"TAGFLOW_TAG_SOURCE", "map"}});
    EXPECT_EQ(r.options.tags, "rollout");
    EXPECT_EQ(r.options.tags_origin, "env");
    EXPECT_EQ(r.options.tag_source, "map");
    auto r2 = parse({"--out", "o", "--tags", "train"}, Env{{"TAGFLOW_TAGS", "rollout"}});
    EXPECT_EQ(r2.options.tags, "train");
    EXPECT_EQ(r2.options.tags_origin, "option");
}

TEST(Options, ModeValidation) {
    EXPECT_NE(error_of({"--out", "o", "--mode", "fast"}).find("--mode fast"), std::string::npos);
    EXPECT_EQ(parse({"--out", "o", "--mode", "multiplex"}, Env{}).options.mode, "multiplex");
    EXPECT_EQ(parse({"--out", "o", "--mode", "disaggregated"}, Env{}).options.mode, "disaggregated");
    EXPECT_NE(error_of({"--out", "o", "--stale", "keep"}).find("--stale"), std::string::npos);
    EXPECT_NE(error_of({"--out", "o", "--min-rollout-frac", "1.5"}).find("--min-rollout-frac"), std::string::npos);
    EXPECT_NE(error_of({"--out", "o", "--staleness", "-1"}).find("--staleness"), std::string::npos);
}

TEST(Options, StrayPositionalArgument) {
    EXPECT_NE(error_of({"--out", "o", "extra"}).find("extra"), std::string::npos);
}

TEST(Options, JsonHasEveryResolvedOption) {
    auto r = parse({"--out", "o\"q", "--steps", "12"});
    std::string j = tagflow::config::to_json(r);
    EXPECT_EQ(j.front(), '{');
    EXPECT_EQ(j.back(), '}');
    EXPECT_NE(j.find("\"steps\": 12"), std::string::npos) << j;
    EXPECT_NE(j.find("\"out\": \"o\\\"q\""), std::string::npos) << j;
    EXPECT_NE(j.find("\"lr\": "), std::string::npos) << j;
}

TEST(Options, EnvNames) { EXPECT_EQ(tagflow::config::env_name("prompts-per-step"), "TAGFLOW_PROMPTS_PER_STEP"); }

TEST(Options, ShippedExampleConfigParses) {
    const std::string cfg = std::string(TAGFLOW_SOURCE_DIR) + "/share/examples/reverse.ini";
    auto r = parse({"--out", "o", "--config", cfg});
    EXPECT_EQ(r.options.task, "reverse");
    EXPECT_EQ(r.options.group_size, 8);
}

TEST(Options, AlgorithmChoicesAreChecked) {
    EXPECT_EQ(
        parse({"--out", "d", "--algo", "ppo", "--kl-in", "reward", "--loss-agg", "seq-mean-token-sum"}).options.algo,
        "ppo");
    EXPECT_NE(error_of({"--out", "d", "--algo", "dpo"}).find("--algo 'dpo': unknown value (choose grpo, ppo, rloo"),
              std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--kl-in", "both"}).find("--kl-in 'both'"), std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--kl-estimator", "k9"}).find("--kl-estimator 'k9'"), std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--loss-agg", "mean"}).find("--loss-agg 'mean'"), std::string::npos);
}

TEST(Options, ObjectiveOptions) {
    // veRL's names and defaults (issue 21).
    const tagflow::config::Options d = parse({"--out", "d"}).options;
    EXPECT_EQ(d.clip_ratio_c, 3.0);
    EXPECT_TRUE(d.norm_adv_by_std_in_grpo);
    EXPECT_EQ(d.grpo_std, "unbiased");
    EXPECT_EQ(d.kl_ctrl, "fixed");
    const tagflow::config::Options o = parse({"--out",
                                              "d",
                                              "--algo",
                                              "reinforce_pp_baseline",
                                              "--clip-ratio-low",
                                              "0.2",
                                              "--clip-ratio-high",
                                              "0.28",
                                              "--clip-ratio-c",
                                              "0",
                                              "--norm-adv-by-std-in-grpo",
                                              "false",
                                              "--loss-agg",
                                              "seq-mean-token-sum-norm",
                                              "--max-new-tokens",
                                              "16",
                                              "--grpo-std",
                                              "population",
                                              "--kl-coef",
                                              "0.01",
                                              "--kl-in",
                                              "reward",
                                              "--kl-ctrl",
                                              "adaptive",
                                              "--kl-penalty",
                                              "kl",
                                              "--kl-loss-type",
                                              "mse"})
                                           .options;
    EXPECT_EQ(o.clip_ratio_high, 0.28);
    EXPECT_FALSE(o.norm_adv_by_std_in_grpo);
    EXPECT_EQ(o.kl_penalty, "kl");
    EXPECT_NE(error_of({"--out", "d", "--clip-ratio-c", "0.5"}).find("--clip-ratio-c"), std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--grpo-std", "biased"}).find("--grpo-std 'biased'"), std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--kl-penalty", "k9"}).find("--kl-penalty 'k9'"), std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--kl-ctrl", "adaptive"}).find("--kl-ctrl adaptive: adapts the reward penalty"),
              std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--loss-agg", "seq-mean-token-sum-norm"})
                  .find("--loss-agg seq-mean-token-sum-norm: needs a constant token count"),
              std::string::npos);
}

TEST(Options, LearningRateSchedule) {
    const auto o =
        parse({"--out", "d", "--lr-warmup-steps", "20", "--lr-schedule", "cosine", "--min-lr-ratio", "0.1"}).options;
    EXPECT_EQ(o.lr_warmup_steps, 20);
    EXPECT_EQ(o.lr_schedule, "cosine");
    EXPECT_DOUBLE_EQ(o.min_lr_ratio, 0.1);
    const auto d = parse({"--out", "d"}).options;  // veRL's defaults: no warm-up, constant
    EXPECT_EQ(d.lr_warmup_steps, 0);
    EXPECT_EQ(d.lr_schedule, "constant");
    EXPECT_NE(error_of({"--out", "d", "--lr-schedule", "linear"}).find("--lr-schedule 'linear'"), std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--min-lr-ratio", "1.5"}).find("--min-lr-ratio 1.5: must be between 0 and 1"),
              std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--lr-warmup-steps", "-1"}).find("--lr-warmup-steps -1"), std::string::npos);
}

TEST(Options, RolloutAheadBelowOneIsRefused) {
    EXPECT_NE(error_of({"--out", "d", "--rollout-ahead", "0.5"})
                  .find("--rollout-ahead 0.5: must be 0 (no cap) or at least 1"),
              std::string::npos);
    EXPECT_DOUBLE_EQ(parse({"--out", "d", "--rollout-ahead", "0"}).options.rollout_ahead, 0.0);
    EXPECT_DOUBLE_EQ(parse({"--out", "d", "--rollout-ahead", "1.5"}).options.rollout_ahead, 1.5);
}

TEST(Options, ModelShapeIsChecked) {
    EXPECT_NE(error_of({"--out", "d", "--heads", "4", "--kv-heads", "3"}).find("--kv-heads 3: must divide --heads 4"),
              std::string::npos);
    // d_model 66 / 3 heads = 22 is even; 60 / 4 = 15 is not (RoPE pairs dimensions).
    EXPECT_EQ(error_of({"--out", "d", "--d-model", "66", "--heads", "3"}), "");
    EXPECT_NE(error_of({"--out", "d", "--d-model", "60", "--heads", "4"}).find("head size must be even"),
              std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--top-k", "-1"}).find("--top-k"), std::string::npos);
    EXPECT_NE(error_of({"--out", "d", "--gamma", "1.5"}).find("--gamma"), std::string::npos);
}
