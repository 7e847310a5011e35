// SPDX-License-Identifier: Apache-2.0
// sft_options: `tagflow sft`'s options (SftOptions), their parsing and checks (every bad value is
// one ConfigError naming the option), and the learning-rate schedule they define.
// Does NOT: touch MPI, LibTorch or the file system beyond checking that --init has a config.json.
#pragma once
#include <boost/program_options/variables_map.hpp>
#include <cstdint>
#include <string>

namespace tagflow::cmd {

struct SftOptions {
    std::string task = "addition";
    std::string out;
    std::string init;
    std::string tokenizer;              // --tokenizer: a fresh model's vocabulary; OUT/model's tokenizer files
    std::string export_dtype = "auto";  // --export-dtype: OUT/model's weights (model/hf_export.hpp)
    bool overwrite = false;
    bool allow_shared_dir = false;
    bool activation_checkpointing = false;  // recompute each decoder layer in the backward (model/layer_checkpoint.hpp)
    int32_t digits = 0;                     // 0 = the task's default
    int64_t steps = 1000;
    int64_t batch = 64;
    double lr = 3e-3;
    double weight_decay = 0.01;
    double grad_clip = 1.0;
    int32_t max_bad_steps = 3;  // consecutive steps with a dropped (non-finite) update that stop sft
    int64_t warmup = 100;
    int64_t seed = 1;
    int64_t d_model = 128;
    int64_t layers = 2;
    int64_t heads = 4;
    int64_t kv_heads = 2;
    int64_t d_ff = 256;
    int64_t eval_prompts = 256;
    int64_t eval_every = 0;
    int64_t log_every = 0;
    int32_t threads = 0;
    // ---- --data (share/doc/data.md, "Supervised fine-tuning on a data set") ----
    std::string data, val_data, chat_template, reward, reward_fn;
    int64_t epochs = 0;             // 0: one epoch, or --steps when given
    int64_t max_prompt_tokens = 0;  // 0 = no limit
    int32_t val_samples = 1;        // K of mean@K (1 = greedy only)
    double val_temperature = 1.0;
    int32_t val_max_tokens = 0;  // 0 = the longest response of the data
    int32_t reward_workers = 2;
};

/// Parses argv (argv[0] = "sft") into `o` and checks it; false after printing --help. Bad usage
/// throws ConfigError (one line naming the option).
bool parse_sft_options(int argc, char** argv, SftOptions& o, boost::program_options::variables_map& vm);

/// The learning rate of `step` (0-based): linear warm-up over --warmup steps to --lr, then a
/// cosine decay to --lr/10 at --steps.
double lr_at(const SftOptions& o, int64_t step);

}  // namespace tagflow::cmd
