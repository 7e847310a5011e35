// SPDX-License-Identifier: Apache-2.0
// dataset: a JSON Lines data file (plain or gzip, text_file.hpp) as veRL's parquet rows
// (`df.to_json(path, lines=True, orient="records")`), indexed once: one pass checks every row
// (JSON, `prompt` a string or a list of {role, content} messages, `data_source` a string,
// `reward_model.ground_truth` or `ground_truth`, `extra_info` any JSON; for sft a `response` or
// `extra_info.answer` string) and keeps the byte offset of each; a row is parsed again when asked
// for. With a tokenizer the prompt is rendered and counted in the same pass, and prompts over
// `max_prompt_tokens` are skipped and counted (or refused). Errors are one ConfigError naming
// FILE:LINE and the problem. The index is a plain value (to_bytes/from_bytes) so one rank can build
// it and send it to the others. Thread-safe for reading after construction. No MPI, no LibTorch.
// Does NOT: shuffle or hand out rows (epoch.hpp), score answers (scorers.hpp).
#pragma once
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/text_file.hpp"
#include "text/tokenizer.hpp"

namespace tagflow::data {

struct DatasetOptions {
    /// When set, prompts are rendered (chat template for message lists) and counted.
    std::shared_ptr<const text::Tokenizer> tokenizer;
    /// 0: no limit. Needs `tokenizer`.
    int64_t max_prompt_tokens = 0;
    /// A prompt over the limit is an error (FILE:LINE) instead of a skipped, counted row.
    bool over_limit_is_error = false;
    /// Rows must carry a response (`response`, or `extra_info.answer`), as `tagflow sft` needs.
    bool sft = false;
    /// Uncompressed bytes between gzip access points (text_file.hpp).
    std::size_t gzip_span = std::size_t{1} << 20;
};

/// One row, parsed.
struct Row {
    uint64_t index = 0;                   ///< position among the kept rows (what epochs shuffle)
    uint64_t line = 0;                    ///< 1-based line in the file
    nlohmann::ordered_json prompt;        ///< a string, or an array of {role, content, ...} objects
    std::string data_source;              ///< "" when the row has none
    nlohmann::ordered_json ground_truth;  ///< reward_model.ground_truth, else ground_truth; null if neither
    nlohmann::ordered_json extra_info;    ///< verbatim; null if absent
    std::string response;                 ///< `response`, else extra_info.answer; "" if neither
    bool has_response = false;
};

/// Longest line accepted (a longer one is a ConfigError naming it).
constexpr std::size_t kMaxLineBytes = std::size_t{256} << 20;
/// Deepest JSON nesting accepted in a row.
constexpr int kMaxJsonDepth = 128;

/// Checks one line of `file` (1-based `line`) and returns it as a Row (index 0);
/// ConfigError "FILE:LINE: problem" when it is not a valid row.
Row parse_row(std::string_view text, const std::string& file, uint64_t line, bool sft);

/// What parse_row checks, in one SAX pass without building the row (the index pass's fast path):
/// the same ConfigError for the same line. Returns the row's data_source ("" if none).
std::string check_row(std::string_view text, const std::string& file, uint64_t line, bool sft);

namespace detail {
/// Deepest [ / { nesting outside strings (counted before parsing, cheaply).
int json_depth(const char* p, std::size_t n);
/// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string parse_message(const std::exception& e);
}  // namespace detail

/// The prompt's token ids: a string is encoded as Hugging Face's tokenizer(prompt) does (special
/// tokens added, e.g. Llama 3's BOS); messages through the chat template with the generation prompt.
std::vector<int32_t> prompt_ids(const Row& row, const text::Tokenizer& tok);

class Dataset {
public:
    /// Indexes `path` (one pass). ConfigError FILE:LINE for a bad row, FILE for an empty file,
    /// a file without rows, a cut-short or corrupt gzip file, or every row over the limit.
    static Dataset open(const std::string& path, const DatasetOptions& opts = {});

    const std::string& path() const { return file_.path(); }
    bool gzip() const { return file_.gzip(); }
    uint64_t file_bytes() const { return file_.file_bytes(); }
    uint64_t uncompressed_bytes() const { return file_.uncompressed_bytes(); }

    /// Rows kept (every non-blank line, less those skipped for their length).
    uint64_t size() const { return starts_.size(); }
    uint64_t skipped_over_limit() const { return skipped_; }
    /// 1-based line of kept row i.
    uint64_t line(uint64_t i) const;
    /// Kept row i, parsed (reads the file again).
    Row row(uint64_t i) const;
    /// Rows per data_source ("" for rows without one), over the kept rows.
    const std::map<std::string, uint64_t>& data_sources() const { return sources_; }
    /// Prompt length in tokens of each kept row (empty without a tokenizer).
    const std::vector<uint32_t>& prompt_tokens() const { return tokens_; }
    /// Memory held by the index (offsets, lines, token counts, gzip access points).
    std::size_t index_bytes() const;

    /// The index as bytes, and back: from_bytes reopens `path` and checks its size.
    std::string to_bytes() const;
    static Dataset from_bytes(const std::string& path, const std::string& bytes, bool sft = false);

private:
    TextFile file_;
    bool sft_ = false;
    std::vector<uint64_t> starts_;  // uncompressed offset of each kept row
    std::vector<uint32_t> lens_;    // and its length in bytes (without the '\n')
    std::vector<uint64_t> lines_;   // 1-based lines; empty while line == index + 1
    std::vector<uint32_t> tokens_;
    std::map<std::string, uint64_t> sources_;
    uint64_t skipped_ = 0;
};

}  // namespace tagflow::data
