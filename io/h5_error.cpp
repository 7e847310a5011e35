// SPDX-License-Identifier: Apache-2.0
// h5_error: walks the HDF5 error stack (H5Ewalk2 on a copied stack) into H5Error text.
#include "io/h5_error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.hpp"

namespace tagflow::io {
namespace {

struct WalkState {
    std::string text;
    hid_t maj = H5I_INVALID_HID;
    hid_t min = H5I_INVALID_HID;
};

std::string message_of(hid_t id) {
    char buf[256] = {0};
    if (id < 0 || H5Eget_msg(id, nullptr, buf, sizeof buf) < 0) return "?";
    return buf;
}

herr_t walk_cb(unsigned n, const H5E_error2_t* e, void* data) {
    auto* st = static_cast<WalkState*>(data);
    char line[768];
    snprintf(line, sizeof line, "  #%03u %s:%u %s(): %s [%s / %s]\n", n, e->file_name ? e->file_name : "?", e->line,
             e->func_name ? e->func_name : "?", e->desc ? e->desc : "", message_of(e->maj_num).c_str(),
             message_of(e->min_num).c_str());
    st->text += line;
    // Walking downward, the last frame is the innermost: the real cause.
    st->maj = e->maj_num;
    st->min = e->min_num;
    return 0;
}

WalkState walk_current() noexcept {
    WalkState st;
    try {
        hid_t stack = H5Eget_current_stack();  // copies and clears the thread's stack
        if (stack < 0) return st;
        H5Ewalk2(stack, H5E_WALK_DOWNWARD, walk_cb, &st);
        H5Eclose_stack(stack);
    } catch (...) {
        st.text += "  (error while walking the HDF5 error stack)\n";
    }
    return st;
}

}  // namespace

H5Error H5Error::from_stack(const char* what, const char* file, int line) {
    const int err = errno;  // what the failing write(2)/pwrite(2) below HDF5 left, before anything else runs
    const bool disk = err == ENOSPC || err == EDQUOT || err == EIO || err == EROFS || err == EFBIG;
    WalkState st = walk_current();
    std::string msg = "HDF5: ";
    msg += what ? what : "?";
    if (file) msg += std::string(" failed at ") + file + ":" + std::to_string(line);
    else msg += " failed";
    msg += " (rank " + std::to_string(log_rank()) + ")";
    if (st.min >= 0) msg += ": " + message_of(st.maj) + ": " + message_of(st.min);
    if (disk) msg += std::string(": ") + std::strerror(err);
    return H5Error(msg, st.maj, st.min, std::move(st.text), disk ? err : 0);
}

void silence_auto_print() noexcept { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string take_error_stack() noexcept {
    try {
        return walk_current().text;
    } catch (...) {
        return {};
    }
}

}  // namespace tagflow::io
