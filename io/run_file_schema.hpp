// SPDX-License-Identifier: Apache-2.0
// run_file_schema: schema v1 of the run file as data: groups, columns, dtypes, string
// lengths, chunk sizes, units and enum names. Used by run_file.cpp to create and to check
// a file; share/doc/hdf5-schema.md is the prose version. Does no I/O.
#pragma once
#include <hdf5.h>

#include <cstddef>
#include <string>
#include <vector>

namespace tagflow::io::schema {

enum class ColType { kU8, kI32, kI64, kF32, kF64, kStr };

struct Column {
    const char* name;
    ColType type;
    size_t str_len = 0;           // kStr only: the S<n> length
    const char* units = nullptr;  // written as attribute `units`
    std::string enum_names{};     // uint8 enums: attribute `enum_names` (comma list)
    /// Added to schema v1 after files were written without it (integer, float64 or string
    /// columns): when open_append finds it missing it creates it with every existing row -1 ("not
    /// recorded"; a uint8 column: 0; a string column: ""), so a run started by an older tagflow
    /// resumes instead of failing.
    bool added_later = false;
};

/// Tables whose columns always have the same length. /samples holds two of them: the
/// per-sample rows and the flat per-token arrays (plus token_offsets, handled apart); so does
/// /tree (rows with token_start/token_end, and the flat arrays).
enum TableId {
    kSamples,
    kTokens,
    kConsumed,
    kSteps,
    kEval,
    kSyncs,
    kTimeline,
    kRanks,
    kResumes,
    kTree,
    kTreeTokens,  // /tree: one row per stored token segment, and its flat token arrays
    kText,        // /samples/text: the UTF-8 bytes of every sample's prompt and response text
    kExtras,      // /samples/reward_extras: every sample's reward extras (JSON object text, UTF-8)
    kNumTables
};

struct Table {
    TableId id;
    const char* group;  // "/samples"
    hsize_t chunk;      // elements per chunk
    std::vector<Column> columns;
};

inline constexpr hsize_t kRowChunk = 1024;         // row tables
inline constexpr hsize_t kTokenChunk = 64 * 1024;  // flat token arrays (256 KiB of int32)
inline constexpr const char* kTokenOffsets = "token_offsets";
inline constexpr const char* kSecondsSinceT0 = "s since t0_unix";

/// Schema v1, indexed by TableId.
const std::vector<Table>& tables();
/// Every group of schema v1, creation order.
const std::vector<const char*>& groups();
/// Index of `name` in table `t` (throws InternalError when absent: a bug).
size_t column_index(TableId t, const char* name);

}  // namespace tagflow::io::schema
