/*
 * Unit tests of the C SDK, natively: `make -C sdk/c test` (gcc or clang,
 * with AddressSanitizer and UndefinedBehaviorSanitizer). The reconciler
 * under test is defined here.
 */
#include <stdlib.h>

#include "operon_testing.h"

/* -------------------------------------------- the reconciler under test */

static const operon_gvk_t OWNS[] = {{"", "v1", "ConfigMap"}, {"apps", "v1", "Deployment"}};
static const operon_gvk_t READS[] = {{"", "v1", "Secret"}};
static const operon_watch_t WATCHES[] = {{{"", "v1", "Secret"}, OPERON_MAP_LABEL, "example.dev/owner"}};
static const operon_manifest_t MANIFEST = {
    .name = "tester",
    .for_kind = {"demo.operon.dev", "v1alpha1", "Greeting"},
    .owns = OWNS,
    .owns_len = OPERON_LEN(OWNS),
    .watches = WATCHES,
    .watches_len = OPERON_LEN(WATCHES),
    .reads = READS,
    .reads_len = OPERON_LEN(READS),
    .finalizer = "demo.operon.dev/cleanup",
};

const operon_manifest_t *operon_manifest(void) { return &MANIFEST; }

operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out) {
    const char *mode = operon_json_string_at(req->object, "spec.mode", "");
    if (req->finalizing) {
        operon_finalized(out);
        return OPERON_OK;
    }
    if (strcmp(mode, "terminal") == 0) return operon_terminal(out, "spec.mode %s is invalid", mode);
    if (strcmp(mode, "silent") == 0) return OPERON_FAILED;
    if (strcmp(mode, "kindless") == 0) {
        operon_apply(out, operon_json_set(operon_json_object(), "metadata", operon_json_object()));
        return OPERON_OK;
    }
    const operon_json_t *secret;
    if (operon_get(out, OPERON_SECRET, NULL, "token", &secret)) return OPERON_FAILED;
    if (!secret) return operon_transient(out, "secret token does not exist yet");
    const operon_json_t *const *web;
    size_t web_len;
    if (operon_list(out, OPERON_SECRET, "", "team=web,!legacy", &web, &web_len)) return OPERON_FAILED;
    const char *fields[] = {"children", operon_sprintf("%zu", req->children_len)};
    operon_log_fields(OPERON_INFO, "reconciling", 1, fields);

    operon_json_t *cm = operon_new_object(OPERON_CONFIGMAP, operon_sprintf("%s-settings", req->name));
    operon_json_set(cm, "data", operon_json_set(operon_json_object(), "secrets", operon_json_strf("%zu", web_len)));
    operon_apply(out, cm);
    operon_json_t *status = operon_json_object();
    operon_json_set(status, "deployment", operon_json_boolean(operon_child(req, OPERON_DEPLOYMENT, req->name) != NULL));
    operon_json_set(status, "conditions",
                    operon_json_push(operon_json_array(),
                                     operon_condition(operon_json_at(req->object, "status.conditions"), "Ready", "True",
                                                      req->generation, "2026-01-02T00:00:00Z", "Done", "all good")));
    operon_set_status(out, status);
    operon_event(out, "Configured", "wrote %d secrets", (int)web_len);
    operon_warning(out, "Attempt", "attempt %u", req->attempt);
    operon_requeue_after_ms(out, 30000);
    return OPERON_OK;
}

/* ------------------------------------------------------------- helpers */

static const operon_json_t *parse(const char *text) {
    const char *error = NULL;
    const operon_json_t *v = operon_json_parse(text, strlen(text), &error);
    if (!v) fprintf(stderr, "parse error: %s\n", error);
    return v;
}

static const char *parent(const char *mode, const char *status) {
    return operon_sprintf("{\"apiVersion\":\"demo.operon.dev/v1alpha1\",\"kind\":\"Greeting\","
                          "\"metadata\":{\"name\":\"hello\",\"namespace\":\"default\",\"generation\":4},"
                          "\"spec\":{\"mode\":\"%s\"}%s}",
                          mode, status);
}

static const char *secret(const char *ns, const char *name, const char *labels) {
    return operon_sprintf("{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":\"%s\",\"namespace\":"
                          "\"%s\",\"labels\":%s}}",
                          name, ns, labels);
}

/* --------------------------------------------------------------- JSON */

