// SPDX-License-Identifier: Apache-2.0
// safe_file: see safe_file.hpp.
#include "common/safe_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/error.hpp"

namespace tagflow {

namespace {

std::string cause(int err) { return std::strerror(err); }

std::string dir_of(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

void write_all(int fd, std::string_view bytes, const std::string& path) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(path + ": " + cause(errno));
        }
        if (n == 0) throw Error(path + ": write returned 0 (" + cause(ENOSPC) + "?)");
        done += static_cast<std::size_t>(n);
    }
}

void write_file_replace(const std::string& path, std::string_view bytes, mode_t mode) {
    const std::string dir = dir_of(path);
    std::string tmpl = dir + "/." + base_of(path) + ".XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    const int fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd < 0) throw Error(path + ": cannot create a temporary file in " + dir + ": " + cause(errno));
    const std::string tmp(name.data());
    try {
        write_all(fd, bytes, path);
        if (::fchmod(fd, mode) != 0) throw Error(path + ": " + cause(errno));
        if (::fsync(fd) != 0) throw Error(path + ": " + cause(errno));
        if (::close(fd) != 0) {
            const int err = errno;
            ::unlink(tmp.c_str());
            throw Error(path + ": " + cause(err));
        }
    } catch (...) {
        ::close(fd);  // harmless EBADF when close() itself failed above
        ::unlink(tmp.c_str());
        throw;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw Error(path + ": cannot rename the temporary into place: " + cause(err));
    }
}

int create_new_file(const std::string& path, mode_t mode) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) return fd;
    if (errno == EEXIST)
        throw Error(path + ": exists (a file or a symbolic link was already there); not overwriting it");
    throw Error(path + ": cannot create: " + cause(errno));
}

int open_for_write_nofollow(const std::string& path, mode_t mode) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            struct stat st {};
            if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
                ::close(fd);
                throw Error(path + ": not a regular file; refusing to write to it");
            }
            return fd;
        }
        if (errno == ELOOP) throw Error(path + ": is a symbolic link; refusing to write through it");
        if (errno != ENOENT) throw Error(path + ": cannot open for writing: " + cause(errno));
        const int created = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (created >= 0) return created;
        if (errno != EEXIST) throw Error(path + ": cannot create: " + cause(errno));
        // Someone created it between the two opens: look again (once).
    }
    throw Error(path + ": appeared while being created; refusing to write to it");
}

void append_file_nofollow(const std::string& path, std::string_view bytes, mode_t mode) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) {
        if (errno == ELOOP) throw Error(path + ": is a symbolic link; refusing to write through it");
        throw Error(path + ": cannot open for appending: " + cause(errno));
    }
    try {
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            throw Error(path + ": not a regular file; refusing to write to it");
        write_all(fd, bytes, path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    if (::close(fd) != 0) throw Error(path + ": " + cause(errno));
}

void check_run_dir(const std::string& dir, bool allow_shared) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        throw ConfigError("run directory " + dir + ": " + cause(errno));
    }
    if (!S_ISDIR(st.st_mode)) throw ConfigError("run directory " + dir + " exists and is not a directory");
    if (allow_shared) return;
    if (st.st_uid != ::geteuid())
        throw ConfigError("run directory " + dir + " belongs to user id " + std::to_string(st.st_uid) +
                          ", not to this user (" + std::to_string(::geteuid()) +
                          "): its owner could plant files in it; use your own "
                          "directory, or pass --allow-shared-dir");
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        throw ConfigError("run directory " + dir + " is writable by others (mode " + mode +
                          "): anyone could plant files in it; chmod o-w it, or pass --allow-shared-dir");
    }
}

}  // namespace tagflow
