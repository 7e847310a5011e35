// SPDX-License-Identifier: Apache-2.0
#include "common/malloc_tuning.hpp"

#include <malloc.h>

#include <cstdlib>

namespace tagflow {

bool keep_freed_memory() {
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("GLIBC_TUNABLES"))
        return false;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    // glibc caps the threshold at 32 MiB: larger blocks would still be a fresh mmap (and a page
    // fault per 4 KiB) every time. A 151,936-token vocabulary makes every [rows, vocab] tensor of
    // more than 55 rows one of them, so the main arena serves them all from the heap instead.
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 2147483647);
    return true;
}

}  // namespace tagflow
