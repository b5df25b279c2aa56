/* operon_testing.c — the fake cluster and helpers of operon_testing.h. */
#include "operon_testing.h"

#include <stdlib.h>

int operon_test_passed, operon_test_failed, operon_test_current_failed;

int operon_test_summary(void) {
    printf("%d passed, %d failed\n", operon_test_passed, operon_test_failed);
    return operon_test_failed ? 1 : 0;
}

struct operon_fake_cluster {
    char **objects;
    size_t len;
    char **logs;
    size_t logs_len;
    const char *namespace_; /* the parent's, during a reconcile */
};

static char *dup(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (!out) abort();
    memcpy(out, s, n + 1);
    return out;
}

operon_fake_cluster_t *operon_fake_cluster_new(void) {
    operon_fake_cluster_t *c = calloc(1, sizeof *c);
    if (!c) abort();
    return c;
}

void operon_fake_cluster_add(operon_fake_cluster_t *c, const char *json) {
    char **objects = realloc(c->objects, (c->len + 1) * sizeof *objects);
    if (!objects) abort();
    c->objects = objects;
    c->objects[c->len++] = dup(json);
}

void operon_fake_cluster_free(operon_fake_cluster_t *c) {
    if (!c) return;
    for (size_t i = 0; i < c->len; i++) free(c->objects[i]);
    for (size_t i = 0; i < c->logs_len; i++) free(c->logs[i]);
    free(c->objects);
    free(c->logs);
    free(c);
}

size_t operon_fake_cluster_logs(const operon_fake_cluster_t *c) { return c->logs_len; }

const char *operon_fake_cluster_log(const operon_fake_cluster_t *c, size_t i) {
    return i < c->logs_len ? c->logs[i] : NULL;
}

static void fake_log(void *self, operon_level_t level, const char *message, size_t nfields, const char *const *fields) {
    operon_fake_cluster_t *c = self;
    (void)level;
    const char *line = message;
    for (size_t i = 0; i < nfields; i++) line = operon_sprintf("%s %s=%s", line, fields[2 * i], fields[2 * i + 1]);
    char **logs = realloc(c->logs, (c->logs_len + 1) * sizeof *logs);
    if (!logs) abort();
    c->logs = logs;
    c->logs[c->logs_len++] = dup(line);
}

/* Whether object i is of kind and in namespace_ ("" means the parent's). */
static const operon_json_t *in_scope(operon_fake_cluster_t *c, size_t i, operon_gvk_t kind, const char *namespace_) {
    const operon_json_t *o = operon_json_parse(c->objects[i], strlen(c->objects[i]), NULL);
    if (!o || !operon_is_kind(o, kind)) return NULL;
    const char *want = *namespace_ ? namespace_ : (c->namespace_ ? c->namespace_ : "");
    const char *ns = operon_json_string_at(o, "metadata.namespace", NULL);
    return !ns || !*want || strcmp(ns, want) == 0 ? o : NULL;
}

static int fake_get(void *self, operon_gvk_t kind, const char *namespace_, const char *name, char **object,
                    char **error) {
    operon_fake_cluster_t *c = self;
    (void)error;
    for (size_t i = 0; i < c->len; i++) {
        const operon_json_t *o = in_scope(c, i, kind, namespace_);
        if (o && strcmp(operon_json_string_at(o, "metadata.name", ""), name) == 0) {
            *object = dup(c->objects[i]);
            return 1;
        }
    }
    return 0;
}

/* One requirement of a selector against the labels. */
static bool matches(const operon_json_t *labels, const char *req, size_t n) {
    while (n && *req == ' ') req++, n--;
    while (n && req[n - 1] == ' ') n--;
    if (!n) return true;
    bool negate = req[0] == '!' && (n < 2 || req[1] != '=');
    const char *op = NULL;
    for (size_t i = 0; i < n; i++)
        if (req[i] == '=' || (req[i] == '!' && i + 1 < n && req[i + 1] == '=')) {
            op = req + i;
            break;
        }
    if (!op) {
        const char *key = negate ? operon_sprintf("%.*s", (int)(n - 1), req + 1) : operon_sprintf("%.*s", (int)n, req);
        return (operon_json_get(labels, key) != NULL) != negate;
    }
    bool not_equal = *op == '!';
    const char *key = operon_sprintf("%.*s", (int)(op - req), req);
    const char *value = op + (not_equal || op[1] == '=' ? 2 : 1);
    const char *want = operon_sprintf("%.*s", (int)(req + n - value), value);
    const char *have = operon_json_string(operon_json_get(labels, key));
    return (have && strcmp(have, want) == 0) != not_equal;
}

