// SPDX-License-Identifier: Apache-2.0
// run_file: RunFile life cycle: create (root attributes, groups, empty datasets), open_append
// (schema check, current sizes), flush, truncate, close. The appends are in run_file_append.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "common/log.hpp"
#include "common/safe_file.hpp"
#include "io/run_file_impl.hpp"

namespace tagflow::io {

const char* to_string(FinishReason r) { return finish_reason_name(r); }

const char* to_string(SpanKind k) {
    switch (k) {
        case SpanKind::kRollout: return "rollout";
        case SpanKind::kTrain: return "train";
        case SpanKind::kWeightSync: return "weight_sync";
        case SpanKind::kResplit: return "resplit";
        case SpanKind::kIdle: return "idle";
        case SpanKind::kIo: return "io";
        case SpanKind::kCheckpoint: return "checkpoint";
    }
    return "unknown";
}

const char* to_string(Regroup g) {
    switch (g) {
        case Regroup::kNone: return "none";
        case Regroup::kKept: return "kept";
        case Regroup::kMoved: return "moved";
        case Regroup::kForced: return "forced";
    }
    return "unknown";
}

namespace {

Datatype column_type(const schema::Column& c) {
    using C = schema::ColType;
    hid_t native = H5I_INVALID_HID;
    switch (c.type) {
        case C::kStr: return fixed_string_type(c.str_len);
        case C::kU8: native = H5T_NATIVE_UINT8; break;
        case C::kI32: native = H5T_NATIVE_INT32; break;
        case C::kI64: native = H5T_NATIVE_INT64; break;
        case C::kF32: native = H5T_NATIVE_FLOAT; break;
        case C::kF64: native = H5T_NATIVE_DOUBLE; break;
    }
    return Datatype(H5Tcopy(native), "H5Tcopy");
}

void bcast_string(MPI_Comm comm, std::string& s) {
    int64_t n = static_cast<int64_t>(s.size());
    TAGFLOW_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm));
    s.resize(static_cast<size_t>(n));
    if (n > 0) TAGFLOW_MPI_CHECK(MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, comm));
}

std::unique_ptr<RunFile::Impl> new_impl(MPI_Comm io_comm, const std::string& path) {
    auto impl = std::make_unique<RunFile::Impl>();
    MPI_Comm dup = MPI_COMM_NULL;
    TAGFLOW_MPI_CHECK(MPI_Comm_dup(io_comm, &dup));
    impl->comm = Comm::adopt(dup);
    impl->rank = impl->comm.rank();
    impl->nranks = impl->comm.size();
    impl->path = path;
    bcast_string(dup, impl->path);
    return impl;
}

// Reads token_offsets[i] (every rank reads the same element, collectively).
int64_t read_offset(RunFile::Impl& im, hsize_t i) {
    int64_t v = 0;
    read_slab(im.token_offsets.get(), im.dxpl.get(), H5T_NATIVE_INT64, i, 1, &v);
    return v;
}

// Reads /tree/token_end[i] (collectively, like read_offset); 0 for i < 0 (no rows).
int64_t read_tree_end(RunFile::Impl& im, int64_t i) {
    if (i < 0) return 0;
    int64_t v = 0;
    const size_t c = schema::column_index(schema::kTree, "token_end");
    read_slab(im.tables[schema::kTree].cols[c].get(), im.dxpl.get(), H5T_NATIVE_INT64, static_cast<hsize_t>(i), 1, &v);
    return v;
}

// The end of the text of /samples row i in /samples/text (collectively, like read_offset): its
// text_end, 0 for i < 0 (no rows) or a row written before the text columns existed (-1).
int64_t read_text_end(RunFile::Impl& im, int64_t i) {
    if (i < 0) return 0;
    int64_t v = 0;
    const size_t c = schema::column_index(schema::kSamples, "text_end");
    read_slab(im.tables[schema::kSamples].cols[c].get(), im.dxpl.get(), H5T_NATIVE_INT64, static_cast<hsize_t>(i), 1,
              &v);
    return std::max<int64_t>(v, 0);
}

