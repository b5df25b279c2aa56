/* The runner gives every shared rule case (contract/rules/cases) the host's
 * verdict, message for message: a case this runner passes and the host
 * refuses would be a defect. `make -C sdk/c test` runs it. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdlib.h>

#include "operon_testing.h"

#define CASES "../../contract/rules/cases"

/* The case being run: its manifest and the outcome operon_reconcile answers. */
static const operon_json_t *current;
static operon_manifest_t manifest;

static operon_gvk_t gvk_of(const operon_json_t *k) {
    return (operon_gvk_t){operon_json_string_at(k, "group", ""), operon_json_string_at(k, "version", ""),
                          operon_json_string_at(k, "kind", "")};
}

const operon_manifest_t *operon_manifest(void) { return &manifest; }

operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out) {
    (void)req;
    const operon_json_t *desired = operon_json_at(current, "outcome.desired");
    for (size_t i = 0; i < operon_json_len(desired); i++) operon_apply(out, operon_json_copy(operon_json_item(desired, i)));
    const operon_json_t *events = operon_json_at(current, "outcome.events");
    for (size_t i = 0; i < operon_json_len(events); i++) {
        const operon_json_t *e = operon_json_item(events, i);
        operon_event(out, operon_json_string_at(e, "reason", ""), "%s", operon_json_string_at(e, "message", ""));
    }
    return OPERON_OK;
}

static const char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = operon_alloc((size_t)n + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    fclose(f);
    text[got] = '\0';
    return text;
}

static const char *text_of(const operon_json_t *v) { return v ? operon_json_text(v, NULL) : NULL; }

static int run_case(const char *file) {
    const char *text = read_file(operon_sprintf("%s/%s", CASES, file));
    operon_json_t *c = text ? operon_json_copy(operon_json_parse(text, strlen(text), NULL)) : NULL;
    if (!c) {
        fprintf(stderr, "%s: not JSON\n", file);
        return 1;
    }
    const operon_json_t *pad = operon_json_get(c, "pad");
    if (pad) {
        int64_t i = 0, bytes = 0;
        operon_json_int(operon_json_get(pad, "desired"), &i);
        operon_json_int(operon_json_get(pad, "bytes"), &bytes);
        char *x = operon_alloc((size_t)bytes + 1);
        memset(x, 'x', (size_t)bytes);
        x[bytes] = '\0';
        operon_json_t *data = (operon_json_t *)operon_json_at(operon_json_item(operon_json_at(c, "outcome.desired"), (size_t)i), "data");
        operon_json_set(data, "pad", operon_json_str(x));
    }
    current = c;
    const operon_json_t *owns = operon_json_at(c, "manifest.owns");
    operon_gvk_t *kinds = operon_alloc((operon_json_len(owns) + 1) * sizeof *kinds);
    for (size_t i = 0; i < operon_json_len(owns); i++) kinds[i] = gvk_of(operon_json_item(owns, i));
    manifest = (operon_manifest_t){.name = operon_json_string_at(c, "manifest.name", ""),
                                   .for_kind = {"rules.operon.dev", "v1", "Case"},
                                   .owns = kinds,
                                   .owns_len = operon_json_len(owns)};
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    const char *lists[] = {"request.cluster", "request.related"};
    for (size_t l = 0; l < OPERON_LEN(lists); l++) {
        const operon_json_t *objects = operon_json_at(c, lists[l]);
        for (size_t i = 0; i < operon_json_len(objects); i++) operon_fake_cluster_add(cluster, text_of(operon_json_item(objects, i)));
    }
    const operon_json_t *children = operon_json_at(c, "request.children");
    const char **child_texts = operon_alloc((operon_json_len(children) + 1) * sizeof *child_texts);
    for (size_t i = 0; i < operon_json_len(children); i++) child_texts[i] = text_of(operon_json_item(children, i));
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster, text_of(operon_json_at(c, "request.object")), child_texts, operon_json_len(children),
                          false, &out);
    const char *want = operon_json_string_at(c, "refused", NULL);
    int failed = 0;
    if (out.failed && !out.refused) {
        fprintf(stderr, "%s: the reconcile failed: %s\n", file, out.failure);
        failed = 1;
    } else if (!want && out.refused) {
        fprintf(stderr, "%s: the host writes this outcome, the runner said: %s\n", file, out.failure);
        failed = 1;
    } else if (want) {
        const char *expected = operon_sprintf("outcome refused, nothing written: %s (the host checks this before writing)", want);
        if (!out.refused || strcmp(out.failure, expected) != 0) {
            fprintf(stderr, "%s:\n  host:   %s\n  runner: %s\n", file, expected, out.refused ? out.failure : "(accepted)");
            failed = 1;
        }
    }
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
    return failed;
}

static void the_runner_should_give_every_shared_rule_case_the_hosts_verdict(void) {
    DIR *dir = opendir(CASES);
    CHECK(dir != NULL);
    if (!dir) return;
    size_t ran = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".json") != 0) continue;
        ran++;
        if (run_case(e->d_name)) operon_test_current_failed = 1;
    }
    closedir(dir);
    CHECK(ran >= 10);
}

int main(void) {
    OPERON_RUN_TEST(the_runner_should_give_every_shared_rule_case_the_hosts_verdict);
    return operon_test_summary();
}