static void json_should_round_trip_values(void) {
    const char *text = "{\"a\":[1,-2,3.5,true,false,null],\"b\":{\"c\":\"d\\\"e\\\\f\\n\\u0001\"},\"e\":\"\"}";
    const operon_json_t *v = parse(text);
    CHECK(v != NULL);
    CHECK_STR(operon_json_text(v, NULL), text);
    CHECK(operon_json_len(operon_json_get(v, "a")) == 6);
    int64_t n = 0;
    CHECK(operon_json_int(operon_json_item(operon_json_get(v, "a"), 1), &n) && n == -2);
    CHECK(!operon_json_int(operon_json_item(operon_json_get(v, "a"), 2), &n));
    CHECK_STR(operon_json_string_at(v, "b.c", NULL), "d\"e\\f\n\001");
    CHECK(operon_json_at(v, "b.x") == NULL && operon_json_at(v, "a.b") == NULL && operon_json_get(NULL, "a") == NULL);
    CHECK(operon_json_type(operon_json_get(v, "missing")) == OPERON_MISSING);
}

static void json_should_decode_unicode_escapes(void) {
    const operon_json_t *v = parse("[\"\\u00e9\\u4e2d\\ud83d\\ude00\", \"a\\u0000b\"]");
    CHECK_STR(operon_json_string(operon_json_item(v, 0)), "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
    CHECK(operon_json_string_len(operon_json_item(v, 1)) == 3);
    CHECK_STR(operon_json_text(operon_json_item(v, 1), NULL), "\"a\\u0000b\"");
}

static void json_should_refuse_malformed_and_hostile_input(void) {
    const char *bad[] = {
        "",          "{",        "[1,]",       "{\"a\"}",   "{\"a\":1,}", "01",    "1.",     "-",
        "\"\\x\"",   "\"abc",    "\"\\ud800\"", "\"\\udc00\"", "tru",      "nul",   "[1] 2",  "{\"a\":1,\"a\":2}",
        "\"\x01\"",  "{1:2}",    "\"\\u12\"",   "[\"\\",   "1e",       "\"\\ud800\\u0041\"", "{\"a\\u0000\":1}",
    };
    for (size_t i = 0; i < OPERON_LEN(bad); i++) {
        const char *error = NULL;
        if (operon_json_parse(bad[i], strlen(bad[i]), &error) != NULL || !error) {
            fprintf(stderr, "accepted: %s\n", bad[i]);
            operon_test_current_failed = 1;
        }
    }
    /* Nesting past the limit is an error, not a stack overflow. */
    size_t depth = 100000;
    char *deep = malloc(depth * 2);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    const char *error = NULL;
    CHECK(operon_json_parse(deep, depth * 2, &error) == NULL && strstr(error, "nested too deeply"));
    free(deep);
    /* Input is length-counted: no read past len (ASan watches). */
    char *exact = malloc(4);
    memcpy(exact, "[1,2", 4);
    CHECK(operon_json_parse(exact, 4, NULL) == NULL);
    memcpy(exact, "\"ab\\", 4);
    CHECK(operon_json_parse(exact, 4, NULL) == NULL);
    free(exact);
    /* Random bytes never crash. */
    srand(7);
    char noise[64];
    for (int round = 0; round < 20000; round++) {
        size_t n = (size_t)(rand() % (int)sizeof noise);
        for (size_t i = 0; i < n; i++) noise[i] = "{}[]\",:\\u0123456789eE.-+tfnalrs "[rand() % 33];
        operon_json_parse(noise, n, NULL);
    }
}

static void numbers_should_keep_integers_exact(void) {
    const operon_json_t *v = parse("[9223372036854775807,-9223372036854775808,9223372036854775808,1e3,2.0]");
    int64_t n;
    CHECK(operon_json_int(operon_json_item(v, 0), &n) && n == INT64_MAX);
    CHECK(operon_json_int(operon_json_item(v, 1), &n) && n == INT64_MIN);
    CHECK(operon_json_type(operon_json_item(v, 2)) == OPERON_FLOAT);
    CHECK(operon_json_type(operon_json_item(v, 3)) == OPERON_FLOAT);
    CHECK_STR(operon_json_text(operon_json_item(v, 4), NULL), "2.0");
    CHECK(operon_json_equal(operon_json_item(v, 3), operon_json_integer(1000)));
    CHECK_STR(operon_json_text(operon_json_double(0.0 / 0.0), NULL), "null");
}

static void builders_should_set_replace_and_remove(void) {
    operon_json_t *o = operon_new_object(OPERON_DEPLOYMENT, "web");
    CHECK_STR(operon_json_text(o, NULL), "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"web\"}}");
    operon_json_set(o, "kind", operon_json_str("X"));
    operon_json_set(o, "apiVersion", NULL);
    CHECK_STR(operon_json_text(o, NULL), "{\"kind\":\"X\",\"metadata\":{\"name\":\"web\"}}");
    operon_json_t *copy = operon_json_copy(o);
    operon_json_set(copy, "kind", operon_json_str("Y"));
    CHECK_STR(operon_json_string_at(o, "kind", NULL), "X");
    CHECK(!operon_json_equal(o, copy));
    CHECK(operon_json_equal(o, parse("{\"metadata\":{\"name\":\"web\"},\"kind\":\"X\"}")));
    CHECK_STR(operon_api_version(OPERON_CONFIGMAP), "v1");
    CHECK(operon_is_kind(parse("{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\"}"), OPERON_DEPLOYMENT));
    CHECK(!operon_is_kind(parse("{\"apiVersion\":\"v1\",\"kind\":\"Deployment\"}"), OPERON_DEPLOYMENT));
}

static void conditions_should_keep_their_transition_time_while_the_status_holds(void) {
    const operon_json_t *previous = parse("[{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"t1\"}]");
    CHECK_STR(operon_json_string_at(operon_condition(previous, "Ready", "True", 1, "t2", "R", "m"), "lastTransitionTime", NULL), "t1");
    CHECK_STR(operon_json_string_at(operon_condition(previous, "Ready", "False", 1, "t2", "R", "m"), "lastTransitionTime", NULL), "t2");
    CHECK_STR(operon_json_string_at(operon_condition(NULL, "Ready", "True", 1, "t3", "R", "m"), "lastTransitionTime", NULL), "t3");
    CHECK(operon_find_condition(previous, "Synced") == NULL);
}

/* ------------------------------------------------------------ run path */

static void reconcile_should_produce_the_outcome_of_the_builders(void) {
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_add(cluster, secret("default", "token", "{}"));
    operon_fake_cluster_add(cluster, secret("default", "a", "{\"team\":\"web\"}"));
    operon_fake_cluster_add(cluster, secret("default", "b", "{\"team\":\"web\",\"legacy\":\"yes\"}"));
    operon_fake_cluster_add(cluster, secret("other", "c", "{\"team\":\"web\"}"));
    const char *children[] = {"{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"hello\"}}"};
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster, parent("ok", ""), children, 1, false, &out);
    CHECK(!out.failed);
    CHECK(out.desired_len == 1);
    CHECK_STR(out.desired_len ? out.desired[0] : NULL,
              "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"hello-settings\"},\"data\":{\"secrets\":\"1\"}}");
    CHECK_STR(out.status, "{\"deployment\":true,\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"observedGeneration\":4,"
                          "\"lastTransitionTime\":\"2026-01-02T00:00:00Z\",\"reason\":\"Done\",\"message\":\"all good\"}]}");
    CHECK(out.events_len == 2 && !out.events[0].warning && out.events[1].warning);
    if (out.events_len == 2) CHECK_STR(out.events[0].message, "wrote 1 secrets");
    CHECK(out.has_requeue && out.requeue_after_ms == 30000 && !out.finalized);
    CHECK(operon_fake_cluster_logs(cluster) == 1);
    CHECK_STR(operon_fake_cluster_log(cluster, 0), "reconciling children=2");
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
}

