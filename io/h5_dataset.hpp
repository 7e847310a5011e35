// SPDX-License-Identifier: Apache-2.0
// h5_dataset: 1-D extendable ("column") datasets and attributes: create, extend + write one
// hyperslab per rank in one H5Dwrite, read a slab, fixed-length strings, scalar attributes.
// Does not know the run-file schema and does no MPI communication itself (offsets are the
// caller's: see run_file.cpp).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/h5_handle.hpp"
#include "io/h5_types.hpp"

namespace tagflow::io {

/// Fixed-length, null-padded ASCII string type of `n` bytes (n >= 1): numpy/h5py dtype `S<n>`.
Datatype fixed_string_type(size_t n);

/// Packs `strings` into `n`-byte null-padded slots (one per string). Longer strings are cut at
/// `n` bytes, backing off so that a UTF-8 sequence is never split.
std::vector<char> pack_fixed_strings(const std::vector<std::string>& strings, size_t n);

/// COLLECTIVE (metadata): creates a 1-D dataset, chunked by `chunk` elements, maxdims
/// unlimited. By default empty and never filled (every element is written before it is read);
/// with `fill` (a value of `type`) it is `rows` long from the start, every element `*fill`,
/// written when the chunks are allocated (collectively under MPI-IO).
Dataset create_column(hid_t loc, const char* name, hid_t type, hsize_t chunk, hsize_t rows = 0,
                      const void* fill = nullptr);

/// Opens `name` under `loc` (collective metadata read when the file is parallel).
Dataset open_dataset(hid_t loc, const char* name);

/// Current number of elements of a 1-D dataset.
hsize_t extent_of(hid_t ds);

/// COLLECTIVE (with a collective dxpl): sets the extent to `new_size` (same on every rank)
/// and writes this rank's `count` elements of `buf` at `start` in one H5Dwrite; a rank with
/// count == 0 selects nothing and still takes part. Returns the I/O mode HDF5 really used.
H5D_mpio_actual_io_mode_t write_slab(hid_t ds, hid_t dxpl, hid_t mem_type, hsize_t new_size, hsize_t start,
                                     hsize_t count, const void* buf);

/// Reads `count` elements at `start` into `buf` (COLLECTIVE when dxpl is collective).
void read_slab(hid_t ds, hid_t dxpl, hid_t mem_type, hsize_t start, hsize_t count, void* buf);

/// Reads a whole 1-D numeric dataset (serial helper for readers and tests).
template <class T>
std::vector<T> read_all(hid_t ds, hid_t dxpl = H5P_DEFAULT) {
    std::vector<T> v(extent_of(ds));
    read_slab(ds, dxpl, native_type<T>(), 0, v.size(), v.data());
    return v;
}
/// Reads a whole 1-D fixed-length string dataset, trailing NULs stripped.
std::vector<std::string> read_all_strings(hid_t ds, hid_t dxpl = H5P_DEFAULT);

// ---- attributes (metadata: COLLECTIVE when written to a parallel file, same value on every rank)

/// Writes (or replaces) a scalar fixed-length string attribute (size max(1, len)).
void write_attr(hid_t obj, const char* name, const std::string& value);
void write_attr(hid_t obj, const char* name, const char* value);
void write_attr(hid_t obj, const char* name, int32_t value);
void write_attr(hid_t obj, const char* name, int64_t value);
void write_attr(hid_t obj, const char* name, double value);
bool has_attr(hid_t obj, const char* name);
/// Reads a string attribute, fixed-length or variable-length (as h5py writes by default).
std::string read_string_attr(hid_t obj, const char* name);
/// Reads an integer attribute (any integer width) as int64.
int64_t read_int_attr(hid_t obj, const char* name);
double read_double_attr(hid_t obj, const char* name);

}  // namespace tagflow::io
