// SPDX-License-Identifier: Apache-2.0
// text_file: plain and gzip data files, scanned once and read by range (see text_file.hpp). The
// gzip index follows zlib's examples/zran.c (Mark Adler): inflate with Z_BLOCK, and at a block
// boundary at least `span` bytes after the last point, keep (in, bits, out, window).
#include "data/text_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace tagflow::data {
namespace {

constexpr std::size_t kWindow = 32768;   // deflate's dictionary size
constexpr std::size_t kChunk = 1 << 16;  // compressed bytes read at a time

std::string errno_text() { return std::strerror(errno); }

/// Reads up to n bytes at `off`; returns how many (0 at the end of the file).
std::size_t pread_some(int fd, char* buf, std::size_t n, uint64_t off, const std::string& path) {
    for (;;) {
        ssize_t r = ::pread(fd, buf, n, static_cast<off_t>(off));
        if (r >= 0) return static_cast<std::size_t>(r);
        if (errno == EINTR) continue;
        throw ConfigError(path + ": read failed: " + errno_text());
    }
}

struct Inflater {
    z_stream s{};
    bool live = false;
    explicit Inflater(int window_bits) {
        if (inflateInit2(&s, window_bits) != Z_OK) throw Error("zlib: inflateInit2 failed");
        live = true;
    }
    ~Inflater() {
        if (live) inflateEnd(&s);
    }
    Inflater(const Inflater&) = delete;
    Inflater& operator=(const Inflater&) = delete;
};

std::string zmsg(const z_stream& s, int ret) {
    if (s.msg) return s.msg;
    return ret == Z_MEM_ERROR ? "out of memory" : "corrupt data (zlib error " + std::to_string(ret) + ")";
}

std::string deflate_window(const unsigned char* w, std::size_t n) {
    uLongf len = compressBound(static_cast<uLong>(n));
    std::string out(len, '\0');
    if (compress2(reinterpret_cast<Bytef*>(out.data()), &len, w, static_cast<uLong>(n), 1) != Z_OK)
        throw Error("zlib: compress2 of an index window failed");
    out.resize(len);
    out.shrink_to_fit();  // compressBound's room is most of the window: give it back
    return out;
}

}  // namespace

TextFile TextFile::open(const std::string& path, std::size_t span) {
    TextFile f;
    f.path_ = path;
    f.span_ = span < (std::size_t{1} << 16) ? (std::size_t{1} << 16) : span;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ConfigError(path + ": cannot open: " + errno_text());
    f.fd_ = std::shared_ptr<int>(new int(fd), [](int* p) {
        ::close(*p);
        delete p;
    });
    struct stat st {};
    if (fstat(fd, &st) != 0) throw ConfigError(path + ": cannot stat: " + errno_text());
    if (S_ISDIR(st.st_mode)) throw ConfigError(path + ": is a directory, not a data file");
    if (!S_ISREG(st.st_mode)) throw ConfigError(path + ": not a regular file");
    f.file_bytes_ = static_cast<uint64_t>(st.st_size);
    unsigned char magic[2] = {0, 0};
    std::size_t n = pread_some(fd, reinterpret_cast<char*>(magic), 2, 0, path);
    f.gzip_ = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    f.out_bytes_ = f.gzip_ ? 0 : f.file_bytes_;
    return f;
}

void TextFile::scan(const std::function<void(const char*, std::size_t)>& sink) {
    if (gzip_) return scan_gzip(sink);
    std::string buf(std::size_t{1} << 20, '\0');
    uint64_t off = 0;
    for (;;) {
        std::size_t n = pread_some(*fd_, buf.data(), buf.size(), off, path_);
        if (n == 0) break;
        sink(buf.data(), n);
        off += n;
    }
    out_bytes_ = off;
}

