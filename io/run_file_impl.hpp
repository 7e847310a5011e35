// SPDX-License-Identifier: Apache-2.0
// run_file_impl: RunFile::Impl, shared by run_file.cpp (create/open/close/truncate) and
// run_file_append.cpp (the collective appends). Internal header: not for users of io/.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common/mpi_env.hpp"
#include "io/h5_dataset.hpp"
#include "io/h5_file.hpp"
#include "io/run_file.hpp"
#include "io/run_file_schema.hpp"

namespace tagflow::io {

/// Where this rank's rows go in one collective append of a table.
struct Slot {
    hsize_t start = 0;     // first element written by this rank
    hsize_t count = 0;     // elements written by this rank (may be 0)
    hsize_t new_size = 0;  // extent after the append (same on every rank)
    hsize_t total = 0;     // elements appended by all ranks
};

/// Element type tag of a C++ type, to check put() against the schema.
template <class T>
constexpr schema::ColType col_type_of() {
    if constexpr (std::is_same_v<T, uint8_t>) return schema::ColType::kU8;
    else if constexpr (std::is_same_v<T, int32_t>) return schema::ColType::kI32;
    else if constexpr (std::is_same_v<T, int64_t>) return schema::ColType::kI64;
    else if constexpr (std::is_same_v<T, float>) return schema::ColType::kF32;
    else if constexpr (std::is_same_v<T, double>) return schema::ColType::kF64;
    else static_assert(sizeof(T) == 0, "no schema column type for T");
}

struct RunFile::Impl {
    struct Table {
        std::vector<Dataset> cols;    // schema order
        std::vector<Datatype> types;  // file type == memory type of each column
        hsize_t rows = 0;
    };

    Comm comm;  // dup of the io communicator; destroyed last
    int rank = 0, nranks = 1;
    std::string path;
    RunAttributes attrs;
    File file;  // declared before the objects in it, so it is destroyed after them
    PropList dxpl;
    std::vector<Group> groups;
    std::array<Table, schema::kNumTables> tables;
    Dataset token_offsets;
    IoStats stats;
    bool broken = false;  // an HDF5/MPI error happened inside a collective

    /// Creates (create == true) or opens and checks every group and dataset of schema v1.
    /// Returns "" or, when opening, why the file does not match the schema.
    std::string open_objects(bool create);
    /// Closes datasets and groups (not the file).
    void close_objects() noexcept;
    /// Gives up every handle without closing (after an error: a collective close could hang).
    void leak() noexcept;

    /// COLLECTIVE: allgathers K int64 per rank; result[r*K + k].
    std::vector<int64_t> allgather(const std::vector<int64_t>& local) const;
    /// Slot of this rank for per-rank counts `counts[r*stride + k]` appended after `base`.
    Slot slot(hsize_t base, const std::vector<int64_t>& counts, size_t stride, size_t k) const;
    /// Throws `e` again as one line naming the run file, the operation and the cause ("No space
    /// left on device" when the disk is full); appends the HDF5 error stack to hdf5-errors.log
    /// beside the run file (when it can be written) and names that log.
    [[noreturn]] void rethrow_naming_file(const char* what, const H5Error& e) const;
    /// Runs `f` (a collective operation); an H5Error/MpiError marks the file broken.
    template <class F>
    void collective(const char* what, F&& f);

    /// COLLECTIVE: writes column `name` of table `t` (T must match the schema type).
    template <class T>
    void put(schema::TableId t, const char* name, const std::vector<T>& v, const Slot& s, std::vector<bool>& written);
    void put_strings(schema::TableId t, const char* name, const std::vector<std::string>& v, const Slot& s,
                     std::vector<bool>& written);
    void record(H5D_mpio_actual_io_mode_t mode) noexcept;
};

template <class F>
void RunFile::Impl::collective(const char* what, F&& f) {
    if (!file) throw Error(std::string("RunFile::") + what + ": the run file is closed");
    if (broken)
        throw Error(std::string("RunFile::") + what + ": the run file " + path +
                    " is unusable after an earlier I/O error");
    try {
        f();
    } catch (const H5Error& e) {
        broken = true;
        rethrow_naming_file(what, e);
    } catch (const MpiError&) {
        broken = true;
        throw;
    }
}

template <class T>
void RunFile::Impl::put(schema::TableId t, const char* name, const std::vector<T>& v, const Slot& s,
                        std::vector<bool>& written) {
    size_t i = schema::column_index(t, name);
    if (schema::tables()[t].columns[i].type != col_type_of<T>())
        throw InternalError(std::string("RunFile: wrong C++ type for column ") + name);
    if (v.size() != s.count) throw InternalError(std::string("RunFile: bad row count for ") + name);
    record(write_slab(tables[t].cols[i].get(), dxpl.get(), native_type<T>(), s.new_size, s.start, s.count, v.data()));
    written[i] = true;
}

}  // namespace tagflow::io
