/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tagmap_parse: the tag-map parser (tf_map_init, tf_map_parse, tf_map_load): one statement
 * per line (hardware, normalize, threshold, default, rule), every error "FILE:LINE: problem".
 * Pure C11 + POSIX read(2), no SLURM. Does not evaluate the map (tagmap_eval.c).
 */
#define _POSIX_C_SOURCE 200809L

#include "tagmap.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tagmap_internal.h"

#define TF_MAP_MAX_BYTES (1024 * 1024) /* a map is a few hundred bytes; refuse silly files */
#define TF_MAX_WORDS 16

/* Error about map line `line` (0 = the file as a whole). */
static void tf_maperr(char* err, size_t errlen, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void tf_maperr(char* err, size_t errlen, const char* file, int line, const char* fmt, ...) {
    char msg[TF_ERR_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (line > 0) tf_errf(err, errlen, "%s:%d: %s", file, line, msg);
    else tf_errf(err, errlen, "%s: %s", file, msg);
}

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
static int tf_parse_compute_membw(const struct tf_map* map, int line, char** w, int first, int nw, const char* kind,
                                  const char* subject, int say_both, double* compute, double* membw, char* err,
                                  size_t errlen) {
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
            tf_maperr(err, errlen, map->file, line, "unknown %s attribute '%s' (expected compute= and membw=)", kind,
                      tf_clip(w[i], clip, sizeof(clip)));
            return -1;
        }
        if (*have) {
            tf_maperr(err, errlen, map->file, line, "'%.*s' given twice", (int)(strchr(w[i], '=') - w[i] + 1), w[i]);
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
                  say_both  ? "both compute= and membw="
                  : !have_c ? "compute="
                            : "membw=");
        return -1;
    }
    return 0;
}

static int tf_parse_hardware(struct tf_map* map, int line, char** w, int nw, char* err, size_t errlen) {
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
        tf_maperr(err, errlen, map->file, line, "hardware name longer than %d characters", TF_NAME_MAX - 1);
        return -1;
    }
    for (int i = 0; i < map->nhw; i++)
        if (strcmp(map->hw[i].name, hw.name) == 0) {
            tf_maperr(err, errlen, map->file, line, "hardware '%s' already defined on line %d", hw.name,
                      map->hw[i].line);
            return -1;
        }
    char subject[TF_NAME_MAX + 16];
    snprintf(subject, sizeof(subject), "hardware '%s'", hw.name);
    if (tf_parse_compute_membw(map, line, w, 2, nw, "hardware", subject, 0, &hw.compute, &hw.membw, err, errlen) != 0)
        return -1;
    if (map->nhw >= TF_MAX_HW) {
        tf_maperr(err, errlen, map->file, line, "too many hardware lines (at most %d)", TF_MAX_HW);
        return -1;
    }
    map->hw[map->nhw++] = hw;
    return 0;
}

static int tf_parse_normalize(struct tf_map* map, int line, char** w, int nw, char* err, size_t errlen) {
    if (map->has_normalize) {
        tf_maperr(err, errlen, map->file, line, "'normalize' given twice");
        return -1;
    }
    if (tf_parse_compute_membw(map, line, w, 1, nw, "normalize", "'normalize'", 1, &map->norm_compute, &map->norm_membw,
                               err, errlen) != 0)
        return -1;
    map->has_normalize = 1;
    return 0;
}

static int tf_parse_threshold(struct tf_map* map, int line, char** w, int nw, char* err, size_t errlen) {
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
            tf_maperr(err, errlen, map->file, line, "threshold %s already given on line %d", w[1], map->tier[i].line);
            return -1;
        }
    if (map->ntier >= TF_MAX_TIERS) {
        tf_maperr(err, errlen, map->file, line, "too many threshold lines (at most %d)", TF_MAX_TIERS);
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

static int tf_parse_default(struct tf_map* map, int line, char** w, int nw, char* err, size_t errlen) {
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

static int tf_parse_cond(struct tf_map* map, int line, const char* word, struct tf_cond* c, char* err, size_t errlen) {
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
            tf_maperr(err, errlen, map->file, line, "bad GRES name in '%s'", tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
        int type_i = -1, count_i = -1;
        if (np == 2) {
            int numeric = 1;
            for (size_t k = 0; k < plen[1]; k++)
                if (!isdigit((unsigned char)part[1][k])) numeric = 0;
            if (numeric) count_i = 1;
            else type_i = 1;
        } else if (np == 3) {
            type_i = 1;
            count_i = 2;
        }
        if (type_i >= 0 && tf_strncpy_n(c->pattern, sizeof(c->pattern), part[type_i], plen[type_i]) != 0) {
            tf_maperr(err, errlen, map->file, line, "GRES type too long in '%s'", tf_clip(word, clip, sizeof(clip)));
            return -1;
        }
        if (count_i >= 0 && tf_parse_count(part[count_i], &c->count) != 0) {
            tf_maperr(err, errlen, map->file, line, "bad GRES count in '%s' (a whole number from 1 to 1000000)",
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

int tf_map_parse(struct tf_map* map, const char* file, const char* text, size_t len, char* err, size_t errlen) {
    char buf[TF_LINE_MAX];
    size_t pos = 0;
    int line = 0;

    tf_map_init(map, file);
    while (pos < len) {
        const char* nl = memchr(text + pos, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - (text + pos)) : len - pos;

        line++;
        if (n >= sizeof(buf) - 1) {
            tf_maperr(err, errlen, map->file, line, "line longer than %d characters", TF_LINE_MAX - 2);
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
        tf_maperr(err, errlen, map->file, line, "the map has no 'rule' line (every node would get the default)");
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