void TextFile::scan_gzip(const std::function<void(const char*, std::size_t)>& sink) {
    points_.clear();
    Inflater z(47);  // 32 + 15: a gzip (or zlib) header, then deflate with a 32 KiB window
    std::string input(kChunk, '\0');
    std::vector<unsigned char> window(kWindow);
    uint64_t in_off = 0, totin = 0, totout = 0, last = 0, member_in = 0;
    bool member_start = true;  // the next inflate call begins a gzip member
    z.s.avail_out = 0;
    int ret = Z_OK;
    for (;;) {
        if (z.s.avail_in == 0) {
            std::size_t n = pread_some(*fd_, input.data(), input.size(), in_off, path_);
            if (n == 0) {
                if (member_start && totin > 0) break;  // every member ended; no more data
                throw ConfigError(path_ + ": gzip data ends early, cut short after " + std::to_string(totout) +
                                  " uncompressed bytes (" + std::to_string(totin) + " of " +
                                  std::to_string(file_bytes_) + " compressed bytes used)");
            }
            in_off += n;
            z.s.next_in = reinterpret_cast<Bytef*>(input.data());
            z.s.avail_in = static_cast<uInt>(n);
        }
        if (member_start) {
            GzipPoint p;
            p.out = totout;
            p.in = totin;
            p.bits = -1;
            points_.push_back(std::move(p));
            last = totout;
            member_in = totin;
            member_start = false;
        }
        if (z.s.avail_out == 0) {
            z.s.avail_out = static_cast<uInt>(kWindow);
            z.s.next_out = window.data();
        }
        unsigned char* out_before = z.s.next_out;
        uInt in_before = z.s.avail_in, out_avail = z.s.avail_out;
        ret = inflate(&z.s, Z_BLOCK);
        totin += in_before - z.s.avail_in;
        std::size_t produced = out_avail - z.s.avail_out;
        totout += produced;
        if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_MEM_ERROR || ret == Z_STREAM_ERROR)
            throw ConfigError(path_ + ": corrupt gzip data in the member starting at compressed byte " +
                              std::to_string(member_in) + " (after " + std::to_string(totout) +
                              " uncompressed bytes): " + zmsg(z.s, ret == Z_NEED_DICT ? Z_DATA_ERROR : ret));
        if (produced) sink(reinterpret_cast<const char*>(out_before), produced);
        if (ret == Z_STREAM_END) {
            // A member ended (its CRC and length checked by zlib); another may follow.
            inflateReset(&z.s);
            member_start = true;
            continue;
        }
        if ((z.s.data_type & 128) && !(z.s.data_type & 64) && totout - last >= span_) {
            // End of a deflate block that is not the last one: a place to restart from.
            GzipPoint p;
            p.out = totout;
            p.in = totin;
            p.bits = z.s.data_type & 7;
            std::vector<unsigned char> w(kWindow);
            std::size_t left = z.s.avail_out;  // the window is circular: the oldest bytes start at kWindow - left
            if (left) std::memcpy(w.data(), window.data() + kWindow - left, left);
            if (left < kWindow) std::memcpy(w.data() + left, window.data(), kWindow - left);
            p.window = deflate_window(w.data(), kWindow);
            points_.push_back(std::move(p));
            last = totout;
        }
    }
    out_bytes_ = totout;
}

