// SPDX-License-Identifier: Apache-2.0
#include "common/malloc_tuning.hpp"

#include <malloc.h>

#include <cstdlib>

namespace tagflow {

bool keep_freed_memory() {
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("GLIBC_TUNABLES"))
        return false;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 2147483647);
    return true;
}

}  // namespace tagflow