// The end of the reward extras of /samples row i in /samples/reward_extras (collectively): its
// extras_end; 0 for i < 0 or a row written before the extras columns existed (-1).
int64_t read_extras_end(RunFile::Impl& im, int64_t i) {
    if (i < 0) return 0;
    int64_t v = 0;
    const size_t c = schema::column_index(schema::kSamples, "extras_end");
    read_slab(im.tables[schema::kSamples].cols[c].get(), im.dxpl.get(), H5T_NATIVE_INT64, static_cast<hsize_t>(i), 1,
              &v);
    return std::max<int64_t>(v, 0);
}

}  // namespace

// ---- Impl ----

std::string RunFile::Impl::open_objects(bool create) {
    for (const char* g : schema::groups()) {
        if (create) {
            groups.emplace_back(H5Gcreate2(file.get(), g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), g);
        } else {
            if (TAGFLOW_H5_CHECK(H5Lexists(file.get(), g, H5P_DEFAULT)) <= 0) return std::string("missing group ") + g;
            groups.emplace_back(H5Gopen2(file.get(), g, H5P_DEFAULT), g);
        }
    }
    auto group_of = [&](const char* name) {
        for (size_t i = 0; i < schema::groups().size(); ++i)
            if (std::string(schema::groups()[i]) == name) return groups[i].get();
        throw InternalError(std::string("RunFile: no group ") + name);
    };
    for (const schema::Table& ts : schema::tables()) {
        Table& t = tables[ts.id];
        hid_t g = group_of(ts.group);
        hsize_t rows = 0;
        std::vector<size_t> added;  // columns added_later that this (older) file lacks
        for (size_t i = 0; i < ts.columns.size(); ++i) {
            const schema::Column& c = ts.columns[i];
            t.types.push_back(column_type(c));
            if (create) {
                t.cols.push_back(create_column(g, c.name, t.types.back().get(), ts.chunk));
                if (c.units) write_attr(t.cols.back().get(), "units", c.units);
                if (!c.enum_names.empty()) write_attr(t.cols.back().get(), "enum_names", c.enum_names);
                continue;
            }
            if (TAGFLOW_H5_CHECK(H5Lexists(g, c.name, H5P_DEFAULT)) <= 0) {
                if (!c.added_later) return std::string("missing dataset ") + ts.group + "/" + c.name;
                t.cols.emplace_back();  // created below, once the table's length is known
                added.push_back(i);
                continue;
            }
            t.cols.push_back(open_dataset(g, c.name));
            Datatype ft(H5Dget_type(t.cols.back().get()), "H5Dget_type");
            if (TAGFLOW_H5_CHECK(H5Tequal(ft.get(), t.types.back().get())) <= 0)
                return std::string("dataset ") + ts.group + "/" + c.name + " has the wrong type";
            hsize_t n = extent_of(t.cols.back().get());
            if (i > 0 && n != rows && rank == 0)
                log_warn(
                    "run file %s: columns of %s have different lengths (cut by a crash?); "
                    "appending after the shortest",
                    path.c_str(), ts.group);
            rows = i == 0 ? n : std::min(rows, n);
        }
        t.rows = rows;
        for (size_t i : added) {
            const schema::Column& c = ts.columns[i];
            if (c.type != schema::ColType::kI32 && c.type != schema::ColType::kI64 && c.type != schema::ColType::kU8 &&
                c.type != schema::ColType::kF64 && c.type != schema::ColType::kStr)
                throw InternalError(std::string("run file schema: added_later column ") + c.name +
                                    " is not an integer, float64 or string column");
            const int64_t minus1_64 = -1;
            const int32_t minus1_32 = -1;
            const uint8_t zero_u8 = 0;
            const double minus1_f64 = -1.0;
            const std::string empty_str(c.str_len, '\0');
            const void* fill = c.type == schema::ColType::kI64   ? static_cast<const void*>(&minus1_64)
                               : c.type == schema::ColType::kI32 ? static_cast<const void*>(&minus1_32)
                               : c.type == schema::ColType::kF64 ? static_cast<const void*>(&minus1_f64)
                               : c.type == schema::ColType::kStr ? static_cast<const void*>(empty_str.data())
                                                                 : static_cast<const void*>(&zero_u8);
            t.cols[i] = create_column(g, c.name, t.types[i].get(), ts.chunk, rows, fill);
            if (c.units) write_attr(t.cols[i].get(), "units", c.units);
            if (!c.enum_names.empty()) write_attr(t.cols[i].get(), "enum_names", c.enum_names);
            const char* before = c.type == schema::ColType::kStr ? "\"\"" : c.type == schema::ColType::kU8 ? "0" : "-1";
            if (rank == 0 && rows > 0)
                log_info("run file %s: added %s/%s (%s in the %llu rows written before)", path.c_str(), ts.group,
                         c.name, before, static_cast<unsigned long long>(rows));
            else if (rank == 0) log_info("run file %s: added %s/%s", path.c_str(), ts.group, c.name);
        }
    }
    hid_t samples = group_of("/samples");
    if (create) {
        Datatype i64 = column_type({schema::kTokenOffsets, schema::ColType::kI64});
        token_offsets = create_column(samples, schema::kTokenOffsets, i64.get(), schema::kRowChunk);
    } else {
        if (TAGFLOW_H5_CHECK(H5Lexists(samples, schema::kTokenOffsets, H5P_DEFAULT)) <= 0)
            return "missing dataset /samples/token_offsets";
        token_offsets = open_dataset(samples, schema::kTokenOffsets);
    }
    return "";
}

