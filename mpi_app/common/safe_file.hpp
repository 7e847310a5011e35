// SPDX-License-Identifier: Apache-2.0
// safe_file: writing files in a run directory that someone else may have tampered with.
// Every file tagflow creates or replaces goes through one of these: a new file is created
// with O_EXCL (a planted symbolic link or file is an error, never followed), a replaced file
// is written to a temporary with an unpredictable name in the same directory and renamed
// over the old one (rename replaces a link, it does not write through it), and a failed
// write (a full disk above all) is one line naming the path and the cause, with the partial
// temporary removed.
// Does not: lock files, decide where files go, or make directories private (check_run_dir
// only refuses a directory that others may write to).
#pragma once
#include <sys/types.h>

#include <string>
#include <string_view>

namespace tagflow {

/// Replaces `path` with `bytes`: temporary `.<name>.XXXXXX` beside it (mkostemp: O_EXCL,
/// random suffix), written in full, fsync'ed, given `mode`, renamed into place. A symbolic
/// link at `path` is replaced by the file; its target is never opened. Throws Error
/// ("PATH: No space left on device", ...) and leaves no temporary behind.
void write_file_replace(const std::string& path, std::string_view bytes, mode_t mode = 0644);

/// Creates `path`, which must not exist (O_CREAT|O_EXCL|O_NOFOLLOW), for writing; returns the
/// descriptor (O_CLOEXEC). Throws Error naming the path: "exists" for a file or a link there.
int create_new_file(const std::string& path, mode_t mode = 0644);

/// Opens an existing regular file for writing without following a link (O_NOFOLLOW), creating it
/// (O_EXCL) when it is missing. Throws Error naming the path if it is a link or not a regular file.
int open_for_write_nofollow(const std::string& path, mode_t mode = 0644);

/// Appends `bytes` to `path` (O_APPEND|O_NOFOLLOW, created with `mode` when missing): a log that
/// many writers share. Throws Error naming the path for a link, a non-regular file or a failed write.
void append_file_nofollow(const std::string& path, std::string_view bytes, mode_t mode = 0640);

/// write(2) until all of `bytes` is written (EINTR retried). Throws Error "PATH: <strerror>".
void write_all(int fd, std::string_view bytes, const std::string& path);

/// Refuses (ConfigError, one line) a run directory that is not a directory, and unless
/// `allow_shared` (--allow-shared-dir) one that another user owns or that others may write to
/// (mode o+w without the sticky bit, which would let them rename or remove our files). A missing
/// directory passes; a directory reached through a symbolic link is judged by its target (the
/// user chose that link).
void check_run_dir(const std::string& dir, bool allow_shared);

}  // namespace tagflow
