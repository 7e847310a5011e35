/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_tagmap: libFuzzer target for the tag-map parser (slurm_plugin/tagmap*.c) and its
 * evaluation, the code spank_tagflow.so runs as root in slurmstepd.
 * Input: a tag map. If a line "%%" occurs, the map is what comes before it and the next two
 * lines describe one more node to evaluate: a feature list and a GRES detail string.
 * Checks, beyond "no crash, no UB, no leak":
 *   - a failed parse leaves one printable line "fuzz.map[:LINE]: ..." with LINE within the input;
 *   - a parsed map is within its limits (rules, tiers sorted, tags, names, positive numbers);
 *   - it re-validates: printed back as map text (fuzz_format_map) it parses again to the same map;
 *   - evaluation for every requested mask and a few nodes (the map's own hardware names,
 *     feature patterns, the input's node) is consistent (tags = map tags & requested,
 *     rule/hardware indices in range, the source, the default), deterministic, and the same
 *     on the re-parsed map.
 * Does not read files (tf_map_load is a thin read loop around tf_map_parse).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "tagmap.h"

#define FILE_NAME "fuzz.map"

static struct tf_map map_a, map_b;

static int printable_line(const char* s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f) return 0;
    return 1;
}

/* err must be NUL-terminated within TF_ERR_LEN and read "fuzz.map[:LINE]: ..." */
static void check_error(const char* err, int nlines_in_input) {
    FUZZ_CHECK(memchr(err, '\0', TF_ERR_LEN) != NULL, "error not terminated");
    FUZZ_CHECK(err[0] != '\0', "failure without a message");
    FUZZ_CHECK(printable_line(err), "error is not one printable line: %s", err);
    FUZZ_CHECK(strncmp(err, FILE_NAME ":", strlen(FILE_NAME ":")) == 0, "error without file: %s", err);
    const char* p = err + strlen(FILE_NAME ":");
    if (*p >= '0' && *p <= '9') {
        long line = strtol(p, NULL, 10);
        FUZZ_CHECK(line >= 1 && line <= nlines_in_input, "error names line %ld of %d: %s", line, nlines_in_input, err);
    }
}

static void check_tags(unsigned tags, int allow_empty, const char* what) {
    FUZZ_CHECK((tags & ~TF_TAG_ALL) == 0, "%s: stray tag bits %#x", what, tags);
    FUZZ_CHECK(allow_empty || tags != 0, "%s: empty tag set", what);
}

static int bounded_nonempty(const char* s, size_t cap) {
    size_t n = strnlen(s, cap);
    return n > 0 && n < cap;
}

