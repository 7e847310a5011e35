// SPDX-License-Identifier: Apache-2.0
// checkpoint: manifest text format, CRC-32, fsync, the atomic commit and verification.
// See checkpoint.hpp and share/doc/checkpoints.md.
#include "ckpt/checkpoint.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "model/safetensors.hpp"

namespace tagflow::ckpt {
namespace {

const char kMagic[] = "tagflow-checkpoint";
const char kManifest[] = "manifest.txt";

std::string errno_text() { return std::strerror(errno); }

std::string shape_text(const std::vector<int64_t>& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
}

bool valid_key(const std::string& k) {
    if (k.empty()) return false;
    for (char c : k)
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') return false;
    return true;
}

bool valid_file_name(const std::string& n) {
    return valid_key(n) && n[0] != '/' && n.find("..") == std::string::npos && n != kManifest;
}

const std::array<uint32_t, 256>& crc_table() {
    static const std::array<uint32_t, 256> t = [] {
        std::array<uint32_t, 256> r{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            r[i] = c;
        }
        return r;
    }();
    return t;
}

}  // namespace

// ---- Manifest ----

void Manifest::set(const std::string& key, const std::string& value) {
    if (!valid_key(key) || key == "file") throw InternalError("checkpoint manifest: bad key '" + key + "'");
    if (value.find('\n') != std::string::npos || value.find('\r') != std::string::npos)
        throw InternalError("checkpoint manifest: value of '" + key + "' has a newline");
    values[key] = value;
}
void Manifest::set_int(const std::string& key, int64_t v) { set(key, std::to_string(v)); }
void Manifest::set_double(const std::string& key, double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%a", v);
    set(key, b);
}
bool Manifest::has(const std::string& key) const { return values.count(key) != 0; }
const std::string& Manifest::get(const std::string& key) const {
    auto it = values.find(key);
    if (it == values.end()) throw ConfigError("checkpoint " + path + ": missing key '" + key + "'");
    return it->second;
}
int64_t Manifest::get_int(const std::string& key) const {
    const std::string& v = get(key);
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || errno != 0 || *end != '\0')
        throw ConfigError("checkpoint " + path + ": key '" + key + "' is not an integer ('" + v + "')");
    return static_cast<int64_t>(x);
}
double Manifest::get_double(const std::string& key) const {
    const std::string& v = get(key);
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0')
        throw ConfigError("checkpoint " + path + ": key '" + key + "' is not a number ('" + v + "')");
    return x;
}
const FileEntry* Manifest::find_file(const std::string& name) const {
    for (const auto& f : files)
        if (f.name == name) return &f;
    return nullptr;
}

// ---- paths and files ----

std::string checkpoint_dir(const std::string& out) { return out + "/checkpoint"; }
std::string staging_dir(const std::string& out, int64_t step) {
    return out + "/checkpoint.tmp-" + std::to_string(step);
}
std::string previous_dir(const std::string& out) { return out + "/checkpoint.old"; }

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
    const auto& t = crc_table();
    const auto* p = static_cast<const unsigned char*>(data);
    crc = ~crc;
    for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

void fsync_path(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("checkpoint: cannot open " + path + " to fsync it: " + errno_text());
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0 && err != EINVAL) throw Error("checkpoint: fsync " + path + ": " + std::strerror(err));
}

FileEntry describe_file(const std::string& dir, const std::string& name) {
    if (!valid_file_name(name)) throw InternalError("checkpoint: bad file name '" + name + "'");
    const std::string path = dir + "/" + name;
    fsync_path(path);
    FileEntry e;
    e.name = name;
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw Error("checkpoint: cannot read " + path + ": " + errno_text());
    std::vector<char> buf(1 << 20);
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
        e.crc32 = crc32(buf.data(), n, e.crc32);
        e.bytes += n;
    }
    const bool bad = std::ferror(f) != 0;
    std::fclose(f);
    if (bad) throw Error("checkpoint: error reading " + path);
    return e;
}

void remove_tree(const std::string& path) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        throw Error("checkpoint: cannot stat " + path + ": " + errno_text());
    }
    if (S_ISDIR(st.st_mode)) {
        DIR* d = ::opendir(path.c_str());
        if (!d) throw Error("checkpoint: cannot list " + path + ": " + errno_text());
        std::vector<std::string> names;
        while (dirent* e = ::readdir(d)) {
            std::string n = e->d_name;
            if (n != "." && n != "..") names.push_back(n);
        }
        ::closedir(d);
        for (const auto& n : names) remove_tree(path + "/" + n);
        if (::rmdir(path.c_str()) != 0 && errno != ENOENT)
            throw Error("checkpoint: cannot remove " + path + ": " + errno_text());
    } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        throw Error("checkpoint: cannot remove " + path + ": " + errno_text());
    }
}