void RunFile::Impl::close_objects() noexcept {
    token_offsets.reset();
    for (Table& t : tables) {
        t.cols.clear();
        t.types.clear();
    }
    groups.clear();
}

void RunFile::Impl::leak() noexcept {
    token_offsets.release();
    for (Table& t : tables)
        for (Dataset& d : t.cols) d.release();
    for (Group& g : groups) g.release();
    file.release();
    close_objects();  // now only closes the (local) datatypes
}

// ---- create / open ----

RunFile RunFile::create(MPI_Comm io_comm, const std::string& path, const RunAttributes& attrs) {
    std::unique_ptr<Impl> im = new_impl(io_comm, path);
    try {
        MPI_Comm c = im->comm.get();
        im->attrs = attrs;
        bcast_string(c, im->attrs.config_json);
        bcast_string(c, im->attrs.tagflow_version);
        bcast_string(c, im->attrs.slurm_job_id);
        TAGFLOW_MPI_CHECK(MPI_Bcast(&im->attrs.world_size, 1, MPI_INT32_T, 0, c));
        TAGFLOW_MPI_CHECK(MPI_Bcast(&im->attrs.t0_unix, 1, MPI_DOUBLE, 0, c));

        im->file = create_file(c, im->path);
        hid_t f = im->file.get();
        write_attr(f, "format", "tagflow");
        write_attr(f, "format_version", kFormatVersion);
        write_attr(f, "config", im->attrs.config_json);
        write_attr(f, "tagflow_version", im->attrs.tagflow_version);
        write_attr(f, "world_size", im->attrs.world_size);
        write_attr(f, "t0_unix", im->attrs.t0_unix);
        if (!im->attrs.slurm_job_id.empty()) write_attr(f, "slurm_job_id", im->attrs.slurm_job_id);
        im->dxpl = mpio_dxpl(true);
        im->open_objects(true);
        // token_offsets holds n+1 entries: it starts as a single 0, written by rank 0.
        const int64_t zero = 0;
        im->record(
            write_slab(im->token_offsets.get(), im->dxpl.get(), H5T_NATIVE_INT64, 1, 0, im->rank == 0 ? 1 : 0, &zero));
    } catch (...) {
        im->leak();
        throw;
    }
    return RunFile(std::move(im));
}

namespace {

// HDF5 refuses a file whose superblock records more bytes than the file has ("truncated file:
// eof = A, sblock->base_addr = 0, stored_eof = B"): what a kill leaves when it lands inside a
// flush after the superblock was written but before the file was extended to it. Returns B
// when `stack` says so with A < B, else -1.
long long stored_eof_past_the_end(const std::string& stack) {
    const size_t at = stack.find("truncated file: eof = ");
    if (at == std::string::npos) return -1;
    long long eof = -1, base = -1, stored = -1;
    if (std::sscanf(stack.c_str() + at, "truncated file: eof = %lld, sblock->base_addr = %lld, stored_eof = %lld", &eof,
                    &base, &stored) != 3)
        return -1;
    return base == 0 && eof >= 0 && stored > eof ? stored : -1;
}

}  // namespace

