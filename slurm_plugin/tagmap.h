/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tagmap: the SLURM-free core of spank_tagflow. Parses tag lists, plugstack
 * arguments and the admin's tag map, describes one node (features + GRES
 * allocated to the job there) and evaluates the map for it.
 * Does not talk to SLURM and does not touch the environment (see stepd.c).
 * Every function reports problems as one line of text in a caller buffer
 * ("FILE:LINE: problem" for map errors); nothing here prints or exits.
 */
#ifndef TAGFLOW_TAGMAP_H
#define TAGFLOW_TAGMAP_H

#include <stddef.h>

/* ---- tags ---- */
#define TF_TAG_ROLLOUT 0x1u
#define TF_TAG_TRAIN 0x2u
#define TF_TAG_CRITIC 0x4u
#define TF_TAG_ALL (TF_TAG_ROLLOUT | TF_TAG_TRAIN | TF_TAG_CRITIC)

#define TF_ERR_LEN 512     /* every error buffer */
#define TF_TAGS_STR_LEN 32 /* "rollout,train,critic" + NUL fits */
#define TF_OPT_MAX 128     /* longest --rl-tags value accepted */
#define TF_LINE_MAX 1024   /* longest map line, newline included */
#define TF_PATH_MAX 512    /* longest map path */
#define TF_NAME_MAX 64     /* feature, hardware, GRES type, glob patterns */
#define TF_GRES_NAME_MAX 32
#define TF_MAX_HW 64
#define TF_MAX_RULES 256
#define TF_MAX_COND 4
#define TF_MAX_TIERS 8
#define TF_MAX_FEATURES 64
#define TF_MAX_GRES 16

/*
 * Parse a comma list of tags (canonical order is not required; empty items,
 * unknown or repeated tags are errors). With allow_auto, the single word
 * "auto" means every tag. With allow_none, the single word "none" means the
 * empty set. Returns 0 and sets *mask, or -1 and fills err.
 */
int tf_tags_parse(const char* s, int allow_auto, int allow_none, unsigned* mask, char* err, size_t errlen);

/* Format mask as "rollout,train,critic" in canonical order ("" for 0). */
void tf_tags_format(unsigned mask, char* buf, size_t len);

/* ---- plugstack arguments ---- */
struct tf_args {
    char map[TF_PATH_MAX]; /* "" = no map */
    int has_default;       /* default= given */
    unsigned default_tags; /* 0 with has_default means default=none */
};

/*
 * Parse the plugstack.conf arguments (map=FILE, default=TAGS|none).
 * Unknown, repeated, empty or over-long arguments are errors, and so is a
 * line giving neither map= nor default=. Returns 0 or -1 with err filled.
 */
int tf_args_parse(int ac, char** av, struct tf_args* args, char* err, size_t errlen);

/* ---- the tag map ---- */
enum tf_cond_kind {
    TF_COND_ANY,      /* "*" */
    TF_COND_FEATURE,  /* feature=GLOB */
    TF_COND_GRES,     /* gres=NAME[:TYPE][:COUNT] */
    TF_COND_HARDWARE, /* hardware=GLOB (the node's hardware table entry) */
    TF_COND_SCORE_GE, /* score>=X */
    TF_COND_SCORE_LT  /* score<X */
};

struct tf_cond {
    enum tf_cond_kind kind;
    char pattern[TF_NAME_MAX];        /* feature / hardware glob, GRES type glob */
    char gres_name[TF_GRES_NAME_MAX]; /* GRES name glob ("gpu") */
    unsigned long count;              /* GRES: at least this many on the node */
    double value;                     /* score bound */
};

struct tf_rule {
    int line;
    int ncond; /* conditions are ANDed */
    struct tf_cond cond[TF_MAX_COND];
    int use_score; /* "-> score": tags from the score thresholds */
    unsigned tags;
};

struct tf_hw {
    int line;
    char name[TF_NAME_MAX];
    double compute; /* any unit, e.g. dense BF16 TFLOP/s */
    double membw;   /* any unit, e.g. TB/s */
};

struct tf_tier {
    int line;
    double min;
    unsigned tags;
};

