// SPDX-License-Identifier: Apache-2.0
// h5_handle: a move-only owner of one hid_t (File, Group, Dataset, Dataspace, Datatype,
// PropList, Attribute). Destructors never throw: a failed close is logged (with the HDF5 stack).
// Does not reference-count: one owner per id. With the MPI-IO driver H5Fclose fails while any
// object of the file is open, so declare the File first in a scope (it is destroyed last).
#pragma once
#include <hdf5.h>

#include <utility>

#include "io/h5_error.hpp"

namespace tagflow::io {

namespace detail {
/// Logs a failed close from a destructor (never throws).
void log_close_failure(const char* kind, hid_t id) noexcept;
}  // namespace detail

template <herr_t (*Close)(hid_t)>
class H5Handle {
public:
    H5Handle() = default;
    /// Takes ownership of `id`; throws H5Error (naming `what`) when id < 0.
    H5Handle(hid_t id, const char* what) : id_(id) {
        if (id_ < 0) throw H5Error::from_stack(what);
    }
    H5Handle(const H5Handle&) = delete;
    H5Handle& operator=(const H5Handle&) = delete;
    H5Handle(H5Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
    H5Handle& operator=(H5Handle&& o) noexcept {
        if (this != &o) {
            reset();
            id_ = std::exchange(o.id_, H5I_INVALID_HID);
        }
        return *this;
    }
    ~H5Handle() { reset(); }

    hid_t get() const noexcept { return id_; }
    bool valid() const noexcept { return id_ >= 0; }
    explicit operator bool() const noexcept { return valid(); }
    /// Gives up ownership without closing.
    hid_t release() noexcept { return std::exchange(id_, H5I_INVALID_HID); }
    /// Closes now, logging (not throwing) a failure.
    void reset() noexcept {
        if (id_ >= 0 && Close(id_) < 0) detail::log_close_failure(kind(), id_);
        id_ = H5I_INVALID_HID;
    }
    /// Closes now and throws H5Error on failure (use where a failure must stop the run,
    /// e.g. the final H5Fclose).
    void close() {
        hid_t id = std::exchange(id_, H5I_INVALID_HID);
        if (id >= 0 && Close(id) < 0) throw H5Error::from_stack(kind());
    }

private:
    static const char* kind() noexcept;
    hid_t id_ = H5I_INVALID_HID;
};

using File = H5Handle<H5Fclose>;
using Group = H5Handle<H5Gclose>;
using Dataset = H5Handle<H5Dclose>;
using Dataspace = H5Handle<H5Sclose>;
using Datatype = H5Handle<H5Tclose>;
using PropList = H5Handle<H5Pclose>;
using Attribute = H5Handle<H5Aclose>;

template <herr_t (*Close)(hid_t)>
const char* H5Handle<Close>::kind() noexcept {
    if constexpr (Close == &H5Fclose) return "H5Fclose";
    else if constexpr (Close == &H5Gclose) return "H5Gclose";
    else if constexpr (Close == &H5Dclose) return "H5Dclose";
    else if constexpr (Close == &H5Sclose) return "H5Sclose";
    else if constexpr (Close == &H5Tclose) return "H5Tclose";
    else if constexpr (Close == &H5Pclose) return "H5Pclose";
    else if constexpr (Close == &H5Aclose) return "H5Aclose";
    else return "H5?close";
}

}  // namespace tagflow::io
