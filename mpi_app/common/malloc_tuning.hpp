// SPDX-License-Identifier: Apache-2.0
// Keep freed memory in the process instead of handing it back to the OS after every step.
#pragma once

namespace tagflow {

/// A training step allocates tens of MB at a time (attention scores: 64 x 2 x 327^2 floats =
/// 55 MB per layer). With glibc's defaults that memory goes back to the OS when it is freed
/// (munmap above the dynamic mmap threshold, heap trimming below it) and is page-faulted in
/// again by the next step: a 1-rank sync run trained at 42.5 us per padded token with glibc's
/// defaults, 28 with the memory kept (share/doc/bench.md, "Memory allocator"). This sets a
/// fixed 32 MiB mmap threshold, no mmap at all in the main arena (glibc cannot raise the
/// threshold past 32 MiB, and a [rows, 151,936] logits tensor is larger) and no trimming below
/// 2 GiB, unless the user tuned malloc
/// (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES set). Called first thing by
/// `tagflow` and by the benchmarks, so the simulator's calibration measures the trainer as
/// tagflow runs it. Returns whether it changed anything.
bool keep_freed_memory();

}  // namespace tagflow
