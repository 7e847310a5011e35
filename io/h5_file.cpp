// SPDX-License-Identifier: Apache-2.0
// h5_file: MPI-IO file access/transfer property lists and file open/create.
#include "io/h5_file.hpp"

#include <unistd.h>

#include <cerrno>

#include "common/error.hpp"
#include "common/log.hpp"

namespace tagflow::io {

namespace detail {
void log_close_failure(const char* kind, hid_t id) noexcept {
    std::string stack = take_error_stack();
    log_warn("%s(%lld) failed (an object left open? with MPI-IO close the file last)%s%s", kind,
             static_cast<long long>(id), stack.empty() ? "" : "\n", stack.c_str());
}
}  // namespace detail

PropList mpio_fapl(MPI_Comm comm) {
    silence_auto_print();
    PropList fapl(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate(H5P_FILE_ACCESS)");
    TAGFLOW_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
    TAGFLOW_H5_CHECK(H5Pset_all_coll_metadata_ops(fapl.get(), 1));
    TAGFLOW_H5_CHECK(H5Pset_coll_metadata_write(fapl.get(), 1));
    TAGFLOW_H5_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V110));
    return fapl;
}

File create_file(MPI_Comm comm, const std::string& path) {
    // Never truncate through a planted symbolic link: the first rank removes whatever is at
    // `path` (a link is removed, not its target), then the file is created exclusively
    // (O_CREAT|O_EXCL: a link or file planted in between is an error, not followed).
    int rank = 0;
    TAGFLOW_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    if (rank == 0 && ::unlink(path.c_str()) != 0 && errno != ENOENT) {
        // Left for the exclusive create to report ("file exists"), naming the path.
    }
    TAGFLOW_MPI_CHECK(MPI_Barrier(comm));
    PropList fapl = mpio_fapl(comm);
    return File(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()),
                ("H5Fcreate " + path + " (a new file; anything there was removed first)").c_str());
}

File open_file(MPI_Comm comm, const std::string& path, bool writable) {
    PropList fapl = mpio_fapl(comm);
    return File(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.get()),
                ("H5Fopen " + path).c_str());
}

File open_file_serial(const std::string& path) {
    silence_auto_print();
    return File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), ("H5Fopen " + path).c_str());
}

PropList mpio_dxpl(bool collective) {
    PropList dxpl(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate(H5P_DATASET_XFER)");
    TAGFLOW_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT));
    return dxpl;
}

void flush_file(hid_t file) { TAGFLOW_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL)); }

}  // namespace tagflow::io
