// SPDX-License-Identifier: Apache-2.0
// learn_probe: single-process GRPO loop (prompts -> G samples -> rewards -> group
// advantages -> learner step -> periodic greedy eval) used to tune the defaults.
// Not a test and not the real run (no MPI, no HDF5). Flags are `--name value`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <random>
#include <string>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "rollout/generate.hpp"
#include "rollout/task.hpp"
#include "train/grpo.hpp"

using namespace tagflow;

namespace {

struct Args {
    std::map<std::string, std::string> kv;
    double num(const std::string& k, double def) const {
        auto it = kv.find(k);
        return it == kv.end() ? def : std::atof(it->second.c_str());
    }
    std::string str(const std::string& k, const std::string& def) const {
        auto it = kv.find(k);
        return it == kv.end() ? def : it->second;
    }
};

// CPU seconds of this process: less noisy than wall time on a shared machine.
double cpu_s() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double now_s() {
    using clock = std::chrono::steady_clock;
    static const auto t0 = clock::now();
    return std::chrono::duration<double>(clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string k = argv[i];
        if (k.rfind("--", 0) != 0) {
            std::fprintf(stderr, "usage: tagflow_learn_probe [--key value]...\n");
            return 2;
        }
        a.kv[k.substr(2)] = argv[i + 1];
    }
    const auto seed = static_cast<uint64_t>(a.num("seed", 1));
    const int threads = static_cast<int>(a.num("threads", 1));
    torch::set_num_threads(threads);

    rollout::TaskParams tp;
    tp.digits = static_cast<int32_t>(a.num("digits", tp.digits));
    tp.min_digits = static_cast<int32_t>(a.num("min-digits", 0));
    auto task = rollout::make_task(a.str("task", "reverse"), seed, tp);

    model::PolicyConfig pc;
    pc.vocab = task->vocab_size();
    pc.d_model = static_cast<int64_t>(a.num("d-model", pc.d_model));
    pc.n_layers = static_cast<int64_t>(a.num("layers", pc.n_layers));
    pc.n_heads = static_cast<int64_t>(a.num("heads", pc.n_heads));
    pc.d_ff = static_cast<int64_t>(a.num("d-ff", pc.d_ff));
    pc.max_seq = task->max_prompt_tokens() + task->max_response_tokens();
    model::Policy policy(pc, seed);

    train::GrpoConfig gc;
    gc.lr = a.num("lr", gc.lr);
    gc.clip_eps = a.num("clip", gc.clip_eps);
    gc.kl_coef = a.num("kl", gc.kl_coef);
    gc.weight_decay = a.num("wd", gc.weight_decay);
    gc.grad_clip = a.num("grad-clip", gc.grad_clip);
    gc.beta2 = a.num("beta2", gc.beta2);
    gc.entropy_coef = a.num("entropy", gc.entropy_coef);
    gc.micro_batch = static_cast<int64_t>(a.num("micro-batch", gc.micro_batch));
    gc.bf16 = a.num("bf16", 0) != 0;
    rollout::SamplingParams sp;
    sp.temperature = a.num("temp", 1.0);
    sp.top_p = a.num("top-p", 1.0);
    sp.max_tokens = task->max_response_tokens();
    sp.eos = task->eos_token();
    gc.temperature = sp.temperature;
    train::GrpoLearner learner(policy, gc);

    const int group = static_cast<int>(a.num("group", 8));
    const int64_t prompts_per_step = static_cast<int64_t>(a.num("prompts", 16));
    const int64_t max_steps = static_cast<int64_t>(a.num("steps", 100000));
    const double time_limit = a.num("time", 120);
    const int64_t eval_every = static_cast<int64_t>(a.num("eval-every", 10));
    const int64_t eval_n = static_cast<int64_t>(a.num("eval-n", 256));
    const double stop_at = a.num("stop-at", 2.0);
    const bool shuffle = a.num("shuffle", 0) != 0;
    const bool norm_std = a.num("std", 1) != 0;
    const int epochs = static_cast<int>(a.num("epochs", 1));
    const std::string tag = a.str("tag", "run");

    at::Generator gen = at::detail::createCPUGenerator(seed * 7919 + 1);
    std::mt19937_64 shuf_rng(seed + 99);
    const double best_const = task->best_constant_score(eval_n);
    std::printf("# %s seed=%llu params=%lld d=%lld L=%lld H=%lld ff=%lld lr=%g G=%d P=%lld "
                "digits=%d temp=%g shuffle=%d best_const=%.3f random=%.3f\n",
                tag.c_str(), static_cast<unsigned long long>(seed),
                static_cast<long long>(policy->num_parameters()), static_cast<long long>(pc.d_model),
                static_cast<long long>(pc.n_layers), static_cast<long long>(pc.n_heads),
                static_cast<long long>(pc.d_ff), gc.lr, group,
                static_cast<long long>(prompts_per_step), tp.digits, sp.temperature, shuffle ? 1 : 0,
                best_const, rollout::random_policy_score(*task, eval_n, seed));

    const double thresholds[3] = {0.5, 0.85, 0.9};
    int64_t hit_step[3] = {-1, -1, -1};
    double hit_time[3] = {-1, -1, -1};
    double hit_cpu[3] = {-1, -1, -1};
    const double cpu0 = cpu_s();
    double start_score = -1, last_score = 0, t_gen = 0, t_train = 0, t_opt = 0, t_eval = 0;
    now_s();
    int64_t step = 0;
    for (;; ++step) {
        const bool do_eval = step % eval_every == 0 || step == max_steps || now_s() > time_limit;
        train::StepStats st;
        double reward_mean = 0;
        if (do_eval) {
            const double t0 = now_s();
            last_score = rollout::evaluate(policy, *task, eval_n);
            t_eval += now_s() - t0;
            if (start_score < 0) start_score = last_score;
            for (int k = 0; k < 3; ++k)
                if (hit_step[k] < 0 && last_score >= thresholds[k]) {
                    hit_step[k] = step;
                    hit_time[k] = now_s();
                    hit_cpu[k] = cpu_s() - cpu0;
                }
        }
        if (step == max_steps || now_s() > time_limit || last_score >= stop_at) break;

        double t0 = now_s();
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t p = 0; p < prompts_per_step; ++p)
            for (int g = 0; g < group; ++g) prompts.push_back(task->train_prompt(step * prompts_per_step + p));
        auto comps = rollout::generate(policy, prompts, sp, gen);
        std::vector<float> rewards;
        for (size_t i = 0; i < comps.size(); ++i) rewards.push_back(task->reward(prompts[i], comps[i].response));
        for (float r : rewards) reward_mean += r;
        reward_mean /= static_cast<double>(rewards.size());
        auto adv = train::group_advantages(rewards, group, norm_std);
        if (shuffle) std::shuffle(adv.begin(), adv.end(), shuf_rng);
        std::vector<train::TrainSample> batch;
        double ntok = 0;
        for (size_t i = 0; i < comps.size(); ++i) {
            batch.push_back(train::make_train_sample(prompts[i], comps[i], adv[i]));
            ntok += static_cast<double>(comps[i].response.size());
        }
        double t1 = now_s();
        t_gen += t1 - t0;
        double gnorm = 0;
        for (int e = 0; e < epochs; ++e) {
            st = learner.accumulate(batch, ntok);
            const double t2 = now_s();
            gnorm = learner.step();
            t_opt += now_s() - t2;
        }
        t_train += now_s() - t1;
        if (do_eval)
            std::printf("step %5lld t %6.1fs cpu %6.1fs reward %.3f eval %.3f ent %.3f clip %.3f dlp %.4f gnorm %.3f\n",
                        static_cast<long long>(step), now_s(), cpu_s() - cpu0, reward_mean, last_score, st.entropy,
                        st.clip_frac, st.logprob_diff_mean, gnorm);
        std::fflush(stdout);
    }
    std::printf("SUMMARY %s seed=%llu start=%.3f final=%.3f best_const=%.3f steps=%lld time=%.1f cpu=%.1f "
                "gen=%.1f train=%.1f (opt %.1f) eval=%.1f", tag.c_str(), static_cast<unsigned long long>(seed),
                start_score, last_score, best_const, static_cast<long long>(step), now_s(), cpu_s() - cpu0, t_gen,
                t_train, t_opt, t_eval);
    for (int k = 0; k < 3; ++k)
        std::printf(" | %.2f@step%lld/%.1fs/cpu%.1fs", thresholds[k],
                    static_cast<long long>(hit_step[k]), hit_time[k], hit_cpu[k]);
    std::printf("\n");
    return 0;
}