std::string TextFile::read(uint64_t begin, uint64_t end) const {
    if (end < begin || end > out_bytes_)
        throw InternalError(path_ + ": read of bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
                            ") outside the " + std::to_string(out_bytes_) + "-byte stream");
    std::string out(static_cast<std::size_t>(end - begin), '\0');
    if (!gzip_) {
        std::size_t got = 0;
        while (got < out.size()) {
            std::size_t n = pread_some(*fd_, out.data() + got, out.size() - got, begin + got, path_);
            if (n == 0) throw ConfigError(path_ + ": file shrank while reading (changed since it was indexed?)");
            got += n;
        }
        return out;
    }
    if (begin == end) return out;
    if (points_.empty()) throw InternalError(path_ + ": read before scan of a gzip file");
    // The last point at or before `begin`.
    std::size_t lo = 0, hi = points_.size();
    while (hi - lo > 1) {
        std::size_t mid = (lo + hi) / 2;
        (points_[mid].out <= begin ? lo : hi) = mid;
    }
    const GzipPoint& p = points_[lo];
    const bool member = p.bits < 0;
    Inflater z(member ? 47 : -15);
    std::string input(kChunk, '\0');
    uint64_t in_off = p.in;
    if (!member && p.bits > 0) {
        unsigned char c = 0;
        if (pread_some(*fd_, reinterpret_cast<char*>(&c), 1, p.in - 1, path_) != 1)
            throw ConfigError(path_ + ": file shrank while reading (changed since it was indexed?)");
        inflatePrime(&z.s, p.bits, c >> (8 - p.bits));
    }
    if (!member) {
        std::vector<unsigned char> w(kWindow);
        uLongf wlen = kWindow;
        if (uncompress(w.data(), &wlen, reinterpret_cast<const Bytef*>(p.window.data()),
                       static_cast<uLong>(p.window.size())) != Z_OK ||
            wlen != kWindow)
            throw Error(path_ + ": a gzip index window does not decompress (a corrupt index)");
        inflateSetDictionary(&z.s, w.data(), static_cast<uInt>(kWindow));
    }
    uint64_t pos = p.out;  // uncompressed offset of the next output byte
    std::string skip(kChunk, '\0');
    bool raw = !member;       // raw deflate (no header) until a member ends
    std::size_t trailer = 0;  // gzip trailer bytes still to skip after a raw stream ended
    while (pos < end) {
        if (z.s.avail_in == 0) {
            std::size_t n = pread_some(*fd_, input.data(), input.size(), in_off, path_);
            if (n == 0) throw ConfigError(path_ + ": gzip data ends early (changed since it was indexed?)");
            in_off += n;
            z.s.next_in = reinterpret_cast<Bytef*>(input.data());
            z.s.avail_in = static_cast<uInt>(n);
        }
        if (trailer) {
            uInt k = static_cast<uInt>(std::min<std::size_t>(trailer, z.s.avail_in));
            z.s.next_in += k;
            z.s.avail_in -= k;
            trailer -= k;
            if (trailer == 0) inflateReset2(&z.s, 47);
            continue;
        }
        const bool skipping = pos < begin;
        std::size_t want =
            skipping ? std::min<uint64_t>(skip.size(), begin - pos) : static_cast<std::size_t>(end - pos);
        unsigned char* dst = skipping ? reinterpret_cast<unsigned char*>(skip.data())
                                      : reinterpret_cast<unsigned char*>(out.data() + (pos - begin));
        z.s.next_out = dst;
        z.s.avail_out = static_cast<uInt>(std::min<std::size_t>(want, 1u << 30));
        uInt before = z.s.avail_out;
        int ret = inflate(&z.s, Z_NO_FLUSH);
        pos += before - z.s.avail_out;
        if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_MEM_ERROR || ret == Z_STREAM_ERROR)
            throw ConfigError(path_ + ": corrupt gzip data (changed since it was indexed?): " + zmsg(z.s, ret));
        if (ret == Z_STREAM_END) {
            if (raw) {
                trailer = 8;  // CRC-32 and ISIZE of the member, then the next member's header
                raw = false;
            } else {
                inflateReset(&z.s);
            }
        }
    }
    return out;
}

std::size_t TextFile::index_bytes() const {
    std::size_t n = points_.capacity() * sizeof(GzipPoint);
    for (const auto& p : points_) n += p.window.capacity();
    return n;
}

void TextFile::set_index(std::vector<GzipPoint> points, uint64_t uncompressed_bytes) {
    points_ = std::move(points);
    out_bytes_ = uncompressed_bytes;
}

}  // namespace tagflow::data
