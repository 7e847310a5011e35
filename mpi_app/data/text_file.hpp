// SPDX-License-Identifier: Apache-2.0
// text_file: the bytes of a data file, plain or gzip (detected by its magic bytes 1f 8b, not by
// its name), read once from start to end (scan) and afterwards by uncompressed byte range (read).
// For gzip, the scan records access points as zlib's examples/zran.c does: every `span` bytes of
// uncompressed output, at a deflate block boundary, the compressed offset, the bit offset and the
// 32 KiB of output before it (the dictionary), itself deflate-compressed; a read inflates from the
// nearest point before it, so it costs at most `span` bytes of decompression and the index costs
// about 32 KiB / span of the uncompressed size (before the window compression; see data.md).
// Concatenated gzip members (pigz -i, bgzip) are followed; each member start is an access point.
// Corrupt or cut-short gzip data is a ConfigError naming the file. No MPI, no threads of its own;
// read() is safe from several threads at once (pread, one z_stream per call).
// Does NOT: parse lines (dataset.hpp), keep the decompressed stream in memory or on disk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tagflow::data {

/// One place where inflation can start (gzip only).
struct GzipPoint {
    uint64_t out = 0;    ///< offset in the uncompressed stream
    uint64_t in = 0;     ///< offset in the file of the first byte (partly) needed
    int bits = 0;        ///< bits of byte in-1 to feed first (0..7); -1: a gzip member starts at `in`
    std::string window;  ///< the 32 KiB before `out`, deflate-compressed (empty for a member start)
};

class TextFile {
public:
    /// Opens `path` (ConfigError naming it when it cannot be read or is a directory).
    /// `span`: uncompressed bytes between gzip access points (>= 64 KiB).
    static TextFile open(const std::string& path, std::size_t span = std::size_t{1} << 20);

    const std::string& path() const { return path_; }
    bool gzip() const { return gzip_; }
    uint64_t file_bytes() const { return file_bytes_; }
    /// Size of the uncompressed stream: known after scan() (plain files: the file size).
    uint64_t uncompressed_bytes() const { return out_bytes_; }

    /// Streams the whole uncompressed content once, in blocks, to `sink`; records the access
    /// points of a gzip file. ConfigError for corrupt or truncated gzip data.
    void scan(const std::function<void(const char* data, std::size_t n)>& sink);
    /// Bytes [begin, end) of the uncompressed stream (a gzip file must have been scanned).
    std::string read(uint64_t begin, uint64_t end) const;

    /// Memory held by the access points (0 for a plain file).
    std::size_t index_bytes() const;
    const std::vector<GzipPoint>& points() const { return points_; }
    /// For an index built elsewhere (data::Dataset::from_bytes): the points and the stream size.
    void set_index(std::vector<GzipPoint> points, uint64_t uncompressed_bytes);

private:
    void scan_gzip(const std::function<void(const char*, std::size_t)>& sink);
    std::string path_;
    std::shared_ptr<int> fd_;
    bool gzip_ = false;
    uint64_t file_bytes_ = 0;
    uint64_t out_bytes_ = 0;
    std::size_t span_ = 0;
    std::vector<GzipPoint> points_;
};

}  // namespace tagflow::data
