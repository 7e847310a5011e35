// SPDX-License-Identifier: Apache-2.0
// checkpoint: the on-disk checkpoint directory of `tagflow train` (share/doc/checkpoints.md).
// `<out>/checkpoint/` holds manifest.txt (format version, step, scheduler state, the run-file
// table sizes, and every other file with its size and CRC-32) plus the files the ranks wrote
// (policy/ as a Hugging Face directory, engine states). A checkpoint is written into
// `<out>/checkpoint.tmp-<step>/`, every file fsynced, then swapped in with one atomic rename
// (renameat2 RENAME_EXCHANGE; the previous checkpoint stays until that rename succeeded).
// Reading validates before anything is used: a missing or corrupt checkpoint gives one-line
// ConfigErrors naming the file and the problem. No MPI, no LibTorch (see checkpoint_mpi.hpp
// for the collective parts; the schedulers decide what goes in).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tagflow::ckpt {

/// Version of the checkpoint directory layout (manifest line 1: `tagflow-checkpoint <v>`).
inline constexpr int kFormatVersion = 1;

/// One data file of a checkpoint, relative to its directory.
struct FileEntry {
    std::string name;  ///< e.g. "policy/model.safetensors"; no spaces, no "..", no leading '/'
    uint64_t bytes = 0;
    uint32_t crc32 = 0;
};

/// The manifest: flat key -> value pairs (keys without spaces, values without newlines) and
/// the file list.
struct Manifest {
    int format_version = kFormatVersion;
    std::map<std::string, std::string> values;
    std::vector<FileEntry> files;
    std::string path;  ///< where it was read from (messages); empty for a new one

    void set(const std::string& key, const std::string& value);
    void set_int(const std::string& key, int64_t v);
    void set_double(const std::string& key, double v);  ///< exact (hex float)
    bool has(const std::string& key) const;
    /// The value; throws ConfigError "checkpoint <path>: missing key 'k'" / "key 'k': not a number".
    const std::string& get(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    double get_double(const std::string& key) const;
    const FileEntry* find_file(const std::string& name) const;
};

/// What a scheduler is told about checkpoints (cmd/train_command.cpp fills it).
struct Plan {
    std::string out;      ///< run directory: the checkpoint is out/checkpoint
    int32_t every = 0;    ///< --ckpt-every (0: only on a signal and at the end)
    bool resume = false;  ///< resume from `manifest` (read and verified on every rank)
    Manifest manifest;
    std::string dir;  ///< out/checkpoint when resuming
};

/// `<out>/checkpoint`, `<out>/checkpoint.tmp-<step>`, `<out>/checkpoint.old`.
std::string checkpoint_dir(const std::string& out);
std::string staging_dir(const std::string& out, int64_t step);
std::string previous_dir(const std::string& out);

/// CRC-32 (IEEE, as zlib) of a byte range; `crc` chains calls.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
/// fsyncs the file at `path`, then returns its size and CRC-32 under `name`. Throws
/// tagflow::Error naming the file when it cannot be read.
FileEntry describe_file(const std::string& dir, const std::string& name);
/// fsync of a file or directory; throws tagflow::Error naming it.
void fsync_path(const std::string& path);
/// rm -rf (no error when absent); throws tagflow::Error naming what it could not remove.
void remove_tree(const std::string& path);
/// mkdir -p with mode 0750.
void make_dirs(const std::string& path);

/// Removes a stale staging dir (without following links) and creates `dir` afresh: the mkdir of
/// `dir` itself must create it (EEXIST is an error), so everything written into it afterwards
/// (policy, engine and trainer states, manifest) lands in a directory only this job can write to,
/// never through a link planted beforehand.
void prepare_staging(const std::string& dir);

/// Removes the staging dir `dir` when the scope is left by an exception (a full disk in the
/// middle of a checkpoint): no partial `checkpoint.tmp-*` is left behind. Every rank that
/// writes into it holds one (the failing rank cleans up before the job is aborted); a failure
/// to remove is ignored (remove_stale() catches it on the next resume).
class StagingCleanup {
public:
    explicit StagingCleanup(std::string dir);
    ~StagingCleanup();
    StagingCleanup(const StagingCleanup&) = delete;
    StagingCleanup& operator=(const StagingCleanup&) = delete;

private:
    std::string dir_;
    int exceptions_;
};
/// Writes `dir`/manifest.txt (via a temporary, fsynced, renamed) and fsyncs `dir`.
void write_manifest(const std::string& dir, const Manifest& m);
/// Reads and parses `dir`/manifest.txt. Throws ConfigError naming the file on: missing file,
/// not a tagflow checkpoint, another format version, a malformed line.
Manifest read_manifest(const std::string& dir);
/// Every file of the manifest exists in `dir` with its size and CRC-32 (ConfigError naming the
/// first bad file: missing, truncated/size differs, CRC mismatch).
void verify_files(const std::string& dir, const Manifest& m);
/// Checks the safetensors file `dir`/`name` against the tensor shapes a model needs (names and
/// shapes both ways); ConfigError naming the file and the first difference.
void verify_shapes(const std::string& dir, const std::string& name,
                   const std::map<std::string, std::vector<int64_t>>& expected);

/// Makes `staging` (fully written and fsynced, manifest last) the checkpoint of `out`: an
/// atomic exchange with the current `<out>/checkpoint` (or a plain rename when there is none),
/// fsync of `out`, then removal of the previous one. Throws tagflow::Error on failure, leaving
/// the previous checkpoint in place.
void commit(const std::string& out, const std::string& staging);
/// After a crash inside a non-atomic fallback commit: `<out>/checkpoint.old` without
/// `<out>/checkpoint` is renamed back. Returns true when `<out>/checkpoint/manifest.txt` exists.
bool recover_and_probe(const std::string& out);
/// Removes `<out>/checkpoint`, `checkpoint.old` and every `checkpoint.tmp-*` (a fresh run).
void remove_all(const std::string& out);
/// Removes what a crash may leave beside a valid `<out>/checkpoint`: every `checkpoint.tmp-*`
/// and `checkpoint.old` (call after recover_and_probe() returned true).
void remove_stale(const std::string& out);

}  // namespace tagflow::ckpt
