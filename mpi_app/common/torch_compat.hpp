// SPDX-License-Identifier: Apache-2.0
// torch_compat: the few LibTorch calls whose spelling differs between Debian's 1.13 and the
// LibTorch 2.x of a PyTorch install, behind one name each (checked list: share/doc/gpu.md).
// Include only from .cpp files that already include ATen (it pulls <ATen/autocast_mode.h>).
// Does not hide anything else: code uses the plain torch API wherever 1.13 and 2.x agree.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/version.h>

// TAGFLOW_TORCH_AT_LEAST(2, 4): LibTorch is 2.4 or newer.
#define TAGFLOW_TORCH_AT_LEAST(major, minor) \
    (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace tagflow::compat {

/// Autocast on/off for this thread on `device` (kCPU or kCUDA), with `dtype` as the
/// lower-precision type when turning it on. 2.4 made autocast per device type
/// (set_autocast_enabled(kCPU, ..), set_autocast_dtype(kCPU, ..)) and deprecated set_cpu_enabled,
/// set_autocast_cpu_dtype, set_enabled and set_autocast_gpu_dtype (they warn at run time).
inline void set_autocast(at::DeviceType device, bool enabled, at::ScalarType dtype = at::kBFloat16) {
#if TAGFLOW_TORCH_AT_LEAST(2, 4)
    if (enabled) at::autocast::set_autocast_dtype(device, dtype);
    at::autocast::set_autocast_enabled(device, enabled);
#else
    if (device == at::kCPU) {
        if (enabled) at::autocast::set_autocast_cpu_dtype(dtype);
        at::autocast::set_cpu_enabled(enabled);
    } else {
        if (enabled) at::autocast::set_autocast_gpu_dtype(dtype);
        at::autocast::set_enabled(enabled);
    }
#endif
}

/// Whether autocast is on for this thread on `device` (kCPU or kCUDA).
inline bool autocast_enabled(at::DeviceType device) {
#if TAGFLOW_TORCH_AT_LEAST(2, 4)
    return at::autocast::is_autocast_enabled(device);
#else
    return device == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

/// CPU shorthands.
inline void set_cpu_autocast(bool enabled, at::ScalarType dtype = at::kBFloat16) {
    set_autocast(at::kCPU, enabled, dtype);
}
inline bool cpu_autocast_enabled() { return autocast_enabled(at::kCPU); }

}  // namespace tagflow::compat
