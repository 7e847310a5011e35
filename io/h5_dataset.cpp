// SPDX-License-Identifier: Apache-2.0
// h5_dataset: column datasets (create / extend + hyperslab write / read) and attributes.
#include "io/h5_dataset.hpp"

#include <algorithm>
#include <cstring>

namespace tagflow::io {

Datatype fixed_string_type(size_t n) {
    Datatype t(H5Tcopy(H5T_C_S1), "H5Tcopy(H5T_C_S1)");
    TAGFLOW_H5_CHECK(H5Tset_size(t.get(), std::max<size_t>(n, 1)));
    TAGFLOW_H5_CHECK(H5Tset_strpad(t.get(), H5T_STR_NULLPAD));
    TAGFLOW_H5_CHECK(H5Tset_cset(t.get(), H5T_CSET_ASCII));
    return t;
}

std::vector<char> pack_fixed_strings(const std::vector<std::string>& strings, size_t n) {
    std::vector<char> buf(strings.size() * n, '\0');
    for (size_t i = 0; i < strings.size(); ++i) {
        const std::string& s = strings[i];
        size_t len = s.size();
        if (len > n) {
            len = n;  // s[len] is the first byte cut off: never cut inside a UTF-8 sequence
            while (len > 0 && (static_cast<unsigned char>(s[len]) & 0xC0) == 0x80) --len;
        }
        if (len > 0) std::memcpy(buf.data() + i * n, s.data(), len);
    }
    return buf;
}

Dataset create_column(hid_t loc, const char* name, hid_t type, hsize_t chunk, hsize_t rows, const void* fill) {
    hsize_t dims = fill ? rows : 0, maxdims = H5S_UNLIMITED;
    chunk = std::max<hsize_t>(chunk, 1);
    Dataspace space(H5Screate_simple(1, &dims, &maxdims), "H5Screate_simple");
    PropList dcpl(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate(H5P_DATASET_CREATE)");
    TAGFLOW_H5_CHECK(H5Pset_chunk(dcpl.get(), 1, &chunk));
    if (fill) TAGFLOW_H5_CHECK(H5Pset_fill_value(dcpl.get(), type, fill));
    TAGFLOW_H5_CHECK(H5Pset_fill_time(dcpl.get(), fill ? H5D_FILL_TIME_ALLOC : H5D_FILL_TIME_NEVER));
    return Dataset(H5Dcreate2(loc, name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                   (std::string("H5Dcreate2 ") + name).c_str());
}

Dataset open_dataset(hid_t loc, const char* name) {
    return Dataset(H5Dopen2(loc, name, H5P_DEFAULT), (std::string("H5Dopen2 ") + name).c_str());
}

hsize_t extent_of(hid_t ds) {
    Dataspace s(H5Dget_space(ds), "H5Dget_space");
    int rank = TAGFLOW_H5_CHECK(H5Sget_simple_extent_ndims(s.get()));
    if (rank != 1) throw Error("extent_of: dataset is not 1-D");
    hsize_t n = 0;
    TAGFLOW_H5_CHECK(H5Sget_simple_extent_dims(s.get(), &n, nullptr));
    return n;
}

namespace {
// Selects [start, start+count) in the file space and a matching memory space; a rank with
// count == 0 selects none in both (and still takes part in a collective transfer).
void select(hid_t fs, Dataspace& ms, hsize_t start, hsize_t count) {
    hsize_t mdims = std::max<hsize_t>(count, 1);
    ms = Dataspace(H5Screate_simple(1, &mdims, nullptr), "H5Screate_simple");
    if (count > 0) {
        TAGFLOW_H5_CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    } else {
        TAGFLOW_H5_CHECK(H5Sselect_none(fs));
        TAGFLOW_H5_CHECK(H5Sselect_none(ms.get()));
    }
}
}  // namespace

H5D_mpio_actual_io_mode_t write_slab(hid_t ds, hid_t dxpl, hid_t mem_type, hsize_t new_size, hsize_t start,
                                     hsize_t count, const void* buf) {
    TAGFLOW_H5_CHECK(H5Dset_extent(ds, &new_size));
    Dataspace fs(H5Dget_space(ds), "H5Dget_space");
    Dataspace ms;
    select(fs.get(), ms, start, count);
    static const char kDummy[16] = {0};  // H5Dwrite wants a non-null buffer even for none
    TAGFLOW_H5_CHECK(H5Dwrite(ds, mem_type, ms.get(), fs.get(), dxpl, count ? buf : kDummy));
    H5D_mpio_actual_io_mode_t mode = H5D_MPIO_NO_COLLECTIVE;
    if (dxpl != H5P_DEFAULT) TAGFLOW_H5_CHECK(H5Pget_mpio_actual_io_mode(dxpl, &mode));
    return mode;
}

void read_slab(hid_t ds, hid_t dxpl, hid_t mem_type, hsize_t start, hsize_t count, void* buf) {
    Dataspace fs(H5Dget_space(ds), "H5Dget_space");
    Dataspace ms;
    select(fs.get(), ms, start, count);
    char dummy[16];
    TAGFLOW_H5_CHECK(H5Dread(ds, mem_type, ms.get(), fs.get(), dxpl, count ? buf : dummy));
}

std::vector<std::string> read_all_strings(hid_t ds, hid_t dxpl) {
    Datatype ft(H5Dget_type(ds), "H5Dget_type");
    if (TAGFLOW_H5_CHECK(H5Tis_variable_str(ft.get())) > 0)
        throw Error("read_all_strings: variable-length strings are not part of the schema");
    size_t n = H5Tget_size(ft.get());
    if (n == 0) throw H5Error::from_stack("H5Tget_size");
    Datatype mt = fixed_string_type(n);
    hsize_t count = extent_of(ds);
    std::vector<char> buf(count * n);
    read_slab(ds, dxpl, mt.get(), 0, count, buf.data());
    std::vector<std::string> out(count);
    for (hsize_t i = 0; i < count; ++i) {
        const char* p = buf.data() + i * n;
        out[i].assign(p, strnlen(p, n));
    }
    return out;
}

// ---- attributes ----

namespace {
void write_scalar_attr(hid_t obj, const char* name, hid_t type, const void* value) {
    if (has_attr(obj, name)) TAGFLOW_H5_CHECK(H5Adelete(obj, name));
    Dataspace s(H5Screate(H5S_SCALAR), "H5Screate(H5S_SCALAR)");
    Attribute a(H5Acreate2(obj, name, type, s.get(), H5P_DEFAULT, H5P_DEFAULT),
                (std::string("H5Acreate2 ") + name).c_str());
    TAGFLOW_H5_CHECK(H5Awrite(a.get(), type, value));
}
}  // namespace

void write_attr(hid_t obj, const char* name, const std::string& value) {
    Datatype t = fixed_string_type(value.size());
    std::string padded = value.empty() ? std::string(1, '\0') : value;
    write_scalar_attr(obj, name, t.get(), padded.data());
}
void write_attr(hid_t obj, const char* name, const char* value) {
    write_attr(obj, name, std::string(value ? value : ""));
}
void write_attr(hid_t obj, const char* name, int32_t value) { write_scalar_attr(obj, name, H5T_NATIVE_INT32, &value); }
void write_attr(hid_t obj, const char* name, int64_t value) { write_scalar_attr(obj, name, H5T_NATIVE_INT64, &value); }
void write_attr(hid_t obj, const char* name, double value) { write_scalar_attr(obj, name, H5T_NATIVE_DOUBLE, &value); }

bool has_attr(hid_t obj, const char* name) { return TAGFLOW_H5_CHECK(H5Aexists(obj, name)) > 0; }

std::string read_string_attr(hid_t obj, const char* name) {
    Attribute a(H5Aopen(obj, name, H5P_DEFAULT), (std::string("H5Aopen ") + name).c_str());
    Datatype ft(H5Aget_type(a.get()), "H5Aget_type");
    if (H5Tget_class(ft.get()) != H5T_STRING) throw Error(std::string("attribute ") + name + " is not a string");
    if (TAGFLOW_H5_CHECK(H5Tis_variable_str(ft.get())) > 0) {
        Datatype mt(H5Tcopy(H5T_C_S1), "H5Tcopy");
        TAGFLOW_H5_CHECK(H5Tset_size(mt.get(), H5T_VARIABLE));
        char* p = nullptr;
        TAGFLOW_H5_CHECK(H5Aread(a.get(), mt.get(), &p));
        std::string s = p ? p : "";
        H5free_memory(p);
        return s;
    }
    size_t n = H5Tget_size(ft.get());
    Datatype mt = fixed_string_type(n);
    std::vector<char> buf(std::max<size_t>(n, 1), '\0');
    TAGFLOW_H5_CHECK(H5Aread(a.get(), mt.get(), buf.data()));
    return std::string(buf.data(), strnlen(buf.data(), n));
}

int64_t read_int_attr(hid_t obj, const char* name) {
    Attribute a(H5Aopen(obj, name, H5P_DEFAULT), (std::string("H5Aopen ") + name).c_str());
    Datatype ft(H5Aget_type(a.get()), "H5Aget_type");
    if (H5Tget_class(ft.get()) != H5T_INTEGER) throw Error(std::string("attribute ") + name + " is not an integer");
    int64_t v = 0;
    TAGFLOW_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, &v));
    return v;
}

double read_double_attr(hid_t obj, const char* name) {
    Attribute a(H5Aopen(obj, name, H5P_DEFAULT), (std::string("H5Aopen ") + name).c_str());
    double v = 0;
    TAGFLOW_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v));
    return v;
}

}  // namespace tagflow::io
