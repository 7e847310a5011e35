// SPDX-License-Identifier: Apache-2.0
// sft_options: see sft_options.hpp. The option table is `tagflow sft --help`.
#include "cmd/sft_options.hpp"

#include <boost/program_options.hpp>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "common/error.hpp"
#include "common/log.hpp"
#include "config/option_checks.hpp"
#include "model/hf_export.hpp"
#include "train/lr_schedule.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace tagflow::cmd {
namespace {

using config::check_range;
using config::val;

po::options_description describe(SftOptions& o) {
    po::options_description d("tagflow sft options");
    // clang-format off
    d.add_options()
        ("help,h", "print this help and exit")
        ("task", val(&o.task), "task (needs a reference solution): addition, longtail, reverse, sort or a registered one")
        ("out", po::value<std::string>(&o.out), "output directory (required): OUT/model (HF checkpoint) and OUT/sft.json")
        ("overwrite", val(&o.overwrite)->implicit_value(true), "replace an existing OUT/model")
        ("allow-shared-dir", val(&o.allow_shared_dir)->implicit_value(true),
         "accept an --out directory owned by another user or writable by others without the sticky bit")
        ("digits", val(&o.digits), "task digits (0 = the task's default: addition 3, reverse/sort 5)")
        ("steps", val(&o.steps), "optimizer steps")
        ("batch", val(&o.batch), "sequences per step, over all ranks")
        ("lr", po::value<double>(&o.lr)->default_value(o.lr, "0.003"), "AdamW peak learning rate (linear warm-up, then cosine decay to lr/10)")
        ("warmup", val(&o.warmup), "warm-up steps")
        ("weight-decay", val(&o.weight_decay), "AdamW weight decay")
        ("grad-clip", val(&o.grad_clip), "global gradient-norm clip (0 = off)")
        ("max-bad-steps", val(&o.max_bad_steps), "stop (exit 1, OUT/model not written) after this many consecutive "
                                                 "steps whose loss or gradient norm was NaN/inf, each skipped; 0 = never")
        ("seed", val(&o.seed), "seed of the weights and of the prompt order")
        ("init", po::value<std::string>(&o.init), "start from this HF checkpoint directory instead of random weights")
        ("tokenizer", val(&o.tokenizer), "a tokenizer.json (or a directory holding one): a new model takes its vocabulary "
                                         "and bos/eos ids from it; OUT/model carries its files (default: --init's own)")
        ("export-dtype", val(&o.export_dtype), "dtype of OUT/model's weights: bf16, fp32, or auto (bf16 when --init's "
                                               "torch_dtype is bfloat16, else fp32)")
        ("d-model", val(&o.d_model), "hidden size (new model)")
        ("layers", val(&o.layers), "decoder layers (new model)")
        ("heads", val(&o.heads), "attention heads (must divide d-model)")
        ("kv-heads", val(&o.kv_heads), "key/value heads (must divide heads)")
        ("d-ff", val(&o.d_ff), "SwiGLU intermediate size (new model)")
        ("activation-checkpointing", val(&o.activation_checkpointing)->implicit_value(true),
         "keep only each decoder layer's input in the forward and recompute the layer in the backward "
         "(less memory for long sequences, about one more forward of compute)")
        ("eval-prompts", val(&o.eval_prompts), "held-out prompts per greedy evaluation")
        ("eval-every", val(&o.eval_every), "also evaluate every N steps (0 = only at the start and the end)")
        ("log-every", val(&o.log_every), "progress line every N steps (0 = about 20 lines)")
        ("threads", val(&o.threads), "torch threads per rank (0 = cores / ranks on this node)");
    // clang-format on
    po::options_description data("Data set instead of --task (share/doc/data.md)");
    // clang-format off
    data.add_options()
        ("data", po::value<std::string>(&o.data), "train on this JSON Lines file (plain or .gz; veRL rows with a "
                                                  "\"response\" or extra_info.answer); needs --tokenizer or an --init "
                                                  "directory with a tokenizer.json")
        ("val-data", po::value<std::string>(&o.val_data), "score the model on these rows at the start, every "
                                                          "--eval-every steps and at the end (greedy; mean@K with "
                                                          "--val-samples K); written to OUT/tagflow.h5 /eval")
        ("epochs", val(&o.epochs), "passes over --data, each in a seeded shuffle (0 = one, or until --steps when "
                                   "given); --steps, when given too, can end the run earlier")
        ("max-prompt-tokens", val(&o.max_prompt_tokens), "rows whose rendered prompt is longer are skipped and counted "
                                                         "(0 = no limit)")
        ("chat-template", po::value<std::string>(&o.chat_template), "a Jinja chat template file instead of the "
                                                                     "tokenizer's")
        ("reward", po::value<std::string>(&o.reward), "validation scorer builtin:NAME (exact, gsm8k, math) for every "
                                                      "row (default: by each row's data_source)")
        ("reward-fn", po::value<std::string>(&o.reward_fn), "validation scorer FILE.py[:NAME] with veRL's signature "
                                                            "compute_score(data_source, solution_str, ground_truth, "
                                                            "extra_info)")
        ("reward-workers", val(&o.reward_workers), "Python worker processes per rank (--reward-fn)")
        ("val-samples", val(&o.val_samples), "K: also sample K responses per validation row and report mean@K")
        ("val-temperature", val(&o.val_temperature), "sampling temperature of --val-samples")
        ("val-max-tokens", val(&o.val_max_tokens), "validation response budget (0 = the longest response of the data, "
                                                   "end token included)");
    // clang-format on
    d.add(data);
    return d;
}

}  // namespace