struct tf_map {
    char file[TF_PATH_MAX];
    int nlines;
    struct tf_hw hw[TF_MAX_HW];
    int nhw;
    double norm_compute; /* 0 = maximum over the table */
    double norm_membw;
    int has_normalize;
    struct tf_tier tier[TF_MAX_TIERS]; /* sorted by min, highest first */
    int ntier;
    int custom_tiers; /* threshold lines replaced the SeamlessFlow tiers */
    struct tf_rule rule[TF_MAX_RULES];
    int nrule;
    int has_default;
    unsigned default_tags;
};

/* Reset to an empty map with the SeamlessFlow tiers (>=0.8 all, >=0.6 rollout,train, else rollout). */
void tf_map_init(struct tf_map* map, const char* file);

/*
 * Parse a whole map held in memory (text need not be NUL-terminated: len
 * bytes). Errors are "FILE:LINE: problem". Returns 0 or -1.
 */
int tf_map_parse(struct tf_map* map, const char* file, const char* text, size_t len, char* err, size_t errlen);

/*
 * Read and parse FILE. Returns 0, or -1 with err filled; *open_errno is set to
 * errno when the file could not be opened or read (0 for parse errors).
 */
int tf_map_load(struct tf_map* map, const char* file, int* open_errno, char* err, size_t errlen);

/* Normalised SeamlessFlow score of hardware entry i: 0.6*compute + 0.4*membw. */
double tf_map_hw_score(const struct tf_map* map, int i);

/* Tags the thresholds give for a score; 0 when no tier applies. */
unsigned tf_map_tier_tags(const struct tf_map* map, double score);

/* ---- one node, as the plugin sees it in a job step ---- */
struct tf_gres {
    char name[TF_GRES_NAME_MAX];
    char type[TF_NAME_MAX]; /* "" = untyped */
    unsigned long count;
};

struct tf_node {
    char name[TF_NAME_MAX];
    char features[TF_MAX_FEATURES][TF_NAME_MAX];
    int nfeatures;
    struct tf_gres gres[TF_MAX_GRES];
    int ngres;
};

void tf_node_init(struct tf_node* node, const char* name);

/* Add features from a comma list ("h100,nvlink"); NULL or "" adds none. */
int tf_node_add_features(struct tf_node* node, const char* csv, char* err, size_t errlen);

/*
 * Add allocated GRES from one gres_detail_str entry of slurm_load_job(), e.g.
 * "gpu:h100:2(IDX:0-1),gpu:t4:1(IDX:2)" or "gpu:1(IDX:0,2)". Commas inside
 * parentheses do not separate entries. Also accepts "gpu:h100:2" (no index)
 * and "gpu:h100(CNT:2)".
 */
int tf_node_add_gres(struct tf_node* node, const char* detail, char* err, size_t errlen);

/* ---- evaluation ---- */
enum tf_source { TF_SRC_MAP, TF_SRC_OPTION, TF_SRC_DEFAULT };

struct tf_result {
    int rule;          /* index of the first matching rule, -1 if none */
    int hw;            /* node's hardware entry, -1 if unknown */
    double score;      /* valid when hw >= 0 */
    unsigned map_tags; /* tags of the matching rule (or default) */
    int from_default;  /* no rule matched: map_tags is the default */
    int has_default;   /* a default exists (plugstack default= or map default) */
    unsigned tags;     /* final: map_tags & requested */
    enum tf_source source;
};

/*
 * Evaluate the map for node (first matching rule wins), fall back to the
 * default (args default= overrides the map's "default" line), intersect with
 * requested and set the source:
 *   default - no rule matched; tags are the default's, intersected;
 *   option  - a rule matched and --rl-tags removed at least one of its tags;
 *   map     - a rule matched and its tags are exported unchanged.
 * map may be NULL (no map= argument). Returns res->tags.
 */
unsigned tf_evaluate(const struct tf_map* map, const struct tf_args* args, const struct tf_node* node,
                     unsigned requested, struct tf_result* res);

const char* tf_source_name(enum tf_source src);

/* Describe a node for messages: "features=h100,nvlink gres=gpu:h100:2". */
void tf_node_describe(const struct tf_node* node, char* buf, size_t len);

/* Bounded copy: returns 0, or -1 when src (NUL-terminated) does not fit. */
int tf_strlcpy(char* dst, const char* src, size_t len);

#endif /* TAGFLOW_TAGMAP_H */