static int fake_list(void *self, operon_gvk_t kind, const char *namespace_, const char *selector, char ***objects,
                     size_t *len, char **error) {
    operon_fake_cluster_t *c = self;
    (void)error;
    *objects = calloc(c->len ? c->len : 1, sizeof **objects);
    if (!*objects) abort();
    *len = 0;
    for (size_t i = 0; i < c->len; i++) {
        const operon_json_t *o = in_scope(c, i, kind, namespace_);
        if (!o) continue;
        const operon_json_t *labels = operon_json_at(o, "metadata.labels");
        bool all = true;
        for (const char *p = selector; all;) {
            const char *comma = strchr(p, ',');
            size_t n = comma ? (size_t)(comma - p) : strlen(p);
            all = matches(labels, p, n);
            if (!comma) break;
            p = comma + 1;
        }
        if (all) (*objects)[(*len)++] = dup(c->objects[i]);
    }
    return 0;
}

static operon_host_t host_of(operon_fake_cluster_t *c) { return (operon_host_t){c, fake_log, fake_get, fake_list}; }

void operon_test_reconcile(operon_fake_cluster_t *cluster, const char *parent, const char *const *children,
                           size_t children_len, bool finalizing, operon_raw_outcome_t *out) {
    operon_fake_cluster_t *own = cluster ? NULL : operon_fake_cluster_new();
    operon_fake_cluster_t *c = cluster ? cluster : own;
    void *mark = operon_arena_mark();
    const operon_manifest_t *m = operon_manifest();
    operon_raw_children_t *groups = operon_alloc((m->owns_len + 1) * sizeof *groups);
    const operon_json_t *parsed_parent = operon_json_parse(parent, strlen(parent), NULL);
    c->namespace_ = operon_json_string_at(parsed_parent, "metadata.namespace", "");
    for (size_t k = 0; k < m->owns_len; k++) {
        operon_str_t *objects = operon_alloc((children_len + 1) * sizeof *objects);
        size_t n = 0;
        for (size_t i = 0; i < children_len; i++) {
            const operon_json_t *child = operon_json_parse(children[i], strlen(children[i]), NULL);
            if (operon_is_kind(child, m->owns[k])) objects[n++] = (operon_str_t){children[i], strlen(children[i])};
        }
        groups[k] = (operon_raw_children_t){m->owns[k], objects, n};
    }
    for (size_t i = 0; i < children_len; i++) {
        const operon_json_t *child = operon_json_parse(children[i], strlen(children[i]), NULL);
        bool owned = false;
        for (size_t k = 0; k < m->owns_len; k++) owned = owned || operon_is_kind(child, m->owns[k]);
        if (!owned) {
            memset(out, 0, sizeof *out);
            out->failed = out->terminal = true;
            out->failure = dup("operon_test_reconcile: a child is of a kind the manifest does not own");
            goto done;
        }
    }
    operon_raw_request_t req = {{parent, strlen(parent)}, groups, m->owns_len, NULL, 0, finalizing, 0};
    operon_host_t host = host_of(c);
    operon_run_reconcile(&host, &req, out);
done:
    c->namespace_ = NULL;
    operon_arena_release(mark);
    operon_fake_cluster_free(own);
}

void operon_test_admission(operon_admission_fn fn, operon_operation_t op, const char *object,
                           operon_raw_admission_t *out) {
    operon_fake_cluster_t *c = operon_fake_cluster_new();
    operon_host_t host = host_of(c);
    operon_str_t text = {object, object ? strlen(object) : 0};
    operon_raw_review_t review = {
        .uid = {"operon-test", 11},
        .operation = op,
        .kind = {"", "", ""},
        .name = {"", 0},
        .object = object ? &text : NULL,
        .username = {"", 0},
    };
    operon_run_admission(&host, fn, &review, out);
    operon_fake_cluster_free(c);
}
