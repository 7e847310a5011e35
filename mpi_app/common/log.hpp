// SPDX-License-Identifier: Apache-2.0
// log: "[tagflow r/n] ..." lines on stderr (every rank) and plain lines on stdout (rank 0).
// Does not decide what to log; set_log_rank() is called once after MPI_Init.
#pragma once
#include <cstdarg>

namespace tagflow {

void set_log_rank(int rank, int size);
int log_rank();
/// printf to stdout from rank 0 only, flushed (progress lines, tables).
void print0(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// "[tagflow r/n] warning: ..." to stderr from any rank.
void log_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// "[tagflow r/n] ..." to stderr from any rank.
void log_info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// "tagflow: error: ..." to stderr (used for the one-line config errors).
void log_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace tagflow
