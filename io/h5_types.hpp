// SPDX-License-Identifier: Apache-2.0
// h5_types: C++ scalar type -> HDF5 native type (native_type<T>()). The run file stores the
// native (little-endian on x86) types, so memory and file types match and no conversion can
// break collective I/O. Does not cover strings (see h5_dataset.hpp: fixed_string_type()).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <type_traits>

namespace tagflow::io {

template <class T>
inline hid_t native_type() {
    static_assert(std::is_arithmetic_v<T>, "native_type<T>: arithmetic types only");
    if constexpr (std::is_same_v<T, int8_t>) return H5T_NATIVE_INT8;
    else if constexpr (std::is_same_v<T, uint8_t>) return H5T_NATIVE_UINT8;
    else if constexpr (std::is_same_v<T, int16_t>) return H5T_NATIVE_INT16;
    else if constexpr (std::is_same_v<T, uint16_t>) return H5T_NATIVE_UINT16;
    else if constexpr (std::is_same_v<T, int32_t>) return H5T_NATIVE_INT32;
    else if constexpr (std::is_same_v<T, uint32_t>) return H5T_NATIVE_UINT32;
    else if constexpr (std::is_same_v<T, int64_t>) return H5T_NATIVE_INT64;
    else if constexpr (std::is_same_v<T, uint64_t>) return H5T_NATIVE_UINT64;
    else if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
    else static_assert(sizeof(T) == 0, "native_type<T>: unsupported type");
}

}  // namespace tagflow::io
