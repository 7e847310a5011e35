// SPDX-License-Identifier: Apache-2.0
// error: the exception hierarchy of tagflow and the MPI check macro.
// Library code throws; only main() decides between `return 2` (config errors, found
// identically on every rank before any collective) and MPI_Abort (anything later).
#pragma once
#include <stdexcept>
#include <string>

namespace tagflow {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
/// Bad user input (option, config file, tags). Detected identically on every rank.
struct ConfigError : Error {
    using Error::Error;
};
/// A failing MPI call; `code` is the MPI error code.
struct MpiError : Error {
    MpiError(const std::string& what, int code_) : Error(what), code(code_) {}
    int code;
};
/// A broken invariant inside tagflow: a bug, please report.
struct InternalError : Error {
    using Error::Error;
};

/// Builds the message for a failed MPI call (call text, file:line, MPI's own string).
std::string mpi_error_message(int code, const char* call, const char* file, int line);

}  // namespace tagflow

#define TAGFLOW_MPI_CHECK(call)                                                                                 \
    do {                                                                                                        \
        int tagflow_mpi_rc_ = (call);                                                                           \
        if (tagflow_mpi_rc_ != 0 /* MPI_SUCCESS */)                                                             \
            throw ::tagflow::MpiError(::tagflow::mpi_error_message(tagflow_mpi_rc_, #call, __FILE__, __LINE__), \
                                      tagflow_mpi_rc_);                                                         \
    } while (0)