bool parse_sft_options(int argc, char** argv, SftOptions& o, po::variables_map& vm) {
    po::options_description desc = describe(o);
    try {
        po::parsed_options parsed = po::command_line_parser(argc, argv).options(desc).run();
        for (const auto& opt : parsed.options)
            if (opt.position_key >= 0 || opt.string_key.empty())
                throw ConfigError("unexpected argument '" + opt.value.at(0) + "' (options start with --)");
        po::store(parsed, vm);
        po::notify(vm);
    } catch (const po::unknown_option& e) {
        throw ConfigError("unknown option '" + e.get_option_name() + "' (see `tagflow sft --help`)");
    } catch (const po::error& e) {
        throw ConfigError(e.what());
    }
    if (vm.count("help")) {
        std::ostringstream s;
        s << "usage: tagflow sft --task NAME --out DIR [options]\n"
             "       tagflow sft --data FILE [--val-data FILE] --tokenizer PATH --out DIR [options]\n"
             "Supervised warm start on the task's reference solutions, or on a data set's responses\n"
             "(data-parallel under mpirun).\n\n"
          << desc;
        print0("%s", s.str().c_str());
        return false;
    }
    if (o.out.empty()) throw ConfigError("--out: missing (the output directory is required)");
    check_range<int64_t>("steps", o.steps, 0, 100000000);
    check_range<int64_t>("batch", o.batch, 1, 1000000);
    check_range<int64_t>("warmup", o.warmup, 0, 100000000);
    check_range<int64_t>("eval-prompts", o.eval_prompts, 1, 1000000);
    check_range<int64_t>("eval-every", o.eval_every, 0, 100000000);
    check_range<int64_t>("log-every", o.log_every, 0, 100000000);
    check_range<int32_t>("threads", o.threads, 0, 1024);
    check_range<int32_t>("digits", o.digits, 0, 64);
    check_range<double>("weight-decay", o.weight_decay, 0.0, 10.0);
    check_range<double>("grad-clip", o.grad_clip, 0.0, 1e6);
    check_range<int32_t>("max-bad-steps", o.max_bad_steps, 0, 1000000);
    if (!(o.lr > 0 && std::isfinite(o.lr)) || o.lr > 1.0)
        throw ConfigError("--lr " + std::to_string(o.lr) + ": must be in (0, 1]");
    for (const char* size_opt : {"d-model", "layers", "heads", "kv-heads", "d-ff"})
        if (!o.init.empty() && !vm[size_opt].defaulted())
            throw ConfigError(std::string("--") + size_opt + ": model sizes come from --init " + o.init +
                              "'s config.json; drop one of the two");
    check_range<int64_t>("d-model", o.d_model, 2, 65536);
    check_range<int64_t>("layers", o.layers, 1, 1024);
    check_range<int64_t>("heads", o.heads, 1, 1024);
    check_range<int64_t>("kv-heads", o.kv_heads, 1, 1024);
    check_range<int64_t>("d-ff", o.d_ff, 1, 1 << 20);
    if (o.d_model % o.heads != 0)
        throw ConfigError("--heads " + std::to_string(o.heads) + ": must divide --d-model " +
                          std::to_string(o.d_model));
    if ((o.d_model / o.heads) % 2 != 0)
        throw ConfigError("--d-model / --heads must be even (RoPE head dimension), got " +
                          std::to_string(o.d_model / o.heads));
    if (o.heads % o.kv_heads != 0)
        throw ConfigError("--kv-heads " + std::to_string(o.kv_heads) + ": must divide --heads " +
                          std::to_string(o.heads));
    if (!o.init.empty() && !fs::exists(fs::path(o.init) / "config.json"))
        throw ConfigError("--init " + o.init + ": no config.json there (expected a Hugging Face checkpoint directory)");
    (void)model::parse_export_dtype(o.export_dtype, "");  // the value; the source's dtype is read later
    if (o.data.empty()) {
        for (const char* only : {"val-data", "epochs", "max-prompt-tokens", "chat-template", "reward", "reward-fn",
                                 "val-samples", "val-temperature", "val-max-tokens"})
            if (vm.count(only) && !vm[only].defaulted())
                throw ConfigError(std::string("--") + only + ": only with --data FILE");
    } else {
        if (!vm["task"].defaulted() || !vm["digits"].defaulted())
            throw ConfigError("--data " + o.data + ": the rows are the task; drop --task/--digits");
        check_range<int64_t>("epochs", o.epochs, 0, 1000000);
        check_range<int64_t>("max-prompt-tokens", o.max_prompt_tokens, 0, 100000000);
        check_range<int32_t>("val-samples", o.val_samples, 1, 1024);
        check_range<int32_t>("val-max-tokens", o.val_max_tokens, 0, 1000000);
        check_range<int32_t>("reward-workers", o.reward_workers, 1, 256);
        if (!(o.val_temperature > 0 && o.val_temperature <= 100))
            throw ConfigError("--val-temperature " + std::to_string(o.val_temperature) + ": must be in (0, 100]");
    }
    return true;
}

double lr_at(const SftOptions& o, int64_t step) {
    train::LrSchedule s;
    s.lr = o.lr;
    s.warmup_steps = o.warmup;
    s.cosine = true;
    s.min_lr_ratio = 0.1;
    s.total_steps = o.steps;
    return train::lr_at(s, step);
}

}  // namespace tagflow::cmd
