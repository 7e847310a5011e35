// SPDX-License-Identifier: Apache-2.0
// hf_export: the Hugging Face directories tagflow writes (the checkpoint's policy/, `tagflow sft`'s
// OUT/model) as one unit: config.json and the safetensors in the chosen dtype (--export-dtype), the
// tokenizer files of the source model or of --tokenizer copied byte for byte, and a
// generation_config.json (bos/eos/pad ids, the run's sampling defaults, the source's own fields
// kept). Also the vocabulary a fresh model takes from --tokenizer. share/doc/models.md ("Exported
// directories"). Does not choose where a directory goes or make it atomic (ckpt/ does for
// checkpoints). LibTorch stays in the .cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/safetensors.hpp"

namespace torch::nn {
class Module;
}

namespace tagflow::model {

class LlamaModelImpl;
struct HfConfig;

/// Throws tagflow::Error naming `what` and the first parameter holding a NaN or inf: such weights
/// never reach a checkpoint or an export (write_hf_dir and the train engines' save() call it
/// before writing anything, so the previous checkpoint stays the last good one).
void check_finite(const torch::nn::Module& module, const std::string& what);

/// Files copied from a tokenizer's directory when present (tokenizer.json must be there).
const std::vector<std::string>& tokenizer_file_names();

/// How one Hugging Face directory is written.
struct HfExport {
    st::DType dtype = st::DType::F32;  ///< weights on disk; config.json's torch_dtype says it
    std::string tokenizer_json;        ///< copied with its siblings (tokenizer_file_names()); "" = none
    std::string source_dir;            ///< --model / --init: its generation_config.json's fields are kept
    /// The run's sampling defaults (train: --temperature, --top-p, --top-k, the response limit).
    bool sampling = false;
    double temperature = 1.0, top_p = 1.0;
    int32_t top_k = 0;
    int32_t max_new_tokens = 0;  ///< 0 = not written
    /// A model without tokenizer.json: the ids its run stopped on (the task's EOS), written as
    /// generation_config.json's eos_token_id.
    std::vector<int64_t> stop_ids;
};

/// --export-dtype VALUE: "bf16", "fp32", or "auto" / "" (the default): bf16 when
/// `source_torch_dtype` (the --model / --init config.json's; "" for a fresh model) is "bfloat16",
/// else fp32. Anything else: ConfigError naming `option`.
st::DType parse_export_dtype(const std::string& value, const std::string& source_torch_dtype,
                             const std::string& option = "--export-dtype");

/// The tokenizer.json of --tokenizer PATH (the file, or PATH/tokenizer.json for a directory).
/// ConfigError naming `option` when there is none.
std::string resolve_tokenizer_json(const std::string& path, const std::string& option = "--tokenizer");

/// The tokenizer a run's exports carry: --tokenizer when given, else the source model
/// directory's tokenizer.json when it has one, else "" (the byte-level tokenizer).
std::string export_tokenizer(const std::string& tokenizer_option, const std::string& source_dir);

/// A fresh model's vocabulary from a tokenizer (loaded and checked: ConfigError naming the file):
/// vocab_size = the tokenizer's (largest id + 1, added tokens included, not rounded), bos/eos/pad
/// from its tokenizer_config.json. `min_vocab` (the task's ids) must fit: ConfigError otherwise.
void apply_tokenizer_vocab(HfConfig& c, const std::string& tokenizer_json, int64_t min_vocab,
                           const std::string& option = "--tokenizer");

/// The shape of a fresh (randomly initialised) Llama: --d-model, --d-ff, --layers, --heads and
/// --kv-heads (<= 0: as many as --heads) of `tagflow train` and `tagflow sft`.
struct FreshShape {
    int64_t d_model = 0, d_ff = 0, layers = 0, heads = 0, kv_heads = 0;
};
/// The config of a fresh Llama of `shape` with `positions` positions and `vocab` ids; with a
/// tokenizer (`tokenizer_json` not ""), its vocabulary and special ids instead, which must hold
/// the `vocab` ids (apply_tokenizer_vocab). rms_norm_eps and rope_theta are HfConfig's defaults
/// (1e-6, 10000). Not validated: the caller may change it first.
HfConfig fresh_config(const FreshShape& shape, int64_t vocab, const std::string& tokenizer_json, int64_t positions);

/// --tokenizer with a --model / --init checkpoint: every id of the tokenizer must be an id of the
/// model (its vocab_size >= the tokenizer's). ConfigError naming `option`, the file and the sizes.
void check_tokenizer_fits(const std::string& tokenizer_json, int64_t model_vocab, const std::string& model_dir,
                          const std::string& option = "--tokenizer");

/// generation_config.json text for `m` written with `e` (see the file comment).
std::string generation_config_json(const HfConfig& c, const HfExport& e);

/// Writes `dir` (created if absent; files of the same names replaced): config.json,
/// model.safetensors in e.dtype, the tokenizer files, generation_config.json. Returns the names
/// written, relative to `dir`. Throws tagflow::Error naming a file it cannot read or write.
std::vector<std::string> write_hf_dir(const LlamaModelImpl& m, const std::string& dir, const HfExport& e);

}  // namespace tagflow::model
