/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_check: FUZZ_CHECK(cond, fmt, ...) for the fuzz targets (C and C++). A failed invariant
 * prints one line naming the condition and aborts, which libFuzzer reports as a crash (and
 * saves the input) and the replay driver (fuzz_replay.c) turns into a failing ctest.
 * Does not depend on libFuzzer.
 */
#ifndef TAGFLOW_FUZZ_CHECK_H
#define TAGFLOW_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                                   \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fputc('\n', stderr);                                                                \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

#endif /* TAGFLOW_FUZZ_CHECK_H */
