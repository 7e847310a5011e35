/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tagmap: tag lists, plugstack arguments and the small helpers the other tagmap*.c files
 * share (tagmap_internal.h). The map parser is in tagmap_parse.c, node descriptions and the
 * evaluation in tagmap_eval.c. Pure C11, no SLURM.
 * Does not decide what to do with errors (spank_tagflow.c does) and never
 * copies input without a bound.
 */
#define _POSIX_C_SOURCE 200809L

#include "tagmap.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tagmap_internal.h"

static const char* const tf_tag_names[] = {"rollout", "train", "critic"};

/* ---- small helpers ---- */

int tf_strlcpy(char* dst, const char* src, size_t len) {
    size_t n;

    if (len == 0) return -1;
    n = strnlen(src, len);
    if (n >= len) {
        dst[0] = '\0';
        return -1;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
    return 0;
}

/* Copy at most n bytes of src (not necessarily NUL-terminated) into dst. */
int tf_strncpy_n(char* dst, size_t len, const char* src, size_t n) {
    if (n >= len) {
        if (len) dst[0] = '\0';
        return -1;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
    return 0;
}

void tf_errf(char* err, size_t errlen, const char* fmt, ...) {
    va_list ap;

    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Shorten user text for messages: at most 40 characters, with "..." when cut. */
const char* tf_clip(const char* s, char* buf, size_t len) {
    size_t n = strnlen(s, 41);
    size_t i;

    if (len < 45) return "";
    for (i = 0; i < n && i < 40; i++) buf[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (n > 40) {
        memcpy(buf + 40, "...", 4);
    } else {
        buf[n] = '\0';
    }
    return buf;
}

/* Strict non-negative finite decimal number. */
int tf_parse_number(const char* s, double* out) {
    char* end = NULL;
    double v;

    if (s == NULL || *s == '\0' || isspace((unsigned char)*s) || *s == '+' || *s == '-') return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0.0) return -1;
    /* refuse hex floats, "inf", "nan": only digits, one '.', optional exponent */
    for (const char* p = s; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != '.' && *p != 'e' && *p != 'E' && *p != '-' && *p != '+') return -1;
    *out = v;
    return 0;
}

/* Strict positive decimal integer up to 1e6. */
int tf_parse_count(const char* s, unsigned long* out) {
    unsigned long v = 0;

    if (s == NULL || *s == '\0') return -1;
    for (const char* p = s; *p; p++) {
        if (!isdigit((unsigned char)*p)) return -1;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 1000000ul) return -1;
    }
    if (v == 0) return -1;
    *out = v;
    return 0;
}

/* ---- tags ---- */

int tf_tags_parse(const char* s, int allow_auto, int allow_none, unsigned* mask, char* err, size_t errlen) {
    char buf[TF_OPT_MAX + 1];
    char clip[48];
    unsigned m = 0;
    char* item;
    char* save = NULL;
    size_t n;

    if (s == NULL || *s == '\0') {
        tf_errf(err, errlen, "empty tag list (allowed: rollout,train,critic%s%s)", allow_auto ? " or auto" : "",
                allow_none ? " or none" : "");
        return -1;
    }
    n = strnlen(s, sizeof(buf));
    if (n >= sizeof(buf)) {
        tf_errf(err, errlen, "tag list too long (more than %d characters)", TF_OPT_MAX);
        return -1;
    }
    memcpy(buf, s, n + 1);
    if (allow_auto && strcmp(buf, "auto") == 0) {
        *mask = TF_TAG_ALL;
        return 0;
    }
    if (allow_none && strcmp(buf, "none") == 0) {
        *mask = 0;
        return 0;
    }
    if (buf[0] == ',' || buf[n - 1] == ',' || strstr(buf, ",,") != NULL) {
        tf_errf(err, errlen, "empty item in tag list '%s'", tf_clip(s, clip, sizeof(clip)));
        return -1;
    }
    for (item = strtok_r(buf, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        unsigned bit = 0;

        for (unsigned i = 0; i < 3; i++)
            if (strcmp(item, tf_tag_names[i]) == 0) bit = 1u << i;
        if (bit == 0) {
            if ((strcmp(item, "auto") == 0 && allow_auto) || (strcmp(item, "none") == 0 && allow_none))
                tf_errf(err, errlen, "'%s' must be used alone, not in a list", item);
            else
                tf_errf(err, errlen, "unknown tag '%s' (allowed: rollout,train,critic%s%s)",
                        tf_clip(item, clip, sizeof(clip)), allow_auto ? " or auto" : "", allow_none ? " or none" : "");
            return -1;
        }
        if (m & bit) {
            tf_errf(err, errlen, "tag '%s' given twice", item);
            return -1;
        }
        m |= bit;
    }
    *mask = m;
    return 0;
}

void tf_tags_format(unsigned mask, char* buf, size_t len) {
    size_t off = 0;

    if (len == 0) return;
    buf[0] = '\0';
    for (unsigned i = 0; i < 3; i++) {
        if (!(mask & (1u << i))) continue;
        int w = snprintf(buf + off, len - off, "%s%s", off ? "," : "", tf_tag_names[i]);
        if (w < 0 || (size_t)w >= len - off) return;
        off += (size_t)w;
    }
}

/* ---- plugstack arguments ---- */

int tf_args_parse(int ac, char** av, struct tf_args* args, char* err, size_t errlen) {
    char clip[48];
    char terr[TF_ERR_LEN];
    int seen_map = 0;

    memset(args, 0, sizeof(*args));
    for (int i = 0; i < ac; i++) {
        const char* a = av[i];

        if (strncmp(a, "map=", 4) == 0) {
            if (seen_map) {
                tf_errf(err, errlen, "plugstack argument map= given twice");
                return -1;
            }
            seen_map = 1;
            if (a[4] == '\0') {
                tf_errf(err, errlen, "plugstack argument map= is empty");
                return -1;
            }
            if (a[4] != '/') {
                tf_errf(err, errlen, "plugstack argument map=%s: the path must be absolute",
                        tf_clip(a + 4, clip, sizeof(clip)));
                return -1;
            }
            if (tf_strlcpy(args->map, a + 4, sizeof(args->map)) != 0) {
                tf_errf(err, errlen, "plugstack argument map=: path longer than %d characters", TF_PATH_MAX - 1);
                return -1;
            }
        } else if (strncmp(a, "default=", 8) == 0) {
            if (args->has_default) {
                tf_errf(err, errlen, "plugstack argument default= given twice");
                return -1;
            }
            if (tf_tags_parse(a + 8, 0, 1, &args->default_tags, terr, sizeof(terr)) != 0) {
                tf_errf(err, errlen, "plugstack argument default=%s: %s", tf_clip(a + 8, clip, sizeof(clip)), terr);
                return -1;
            }
            args->has_default = 1;
        } else {
            tf_errf(err, errlen, "unknown plugstack argument '%s' (known: map=FILE, default=TAGS|none)",
                    tf_clip(a, clip, sizeof(clip)));
            return -1;
        }
    }
    if (!seen_map && !args->has_default) {
        tf_errf(err, errlen, "plugstack line needs map=FILE (or at least default=TAGS)");
        return -1;
    }
    return 0;
}
