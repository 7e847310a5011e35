// SPDX-License-Identifier: Apache-2.0
// h5_file: open/create an HDF5 file with the MPI-IO driver over one communicator, with
// collective metadata reads and writes, and the collective/independent transfer lists.
// Does not know the run-file schema (see run_file.hpp).
#pragma once
#include <mpi.h>

#include <string>

#include "io/h5_handle.hpp"

namespace tagflow::io {

/// File access list: MPI-IO over `comm` (HDF5 dups it), all metadata ops collective,
/// file format >= 1.8 (so large attributes such as the config JSON can use dense storage).
PropList mpio_fapl(MPI_Comm comm);

/// COLLECTIVE over `comm`: creates `path` afresh: whatever is there is removed first (a symbolic
/// link itself, never its target) and the new file is created exclusively.
File create_file(MPI_Comm comm, const std::string& path);

/// COLLECTIVE over `comm`: opens an existing file, read-write when `writable`.
File open_file(MPI_Comm comm, const std::string& path, bool writable);

/// Serial (sec2 driver) read-only open, for readers and tests on one process.
File open_file_serial(const std::string& path);

/// Data transfer list: H5FD_MPIO_COLLECTIVE (or H5FD_MPIO_INDEPENDENT when !collective).
PropList mpio_dxpl(bool collective = true);

/// COLLECTIVE over the file's communicator: H5Fflush(H5F_SCOPE_GLOBAL). After it returns a
/// crash leaves a readable file holding everything written so far.
void flush_file(hid_t file);

}  // namespace tagflow::io
