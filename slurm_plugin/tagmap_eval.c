/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tagmap_eval: one node as the plugin sees it (features, the job's GRES there), the hardware
 * score and tiers, and the evaluation of a parsed map for a node (first matching rule, else
 * the default). Pure C11 + POSIX fnmatch, no SLURM. Does not parse the map (tagmap_parse.c).
 */
#define _POSIX_C_SOURCE 200809L

#include "tagmap.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "tagmap_internal.h"

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
                tf_errf(err, errlen, "node %s: feature longer than %d characters", node->name, TF_NAME_MAX - 1);
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
static int tf_node_add_gres_item(struct tf_node* node, const char* s, size_t n, char* err, size_t errlen) {
    char item[TF_NAME_MAX + TF_GRES_NAME_MAX + 32];
    char shown[48]; /* the entry as messages show it: clipped, printable */
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
    tf_clip(item, shown, sizeof(shown));
    open = strchr(item, '(');
    if (open) {
        char* close = strrchr(open, ')');
        if (close == NULL || close[1] != '\0') {
            tf_errf(err, errlen, "unbalanced parentheses in GRES '%s'", shown);
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
        tf_errf(err, errlen, "cannot parse GRES '%s'", shown);
        return -1;
    }
    if (tf_strlcpy(g.name, f[0], sizeof(g.name)) != 0) { /* was silently an empty name */
        tf_errf(err, errlen, "GRES name longer than %d characters in '%s'", TF_GRES_NAME_MAX - 1, shown);
        return -1;
    }
    g.count = 1;
    int type_i = -1, count_i = -1;
    if (nf == 2) {
        int numeric = f[1][0] != '\0';
        for (const char* q = f[1]; *q; q++)
            if (!isdigit((unsigned char)*q)) numeric = 0;
        if (numeric) count_i = 1;
        else type_i = 1;
    } else if (nf == 3) {
        type_i = 1;
        count_i = 2;
    }
    if (type_i >= 0 && (f[type_i][0] == '\0' || tf_strlcpy(g.type, f[type_i], sizeof(g.type)) != 0)) {
        tf_errf(err, errlen, "bad GRES type in '%s'", shown);
        return -1;
    }
    if (count_i >= 0) {
        unsigned long c;
        if (strcmp(f[count_i], "0") == 0) return 0; /* nothing allocated */
        if (tf_parse_count(f[count_i], &c) != 0) {
            tf_errf(err, errlen, "bad GRES count in '%s'", shown);
            return -1;
        }
        g.count = c;
    } else if (strncmp(paren, "CNT:", 4) == 0) {
        unsigned long c;
        if (tf_parse_count(paren + 4, &c) != 0) {
            tf_errf(err, errlen, "bad GRES count in '%s'", shown);
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
#define TF_APPEND(...)                                   \
    do {                                                 \
        w = snprintf(buf + off, len - off, __VA_ARGS__); \
        if (w < 0 || (size_t)w >= len - off) return;     \
        off += (size_t)w;                                \
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

static int tf_cond_match(const struct tf_map* map, const struct tf_cond* c, const struct tf_node* node, int hw,
                         double score) {
    switch (c->kind) {
        case TF_COND_ANY: return 1;
        case TF_COND_FEATURE:
            for (int i = 0; i < node->nfeatures; i++)
                if (fnmatch(c->pattern, node->features[i], 0) == 0) return 1;
            return 0;
        case TF_COND_HARDWARE: return hw >= 0 && fnmatch(c->pattern, map->hw[hw].name, 0) == 0;
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
        case TF_COND_SCORE_GE: return hw >= 0 && score + TF_EPS >= c->value;
        case TF_COND_SCORE_LT: return hw >= 0 && score + TF_EPS < c->value;
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
    if (res->from_default) res->source = TF_SRC_DEFAULT;
    else if (res->tags != res->map_tags) res->source = TF_SRC_OPTION;
    else res->source = TF_SRC_MAP;
    return res->tags;
}

const char* tf_source_name(enum tf_source src) {
    switch (src) {
        case TF_SRC_MAP: return "map";
        case TF_SRC_OPTION: return "option";
        case TF_SRC_DEFAULT: return "default";
    }
    return "?";
}