/* The invariants a successfully parsed map must satisfy. */
static void check_map(const struct tf_map* m) {
    FUZZ_CHECK(strcmp(m->file, FILE_NAME) == 0, "file name %s", m->file);
    FUZZ_CHECK(m->nrule >= 1 && m->nrule <= TF_MAX_RULES, "nrule %d", m->nrule);
    FUZZ_CHECK(m->nhw >= 0 && m->nhw <= TF_MAX_HW, "nhw %d", m->nhw);
    FUZZ_CHECK(m->ntier >= 1 && m->ntier <= TF_MAX_TIERS, "ntier %d", m->ntier);
    for (int i = 0; i < m->nhw; i++) {
        const struct tf_hw* h = &m->hw[i];
        FUZZ_CHECK(bounded_nonempty(h->name, sizeof(h->name)) && strchr(h->name, '=') == NULL, "hardware %d name", i);
        FUZZ_CHECK(isfinite(h->compute) && h->compute > 0 && isfinite(h->membw) && h->membw > 0, "hardware %s numbers",
                   h->name);
        for (int k = 0; k < i; k++) FUZZ_CHECK(strcmp(m->hw[k].name, h->name) != 0, "hardware %s twice", h->name);
        double s = tf_map_hw_score(m, i);
        FUZZ_CHECK(!isnan(s) && s >= 0.0, "score of %s is %g", h->name, s);
        if (!m->has_normalize) FUZZ_CHECK(s <= 1.0 + 1e-12, "relative score of %s is %g > 1", h->name, s);
    }
    if (m->has_normalize)
        FUZZ_CHECK(m->nhw > 0 && m->norm_compute > 0 && m->norm_membw > 0 && isfinite(m->norm_compute) &&
                       isfinite(m->norm_membw),
                   "normalize without hardware or with bad numbers");
    for (int i = 0; i < m->ntier; i++) {
        FUZZ_CHECK(isfinite(m->tier[i].min) && m->tier[i].min >= 0, "tier %d min", i);
        check_tags(m->tier[i].tags, 0, "tier");
        if (i > 0) FUZZ_CHECK(m->tier[i - 1].min > m->tier[i].min, "tiers not sorted at %d", i);
    }
    if (m->has_default) check_tags(m->default_tags, 1, "default");
    int prev_line = 0;
    for (int r = 0; r < m->nrule; r++) {
        const struct tf_rule* rule = &m->rule[r];
        FUZZ_CHECK(rule->line > prev_line && rule->line <= m->nlines, "rule %d line %d", r, rule->line);
        prev_line = rule->line;
        FUZZ_CHECK(rule->ncond >= 1 && rule->ncond <= TF_MAX_COND, "rule %d ncond %d", r, rule->ncond);
        if (rule->use_score) FUZZ_CHECK(rule->tags == 0 && m->nhw > 0, "score rule %d", r);
        else check_tags(rule->tags, 0, "rule");
        for (int c = 0; c < rule->ncond; c++) {
            const struct tf_cond* cd = &rule->cond[c];
            switch (cd->kind) {
                case TF_COND_ANY: break;
                case TF_COND_FEATURE:
                case TF_COND_HARDWARE:
                    FUZZ_CHECK(bounded_nonempty(cd->pattern, sizeof(cd->pattern)) && strchr(cd->pattern, '=') == NULL,
                               "rule %d pattern", r);
                    if (cd->kind == TF_COND_HARDWARE) FUZZ_CHECK(m->nhw > 0, "hardware= without table");
                    break;
                case TF_COND_GRES:
                    FUZZ_CHECK(
                        bounded_nonempty(cd->gres_name, sizeof(cd->gres_name)) && strpbrk(cd->gres_name, "=:") == NULL,
                        "rule %d GRES name", r);
                    FUZZ_CHECK(memchr(cd->pattern, '\0', sizeof(cd->pattern)) && !strchr(cd->pattern, ':'),
                               "rule %d GRES type", r);
                    FUZZ_CHECK(cd->count >= 1 && cd->count <= 1000000ul, "rule %d GRES count %lu", r, cd->count);
                    break;
                case TF_COND_SCORE_GE:
                case TF_COND_SCORE_LT:
                    FUZZ_CHECK(isfinite(cd->value) && cd->value >= 0 && m->nhw > 0, "rule %d bound", r);
                    break;
                default: FUZZ_CHECK(0, "rule %d condition kind %d", r, (int)cd->kind);
            }
        }
    }
}

/* ---- printing a map back as text ---- */

struct out {
    char* buf;
    size_t len, cap;
};

static void put(struct out* o, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out* o, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    FUZZ_CHECK(w >= 0 && (size_t)w < o->cap - o->len, "formatted map too long");
    o->len += (size_t)w;
}

static void put_tags(struct out* o, unsigned tags) {
    char t[TF_TAGS_STR_LEN];
    tf_tags_format(tags, t, sizeof(t));
    put(o, "%s", tags ? t : "none");
}

static void format_map(const struct tf_map* m, struct out* o) {
    for (int i = 0; i < m->nhw; i++)
        put(o, "hardware %s compute=%.17g membw=%.17g\n", m->hw[i].name, m->hw[i].compute, m->hw[i].membw);
    if (m->has_normalize) put(o, "normalize compute=%.17g membw=%.17g\n", m->norm_compute, m->norm_membw);
    if (m->custom_tiers)
        for (int i = 0; i < m->ntier; i++) {
            put(o, "threshold %.17g ", m->tier[i].min);
            put_tags(o, m->tier[i].tags);
            put(o, "\n");
        }
    if (m->has_default) {
        put(o, "default ");
        put_tags(o, m->default_tags);
        put(o, "\n");
    }
    for (int r = 0; r < m->nrule; r++) {
        const struct tf_rule* rule = &m->rule[r];
        put(o, "rule");
        for (int c = 0; c < rule->ncond; c++) {
            const struct tf_cond* cd = &rule->cond[c];
            switch (cd->kind) {
                case TF_COND_ANY: put(o, " *"); break;
                case TF_COND_FEATURE: put(o, " feature=%s", cd->pattern); break;
                case TF_COND_HARDWARE: put(o, " hardware=%s", cd->pattern); break;
                case TF_COND_GRES:
                    put(o, " gres=%s%s%s:%lu", cd->gres_name, cd->pattern[0] ? ":" : "", cd->pattern, cd->count);
                    break;
                case TF_COND_SCORE_GE: put(o, " score>=%.17g", cd->value); break;
                case TF_COND_SCORE_LT: put(o, " score<%.17g", cd->value); break;
            }
        }
        put(o, " -> ");
        if (rule->use_score) put(o, "score");
        else put_tags(o, rule->tags);
        put(o, "\n");
    }
}

