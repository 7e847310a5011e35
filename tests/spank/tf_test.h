/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tf_test: a ten-line C test harness for tests/spank (no SLURM, no gtest).
 * CHECK records a failure and continues; each executable prints
 * "N passed, N failed" and exits non-zero on any failure.
 */
#ifndef TAGFLOW_TF_TEST_H
#define TAGFLOW_TF_TEST_H

#include <stdio.h>
#include <string.h>

extern int tf_test_passed, tf_test_failed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            tf_test_passed++;                                                        \
        } else {                                                                     \
            tf_test_failed++;                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

/* haystack contains needle; prints both on failure */
#define CHECK_HAS(hay, needle)                                                                                 \
    do {                                                                                                       \
        const char* h_ = (hay);                                                                                \
        const char* n_ = (needle);                                                                             \
        if (h_ != NULL && strstr(h_, n_) != NULL) {                                                            \
            tf_test_passed++;                                                                                  \
        } else {                                                                                               \
            tf_test_failed++;                                                                                  \
            fprintf(stderr, "%s:%d: expected \"%s\" in \"%s\"\n", __FILE__, __LINE__, n_, h_ ? h_ : "(null)"); \
        }                                                                                                      \
    } while (0)

#define CHECK_STR(a, b)                                                                                               \
    do {                                                                                                              \
        const char* a_ = (a);                                                                                         \
        const char* b_ = (b);                                                                                         \
        if (a_ != NULL && b_ != NULL && strcmp(a_, b_) == 0) {                                                        \
            tf_test_passed++;                                                                                         \
        } else {                                                                                                      \
            tf_test_failed++;                                                                                         \
            fprintf(stderr, "%s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
        }                                                                                                             \
    } while (0)

struct tf_test_group {
    const char* name;
    void (*fn)(void);
};

/* Run the group named argv[1] (or all); print the summary; return the exit code. */
int tf_test_main(int argc, char** argv, const struct tf_test_group* groups, int n);

#endif /* TAGFLOW_TF_TEST_H */