static void failures_should_be_terminal_or_transient(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, parent("terminal", ""), NULL, 0, false, &out);
    CHECK(out.failed && out.terminal);
    CHECK_STR(out.failure, "spec.mode terminal is invalid");
    operon_raw_outcome_free(&out);
    /* The secret is in another namespace: reads default to the parent's. */
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_add(cluster, secret("other", "token", "{}"));
    operon_test_reconcile(cluster, parent("ok", ""), NULL, 0, false, &out);
    CHECK(out.failed && !out.terminal);
    CHECK_STR(out.failure, "secret token does not exist yet");
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
    operon_test_reconcile(NULL, parent("silent", ""), NULL, 0, false, &out);
    CHECK(out.failed && !out.terminal && strstr(out.failure, "without operon_terminal"));
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, parent("kindless", ""), NULL, 0, false, &out);
    CHECK(out.failed && out.terminal);
    CHECK_STR(out.failure, "desired object <unnamed> has no apiVersion");
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, "[1]", NULL, 0, false, &out);
    CHECK(out.failed && out.terminal && strstr(out.failure, "not a Kubernetes object"));
    operon_raw_outcome_free(&out);
    const char *foreign[] = {"{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}"};
    operon_test_reconcile(NULL, parent("ok", ""), foreign, 1, false, &out);
    CHECK(out.failed);
    operon_raw_outcome_free(&out);
}