void RunFile::Impl::rethrow_naming_file(const char* what, const H5Error& e) const {
    const auto slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    std::string cause;
    if (e.sys_errno != 0) {
        cause = std::strerror(e.sys_errno);
    } else {
        // Below MPI-IO the write's errno is often lost; a file system with no block left is the cause.
        struct statvfs fs {};
        if (::statvfs(dir.c_str(), &fs) == 0 && fs.f_bavail == 0) cause = std::strerror(ENOSPC);
    }
    std::string log = dir + "/hdf5-errors.log";
    const std::string text = "rank " + std::to_string(rank) + ", " + what + ": " + e.what() + "\n" + e.stack + "\n";
    try {
        append_file_nofollow(log, text);
    } catch (const Error&) {
        log.clear();  // a full disk, or a link planted there: the message says the stack was not saved
    }
    std::string msg = "run file " + path + ": " + what + " failed: " + (cause.empty() ? e.what() : cause);
    msg += log.empty() ? " (HDF5 error stack not saved)" : " (HDF5 error stack in " + log + ")";
    throw H5Error(msg, e.maj, e.min, e.stack, e.sys_errno != 0 ? e.sys_errno : cause.empty() ? 0 : ENOSPC);
}

RunFile RunFile::open_append(MPI_Comm io_comm, const std::string& path) {
    try {
        return open_append_once(io_comm, path);
    } catch (const H5Error& e) {
        // Every rank opened the same file and got the same stack: they agree on the repair.
        const long long want = stored_eof_past_the_end(e.stack + e.what());
        if (want < 0) throw;
        int rank = 0;
        TAGFLOW_MPI_CHECK(MPI_Comm_rank(io_comm, &rank));
        int rc = 0;
        struct stat st {};
        if (rank == 0)
            rc = ::stat(path.c_str(), &st) == 0 && ::truncate(path.c_str(), static_cast<off_t>(want)) == 0 ? 0 : errno;
        TAGFLOW_MPI_CHECK(MPI_Bcast(&rc, 1, MPI_INT, 0, io_comm));
        if (rc != 0)
            throw Error("RunFile::open_append: " + path +
                        ": shorter than its superblock says (a kill during a flush) "
                        "and extending it failed: " +
                        std::strerror(rc));
        if (rank == 0)
            log_warn(
                "run file %s: %lld bytes, its superblock records %lld (a kill during a flush): extended "
                "to that; the rows after the checkpoint are cut back on resume",
                path.c_str(), static_cast<long long>(st.st_size), want);
        return open_append_once(io_comm, path);
    }
}

