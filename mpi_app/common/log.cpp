// SPDX-License-Identifier: Apache-2.0
#include "common/log.hpp"

#include <cstdio>
#include <string>

namespace tagflow {
namespace {
int g_rank = 0;
int g_size = 1;

void vlog(FILE* f, const char* prefix, const char* fmt, va_list ap) {
    char buf[4096];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (g_size > 1 || prefix[0] != '\0') fprintf(f, "[tagflow %d/%d] %s%s\n", g_rank, g_size, prefix, buf);
    else fprintf(f, "[tagflow] %s\n", buf);
    fflush(f);
}
}  // namespace

void set_log_rank(int rank, int size) {
    g_rank = rank;
    g_size = size;
}
int log_rank() { return g_rank; }

void print0(const char* fmt, ...) {
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fflush(stdout);
}
void log_warn(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "warning: ", fmt, ap);
    va_end(ap);
}
void log_info(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "", fmt, ap);
    va_end(ap);
}
void log_error(const char* fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    // One line whatever the message echoes (user values with newlines, escape sequences):
    // control bytes are written as \xNN.
    std::string line;
    for (const char* c = buf; *c; ++c) {
        const auto u = static_cast<unsigned char>(*c);
        if (u < 0x20 || u == 0x7f) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\x%02x", u);
            line += esc;
        } else {
            line += *c;
        }
    }
    fprintf(stderr, "tagflow: error: %s\n", line.c_str());
    fflush(stderr);
}

}  // namespace tagflow