/* Same map, up to line numbers. */
static void check_same_map(const struct tf_map* a, const struct tf_map* b) {
    FUZZ_CHECK(a->nhw == b->nhw && a->has_normalize == b->has_normalize && a->ntier == b->ntier &&
                   a->custom_tiers == b->custom_tiers && a->nrule == b->nrule && a->has_default == b->has_default &&
                   a->default_tags == b->default_tags,
               "re-parsed map differs in its counts");
    for (int i = 0; i < a->nhw; i++)
        FUZZ_CHECK(strcmp(a->hw[i].name, b->hw[i].name) == 0 && a->hw[i].compute == b->hw[i].compute &&
                       a->hw[i].membw == b->hw[i].membw,
                   "re-parsed hardware %d differs", i);
    if (a->has_normalize)
        FUZZ_CHECK(a->norm_compute == b->norm_compute && a->norm_membw == b->norm_membw, "re-parsed normalize differs");
    for (int i = 0; i < a->ntier; i++)
        FUZZ_CHECK(a->tier[i].min == b->tier[i].min && a->tier[i].tags == b->tier[i].tags, "re-parsed tier %d differs",
                   i);
    for (int r = 0; r < a->nrule; r++) {
        const struct tf_rule *x = &a->rule[r], *y = &b->rule[r];
        FUZZ_CHECK(x->ncond == y->ncond && x->use_score == y->use_score && x->tags == y->tags,
                   "re-parsed rule %d differs", r);
        for (int c = 0; c < x->ncond; c++) {
            const struct tf_cond *p = &x->cond[c], *q = &y->cond[c];
            FUZZ_CHECK(p->kind == q->kind && strcmp(p->pattern, q->pattern) == 0 &&
                           strcmp(p->gres_name, q->gres_name) == 0 &&
                           (p->kind != TF_COND_GRES || p->count == q->count) && p->value == q->value,
                       "re-parsed rule %d condition %d differs", r, c);
        }
    }
}

/* ---- evaluation ---- */

static void check_eval(const struct tf_map* m, const struct tf_map* m2, const struct tf_args* args,
                       const struct tf_node* node) {
    for (unsigned req = 0; req <= TF_TAG_ALL; req++) {
        struct tf_result res, again, other;
        unsigned tags = tf_evaluate(m, args, node, req, &res);

        FUZZ_CHECK(tags == res.tags && res.tags == (res.map_tags & req), "tags %#x vs map %#x & %#x", res.tags,
                   res.map_tags, req);
        check_tags(res.map_tags, 1, "evaluated");
        FUZZ_CHECK(res.rule >= -1 && res.rule < m->nrule, "rule index %d", res.rule);
        FUZZ_CHECK(res.hw >= -1 && res.hw < m->nhw, "hardware index %d", res.hw);
        if (res.hw >= 0)
            FUZZ_CHECK(res.score == tf_map_hw_score(m, res.hw), "score %g of hardware %d", res.score, res.hw);
        if (res.rule >= 0) {
            const struct tf_rule* rule = &m->rule[res.rule];
            FUZZ_CHECK(!res.from_default && res.map_tags != 0, "matched rule without tags");
            if (rule->use_score)
                FUZZ_CHECK(res.hw >= 0 && res.map_tags == tf_map_tier_tags(m, res.score), "score rule tags");
            else FUZZ_CHECK(res.map_tags == rule->tags, "rule tags");
            FUZZ_CHECK(res.source == (res.tags == res.map_tags ? TF_SRC_MAP : TF_SRC_OPTION), "source");
        } else {
            FUZZ_CHECK(res.from_default && res.source == TF_SRC_DEFAULT, "no rule but not default");
            if (args && args->has_default)
                FUZZ_CHECK(res.has_default && res.map_tags == args->default_tags, "plugstack default");
            else if (m->has_default) FUZZ_CHECK(res.has_default && res.map_tags == m->default_tags, "map default");
            else FUZZ_CHECK(!res.has_default && res.map_tags == 0, "no default but tags");
        }
        /* a "*"-only rule without score before the chosen one would have matched */
        int last = res.rule < 0 ? m->nrule : res.rule;
        for (int r = 0; r < last; r++) {
            int all_any = !m->rule[r].use_score;
            for (int c = 0; c < m->rule[r].ncond; c++)
                if (m->rule[r].cond[c].kind != TF_COND_ANY) all_any = 0;
            FUZZ_CHECK(!all_any, "rule %d matches every node but rule %d was chosen", r, res.rule);
        }
        tf_evaluate(m, args, node, req, &again);
        FUZZ_CHECK(memcmp(&res, &again, sizeof(res)) == 0, "evaluation not deterministic");
        tf_evaluate(m2, args, node, req, &other);
        FUZZ_CHECK(memcmp(&res, &other, sizeof(res)) == 0, "re-parsed map evaluates differently");
        FUZZ_CHECK(tf_source_name(res.source)[0] != '?', "source name");
    }
}

