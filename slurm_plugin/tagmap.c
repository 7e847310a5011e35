/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tagmap: tag lists, plugstack arguments, the tag-map parser and its
 * evaluation for one node. Pure C11 + POSIX (fnmatch), no SLURM.
 * Does not decide what to do with errors (spank_tagflow.c does) and never
 * copies input without a bound.
 */
#define _POSIX_C_SOURCE 200809L

#include "tagmap.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TF_MAP_MAX_BYTES (1024 * 1024) /* a map is a few hundred bytes; refuse silly files */
#define TF_MAX_WORDS 16
#define TF_EPS 1e-9 /* score comparisons: 0.6*1 + 0.4*0.5 must count as >= 0.8 */

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
static int tf_strncpy_n(char* dst, size_t len, const char* src, size_t n) {
    if (n >= len) {
        if (len) dst[0] = '\0';
        return -1;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
    return 0;
}

static void tf_errf(char* err, size_t errlen, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void tf_errf(char* err, size_t errlen, const char* fmt, ...) {
    va_list ap;

    if (err == NULL || errlen == 0) return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Error about map line `line` (0 = the file as a whole). */
static void tf_maperr(char* err, size_t errlen, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void tf_maperr(char* err, size_t errlen, const char* file, int line, const char* fmt, ...) {
    char msg[TF_ERR_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0)
        tf_errf(err, errlen, "%s:%d: %s", file, line, msg);
    else
        tf_errf(err, errlen, "%s: %s", file, msg);
}

/* Shorten user text for messages: at most 40 characters, with "..." when cut. */
static const char* tf_clip(const char* s, char* buf, size_t len) {
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
static int tf_parse_number(const char* s, double* out) {
    char* end = NULL;
    double v;

    if (s == NULL || *s == '\0' || isspace((unsigned char)*s) || *s == '+' || *s == '-')
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0.0) return -1;
    /* refuse hex floats, "inf", "nan": only digits, one '.', optional exponent */
    for (const char* p = s; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != '.' && *p != 'e' && *p != 'E' && *p != '-' &&
            *p != '+')
            return -1;
    *out = v;
    return 0;
}

/* Strict positive decimal integer up to 1e6. */
static int tf_parse_count(const char* s, unsigned long* out) {
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

int tf_tags_parse(const char* s, int allow_auto, int allow_none, unsigned* mask, char* err,
                  size_t errlen) {
    char buf[TF_OPT_MAX + 1];
    char clip[48];
    unsigned m = 0;
    char* item;
    char* save = NULL;
    size_t n;

    if (s == NULL || *s == '\0') {
        tf_errf(err, errlen, "empty tag list (allowed: rollout,train,critic%s%s)",
                allow_auto ? " or auto" : "", allow_none ? " or none" : "");
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
                        tf_clip(item, clip, sizeof(clip)), allow_auto ? " or auto" : "",
                        allow_none ? " or none" : "");
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
                tf_errf(err, errlen, "plugstack argument map=: path longer than %d characters",
                        TF_PATH_MAX - 1);
                return -1;
            }
        } else if (strncmp(a, "default=", 8) == 0) {
            if (args->has_default) {
                tf_errf(err, errlen, "plugstack argument default= given twice");
                return -1;
            }
            if (tf_tags_parse(a + 8, 0, 1, &args->default_tags, terr, sizeof(terr)) != 0) {
                tf_errf(err, errlen, "plugstack argument default=%s: %s",
                        tf_clip(a + 8, clip, sizeof(clip)), terr);
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

/* ---- the map ---- */

void tf_map_init(struct tf_map* map, const char* file) {
    memset(map, 0, sizeof(*map));
    if (file == NULL || tf_strlcpy(map->file, file, sizeof(map->file)) != 0)
        tf_strlcpy(map->file, "<map>", sizeof(map->file));
    /* SeamlessFlow: >= 0.8 -> rollout,train,critic; >= 0.6 -> rollout,train; else rollout */
    map->tier[0] = (struct tf_tier){0, 0.8, TF_TAG_ALL};
    map->tier[1] = (struct tf_tier){0, 0.6, TF_TAG_ROLLOUT | TF_TAG_TRAIN};
    map->tier[2] = (struct tf_tier){0, 0.0, TF_TAG_ROLLOUT};
    map->ntier = 3;
}

/* key=value word: returns value or NULL when the word does not start with key= */
static const char* tf_kv(const char* word, const char* key) {
    size_t n = strlen(key);

    if (strncmp(word, key, n) == 0 && word[n] == '=') return word + n + 1;
    return NULL;
}

/* Parses the "compute=X membw=Y" words w[first..nw) of a `kind` line ("hardware",
 * "normalize") into *compute and *membw: both required, positive, given once. When one is
 * missing the error reads "<subject> needs compute=" (or "needs both ..." with `say_both`). */
static int tf_parse_compute_membw(const struct tf_map* map, int line, char** w, int first, int nw,
                                  const char* kind, const char* subject, int say_both,
                                  double* compute, double* membw, char* err, size_t errlen) {
    char clip[48];
    int have_c = 0, have_m = 0;

    for (int i = first; i < nw; i++) {
        const char* v;
        double* dst;
        int* have;

        if ((v = tf_kv(w[i], "compute")) != NULL) {
            dst = compute;
            have = &have_c;
        } else if ((v = tf_kv(w[i], "membw")) != NULL) {
            dst = membw;
            have = &have_m;
        } else {
            tf_maperr(err, errlen, map->file, line,
                      "unknown %s attribute '%s' (expected compute= and membw=)", kind,
                      tf_clip(w[i], clip, sizeof(clip)));
            return -1;
        }
        if (*have) {
            tf_maperr(err, errlen, map->file, line, "'%.*s' given twice",
                      (int)(strchr(w[i], '=') - w[i] + 1), w[i]);
            return -1;
        }
        if (tf_parse_number(v, dst) != 0 || *dst <= 0.0) {
            tf_maperr(err, errlen, map->file, line, "'%s': value must be a positive number",
                      tf_clip(w[i], clip, sizeof(clip)));
            return -1;
        }
        *have = 1;
    }
    if (!have_c || !have_m) {
        tf_maperr(err, errlen, map->file, line, "%s needs %s", subject,
                  say_both ? "both compute= and membw=" : !have_c ? "compute=" : "membw=");
        return -1;
    }
    return 0;
}

static int tf_parse_hardware(struct tf_map* map, int line, char** w, int nw, char* err,
                             size_t errlen) {
    struct tf_hw hw;
    char clip[48];

    memset(&hw, 0, sizeof(hw));
    hw.line = line;
    if (nw < 2) {
        tf_maperr(err, errlen, map->file, line, "'hardware' needs a name, compute= and membw=");
        return -1;
    }
    if (strchr(w[1], '=') != NULL) {
        tf_maperr(err, errlen, map->file, line, "'hardware' needs a name before '%s'",
                  tf_clip(w[1], clip, sizeof(clip)));
        return -1;
    }
    if (tf_strlcpy(hw.name, w[1], sizeof(hw.name)) != 0) {
        tf_maperr(err, errlen, map->file, line, "hardware name longer than %d characters",
                  TF_NAME_MAX - 1);
        return -1;
    }
    for (int i = 0; i < map->nhw; i++)
        if (strcmp(map->hw[i].name, hw.name) == 0) {
            tf_maperr(err, errlen, map->file, line, "hardware '%s' already defined on line %d",
                      hw.name, map->hw[i].line);
            return -1;
        }
    char subject[TF_NAME_MAX + 16];
    snprintf(subject, sizeof(subject), "hardware '%s'", hw.name);
    if (tf_parse_compute_membw(map, line, w, 2, nw, "hardware", subject, 0, &hw.compute,
                               &hw.membw, err, errlen) != 0)
        return -1;
    if (map->nhw >= TF_MAX_HW) {
        tf_maperr(err, errlen, map->file, line, "too many hardware lines (at most %d)", TF_MAX_HW);
        return -1;
    }
    map->hw[map->nhw++] = hw;
    return 0;
}

static int tf_parse_normalize(struct tf_map* map, int line, char** w, int nw, char* err,
                              size_t errlen) {
    if (map->has_normalize) {
        tf_maperr(err, errlen, map->file, line, "'normalize' given twice");
        return -1;
    }
    if (tf_parse_compute_membw(map, line, w, 1, nw, "normalize", "'normalize'", 1,
                               &map->norm_compute, &map->norm_membw, err, errlen) != 0)
        return -1;
    map->has_normalize = 1;
    return 0;
}

static int tf_parse_threshold(struct tf_map* map, int line, char** w, int nw, char* err,
                              size_t errlen) {
    char clip[48];
    char terr[TF_ERR_LEN];
    struct tf_tier t;

    if (nw != 3) {
        tf_maperr(err, errlen, map->file, line, "'threshold' needs exactly a score and a tag list");
        return -1;
    }
    t.line = line;
    if (tf_parse_number(w[1], &t.min) != 0) {
        tf_maperr(err, errlen, map->file, line, "threshold '%s' is not a non-negative number",
                  tf_clip(w[1], clip, sizeof(clip)));
        return -1;
    }
    if (tf_tags_parse(w[2], 0, 0, &t.tags, terr, sizeof(terr)) != 0) {
        tf_maperr(err, errlen, map->file, line, "threshold %s: %s", w[1], terr);
        return -1;
    }
    if (!map->custom_tiers) { /* the first threshold line replaces the SeamlessFlow tiers */
        map->ntier = 0;
        map->custom_tiers = 1;
    }
    for (int i = 0; i < map->ntier; i++)
        if (fabs(map->tier[i].min - t.min) < TF_EPS) {
            tf_maperr(err, errlen, map->file, line, "threshold %s already given on line %d", w[1],
                      map->tier[i].line);
            return -1;
        }
    if (map->ntier >= TF_MAX_TIERS) {
        tf_maperr(err, errlen, map->file, line, "too many threshold lines (at most %d)",
                  TF_MAX_TIERS);
        return -1;
    }
    /* insertion keeps the tiers sorted, highest first */
    int pos = map->ntier;
    while (pos > 0 && map->tier[pos - 1].min < t.min) {
        map->tier[pos] = map->tier[pos - 1];
        pos--;
    }
    map->tier[pos] = t;
    map->ntier++;
    return 0;
}

static int tf_parse_default(struct tf_map* map, int line, char** w, int nw, char* err,
                            size_t errlen) {
    char terr[TF_ERR_LEN];

    if (map->has_default) {
        tf_maperr(err, errlen, map->file, line, "'default' given twice");
        return -1;
    }
    if (nw != 2) {
        tf_maperr(err, errlen, map->file, line, "'default' needs exactly one tag list (or none)");
        return -1;
    }
    if (tf_tags_parse(w[1], 0, 1, &map->default_tags, terr, sizeof(terr)) != 0) {
        tf_maperr(err, errlen, map->file, line, "default: %s", terr);
        return -1;
    }
    map->has_default = 1;
    return 0;
}

/* Glob pattern sanity: non-empty, fits, no '=' (catches "feature==x"). */
static int tf_check_pattern(const char* p, size_t maxlen) {
    return (*p != '\0' && strnlen(p, maxlen) < maxlen && strchr(p, '=') == NULL) ? 0 : -1;
}

static int tf_parse_cond(struct tf_map* map, int line, const char* word, struct tf_cond* c,
                         char* err, size_t errlen) {
    char clip[48];
    const char* v;

    memset(c, 0, sizeof(*c));
    if (strcmp(word, "*") == 0) {
        c->kind = TF_COND_ANY;
    } else if ((v = tf_kv(word, "feature")) != NULL || (v = tf_kv(word, "hardware")) != NULL) {
        c->kind = word[0] == 'f' ? TF_COND_FEATURE : TF_COND_HARDWARE;
        if (tf_check_pattern(v, sizeof(c->pattern)) != 0) {
            tf_maperr(err, errlen, map->file, line, "bad pattern in '%s' (empty, too long or contains '=')",
                      tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
        tf_strlcpy(c->pattern, v, sizeof(c->pattern));
    } else if ((v = tf_kv(word, "gres")) != NULL) {
        /* NAME[:TYPE][:COUNT]; a purely numeric second field is a count, as in SLURM */
        const char* part[4];
        size_t plen[4];
        int np = 0;
        const char* p = v;

        c->kind = TF_COND_GRES;
        c->count = 1;
        for (;;) {
            const char* colon = strchr(p, ':');
            if (np == 4) break;
            part[np] = p;
            plen[np] = colon ? (size_t)(colon - p) : strlen(p);
            np++;
            if (!colon) break;
            p = colon + 1;
        }
        int bad = np > 3;
        for (int i = 0; i < np && !bad; i++)
            if (plen[i] == 0) bad = 1;
        if (bad) {
            tf_maperr(err, errlen, map->file, line,
                      "bad GRES '%s' (expected gres=NAME[:TYPE][:COUNT], e.g. gres=gpu:h100:2)",
                      tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
        if (tf_strncpy_n(c->gres_name, sizeof(c->gres_name), part[0], plen[0]) != 0 ||
            strchr(c->gres_name, '=') != NULL) {
            tf_maperr(err, errlen, map->file, line, "bad GRES name in '%s'",
                      tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
        int type_i = -1, count_i = -1;
        if (np == 2) {
            int numeric = 1;
            for (size_t k = 0; k < plen[1]; k++)
                if (!isdigit((unsigned char)part[1][k])) numeric = 0;
            if (numeric)
                count_i = 1;
            else
                type_i = 1;
        } else if (np == 3) {
            type_i = 1;
            count_i = 2;
        }
        if (type_i >= 0 && tf_strncpy_n(c->pattern, sizeof(c->pattern), part[type_i], plen[type_i]) != 0) {
            tf_maperr(err, errlen, map->file, line, "GRES type too long in '%s'",
                      tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
        if (count_i >= 0 && tf_parse_count(part[count_i], &c->count) != 0) {
            tf_maperr(err, errlen, map->file, line,
                      "bad GRES count in '%s' (a whole number from 1 to 1000000)",
                      tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
    } else if (strncmp(word, "score>=", 7) == 0 || strncmp(word, "score<", 6) == 0) {
        int ge = word[5] == '>';
        c->kind = ge ? TF_COND_SCORE_GE : TF_COND_SCORE_LT;
        if (tf_parse_number(word + (ge ? 7 : 6), &c->value) != 0) {
            tf_maperr(err, errlen, map->file, line, "bad score bound in '%s' (a non-negative number)",
                      tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
    } else {
        tf_maperr(err, errlen, map->file, line,
                  "unknown condition '%s' (expected feature=, gres=, hardware=, score>=, score< or *)",
                  tf_clip(word, clip, sizeof(clip)));
        return -1;
    }
    return 0;
}

/* "rule COND... -> TAGS|score"; rest is the text after the keyword. */
static int tf_parse_rule(struct tf_map* map, int line, char* rest, char* err, size_t errlen) {
    char clip[48];
    char terr[TF_ERR_LEN];
    struct tf_rule r;
    char* arrow = strstr(rest, "->");
    char* w[TF_MAX_WORDS];
    int nw = 0;
    char* save = NULL;
    char* tok;

    memset(&r, 0, sizeof(r));
    r.line = line;
    if (arrow == NULL) {
        tf_maperr(err, errlen, map->file, line, "rule without '->' (expected: rule COND... -> TAGS)");
        return -1;
    }
    if (strstr(arrow + 2, "->") != NULL) {
        tf_maperr(err, errlen, map->file, line, "rule with more than one '->'");
        return -1;
    }
    *arrow = '\0';
    for (tok = strtok_r(rest, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (nw == TF_MAX_COND) {
            tf_maperr(err, errlen, map->file, line, "too many conditions (at most %d)", TF_MAX_COND);
            return -1;
        }
        w[nw++] = tok;
    }
    if (nw == 0) {
        tf_maperr(err, errlen, map->file, line, "rule has no condition before '->' (use * to match every node)");
        return -1;
    }
    for (int i = 0; i < nw; i++)
        if (tf_parse_cond(map, line, w[i], &r.cond[i], err, errlen) != 0) return -1;
    r.ncond = nw;
    nw = 0;
    save = NULL;
    for (tok = strtok_r(arrow + 2, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (nw == 1) {
            tf_maperr(err, errlen, map->file, line,
                      "more than one word after '->' ('%s'); write tags without spaces: rollout,train",
                      tf_clip(tok, clip, sizeof(clip)));
            return -1;
        }
        w[nw++] = tok;
    }
    if (nw == 0) {
        tf_maperr(err, errlen, map->file, line, "rule has no tags after '->'");
        return -1;
    }
    if (strcmp(w[0], "score") == 0) {
        r.use_score = 1;
    } else if (tf_tags_parse(w[0], 0, 0, &r.tags, terr, sizeof(terr)) != 0) {
        tf_maperr(err, errlen, map->file, line, "%s", terr);
        return -1;
    }
    if (map->nrule >= TF_MAX_RULES) {
        tf_maperr(err, errlen, map->file, line, "too many rules (at most %d)", TF_MAX_RULES);
        return -1;
    }
    map->rule[map->nrule++] = r;
    return 0;
}

static int tf_rule_needs_hw(const struct tf_rule* r) {
    if (r->use_score) return 1;
    for (int i = 0; i < r->ncond; i++)
        if (r->cond[i].kind == TF_COND_HARDWARE || r->cond[i].kind == TF_COND_SCORE_GE ||
            r->cond[i].kind == TF_COND_SCORE_LT)
            return 1;
    return 0;
}

/* One line, NUL-terminated in buf (newline removed). */
static int tf_parse_line(struct tf_map* map, int line, char* buf, char* err, size_t errlen) {
    char clip[48];
    char* w[TF_MAX_WORDS];
    int nw = 0;
    char* hash = strchr(buf, '#');
    char* p;

    if (hash) *hash = '\0';
    for (p = buf; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '\r' || ch == '\t') {
            *p = ch == '\r' ? ' ' : '\t';
            continue;
        }
        if (ch < 0x20 || ch >= 0x7f) {
            tf_maperr(err, errlen, map->file, line, "invalid character 0x%02x", ch);
            return -1;
        }
    }
    for (p = buf; *p == ' ' || *p == '\t'; p++) continue;
    if (*p == '\0') return 0; /* blank or comment */

    if (strncmp(p, "rule", 4) == 0 && (p[4] == ' ' || p[4] == '\t' || p[4] == '\0'))
        return tf_parse_rule(map, line, p + 4, err, errlen);

    char* save = NULL;
    for (char* tok = strtok_r(p, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (nw == TF_MAX_WORDS) {
            tf_maperr(err, errlen, map->file, line, "too many words (at most %d)", TF_MAX_WORDS);
            return -1;
        }
        w[nw++] = tok;
    }
    if (nw == 0) return 0;
    if (strcmp(w[0], "hardware") == 0) return tf_parse_hardware(map, line, w, nw, err, errlen);
    if (strcmp(w[0], "normalize") == 0) return tf_parse_normalize(map, line, w, nw, err, errlen);
    if (strcmp(w[0], "threshold") == 0) return tf_parse_threshold(map, line, w, nw, err, errlen);
    if (strcmp(w[0], "default") == 0) return tf_parse_default(map, line, w, nw, err, errlen);
    tf_maperr(err, errlen, map->file, line,
              "unknown keyword '%s' (expected hardware, normalize, threshold, default or rule)",
              tf_clip(w[0], clip, sizeof(clip)));
    return -1;
}

int tf_map_parse(struct tf_map* map, const char* file, const char* text, size_t len, char* err,
                 size_t errlen) {
    char buf[TF_LINE_MAX];
    size_t pos = 0;
    int line = 0;

    tf_map_init(map, file);
    while (pos < len) {
        const char* nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;

        line++;
        if (n >= sizeof(buf) - 1) {
            tf_maperr(err, errlen, map->file, line, "line longer than %d characters",
                      TF_LINE_MAX - 2);
            return -1;
        }
        if (memchr(text + pos, '\0', n) != NULL) {
            tf_maperr(err, errlen, map->file, line, "NUL byte in line");
            return -1;
        }
        memcpy(buf, text + pos, n);
        buf[n] = '\0';
        if (tf_parse_line(map, line, buf, err, errlen) != 0) return -1;
        pos += n + (nl ? 1 : 0);
    }
    map->nlines = line;
    if (map->nrule == 0) {
        tf_maperr(err, errlen, map->file, line,
                  "the map has no 'rule' line (every node would get the default)");
        return -1;
    }
    for (int i = 0; i < map->nrule; i++)
        if (tf_rule_needs_hw(&map->rule[i]) && map->nhw == 0) {
            tf_maperr(err, errlen, map->file, map->rule[i].line,
                      "rule uses the hardware score but the map has no 'hardware' line");
            return -1;
        }
    if (map->has_normalize && map->nhw == 0) {
        tf_maperr(err, errlen, map->file, line, "'normalize' given but the map has no 'hardware' line");
        return -1;
    }
    return 0;
}

int tf_map_load(struct tf_map* map, const char* file, int* open_errno, char* err, size_t errlen) {
    char* text = NULL;
    size_t len = 0;
    int fd;
    int rc = -1;

    *open_errno = 0;
    tf_map_init(map, file);
    fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *open_errno = errno;
        tf_maperr(err, errlen, map->file, 0, "cannot open tag map: %s", strerror(errno));
        return -1;
    }
    text = malloc(TF_MAP_MAX_BYTES + 1);
    if (text == NULL) {
        *open_errno = ENOMEM;
        tf_maperr(err, errlen, map->file, 0, "out of memory");
        goto out;
    }
    for (;;) {
        ssize_t r = read(fd, text + len, TF_MAP_MAX_BYTES + 1 - len);
        if (r < 0) {
            if (errno == EINTR) continue;
            *open_errno = errno;
            tf_maperr(err, errlen, map->file, 0, "cannot read tag map: %s", strerror(errno));
            goto out;
        }
        if (r == 0) break;
        len += (size_t)r;
        if (len > TF_MAP_MAX_BYTES) {
            tf_maperr(err, errlen, map->file, 0, "tag map larger than %d bytes", TF_MAP_MAX_BYTES);
            goto out;
        }
    }
    rc = tf_map_parse(map, file, text, len, err, errlen);
out:
    free(text);
    close(fd);
    return rc;
}

double tf_map_hw_score(const struct tf_map* map, int i) {
    double ref_c = map->norm_compute, ref_m = map->norm_membw;

    if (i < 0 || i >= map->nhw) return 0.0;
    if (!map->has_normalize) {
        ref_c = ref_m = 0.0;
        for (int k = 0; k < map->nhw; k++) {
            if (map->hw[k].compute > ref_c) ref_c = map->hw[k].compute;
            if (map->hw[k].membw > ref_m) ref_m = map->hw[k].membw;
        }
    }
    return 0.6 * (map->hw[i].compute / ref_c) + 0.4 * (map->hw[i].membw / ref_m);
}

unsigned tf_map_tier_tags(const struct tf_map* map, double score) {
    for (int i = 0; i < map->ntier; i++)
        if (score + TF_EPS >= map->tier[i].min) return map->tier[i].tags;
    return 0;
}

/* ---- nodes ---- */

void tf_node_init(struct tf_node* node, const char* name) {
    memset(node, 0, sizeof(*node));
    if (name == NULL || tf_strlcpy(node->name, name, sizeof(node->name)) != 0)
        tf_strlcpy(node->name, "?", sizeof(node->name));
}

int tf_node_add_features(struct tf_node* node, const char* csv, char* err, size_t errlen) {
    const char* p = csv;

    if (csv == NULL) return 0;
    while (*p) {
        const char* comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);

        if (n > 0) {
            if (node->nfeatures >= TF_MAX_FEATURES) {
                tf_errf(err, errlen, "node %s has more than %d features", node->name, TF_MAX_FEATURES);
                return -1;
            }
            if (tf_strncpy_n(node->features[node->nfeatures], TF_NAME_MAX, p, n) != 0) {
                tf_errf(err, errlen, "node %s: feature longer than %d characters", node->name,
                        TF_NAME_MAX - 1);
                return -1;
            }
            node->nfeatures++;
        }
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

/* One GRES item "gpu:h100:2(IDX:0-1)" of length n. */
static int tf_node_add_gres_item(struct tf_node* node, const char* s, size_t n, char* err,
                                 size_t errlen) {
    char item[TF_NAME_MAX + TF_GRES_NAME_MAX + 32];
    char paren[128] = "";
    char* open;
    char* f[4];
    int nf = 0;
    struct tf_gres g;

    memset(&g, 0, sizeof(g));
    if (tf_strncpy_n(item, sizeof(item), s, n) != 0) {
        tf_errf(err, errlen, "GRES entry too long on node %s", node->name);
        return -1;
    }
    open = strchr(item, '(');
    if (open) {
        char* close = strrchr(open, ')');
        if (close == NULL || close[1] != '\0') {
            tf_errf(err, errlen, "unbalanced parentheses in GRES '%s'", item);
            return -1;
        }
        *close = '\0';
        snprintf(paren, sizeof(paren), "%s", open + 1); /* truncation harmless: only CNT: is read */
        *open = '\0';
    }
    for (char* p = item;;) {
        char* colon = strchr(p, ':');
        if (nf == 4) break;
        f[nf++] = p;
        if (!colon) break;
        *colon = '\0';
        p = colon + 1;
    }
    if (nf > 3 || f[0][0] == '\0') {
        tf_errf(err, errlen, "cannot parse GRES '%.*s'", (int)n, s);
        return -1;
    }
    tf_strlcpy(g.name, f[0], sizeof(g.name));
    g.count = 1;
    int type_i = -1, count_i = -1;
    if (nf == 2) {
        int numeric = f[1][0] != '\0';
        for (const char* q = f[1]; *q; q++)
            if (!isdigit((unsigned char)*q)) numeric = 0;
        if (numeric)
            count_i = 1;
        else
            type_i = 1;
    } else if (nf == 3) {
        type_i = 1;
        count_i = 2;
    }
    if (type_i >= 0 && (f[type_i][0] == '\0' || tf_strlcpy(g.type, f[type_i], sizeof(g.type)) != 0)) {
        tf_errf(err, errlen, "bad GRES type in '%.*s'", (int)n, s);
        return -1;
    }
    if (count_i >= 0) {
        unsigned long c;
        if (strcmp(f[count_i], "0") == 0) return 0; /* nothing allocated */
        if (tf_parse_count(f[count_i], &c) != 0) {
            tf_errf(err, errlen, "bad GRES count in '%.*s'", (int)n, s);
            return -1;
        }
        g.count = c;
    } else if (strncmp(paren, "CNT:", 4) == 0) {
        unsigned long c;
        if (tf_parse_count(paren + 4, &c) != 0) {
            tf_errf(err, errlen, "bad GRES count in '%.*s'", (int)n, s);
            return -1;
        }
        g.count = c;
    }
    if (node->ngres >= TF_MAX_GRES) {
        tf_errf(err, errlen, "more than %d GRES entries on node %s", TF_MAX_GRES, node->name);
        return -1;
    }
    node->gres[node->ngres++] = g;
    return 0;
}

int tf_node_add_gres(struct tf_node* node, const char* detail, char* err, size_t errlen) {
    const char* p = detail;

    if (detail == NULL) return 0;
    while (*p) {
        const char* q = p;
        int depth = 0;

        while (*q && (depth > 0 || *q != ',')) {
            if (*q == '(') depth++;
            if (*q == ')' && depth > 0) depth--;
            q++;
        }
        if (q > p && tf_node_add_gres_item(node, p, (size_t)(q - p), err, errlen) != 0) return -1;
        if (!*q) break;
        p = q + 1;
    }
    return 0;
}

void tf_node_describe(const struct tf_node* node, char* buf, size_t len) {
    size_t off = 0;
    int w = 0;

    if (len == 0) return;
    buf[0] = '\0';
#define TF_APPEND(...)                                         \
    do {                                                       \
        w = snprintf(buf + off, len - off, __VA_ARGS__);       \
        if (w < 0 || (size_t)w >= len - off) return;           \
        off += (size_t)w;                                      \
    } while (0)
    TF_APPEND("features=");
    if (node->nfeatures == 0) TF_APPEND("(none)");
    for (int i = 0; i < node->nfeatures; i++) TF_APPEND("%s%s", i ? "," : "", node->features[i]);
    TF_APPEND(" gres=");
    if (node->ngres == 0) TF_APPEND("(none)");
    for (int i = 0; i < node->ngres; i++)
        TF_APPEND("%s%s%s%s:%lu", i ? "," : "", node->gres[i].name, node->gres[i].type[0] ? ":" : "",
                  node->gres[i].type, node->gres[i].count);
#undef TF_APPEND
}

/* ---- evaluation ---- */

/* The node's hardware entry: from the job's GRES types on the node, else from its features. */
static int tf_node_hw(const struct tf_map* map, const struct tf_node* node, double* score) {
    int best = -1;
    double best_score = -1.0;

    for (int pass = 0; pass < 2 && best < 0; pass++) {
        int n = pass == 0 ? node->ngres : node->nfeatures;
        for (int k = 0; k < n; k++) {
            const char* name = pass == 0 ? node->gres[k].type : node->features[k];
            if (name[0] == '\0') continue;
            for (int i = 0; i < map->nhw; i++) {
                if (strcmp(map->hw[i].name, name) != 0) continue;
                double s = tf_map_hw_score(map, i);
                if (s > best_score) {
                    best = i;
                    best_score = s;
                }
            }
        }
    }
    *score = best >= 0 ? best_score : 0.0;
    return best;
}

static int tf_cond_match(const struct tf_map* map, const struct tf_cond* c, const struct tf_node* node,
                         int hw, double score) {
    switch (c->kind) {
        case TF_COND_ANY:
            return 1;
        case TF_COND_FEATURE:
            for (int i = 0; i < node->nfeatures; i++)
                if (fnmatch(c->pattern, node->features[i], 0) == 0) return 1;
            return 0;
        case TF_COND_HARDWARE:
            return hw >= 0 && fnmatch(c->pattern, map->hw[hw].name, 0) == 0;
        case TF_COND_GRES: {
            unsigned long sum = 0;
            for (int i = 0; i < node->ngres; i++) {
                const struct tf_gres* g = &node->gres[i];
                if (fnmatch(c->gres_name, g->name, 0) != 0) continue;
                if (c->pattern[0] && fnmatch(c->pattern, g->type, 0) != 0) continue;
                sum += g->count;
            }
            return sum >= c->count;
        }
        case TF_COND_SCORE_GE:
            return hw >= 0 && score + TF_EPS >= c->value;
        case TF_COND_SCORE_LT:
            return hw >= 0 && score + TF_EPS < c->value;
    }
    return 0;
}

unsigned tf_evaluate(const struct tf_map* map, const struct tf_args* args, const struct tf_node* node,
                     unsigned requested, struct tf_result* res) {
    memset(res, 0, sizeof(*res));
    res->rule = -1;
    res->hw = -1;
    if (map != NULL) {
        res->hw = tf_node_hw(map, node, &res->score);
        for (int r = 0; r < map->nrule && res->rule < 0; r++) {
            const struct tf_rule* rule = &map->rule[r];
            int ok = 1;
            for (int i = 0; i < rule->ncond && ok; i++)
                ok = tf_cond_match(map, &rule->cond[i], node, res->hw, res->score);
            if (!ok) continue;
            unsigned tags = rule->tags;
            if (rule->use_score) {
                if (res->hw < 0) continue; /* unknown hardware: the score rule does not apply */
                tags = tf_map_tier_tags(map, res->score);
                if (tags == 0) continue;
            }
            res->rule = r;
            res->map_tags = tags;
        }
    }
    if (res->rule < 0) {
        res->from_default = 1;
        if (args != NULL && args->has_default) {
            res->has_default = 1;
            res->map_tags = args->default_tags;
        } else if (map != NULL && map->has_default) {
            res->has_default = 1;
            res->map_tags = map->default_tags;
        }
    }
    res->tags = res->map_tags & requested;
    if (res->from_default)
        res->source = TF_SRC_DEFAULT;
    else if (res->tags != res->map_tags)
        res->source = TF_SRC_OPTION;
    else
        res->source = TF_SRC_MAP;
    return res->tags;
}

const char* tf_source_name(enum tf_source src) {
    switch (src) {
        case TF_SRC_MAP:
            return "map";
        case TF_SRC_OPTION:
            return "option";
        case TF_SRC_DEFAULT:
            return "default";
    }
    return "?";
}
