// SPDX-License-Identifier: Apache-2.0
// h5_error: H5Error (the HDF5 error stack walked into an exception), TAGFLOW_H5_CHECK and
// silence_auto_print(). Does not decide what to do with an error (callers throw; main aborts).
#pragma once
#include <hdf5.h>

#include <string>

#include "common/error.hpp"

namespace tagflow::io {

/// A failing HDF5 call. `maj`/`min` are the innermost (deepest) error's major/minor message ids
/// (H5I_INVALID_HID when the stack was empty); `stack` is the whole stack, one line per frame.
/// what() is one line (the stack is not in it: it belongs in a log, not on a terminal);
/// `sys_errno` is the errno the failing call left when it names a disk problem (ENOSPC,
/// EDQUOT, EIO, EROFS, EFBIG), else 0, and what() ends with its text then.
struct H5Error : Error {
    H5Error(const std::string& what, hid_t maj_, hid_t min_, std::string stack_, int sys_errno_ = 0)
        : Error(what), maj(maj_), min(min_), stack(std::move(stack_)), sys_errno(sys_errno_) {}
    /// Builds an H5Error from (and clears) the current HDF5 error stack of this thread.
    static H5Error from_stack(const char* what, const char* file = nullptr, int line = 0);
    hid_t maj;
    hid_t min;
    std::string stack;
    int sys_errno = 0;
};

/// Turns off HDF5's automatic error printing (otherwise every rank dumps its stack to stderr).
/// Idempotent; called by every io entry point that opens or creates a file.
void silence_auto_print() noexcept;

/// The current error stack as text, then cleared; never throws (for destructors).
std::string take_error_stack() noexcept;

namespace detail {
template <class T>
inline T h5_check(T rc, const char* call, const char* file, int line) {
    if (rc < 0) throw H5Error::from_stack(call, file, line);
    return rc;
}
}  // namespace detail

}  // namespace tagflow::io

/// Evaluates an HDF5 call returning herr_t/hid_t/htri_t/ssize_t; throws H5Error when it is < 0,
/// otherwise yields the value: `hid_t t = TAGFLOW_H5_CHECK(H5Dget_type(ds));`
#define TAGFLOW_H5_CHECK(call) ::tagflow::io::detail::h5_check((call), #call, __FILE__, __LINE__)
