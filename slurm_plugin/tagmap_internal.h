/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tagmap_internal: helpers shared by the tagmap*.c files (not part of tagmap.h's API and
 * hidden in spank_tagflow.so): bounded copies, error formatting, strict number parsing.
 * Does not declare anything a caller of tagmap.h needs.
 */
#ifndef TAGFLOW_TAGMAP_INTERNAL_H
#define TAGFLOW_TAGMAP_INTERNAL_H

#include <stddef.h>

#include "tagmap.h"

#define TF_EPS 1e-9 /* score comparisons: 0.6*1 + 0.4*0.5 must count as >= 0.8 */

/* Copy at most n bytes of src (not necessarily NUL-terminated) into dst; -1 when n >= len. */
int tf_strncpy_n(char* dst, size_t len, const char* src, size_t n);

/* printf into err (when err != NULL and errlen > 0). */
void tf_errf(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* Shorten user text for messages: at most 40 characters, with "..." when cut, and every
 * byte that is not printable ASCII replaced by '?'. buf must hold at least 45 bytes. */
const char* tf_clip(const char* s, char* buf, size_t len);

/* Strict non-negative finite decimal number (no sign, hex, inf or nan). */
int tf_parse_number(const char* s, double* out);

/* Strict positive decimal integer up to 1e6. */
int tf_parse_count(const char* s, unsigned long* out);

#endif /* TAGFLOW_TAGMAP_INTERNAL_H */