static void finalizing_should_answer_finalized(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, parent("ok", ""), NULL, 0, true, &out);
    CHECK(!out.failed && out.finalized && out.desired_len == 0 && out.status == NULL && out.events_len == 0);
    operon_raw_outcome_free(&out);
}

static void previous_conditions_should_come_from_the_parent(void) {
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_add(cluster, secret("default", "token", "{}"));
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster,
                          parent("ok", ",\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\","
                                       "\"lastTransitionTime\":\"2025-01-01T00:00:00Z\"}]}"),
                          NULL, 0, false, &out);
    CHECK(out.status && strstr(out.status, "2025-01-01T00:00:00Z"));
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
}

/* ----------------------------------------------------------- admission */

static operon_result_t validate(const operon_review_t *review, operon_admission_t *answer) {
    if (!review->object) return operon_deny(answer, 422, "no object");
    if (!operon_json_string_at(review->object, "spec.message", NULL)) return operon_deny(answer, 0, "spec.message is required");
    operon_admission_warn(answer, "checked %s", review->operation == OPERON_CREATE ? "create" : "other");
    return OPERON_OK;
}

static operon_result_t mutate(const operon_review_t *review, operon_admission_t *answer) {
    operon_json_t *object = operon_json_copy(review->object);
    operon_json_set(object, "spec", operon_json_set(operon_json_object(), "message", operon_json_str("hi")));
    operon_admission_patch(answer, object);
    return OPERON_OK;
}

static void admission_should_map_denials_warnings_and_patches(void) {
    operon_raw_admission_t out;
    operon_test_admission(validate, OPERON_CREATE, "{\"spec\":{\"message\":\"x\"}}", &out);
    CHECK(!out.denied && out.warnings_len == 1);
    if (out.warnings_len) CHECK_STR(out.warnings[0], "checked create");
    operon_raw_admission_free(&out);
    operon_test_admission(validate, OPERON_UPDATE, "{\"spec\":{}}", &out);
    CHECK(out.denied && out.code == 0);
    CHECK_STR(out.message, "spec.message is required");
    operon_raw_admission_free(&out);
    operon_test_admission(validate, OPERON_DELETE, NULL, &out);
    CHECK(out.denied && out.code == 422);
    operon_raw_admission_free(&out);
    operon_test_admission(mutate, OPERON_CREATE, "{\"kind\":\"G\"}", &out);
    CHECK_STR(out.patched, "{\"kind\":\"G\",\"spec\":{\"message\":\"hi\"}}");
    operon_raw_admission_free(&out);
    operon_test_admission(NULL, OPERON_CREATE, "{}", &out);
    CHECK(!out.denied && out.patched == NULL && out.warnings_len == 0);
    operon_raw_admission_free(&out);
}

int main(void) {
    void *mark = operon_arena_mark();
    OPERON_RUN_TEST(json_should_round_trip_values);
    OPERON_RUN_TEST(json_should_decode_unicode_escapes);
    OPERON_RUN_TEST(json_should_refuse_malformed_and_hostile_input);
    OPERON_RUN_TEST(numbers_should_keep_integers_exact);
    OPERON_RUN_TEST(builders_should_set_replace_and_remove);
    OPERON_RUN_TEST(conditions_should_keep_their_transition_time_while_the_status_holds);
    OPERON_RUN_TEST(reconcile_should_produce_the_outcome_of_the_builders);
    OPERON_RUN_TEST(failures_should_be_terminal_or_transient);
    OPERON_RUN_TEST(finalizing_should_answer_finalized);
    OPERON_RUN_TEST(previous_conditions_should_come_from_the_parent);
    OPERON_RUN_TEST(admission_should_map_denials_warnings_and_patches);
    operon_arena_release(mark);
    return operon_test_summary();
}