static void eval_nodes(const struct tf_map* m, const struct tf_map* m2, const char* features, const char* gres) {
    char err[TF_ERR_LEN];
    struct tf_node node;
    struct tf_args args;

    memset(&args, 0, sizeof(args));
    args.has_default = 1;
    args.default_tags = TF_TAG_TRAIN;

    tf_node_init(&node, "empty");
    check_eval(m, m2, NULL, &node);
    check_eval(m, m2, &args, &node);
    for (int i = 0; i < m->nhw && i < 8; i++) {
        char g[TF_NAME_MAX + 16];
        tf_node_init(&node, "hw");
        if (tf_node_add_features(&node, m->hw[i].name, err, sizeof(err)) != 0) continue;
        snprintf(g, sizeof(g), "gpu:%s:2", m->hw[i].name);
        struct tf_node with_gres = node;
        check_eval(m, m2, NULL, &node);
        if (tf_node_add_gres(&with_gres, g, err, sizeof(err)) == 0) check_eval(m, m2, NULL, &with_gres);
    }
    tf_node_init(&node, "features");
    for (int r = 0; r < m->nrule && r < 16; r++)
        for (int c = 0; c < m->rule[r].ncond; c++)
            if (m->rule[r].cond[c].kind == TF_COND_FEATURE && node.nfeatures < TF_MAX_FEATURES &&
                !strchr(m->rule[r].cond[c].pattern, ','))
                tf_node_add_features(&node, m->rule[r].cond[c].pattern, err, sizeof(err));
    check_eval(m, m2, &args, &node);
    if (features != NULL) {
        tf_node_init(&node, "input");
        if (tf_node_add_features(&node, features, err, sizeof(err)) == 0 &&
            tf_node_add_gres(&node, gres, err, sizeof(err)) == 0)
            check_eval(m, m2, NULL, &node);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static char formatted[256 * 1024];
    char* err = malloc(TF_ERR_LEN);
    size_t map_len = size;
    char* features = NULL;
    char* gres = NULL;
    int nlines = 1;

    /* optional "%%" line: map before it, then a feature line and a GRES line */
    for (size_t i = 0; i + 1 < size; i++)
        if ((i == 0 || data[i - 1] == '\n') && data[i] == '%' && data[i + 1] == '%' &&
            (i + 2 == size || data[i + 2] == '\n')) {
            const char* rest = (const char*)data + (i + 2 == size ? size : i + 3);
            size_t rest_len = (size_t)((const char*)data + size - rest);
            const char* nl = memchr(rest, '\n', rest_len);
            size_t f_len = nl ? (size_t)(nl - rest) : rest_len;
            features = strndup(rest, f_len); /* stops at a NUL, as C strings from SLURM would */
            gres = nl ? strndup(nl + 1, rest_len - f_len - 1) : strdup("");
            map_len = i;
            break;
        }
    for (size_t i = 0; i + 1 < map_len; i++)
        if (data[i] == '\n') nlines++;

    /* exactly sized copy: a read past the map is an ASan error */
    char* text = malloc(map_len ? map_len : 1);
    memcpy(text, data, map_len);
    memset(err, 'X', TF_ERR_LEN);
    int rc = tf_map_parse(&map_a, FILE_NAME, text, map_len, err, TF_ERR_LEN);
    FUZZ_CHECK(rc == 0 || rc == -1, "rc %d", rc);
    if (rc != 0) {
        check_error(err, nlines);
    } else {
        FUZZ_CHECK(map_a.nlines <= nlines, "map has %d lines, input %d", map_a.nlines, nlines);
        check_map(&map_a);
        struct out o = {formatted, 0, sizeof(formatted)};
        format_map(&map_a, &o);
        int rc2 = tf_map_parse(&map_b, FILE_NAME, formatted, o.len, err, TF_ERR_LEN);
        FUZZ_CHECK(rc2 == 0, "printed map does not parse again: %s\n--- printed map:\n%s", err, formatted);
        check_same_map(&map_a, &map_b);
        eval_nodes(&map_a, &map_b, features, gres);
    }
    free(text);
    free(err);
    free(features);
    free(gres);
    return 0;
}
