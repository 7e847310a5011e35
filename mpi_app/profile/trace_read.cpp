// SPDX-License-Identifier: Apache-2.0
// trace_read: the run-file side of `tagflow trace` (see trace_read.hpp).
#include "profile/trace_read.hpp"

#include <hdf5.h>

#include <cmath>
#include <filesystem>

#include "common/error.hpp"
#include "io/h5_dataset.hpp"
#include "io/h5_file.hpp"

namespace tagflow::profile::trace {

namespace fs = std::filesystem;

std::string first_line(const char* what) {
    std::string s(what);
    return s.substr(0, s.find('\n'));
}

extern const char* const kStepMetrics[] = {"reward_mean",
                                           "reward_std",
                                           "loss",
                                           "kl",
                                           "entropy",
                                           "clip_frac",
                                           "staleness_mean",
                                           "samples_per_s",
                                           "idle_frac",
                                           "tokens",
                                           "samples",
                                           "policy_version",
                                           "staleness_max",
                                           "logprob_diff_mean",
                                           "train_members",
                                           "predicted_s",
                                           "predicted_current_s",
                                           "resplit_s",
                                           "resplit_bytes"};
const std::size_t kStepMetricCount = sizeof kStepMetrics / sizeof kStepMetrics[0];

namespace {

// ------------------------------------------------------------------ reading the run file

/// One group of the run file whose columns must all have the length of its `key` column.
class Table {
public:
    Table(hid_t file, const std::string& path, const char* group, const char* key)
        : path_(path), name_(std::string("/") + group) {
        group_ = io::Group(H5Gopen2(file, group, H5P_DEFAULT), ("H5Gopen2 " + name_).c_str());
        rows_ = col<double>(key, /*check=*/false).size();
    }
    bool has(const char* c) const { return H5Lexists(group_.get(), c, H5P_DEFAULT) > 0; }
    size_t rows() const { return rows_; }