RunFile RunFile::open_append_once(MPI_Comm io_comm, const std::string& path) {
    std::unique_ptr<Impl> im = new_impl(io_comm, path);
    std::string why;  // a schema problem: found identically on every rank
    try {
        im->file = open_file(im->comm.get(), im->path, /*writable=*/true);
        hid_t f = im->file.get();
        if (!has_attr(f, "format") || read_string_attr(f, "format") != "tagflow") {
            why = "not a tagflow run file (root attribute format is not \"tagflow\")";
        } else if (!has_attr(f, "format_version") || read_int_attr(f, "format_version") != kFormatVersion) {
            why = "format_version is not " + std::to_string(kFormatVersion);
        } else {
            RunAttributes& a = im->attrs;
            a.config_json = has_attr(f, "config") ? read_string_attr(f, "config") : "";
            a.tagflow_version = has_attr(f, "tagflow_version") ? read_string_attr(f, "tagflow_version") : "";
            a.world_size = has_attr(f, "world_size") ? static_cast<int32_t>(read_int_attr(f, "world_size")) : 0;
            a.t0_unix = has_attr(f, "t0_unix") ? read_double_attr(f, "t0_unix") : 0.0;
            a.slurm_job_id = has_attr(f, "slurm_job_id") ? read_string_attr(f, "slurm_job_id") : "";
            im->dxpl = mpio_dxpl(true);
            why = im->open_objects(false);
        }
        if (why.empty()) {
            // token_offsets (n+1 entries) and the flat arrays must agree with /samples.
            Impl::Table& s = im->tables[schema::kSamples];
            Impl::Table& t = im->tables[schema::kTokens];
            hsize_t n_off = extent_of(im->token_offsets.get());
            if (n_off == 0) {
                why = "/samples/token_offsets is empty (it always starts with 0)";
            } else {
                s.rows = std::min(s.rows, n_off - 1);
                int64_t tok = read_offset(*im, s.rows);
                if (tok < 0 || static_cast<hsize_t>(tok) > t.rows)
                    why = "token_offsets points past the token arrays; truncate() to a checkpoint";
                else t.rows = static_cast<hsize_t>(tok);
            }
        }
        if (why.empty()) {  // the same for /tree: its token arrays end at token_end[rows - 1]
            Impl::Table& r = im->tables[schema::kTree];
            Impl::Table& t = im->tables[schema::kTreeTokens];
            int64_t tok = read_tree_end(*im, static_cast<int64_t>(r.rows) - 1);
            if (tok < 0 || static_cast<hsize_t>(tok) > t.rows)
                why = "/tree/token_end points past the /tree token arrays; truncate() to a checkpoint";
            else t.rows = static_cast<hsize_t>(tok);
        }
        if (why.empty()) {  // and for /samples/text: it ends at text_end of the last row
            Impl::Table& x = im->tables[schema::kText];
            int64_t end = read_text_end(*im, static_cast<int64_t>(im->tables[schema::kSamples].rows) - 1);
            if (static_cast<hsize_t>(end) > x.rows)
                why = "/samples/text_end points past /samples/text; truncate() to a checkpoint";
            else x.rows = static_cast<hsize_t>(end);
        }
        if (why.empty()) {  // and /samples/reward_extras at extras_end of the last row
            Impl::Table& x = im->tables[schema::kExtras];
            int64_t end = read_extras_end(*im, static_cast<int64_t>(im->tables[schema::kSamples].rows) - 1);
            if (static_cast<hsize_t>(end) > x.rows)
                why = "/samples/extras_end points past /samples/reward_extras; truncate() to a checkpoint";
            else x.rows = static_cast<hsize_t>(end);
        }
        if (why.empty()) {
            // Columns of one table can differ in length after a crash between flushes: cut
            // the longer ones now (and flush: see truncate()) so later appends line up.
            bool cut = false;
            auto cut_to = [&](hid_t ds, hsize_t n) {
                if (extent_of(ds) == n) return;
                TAGFLOW_H5_CHECK(H5Dset_extent(ds, &n));
                cut = true;
            };
            for (Impl::Table& t : im->tables)
                for (Dataset& d : t.cols) cut_to(d.get(), t.rows);
            cut_to(im->token_offsets.get(), im->tables[schema::kSamples].rows + 1);
            if (cut) flush_file(im->file.get());
        }
        if (!why.empty()) {
            im->close_objects();
            im->file.close();
        }
    } catch (...) {
        im->leak();
        throw;
    }
    if (!why.empty()) throw Error("RunFile::open_append: " + path + ": " + why);
    return RunFile(std::move(im));
}

// ---- life cycle ----

RunFile::RunFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunFile::RunFile(RunFile&&) noexcept = default;

RunFile& RunFile::operator=(RunFile&& o) noexcept {
    if (this != &o) {
        close_or_leak();
        impl_ = std::move(o.impl_);
    }
    return *this;
}

RunFile::~RunFile() { close_or_leak(); }

void RunFile::close_or_leak() noexcept {
    if (!impl_ || !impl_->file) return;
    if (impl_->broken || std::uncaught_exceptions() > 0) {
        log_warn(
            "run file %s left open (exception in flight or earlier I/O error); it holds "
            "what the last flush() wrote",
            impl_->path.c_str());
        impl_->leak();
        return;
    }
    try {
        close();
    } catch (const std::exception& e) {
        log_warn("closing run file %s failed: %s", impl_->path.c_str(), e.what());
        impl_->leak();
    }
}

void RunFile::close() {
    if (!impl_ || !impl_->file) return;
    impl_->collective("close", [&] {
        impl_->close_objects();
        impl_->file.close();
    });
}

