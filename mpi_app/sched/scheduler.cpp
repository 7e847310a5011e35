// SPDX-License-Identifier: Apache-2.0
// scheduler: see the header (what every mode shares).
#include "sched/scheduler.hpp"

#include "ckpt/checkpoint.hpp"
#include "cluster/roles.hpp"
#include "common/log.hpp"
#include "config/options.hpp"
#include "model/hf_config.hpp"
#include "tagflow/config.hpp"

namespace tagflow::sched {

void print_model_and_algorithm(const config::Options& opt, const cluster::Roles& roles, const model::HfConfig& c,
                               int64_t n_params) {
    print0(
        "model: %s, %lld parameters (hidden %lld, layers %lld, heads %lld/%lld kv, intermediate %lld, vocab "
        "%lld, positions %lld%s)\n",
        opt.model.empty() ? "llama (from the size options)" : opt.model.c_str(), static_cast<long long>(n_params),
        static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_hidden_layers),
        static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads),
        static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size),
        static_cast<long long>(c.max_position_embeddings),
        c.abs_positions ? ", RoPE + learned absolute positions" : ", RoPE");
    print0("algorithm: %s%s\n", opt.algo.c_str(),
           opt.algo == "ppo"
               ? (roles.critic_colocated ? " (critic on the train ranks)" : " (critic on the ranks tagged critic)")
               : "");
}

void put_run_keys(ckpt::Manifest& m, const config::Options& opt, const std::string& task, int world_size, int64_t step,
                  int64_t policy_version, const RunSummary& sum, double total_samples) {
    m.set("writer", std::string("tagflow ") + TAGFLOW_VERSION);
    m.set("mode", opt.mode.name());
    m.set("task", task);
    m.set("algo", opt.algo);
    m.set_int("seed", opt.seed);
    m.set_int("prompts_per_step", opt.prompts_per_step);
    m.set_int("group_size", opt.group_size);
    m.set_int("world_size", world_size);
    m.set_int("step", step);
    m.set_int("policy_version", policy_version);
    m.set("rng", "stateless: sample seed = derive_seed(seed, sample id); advantage shuffle seed*7919+step");
    m.set_double("sched.first_reward", sum.first_reward);
    m.set_double("sched.last_reward", sum.last_reward);
    m.set_double("sched.first_eval", sum.first_eval);
    m.set_double("sched.last_eval", sum.last_eval);
    m.set_double("sched.best_eval", sum.best_eval);
    m.set_double("sched.total_samples", total_samples);
}

void get_run_summary(const ckpt::Manifest& m, RunSummary& sum, double& total_samples) {
    sum.first_reward = m.get_double("sched.first_reward");
    sum.last_reward = m.get_double("sched.last_reward");
    sum.first_eval = m.get_double("sched.first_eval");
    sum.last_eval = m.get_double("sched.last_eval");
    sum.best_eval = m.get_double("sched.best_eval");
    total_samples = m.get_double("sched.total_samples");
}

bool BadSteps::record(int32_t step, int64_t skipped, std::string* warning) {
    if (skipped <= 0) {
        in_a_row_ = 0;
        return false;
    }
    ++in_a_row_;
    last_step_ = step;
    *warning = "tagflow: warning: step " + std::to_string(step) + ": " + std::to_string(skipped) +
               " update(s) skipped, the loss or gradient norm was NaN or inf (a poisoned reward?); weights "
               "unchanged (" +
               std::to_string(in_a_row_) + " such step(s) in a row, --max-bad-steps " + std::to_string(max_) + ")\n";
    return in_a_row_ >= max_;
}

std::string BadSteps::stop_message() const {
    return "step " + std::to_string(last_step_) + ": " + std::to_string(in_a_row_) +
           " steps in a row had NaN or inf losses or gradients (--max-bad-steps " + std::to_string(max_) +
           "); stopped after checkpointing the last good weights (check the rewards of those steps)";
}

}  // namespace tagflow::sched