    template <class T>
    std::vector<T> col(const char* c, bool check = true) const {
        need(c);
        std::vector<T> v;
        try {
            io::Dataset ds = io::open_dataset(group_.get(), c);
            v = io::read_all<T>(ds.get());
        } catch (const Error& e) {
            throw Error(path_ + ": cannot read " + name_ + "/" + c + ": " + first_line(e.what()));
        }
        if (check) check_len(c, v.size());
        return v;
    }
    /// The column, or `rows()` copies of `fill` when the file has no such column.
    template <class T>
    std::vector<T> col_or(const char* c, T fill) const {
        return has(c) ? col<T>(c) : std::vector<T>(rows_, fill);
    }
    std::vector<std::string> strings_or(const char* c, const std::string& fill) const {
        if (!has(c)) return std::vector<std::string>(rows_, fill);
        std::vector<std::string> v;
        try {
            io::Dataset ds = io::open_dataset(group_.get(), c);
            v = io::read_all_strings(ds.get());
        } catch (const Error& e) {
            throw Error(path_ + ": cannot read " + name_ + "/" + c + ": " + first_line(e.what()));
        }
        check_len(c, v.size());
        return v;
    }
    /// The comma list in the `enum_names` attribute of column `c` (empty when absent).
    std::vector<std::string> enum_names(const char* c) const {
        std::vector<std::string> out;
        io::Dataset ds = io::open_dataset(group_.get(), c);
        if (!io::has_attr(ds.get(), "enum_names")) return out;
        std::string s = io::read_string_attr(ds.get(), "enum_names");
        for (size_t b = 0; b <= s.size();) {
            size_t e = s.find(',', b);
            if (e == std::string::npos) e = s.size();
            out.push_back(s.substr(b, e - b));
            b = e + 1;
        }
        return out;
    }

private:
    void need(const char* c) const {
        if (!has(c)) throw Error(path_ + ": " + name_ + " has no column '" + c + "' (not a tagflow run file?)");
    }
    void check_len(const char* c, size_t n) const {
        if (n != rows_)
            throw Error(path_ + ": " + name_ + "/" + c + " has " + std::to_string(n) + " rows, the table has " +
                        std::to_string(rows_) + " (corrupt run file)");
    }
    std::string path_, name_;
    io::Group group_;
    size_t rows_ = 0;
};

bool has_link(hid_t loc, const char* name) { return H5Lexists(loc, name, H5P_DEFAULT) > 0; }

void read_tables(hid_t fid, const std::string& path, RunData& r);

}  // namespace

RunData read_run(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw Error(path + ": no such file");
    if (fs::is_directory(path, ec))
        throw Error(path + ": is a directory, not a run file (the run file is DIR/tagflow.h5)");
    io::silence_auto_print();
    if (H5Fis_hdf5(path.c_str()) <= 0) throw Error(path + ": not an HDF5 file (corrupt or not a tagflow run file)");
    io::File f;
    try {
        f = io::open_file_serial(path);
    } catch (const Error& e) {
        throw Error(path + ": cannot open: " + first_line(e.what()));
    }
    const hid_t fid = f.get();
    RunData r;
    std::string format;
    int64_t version = 0;
    try {
        if (io::has_attr(fid, "format")) format = io::read_string_attr(fid, "format");
        if (io::has_attr(fid, "format_version")) version = io::read_int_attr(fid, "format_version");
        if (io::has_attr(fid, "tagflow_version")) r.tagflow_version = io::read_string_attr(fid, "tagflow_version");
        if (io::has_attr(fid, "slurm_job_id")) r.slurm_job_id = io::read_string_attr(fid, "slurm_job_id");
        if (io::has_attr(fid, "world_size")) r.world_size = io::read_int_attr(fid, "world_size");
        if (io::has_attr(fid, "t0_unix")) r.t0_unix = io::read_double_attr(fid, "t0_unix");
    } catch (const Error& e) {
        if (format != "tagflow") throw Error(path + ": not a tagflow run file (no root attribute format=\"tagflow\")");
        throw Error(path + ": cannot read the root attributes: " + first_line(e.what()));
    }
    if (format != "tagflow") throw Error(path + ": not a tagflow run file (no root attribute format=\"tagflow\")");
    if (version != 1)
        throw Error(path + ": format_version " + std::to_string(version) + " (this tagflow reads version 1)");
    try {
        read_tables(fid, path, r);
    } catch (const io::H5Error& e) {
        throw Error(path + ": " + first_line(e.what()) + " (corrupt run file?)");
    }
    return r;
}

namespace {

void read_tables(hid_t fid, const std::string& path, RunData& r) {
    if (!has_link(fid, "timeline")) throw Error(path + ": no /timeline in this run file (nothing to trace)");
    {
        Table t(fid, path, "timeline", "rank");
        r.rank = t.col<int32_t>("rank");
        r.kind = t.col<uint8_t>("kind");
        r.t_start = t.col<double>("t_start");
        r.t_end = t.col<double>("t_end");
        r.step = t.col_or<int32_t>("step", -1);
        r.kind_names = t.enum_names("kind");
        for (size_t i = 0; i < t.rows(); ++i) {
            if (r.rank[i] < 0)
                throw Error(path + ": /timeline row " + std::to_string(i) + " has rank " + std::to_string(r.rank[i]));
            if (!std::isfinite(r.t_start[i]) || !std::isfinite(r.t_end[i]))
                throw Error(path + ": /timeline row " + std::to_string(i) + " has a non-finite time");
            r.ranks[r.rank[i]];  // every rank with spans gets a process
        }
    }
    if (has_link(fid, "ranks")) {
        Table t(fid, path, "ranks", "rank");
        auto rank = t.col<int32_t>("rank");
        auto host = t.strings_or("host", "?"), tags = t.strings_or("tags", "?"),
             source = t.strings_or("tag_source", "?");
        auto gpus = t.col_or<int32_t>("gpus", 0);
        auto offset = t.col_or<double>("clock_offset", 0.0);
        for (size_t i = 0; i < t.rows(); ++i) {
            if (rank[i] < 0) continue;
            RankInfo& ri = r.ranks[rank[i]];
            ri.host = host[i];
            ri.tags = tags[i];
            ri.tag_source = source[i];
            ri.gpus = gpus[i];
            ri.clock_offset = std::isfinite(offset[i]) ? offset[i] : 0.0;
        }
    }
    if (has_link(fid, "steps")) {
        Table t(fid, path, "steps", "step");
        r.step_no = t.col<int32_t>("step");
        r.step_start = t.col<double>("t_start");
        r.step_end = t.col<double>("t_end");
        for (const char* m : kStepMetrics)
            if (t.has(m)) r.metrics.emplace_back(m, t.col<double>(m));
        r.step_group = t.strings_or("train_group", "");
        const std::vector<std::string> names = t.has("regroup") ? t.enum_names("regroup") : std::vector<std::string>{};
        for (uint8_t k : t.col_or<uint8_t>("regroup", 0))
            r.step_regroup.push_back(k < names.size() ? names[k] : std::to_string(k));
    }
    if (has_link(fid, "syncs")) {
        Table t(fid, path, "syncs", "version");
        r.sync_version = t.col<int32_t>("version");
        r.sync_bytes = t.col_or<int64_t>("bytes", 0);
        r.sync_start = t.col<double>("t_start");
        r.sync_end = t.col<double>("t_end");
        r.sync_mode = t.strings_or("mode", "");
    }
}

}  // namespace

}  // namespace tagflow::profile::trace