bool RunFile::is_open() const { return impl_ && impl_->file; }

void RunFile::flush() {
    impl_->collective("flush", [&] { flush_file(impl_->file.get()); });
}

const std::string& RunFile::path() const { return impl_->path; }
const RunAttributes& RunFile::attributes() const { return impl_->attrs; }
const IoStats& RunFile::io_stats() const { return impl_->stats; }

TableSizes RunFile::sizes() const {
    const auto& t = impl_->tables;
    auto n = [&](schema::TableId id) { return static_cast<int64_t>(t[id].rows); };
    TableSizes s;
    s.samples = n(schema::kSamples);
    s.tokens = n(schema::kTokens);
    s.consumed = n(schema::kConsumed);
    s.steps = n(schema::kSteps);
    s.eval = n(schema::kEval);
    s.syncs = n(schema::kSyncs);
    s.timeline = n(schema::kTimeline);
    s.ranks = n(schema::kRanks);
    s.resumes = n(schema::kResumes);
    s.tree = n(schema::kTree);
    s.tree_tokens = n(schema::kTreeTokens);
    s.text = n(schema::kText);
    return s;
}

int64_t RunFile::truncate(const TableSizes& to) {
    const TableSizes cur = sizes();
    const std::pair<int64_t, int64_t> rows[] = {
        {to.samples, cur.samples}, {to.consumed, cur.consumed}, {to.steps, cur.steps}, {to.eval, cur.eval},
        {to.syncs, cur.syncs},     {to.timeline, cur.timeline}, {to.ranks, cur.ranks}, {to.tree, cur.tree}};
    for (auto [want, have] : rows)
        if (want < 0 || want > have)
            throw Error("RunFile::truncate: requested sizes exceed the file's (" + std::to_string(want) + " > " +
                        std::to_string(have) + ")");
    int64_t discarded = 0;
    impl_->collective("truncate", [&] {
        Impl& im = *impl_;
        int64_t tok = read_offset(im, static_cast<hsize_t>(to.samples));
        if (to.tokens >= 0 && to.tokens != tok)
            throw Error("RunFile::truncate: tokens=" + std::to_string(to.tokens) + " but token_offsets[" +
                        std::to_string(to.samples) + "]=" + std::to_string(tok));
        int64_t tree_tok = read_tree_end(im, to.tree - 1);
        if (to.tree_tokens >= 0 && to.tree_tokens != tree_tok)
            throw Error("RunFile::truncate: tree_tokens=" + std::to_string(to.tree_tokens) + " but /tree/token_end[" +
                        std::to_string(to.tree - 1) + "]=" + std::to_string(tree_tok));
        auto cut = [&](schema::TableId id, int64_t n) {
            hsize_t h = static_cast<hsize_t>(n);
            for (Dataset& d : im.tables[id].cols) TAGFLOW_H5_CHECK(H5Dset_extent(d.get(), &h));
            if (id != schema::kTokens && id != schema::kTreeTokens && id != schema::kText && id != schema::kExtras)
                discarded += static_cast<int64_t>(im.tables[id].rows) - n;
            im.tables[id].rows = h;
        };
        cut(schema::kSamples, to.samples);
        cut(schema::kTokens, tok);
        cut(schema::kConsumed, to.consumed);
        cut(schema::kSteps, to.steps);
        cut(schema::kEval, to.eval);
        cut(schema::kSyncs, to.syncs);
        cut(schema::kTimeline, to.timeline);
        cut(schema::kRanks, to.ranks);
        cut(schema::kTree, to.tree);
        cut(schema::kTreeTokens, tree_tok);
        cut(schema::kText, read_text_end(im, to.samples - 1));
        cut(schema::kExtras, read_extras_end(im, to.samples - 1));
        hsize_t noff = static_cast<hsize_t>(to.samples) + 1;
        TAGFLOW_H5_CHECK(H5Dset_extent(im.token_offsets.get(), &noff));
        // Shrinking fills the cut part of edge chunks through the chunk cache; flush it now, or
        // the stale cached chunk is written back at close over the rows appended after this.
        flush_file(im.file.get());
    });
    return discarded;
}

}  // namespace tagflow::io