void make_dirs(const std::string& path) {
    std::string cur;
    for (size_t i = 0; i <= path.size(); ++i) {
        if ((i == path.size() || path[i] == '/') && !cur.empty())
            if (::mkdir(cur.c_str(), 0750) != 0 && errno != EEXIST)
                throw Error("checkpoint: cannot create " + cur + ": " + errno_text());
        if (i < path.size()) cur += path[i];
    }
}

void prepare_staging(const std::string& dir) {
    remove_tree(dir);
    const std::size_t slash = dir.find_last_of('/');
    if (slash != std::string::npos && slash > 0) make_dirs(dir.substr(0, slash));
    if (::mkdir(dir.c_str(), 0750) != 0)  // EEXIST: something re-created it since remove_tree
        throw Error("checkpoint: cannot create the staging directory " + dir + ": " + errno_text());
}

StagingCleanup::StagingCleanup(std::string dir) : dir_(std::move(dir)), exceptions_(std::uncaught_exceptions()) {}

StagingCleanup::~StagingCleanup() {
    if (std::uncaught_exceptions() <= exceptions_) return;  // left normally: committed (renamed away) or not ours
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

// ---- manifest file ----

void write_manifest(const std::string& dir, const Manifest& m) {
    std::ostringstream s;
    s << kMagic << ' ' << m.format_version << '\n';
    for (const auto& [k, v] : m.values) s << k << ' ' << v << '\n';
    for (const auto& f : m.files) {
        if (!valid_file_name(f.name)) throw InternalError("checkpoint: bad file name '" + f.name + "'");
        char crc[16];
        std::snprintf(crc, sizeof crc, "%08" PRIx32, f.crc32);
        s << "file " << f.name << ' ' << f.bytes << ' ' << crc << '\n';
    }
    s << "end\n";  // a manifest cut short is detected
    const std::string path = dir + "/" + kManifest, tmp = path + ".tmp";
    {
        std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
        o << s.str();
        o.flush();
        if (!o) throw Error("checkpoint: cannot write " + tmp + ": " + errno_text());
    }
    fsync_path(tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
        throw Error("checkpoint: cannot rename " + tmp + ": " + errno_text());
    fsync_path(dir);
}

Manifest read_manifest(const std::string& dir) {
    Manifest m;
    m.path = dir + "/" + kManifest;
    std::ifstream in(m.path, std::ios::binary);
    if (!in) throw ConfigError("checkpoint " + m.path + ": cannot open (" + errno_text() + ")");
    std::string line;
    if (!std::getline(in, line)) throw ConfigError("checkpoint " + m.path + ": empty file");
    {
        std::istringstream h(line);
        std::string magic;
        int v = -1;
        h >> magic >> v;
        if (magic != kMagic) throw ConfigError("checkpoint " + m.path + ": not a tagflow checkpoint manifest");
        if (v != kFormatVersion)
            throw ConfigError("checkpoint " + m.path + ": format version " + std::to_string(v) +
                              ", this tagflow reads version " + std::to_string(kFormatVersion));
        m.format_version = v;
    }
    bool ended = false;
    int lineno = 1;
    while (std::getline(in, line)) {
        ++lineno;
        if (ended) throw ConfigError("checkpoint " + m.path + ": line " + std::to_string(lineno) + " after 'end'");
        if (line == "end") {
            ended = true;
            continue;
        }
        const size_t sp = line.find(' ');
        const std::string key = line.substr(0, sp);
        const std::string value = sp == std::string::npos ? "" : line.substr(sp + 1);
        if (!valid_key(key)) throw ConfigError("checkpoint " + m.path + ": malformed line " + std::to_string(lineno));
        if (key == "file") {
            std::istringstream f(value);
            FileEntry e;
            std::string crc, extra;
            if (!(f >> e.name >> e.bytes >> crc) || (f >> extra) || !valid_file_name(e.name) || crc.size() != 8 ||
                crc.find_first_not_of("0123456789abcdef") != std::string::npos)
                throw ConfigError("checkpoint " + m.path + ": malformed file line " + std::to_string(lineno));
            e.crc32 = static_cast<uint32_t>(std::strtoul(crc.c_str(), nullptr, 16));
            m.files.push_back(e);
        } else {
            m.values[key] = value;
        }
    }
    if (!ended) throw ConfigError("checkpoint " + m.path + ": truncated (no 'end' line)");
    return m;
}

void verify_files(const std::string& dir, const Manifest& m) {
    for (const auto& f : m.files) {
        const std::string path = dir + "/" + f.name;
        struct stat st;
        if (::stat(path.c_str(), &st) != 0)
            throw ConfigError("checkpoint " + path + ": missing (" + errno_text() + ")");
        if (static_cast<uint64_t>(st.st_size) != f.bytes)
            throw ConfigError("checkpoint " + path + ": " + std::to_string(st.st_size) + " bytes, the manifest says " +
                              std::to_string(f.bytes) +
                              (static_cast<uint64_t>(st.st_size) < f.bytes ? " (truncated)" : ""));
        FileEntry got;
        try {
            got = describe_file(dir, f.name);
        } catch (const Error& e) {
            throw ConfigError(e.what());
        }
        if (got.crc32 != f.crc32) {
            char b[64];
            std::snprintf(b, sizeof b, "CRC-32 %08" PRIx32 ", the manifest says %08" PRIx32, got.crc32, f.crc32);
            throw ConfigError("checkpoint " + path + ": corrupt (" + b + ")");
        }
    }
}

void verify_shapes(const std::string& dir, const std::string& name,
                   const std::map<std::string, std::vector<int64_t>>& expected) {
    const std::string path = dir + "/" + name;
    model::st::Header h;
    try {
        model::st::Reader r(path);
        h = r.header();
    } catch (const Error& e) {
        std::string w = e.what();
        throw ConfigError("checkpoint " + path + ": " + w.substr(0, w.find('\n')));
    }
    for (const auto& [n, shape] : expected) {
        const model::st::TensorInfo* t = h.find(n);
        if (!t)
            throw ConfigError("checkpoint " + path + ": no tensor " + n + " (the model needs " + shape_text(shape) +
                              ")");
        if (t->shape != shape)
            throw ConfigError("checkpoint " + path + ": tensor " + n + " has shape " + shape_text(t->shape) +
                              ", the model needs " + shape_text(shape) + " (other model size options?)");
    }
    for (const auto& t : h.tensors)
        if (!expected.count(t.name))
            throw ConfigError("checkpoint " + path + ": unexpected tensor " + t.name + " (another model?)");
}

// ---- commit ----

void commit(const std::string& out, const std::string& staging) {
    const std::string cur = checkpoint_dir(out), old = previous_dir(out);
    fsync_path(staging);
    struct stat st;
    const bool have_cur = ::stat(cur.c_str(), &st) == 0;
    if (!have_cur) {
        if (std::rename(staging.c_str(), cur.c_str()) != 0)
            throw Error("checkpoint: cannot rename " + staging + " to " + cur + ": " + errno_text());
        fsync_path(out);
        return;
    }
    // Atomic swap: at every instant `cur` is a complete checkpoint (old or new).
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, cur.c_str(), RENAME_EXCHANGE) == 0) {
        fsync_path(out);
        remove_tree(staging);  // now holds the previous checkpoint
        return;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        throw Error("checkpoint: cannot exchange " + staging + " with " + cur + ": " + errno_text());
    // File systems without RENAME_EXCHANGE: keep the previous one as .old until the new one is
    // in place (recover_and_probe() puts .old back after a crash in between).
    remove_tree(old);
    if (std::rename(cur.c_str(), old.c_str()) != 0)
        throw Error("checkpoint: cannot rename " + cur + ": " + errno_text());
    if (std::rename(staging.c_str(), cur.c_str()) != 0) {
        const std::string why = errno_text();
        std::rename(old.c_str(), cur.c_str());
        throw Error("checkpoint: cannot rename " + staging + " to " + cur + ": " + why);
    }
    fsync_path(out);
    remove_tree(old);
}

bool recover_and_probe(const std::string& out) {
    const std::string cur = checkpoint_dir(out), old = previous_dir(out);
    struct stat st;
    if (::stat(cur.c_str(), &st) != 0 && ::stat(old.c_str(), &st) == 0) std::rename(old.c_str(), cur.c_str());
    return ::stat((cur + "/" + kManifest).c_str(), &st) == 0;
}

void remove_all(const std::string& out) {
    remove_tree(checkpoint_dir(out));
    remove_stale(out);
}

void remove_stale(const std::string& out) {
    remove_tree(previous_dir(out));
    DIR* d = ::opendir(out.c_str());
    if (!d) return;
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind("checkpoint.tmp-", 0) == 0) stale.push_back(n);
    }
    ::closedir(d);
    for (const auto& n : stale) remove_tree(out + "/" + n);
}

}  // namespace tagflow::ckpt
