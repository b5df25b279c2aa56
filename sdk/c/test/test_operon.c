/*
 * Unit tests of the C SDK, natively: `make -C sdk/c test` (gcc or clang,
 * with AddressSanitizer and UndefinedBehaviorSanitizer). The reconciler
 * under test is defined here.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp, chmod */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "operon_testing.h"

/* -------------------------------------------- the reconciler under test */

static const operon_gvk_t OWNS[] = {{"", "v1", "ConfigMap"}, {"apps", "v1", "Deployment"}};
static const operon_gvk_t READS[] = {{"", "v1", "Secret"}};
static const operon_watch_t WATCHES[] = {{{"", "v1", "Secret"}, OPERON_MAP_LABEL, "example.dev/owner"},
                                         {{"", "v1", "Secret"}, OPERON_MAP_REFERENCE, "spec.tokenRef"},
                                         {{"", "v1", "ConfigMap"}, OPERON_MAP_SELECTOR, "spec.selector"}};
static const operon_owned_update_t UPDATES[] = {{{"apps", "v1", "Deployment"}, OPERON_UPDATE_RECREATE}};
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
    .updates = UPDATES,
    .updates_len = OPERON_LEN(UPDATES),
};

const operon_manifest_t *operon_manifest(void) { return &MANIFEST; }

/* Contract 0.2's egress: reads a DNS zone through the host, creates it
 * when it is missing, and publishes its serial. */
static operon_result_t keep_zone(const operon_request_t *req, operon_outcome_t *out) {
    static const operon_http_header_t ACCEPT[] = {{"accept", "application/json"}};
    const char *zone = operon_sprintf("%s.", req->name);
    operon_http_request_t get = {
        .url = operon_sprintf("https://dns.example/api/zones/%s", zone),
        .headers = ACCEPT,
        .headers_len = OPERON_LEN(ACCEPT),
        .credential = "pdns",
    };
    operon_http_response_t res;
    operon_http_error_t err;
    operon_json_t *status = operon_json_object();
    if (!operon_http(&get, &res, &err)) {
        if (err.kind == OPERON_HTTP_TIMEOUT) {
            operon_set_status(out, operon_json_set(status, "zone", operon_json_str("timed out")));
            return OPERON_OK;
        }
        return operon_transient(out, "dns: %s: %s", operon_http_error_name(err.kind), err.message);
    }
    if (res.status == 404) {
        operon_http_request_t create = {
            .method = "POST",
            .url = "https://dns.example/api/zones",
            .body = operon_json_text(operon_json_set(operon_json_object(), "name", operon_json_str(zone)), NULL),
            .credential = "pdns",
        };
        if (!operon_http(&create, &res, &err))
            return operon_transient(out, "dns: %s: %s", operon_http_error_name(err.kind), err.message);
        if (!operon_http_ok(&res)) return operon_transient(out, "creating zone %s: status %u", zone, (unsigned)res.status);
        operon_set_status(out, operon_json_set(status, "zone", operon_json_str("created")));
        return OPERON_OK;
    }
    const char *error = NULL;
    const operon_json_t *body = operon_http_json(&res, &error);
    if (!body) return operon_transient(out, "%s", error);
    operon_json_set(status, "zone", operon_json_str("present"));
    operon_json_set(status, "serial", operon_json_copy(operon_json_get(body, "serial")));
    const char *type = operon_http_header(&res, "Content-Type");
    operon_json_set(status, "type", operon_json_str(type ? type : "none"));
    operon_set_status(out, status);
    return OPERON_OK;
}

operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out) {
    const char *mode = operon_json_string_at(req->object, "spec.mode", "");
    if (strcmp(mode, "v2") == 0) {
        /* Contract 0.2: the time, the children's readiness, the new outcome fields. */
        const operon_readiness_t *deployment = operon_child_readiness(req, OPERON_DEPLOYMENT, req->name);
        operon_json_t *status = operon_json_object();
        operon_json_set(status, "now", operon_json_str(req->now));
        operon_json_set(status, "deployment",
                        deployment ? operon_json_strf("%s: %s", operon_readiness_name(deployment->status), deployment->message)
                                   : operon_json_null());
        operon_json_set(status, "missing", operon_json_boolean(operon_child_readiness(req, OPERON_DEPLOYMENT, "x") == NULL));
        operon_json_set(status, "allCurrent", operon_json_boolean(operon_children_current(req)));
        operon_set_status(out, status);
        operon_requeue_at(out, operon_time_format(req->now_unix_ms + 90 * 1000));
        operon_parent_metadata(out, operon_json_set(operon_json_object(), "demo.operon.dev/tier", operon_json_str("gold")),
                               NULL);
        const char *keep = operon_json_string_at(req->object, "spec.keep", NULL);
        if (keep) operon_needs_finalizer(out, strcmp(keep, "yes") == 0);
        if (req->finalizing) operon_finalized(out);
        return OPERON_OK;
    }
    if (strcmp(mode, "egress") == 0) return keep_zone(req, out);
    if (strcmp(mode, "swallow") == 0) {
        /* Calls out and ignores what came of it. */
        operon_http_request_t call = {.url = "https://a.example/x"};
        operon_http_response_t res;
        operon_http_error_t err;
        bool answered = operon_http(&call, &res, &err);
        if (!answered) operon_log(OPERON_WARN, "%s: %s", operon_http_error_name(err.kind), err.message);
        operon_set_status(out, operon_json_set(operon_json_object(), "seen",
                                               operon_json_strf("%s: %s", answered ? "answer" : operon_http_error_name(err.kind),
                                                                answered ? res.body : err.message)));
        return OPERON_OK;
    }
    if (req->finalizing) {
        operon_finalized(out);
        return OPERON_OK;
    }
    if (strcmp(mode, "terminal") == 0) return operon_terminal(out, "spec.mode %s is invalid", mode);
    if (strcmp(mode, "silent") == 0) return OPERON_FAILED;
    if (strcmp(mode, "requeue-at") == 0) {
        operon_requeue_at(out, operon_json_string_at(req->object, "spec.at", ""));
        return OPERON_OK;
    }
    if (strcmp(mode, "host-label") == 0) {
        operon_parent_metadata(out, NULL, operon_json_set(operon_json_object(), "operon.dev/x", operon_json_str("1")));
        return OPERON_OK;
    }
    if (strcmp(mode, "number-label") == 0) {
        operon_parent_metadata(out, operon_json_set(operon_json_object(), "a", operon_json_integer(1)), NULL);
        return OPERON_OK;
    }
    if (strcmp(mode, "stuck") == 0) {
        operon_json_t *status = operon_json_set(operon_json_object(), "phase", operon_json_str("Waiting"));
        return operon_transient_with_status(out, status, "waiting for %s", "the token");
    }
    if (strcmp(mode, "invalid") == 0)
        return operon_terminal_with_status(out, operon_json_set(operon_json_object(), "phase", operon_json_str("Invalid")),
                                           "spec is invalid");
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
    /* The answer to a finalizing request releases the finalizer by default. */
    CHECK(!out.needs_finalizer);
    operon_raw_outcome_free(&out);
}

/* --------------------------------------------------------- contract 0.2 */

static void times_should_parse_as_rfc3339_and_format_as_the_contract_does(void) {
    int64_t ms = 0;
    CHECK(operon_time_parse("2026-11-26T04:05:06.789Z", &ms) && ms == 1795665906789LL);
    CHECK(operon_time_parse("2026-11-26T05:05:06.789+01:00", &ms) && ms == 1795665906789LL);
    CHECK(operon_time_parse("2026-11-25t23:05:06.7891234-0500", &ms) && ms == 1795665906789LL);
    CHECK(operon_time_parse("1970-01-01T00:00:00Z", &ms) && ms == 0);
    CHECK(operon_time_parse("1969-12-31T23:59:59.999Z", &ms) && ms == -1);
    CHECK(operon_time_parse("2024-02-29T00:00:00Z", &ms));
    const char *bad[] = {"",          "2026-11-26",           "2026-11-26T04:05:06",   "2026-02-29T00:00:00Z",
                         "2026-13-01T00:00:00Z", "2026-11-26T24:00:00Z", "2026-11-26T04:05:06.Z", "2026-11-26T04:05:06Zx",
                         "26-11-26T04:05:06Z",   "2026-11-26T04:05:06+1", "soon"};
    for (size_t i = 0; i < OPERON_LEN(bad); i++) {
        if (operon_time_parse(bad[i], &ms)) {
            fprintf(stderr, "accepted: %s\n", bad[i]);
            operon_test_current_failed = 1;
        }
    }
    CHECK_STR(operon_time_format(0), "1970-01-01T00:00:00.000Z");
    CHECK_STR(operon_time_format(-1), "1969-12-31T23:59:59.999Z");
    CHECK_STR(operon_time_format(1795665906789LL), "2026-11-26T04:05:06.789Z");
    CHECK_STR(operon_time_format(951782400000LL), "2000-02-29T00:00:00.000Z");
}

static const char *v2_parent(const char *spec) {
    return operon_sprintf("{\"apiVersion\":\"demo.operon.dev/v1alpha1\",\"kind\":\"Greeting\","
                          "\"metadata\":{\"name\":\"hello\",\"namespace\":\"default\",\"generation\":4},"
                          "\"spec\":{\"mode\":\"v2\"%s}}",
                          spec);
}

static const char *deployment_json = "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"hello\"}}";
static const char *config_map_json = "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"}}";

static void requests_should_carry_now_and_each_childs_readiness(void) {
    operon_readiness_t rolling = {OPERON_READINESS_IN_PROGRESS, "Available: 1/2"};
    operon_readiness_t current = {OPERON_READINESS_CURRENT, "Resource is current"};
    operon_test_child_t children[] = {{config_map_json, &current}, {deployment_json, &rolling}};
    operon_test_request_t req = {.object = v2_parent(""), .children = children, .children_len = 2,
                                 .now = "2026-11-26T04:05:06.789Z"};
    operon_raw_outcome_t out;
    operon_test_run(NULL, &req, &out);
    CHECK(!out.failed);
    CHECK_STR(out.status, "{\"now\":\"2026-11-26T04:05:06.789Z\",\"deployment\":\"in-progress: Available: 1/2\","
                          "\"missing\":true,\"allCurrent\":false}");
    CHECK_STR(out.requeue_at, "2026-11-26T04:06:36.789Z");
    operon_raw_outcome_free(&out);
    children[1].readiness = &current;
    req.now = NULL; /* the Unix epoch, as fixtures without now: */
    operon_test_run(NULL, &req, &out);
    CHECK(out.status && strstr(out.status, "\"now\":\"1970-01-01T00:00:00.000Z\"") && strstr(out.status, "\"allCurrent\":true"));
    CHECK_STR(out.requeue_at, "1970-01-01T00:01:30.000Z");
    operon_raw_outcome_free(&out);
}

static void outcomes_should_carry_parent_metadata_and_the_finalizer_by_default(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, v2_parent(""), NULL, 0, false, &out);
    CHECK(!out.failed && out.needs_finalizer); /* the manifest has a finalizer */
    CHECK(out.has_parent_metadata && out.labels_len == 1 && out.annotations_len == 0);
    if (out.labels_len == 1) {
        CHECK_STR(out.labels[0].key, "demo.operon.dev/tier");
        CHECK_STR(out.labels[0].value, "gold");
    }
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, v2_parent(",\"keep\":\"no\""), NULL, 0, false, &out);
    CHECK(!out.failed && !out.needs_finalizer);
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, v2_parent(",\"keep\":\"yes\""), NULL, 0, true, &out);
    CHECK(!out.failed && out.needs_finalizer); /* said explicitly, even when finalizing */
    operon_raw_outcome_free(&out);
    /* Outcomes that do not say leave the parent's metadata alone. */
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_add(cluster, secret("default", "token", "{}"));
    operon_test_reconcile(cluster, parent("ok", ""), NULL, 0, false, &out);
    CHECK(!out.failed && !out.has_parent_metadata && out.requeue_at == NULL && out.needs_finalizer);
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
}

static void failures_should_carry_a_status(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, parent("stuck", ""), NULL, 0, false, &out);
    CHECK(out.failed && !out.terminal);
    CHECK_STR(out.failure, "waiting for the token");
    CHECK_STR(out.failure_status, "{\"phase\":\"Waiting\"}");
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, parent("invalid", ""), NULL, 0, false, &out);
    CHECK(out.failed && out.terminal);
    CHECK_STR(out.failure_status, "{\"phase\":\"Invalid\"}");
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, parent("terminal", ""), NULL, 0, false, &out);
    CHECK(out.failed && out.failure_status == NULL);
    operon_raw_outcome_free(&out);
}

static void the_native_check_should_refuse_what_the_host_refuses_in_0_2(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, parent("requeue-at", "") , NULL, 0, false, &out);
    CHECK(out.refused);
    CHECK_STR(out.failure, "outcome refused, nothing written: requeue-at \"\" is not an RFC 3339 time such as "
                           "2026-01-01T00:00:00Z (the host checks this before writing)");
    operon_raw_outcome_free(&out);
    const char *later = "{\"apiVersion\":\"demo.operon.dev/v1alpha1\",\"kind\":\"Greeting\",\"metadata\":{\"name\":"
                        "\"hello\",\"namespace\":\"default\"},\"spec\":{\"mode\":\"requeue-at\",\"at\":\"2026-01-01T09:30:00+01:00\"}}";
    operon_test_reconcile(NULL, later, NULL, 0, false, &out);
    CHECK(!out.failed);
    CHECK_STR(out.requeue_at, "2026-01-01T09:30:00+01:00");
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, parent("host-label", ""), NULL, 0, false, &out);
    CHECK(out.refused && strstr(out.failure, "parent-metadata sets the annotation \"operon.dev/x\": operon.dev keys are the host's"));
    operon_raw_outcome_free(&out);
    operon_test_reconcile(NULL, parent("number-label", ""), NULL, 0, false, &out);
    CHECK(out.failed && !out.refused);
    CHECK_STR(out.failure, "the parent's labels must be a JSON object of strings");
    operon_raw_outcome_free(&out);
}

/* A stand-in for the operon binary: records its arguments and input, prints a verdict per object. */
static const char *fake_operon(const char *dir) {
    const char *path = operon_sprintf("%s/operon", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "#!/bin/sh\nPATH=/usr/bin:/bin\necho \"$@\" >> %s/calls\ncat \"$2\" > %s/input\n"
               "echo '[{\"status\":\"InProgress\",\"message\":\"Available: 1/2\"},{\"status\":\"Failed\",\"message\":\"no\"}]'\n",
            dir, dir);
    fclose(f);
    chmod(path, 0755);
    return path;
}

static const char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return "";
    char *text = operon_alloc(65536);
    size_t n = fread(text, 1, 65535, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

static void children_without_a_readiness_should_be_rated_by_the_operon_binary(void) {
    char dir[] = "/tmp/operon-c-rate-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *operon = fake_operon(dir);
    const char *saved_operon = getenv("OPERON") ? operon_sprintf("%s", getenv("OPERON")) : NULL;
    const char *saved_path = operon_sprintf("%s", getenv("PATH") ? getenv("PATH") : "");
    setenv("OPERON", operon, 1);
    operon_readiness_t stated = {OPERON_READINESS_CURRENT, "said so"};
    const char *other = "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"other\"}}";
    operon_test_child_t children[] = {{config_map_json, NULL}, {deployment_json, &stated}, {other, NULL}};
    operon_test_request_t req = {.object = v2_parent(""), .children = children, .children_len = 3};
    operon_raw_outcome_t out;
    operon_test_run(NULL, &req, &out);
    CHECK(!out.failed && out.status && strstr(out.status, "\"deployment\":\"current: said so\""));
    operon_raw_outcome_free(&out);
    /* One run for the request, with the unrated children only, in order. */
    const char *calls = slurp(operon_sprintf("%s/calls", dir));
    CHECK(strncmp(calls, "readiness /", 11) == 0 && strchr(calls, '\n') == calls + strlen(calls) - 1);
    CHECK_STR(slurp(operon_sprintf("%s/input", dir)), operon_sprintf("[%s,%s]", config_map_json, other));
    operon_readiness_t rated[2];
    CHECK(operon_test_rate((const char *const[]){config_map_json, other}, 2, rated) == NULL);
    CHECK(rated[0].status == OPERON_READINESS_IN_PROGRESS && rated[1].status == OPERON_READINESS_FAILED);
    CHECK_STR(rated[0].message, "Available: 1/2");
    /* A binary that answers otherwise fails the test run. */
    CHECK(operon_test_rate((const char *const[]){config_map_json}, 1, rated) != NULL);
    /* No binary: unknown, and why. */
    setenv("OPERON", operon_sprintf("%s/missing", dir), 1);
    CHECK(operon_test_rate((const char *const[]){config_map_json}, 1, rated) == NULL);
    CHECK(rated[0].status == OPERON_READINESS_UNKNOWN);
    CHECK_STR(rated[0].message, "not rated: native tests rate children with the operon binary ($OPERON or operon on "
                                "PATH), or pass a readiness");
    unsetenv("OPERON");
    setenv("PATH", dir, 1); /* operon on PATH: the stand-in */
    CHECK(operon_test_rate((const char *const[]){config_map_json, other}, 2, rated) == NULL);
    CHECK(rated[1].status == OPERON_READINESS_FAILED);
    setenv("PATH", operon_sprintf("%s/nowhere", dir), 1);
    CHECK(operon_test_rate((const char *const[]){config_map_json}, 1, rated) == NULL && rated[0].status == OPERON_READINESS_UNKNOWN);
    setenv("PATH", saved_path, 1);
    if (saved_operon) setenv("OPERON", saved_operon, 1);
    unlink(operon_sprintf("%s/calls", dir));
    unlink(operon_sprintf("%s/input", dir));
    unlink(operon);
    rmdir(dir);
}

/* ---------------------------------------------------------- conversion */

operon_result_t operon_convert(const operon_json_t *const *objects, size_t len, const char *desired_api_version,
                               operon_conversion_t *answer) {
    if (strcmp(desired_api_version, "demo.operon.dev/v1") != 0)
        return operon_conversion_error(answer, "cannot convert to %s", desired_api_version);
    for (size_t i = 0; i < len; i++)
        operon_converted(answer, operon_json_set(operon_json_copy(objects[i]), "apiVersion", operon_json_str(desired_api_version)));
    return OPERON_OK;
}

static operon_result_t silent_convert(const operon_json_t *const *objects, size_t len, const char *desired,
                                      operon_conversion_t *answer) {
    (void)objects, (void)len, (void)desired, (void)answer;
    return OPERON_FAILED;
}

static void convert_should_answer_every_object_or_an_error(void) {
    const char *objects[] = {"{\"apiVersion\":\"demo.operon.dev/v1alpha1\",\"kind\":\"Greeting\"}",
                             "{\"apiVersion\":\"demo.operon.dev/v1alpha1\",\"kind\":\"Greeting\",\"spec\":{}}"};
    operon_raw_conversion_t out;
    operon_test_convert(operon_convert, objects, 2, "demo.operon.dev/v1", &out);
    CHECK(!out.failed && out.len == 2);
    if (out.len == 2) CHECK_STR(out.objects[1], "{\"apiVersion\":\"demo.operon.dev/v1\",\"kind\":\"Greeting\",\"spec\":{}}");
    operon_raw_conversion_free(&out);
    operon_test_convert(operon_convert, objects, 2, "demo.operon.dev/v2", &out);
    CHECK(out.failed && out.len == 0);
    CHECK_STR(out.error, "cannot convert to demo.operon.dev/v2");
    operon_raw_conversion_free(&out);
    operon_test_convert(silent_convert, objects, 1, "demo.operon.dev/v1", &out);
    CHECK(out.failed && strstr(out.error, "without operon_conversion_error"));
    operon_raw_conversion_free(&out);
    const char *broken[] = {"{"};
    operon_test_convert(operon_convert, broken, 1, "demo.operon.dev/v1", &out);
    CHECK(out.failed && strstr(out.error, "object 0 is not JSON"));
    operon_raw_conversion_free(&out);
    operon_test_convert(operon_convert, NULL, 0, "demo.operon.dev/v1", &out);
    CHECK(!out.failed && out.len == 0);
    operon_raw_conversion_free(&out);
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
    if (operon_json_get(review->object, "call")) {
        operon_http_request_t call = {.url = "https://a.example/"};
        operon_http_response_t res;
        operon_http_error_t err;
        if (!operon_http(&call, &res, &err)) return operon_deny(answer, 0, "%s: %s", operon_http_error_name(err.kind), err.message);
    }
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

/* ------------------------------------------------------------- egress */

static const char *GET_ZONE = "{\"method\": \"GET\", \"url\": \"https://dns.example/api/zones/hello.\", \"credential\": \"pdns\"}";

static void a_call_with_a_recorded_exchange_should_get_its_answer(void) {
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_egress(cluster, operon_sprintf("{\"request\": %s, \"response\": {\"status\": 200, \"headers\": "
                                                       "{\"content-type\": \"application/json\"}, \"body\": \"{\\\"serial\\\": 7}\"}}",
                                                       GET_ZONE));
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster, parent("egress", ""), NULL, 0, false, &out);
    CHECK(!out.failed);
    CHECK_STR(out.status, "{\"zone\":\"present\",\"serial\":7,\"type\":\"application/json\"}");
    CHECK(operon_fake_cluster_missed(cluster) == 0);
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
}

static void replay_should_match_method_without_case_url_body_and_credential_not_headers(void) {
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_egress(
        cluster,
        "[{\"request\": {\"method\": \"GET\", \"url\": \"https://dns.example/api/zones/hello.\"},"
        "  \"response\": {\"status\": 500, \"body\": \"no credential: another call\"}},"
        " {\"request\": {\"method\": \"get\", \"url\": \"https://dns.example/api/zones/hello.\", \"credential\": \"pdns\","
        "   \"headers\": {\"user-agent\": \"recorder\"}, \"timeoutMs\": 999}, \"response\": {\"status\": 404}},"
        " {\"request\": {\"method\": \"POST\", \"url\": \"https://dns.example/api/zones\", \"credential\": \"pdns\","
        "   \"body\": {\"base64\": \"eyJuYW1lIjoiaGVsbG8uIn0=\"}}, \"response\": {\"status\": 201}},"
        " {\"request\": {\"method\": \"GET\", \"url\": \"https://dns.example/api/zones/hello.\", \"credential\": \"pdns\"},"
        "  \"response\": {\"status\": 200, \"body\": \"{}\"}}]");
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster, parent("egress", ""), NULL, 0, false, &out);
    CHECK(!out.failed);
    CHECK_STR(out.status, "{\"zone\":\"created\"}");
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
}

static void an_unrecorded_call_should_fail_the_run_naming_it(void) {
    /* The GET is answered 404; the POST that follows is not recorded
     * (another body): the run fails naming it. */
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_egress(cluster, operon_sprintf("[{\"request\": %s, \"response\": {\"status\": 404}},"
                                                       " {\"request\": {\"method\": \"POST\", \"url\": \"https://dns.example/api/zones\","
                                                       " \"credential\": \"pdns\", \"body\": \"{}\"}, \"response\": {\"status\": 201}}]",
                                                       GET_ZONE));
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster, parent("egress", ""), NULL, 0, false, &out);
    CHECK(out.failed && out.unrecorded && !out.refused);
    CHECK_STR(out.failure, "the guest made calls the fixture's `egress` does not hold: POST https://dns.example/api/zones "
                           "(17 bytes of body) with credential \"pdns\"");
    CHECK(operon_fake_cluster_missed(cluster) == 1);
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);

    /* A reconciler that swallows the error fails the same; it saw notRecorded. */
    operon_fake_cluster_t *empty = operon_fake_cluster_new();
    operon_test_reconcile(empty, parent("swallow", ""), NULL, 0, false, &out);
    CHECK(out.failed && out.unrecorded);
    CHECK_STR(out.failure, "the guest made calls the fixture's `egress` does not hold: GET https://a.example/x");
    CHECK_STR(operon_fake_cluster_missed_call(empty, 0), "GET https://a.example/x");
    operon_raw_outcome_free(&out);
    /* What the reconciler saw. */
    CHECK_STR(operon_fake_cluster_log(empty, 0), "notRecorded: GET https://a.example/x is not in the recording (it holds no calls)");
    operon_fake_cluster_free(empty);
}

static void the_not_recorded_message_should_list_what_the_recording_holds(void) {
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_egress(cluster, "[{\"request\": {\"method\": \"POST\", \"url\": \"https://a.example/y\", \"body\": \"abc\"},"
                                        " \"response\": {\"status\": 200}},"
                                        " {\"request\": {\"method\": \"get\", \"url\": \"https://a.example/x\", \"credential\": \"c\"},"
                                        " \"error\": {\"denied\": \"no\"}}]");
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster, parent("swallow", ""), NULL, 0, false, &out);
    CHECK(out.unrecorded);
    CHECK_STR(operon_fake_cluster_log(cluster, 0),
              "notRecorded: GET https://a.example/x is not in the recording (it holds: POST https://a.example/y (3 bytes "
              "of body); GET https://a.example/x with credential \"c\")");
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);

    /* A recorded not-recorded error is an answer like any other. */
    cluster = operon_fake_cluster_new();
    operon_fake_cluster_egress(cluster, "{\"request\": {\"method\": \"GET\", \"url\": \"https://a.example/x\"},"
                                        " \"error\": {\"notRecorded\": \"as recorded\"}}");
    operon_test_reconcile(cluster, parent("swallow", ""), NULL, 0, false, &out);
    CHECK(!out.failed);
    CHECK_STR(out.status, "{\"seen\":\"notRecorded: as recorded\"}");
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
}

static void a_recorded_error_should_reach_the_reconciler_with_its_kind(void) {
    operon_fake_cluster_t *cluster = operon_fake_cluster_new();
    operon_fake_cluster_egress(cluster, operon_sprintf("{\"request\": %s, \"error\": {\"timeout\": \"no answer in 10s\"}}", GET_ZONE));
    operon_raw_outcome_t out;
    operon_test_reconcile(cluster, parent("egress", ""), NULL, 0, false, &out);
    CHECK(!out.failed);
    CHECK_STR(out.status, "{\"zone\":\"timed out\"}");
    operon_raw_outcome_free(&out);
    operon_fake_cluster_free(cluster);
    const char *kinds[] = {"denied", "invalid", "unreachable", "tooLarge", "budget", "notRecorded"};
    for (size_t i = 0; i < OPERON_LEN(kinds); i++) {
        cluster = operon_fake_cluster_new();
        operon_fake_cluster_egress(cluster, operon_sprintf("{\"request\": %s, \"error\": {\"%s\": \"because\"}}", GET_ZONE, kinds[i]));
        operon_test_reconcile(cluster, parent("egress", ""), NULL, 0, false, &out);
        CHECK(out.failed && !out.terminal && !out.unrecorded);
        CHECK_STR(out.failure, operon_sprintf("dns: %s: because", kinds[i]));
        operon_raw_outcome_free(&out);
        operon_fake_cluster_free(cluster);
    }
}

static void responses_should_answer_headers_json_and_ok(void) {
    static const operon_http_header_t HEADERS[] = {{"ETag", "x1"}};
    operon_http_response_t res = {.status = 201, .headers = HEADERS, .headers_len = 1, .body = "not json", .body_len = 8};
    CHECK(operon_http_ok(&res));
    CHECK_STR(operon_http_header(&res, "etag"), "x1");
    CHECK(operon_http_header(&res, "etag2") == NULL);
    const char *error = NULL;
    CHECK(operon_http_json(&res, &error) == NULL && error && strstr(error, "status 201"));
    res.status = 404;
    CHECK(!operon_http_ok(&res));
    operon_http_request_t req = {.method = "patch", .url = "https://a/", .body = "abc", .credential = "x\"y"};
    CHECK_STR(operon_http_describe(&req), "PATCH https://a/ (3 bytes of body) with credential \"x\\\"y\"");
    CHECK_STR(operon_http_error_name(OPERON_HTTP_TOO_LARGE), "tooLarge");
    /* Outside a call there is no host. */
    operon_http_error_t err;
    CHECK(!operon_http(&req, &res, &err) && err.kind == OPERON_HTTP_DENIED);
}

static void admission_should_be_denied_every_call(void) {
    operon_raw_admission_t out;
    operon_test_admission(validate, OPERON_CREATE, "{\"call\":true,\"spec\":{\"message\":\"x\"}}", &out);
    CHECK(out.denied);
    CHECK_STR(out.message, "denied: only reconcile may call out (admission and conversion may not)");
    operon_raw_admission_free(&out);
}

static const char *read_text(const char *path) {
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

/* The selector gives every shared case (contract/selectors/cases.json) the
 * host's verdict: what each selector matches, and what it refuses. */
static void selector_should_agree_with_every_shared_case(void) {
    const char *text = read_text("../../contract/selectors/cases.json");
    const operon_json_t *cases = text ? operon_json_parse(text, strlen(text), NULL) : NULL;
    const operon_json_t *selectors = operon_json_get(cases, "selectors"), *refused = operon_json_get(cases, "refused");
    CHECK(operon_json_len(selectors) >= 20 && operon_json_len(refused) >= 20);
    for (size_t i = 0; i < operon_json_len(selectors); i++) {
        const operon_json_t *c = operon_json_item(selectors, i);
        const char *selector_text = operon_json_string_at(c, "selector", ""), *error = NULL;
        const operon_selector_t *selector = operon_selector_parse(selector_text, &error);
        if (!selector) {
            fprintf(stderr, "\"%s\" should parse: %s\n", selector_text, error);
            CHECK(selector);
            continue;
        }
        const char *keys[] = {"matches", "misses"};
        for (int k = 0; k < 2; k++) {
            const operon_json_t *sets = operon_json_get(c, keys[k]);
            for (size_t j = 0; j < operon_json_len(sets); j++) {
                const operon_json_t *labels = operon_json_item(sets, j);
                if (operon_selector_matches(selector, labels) != (k == 0)) {
                    fprintf(stderr, "\"%s\" %s %s\n", selector_text, k == 0 ? "should match" : "should not match",
                            operon_json_text(labels, NULL));
                    CHECK(operon_selector_matches(selector, labels) == (k == 0));
                }
            }
        }
    }
    for (size_t i = 0; i < operon_json_len(refused); i++) {
        const operon_json_t *c = operon_json_item(refused, i);
        const char *selector_text = operon_json_string_at(c, "selector", "");
        if (operon_selector_parse(selector_text, NULL)) {
            fprintf(stderr, "\"%s\" should be refused (%s)\n", selector_text, operon_json_string_at(c, "why", ""));
            CHECK(!operon_selector_parse(selector_text, NULL));
        }
    }
}

static void a_malformed_selector_should_say_what_is_wrong(void) {
    const char *error = NULL;
    CHECK(!operon_selector_parse("env in prod", &error));
    CHECK_STR(error, "invalid label selector \"env in prod\": expected '(' after in or notin");
    CHECK(!operon_selector_parse("app=-web", &error));
    CHECK(strstr(error, "invalid label value \"-web\"") != NULL);
    CHECK(operon_selector_parse(NULL, NULL) != NULL);
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
    OPERON_RUN_TEST(times_should_parse_as_rfc3339_and_format_as_the_contract_does);
    OPERON_RUN_TEST(requests_should_carry_now_and_each_childs_readiness);
    OPERON_RUN_TEST(outcomes_should_carry_parent_metadata_and_the_finalizer_by_default);
    OPERON_RUN_TEST(failures_should_carry_a_status);
    OPERON_RUN_TEST(the_native_check_should_refuse_what_the_host_refuses_in_0_2);
    OPERON_RUN_TEST(children_without_a_readiness_should_be_rated_by_the_operon_binary);
    OPERON_RUN_TEST(convert_should_answer_every_object_or_an_error);
    OPERON_RUN_TEST(selector_should_agree_with_every_shared_case);
    OPERON_RUN_TEST(a_malformed_selector_should_say_what_is_wrong);
    OPERON_RUN_TEST(a_call_with_a_recorded_exchange_should_get_its_answer);
    OPERON_RUN_TEST(replay_should_match_method_without_case_url_body_and_credential_not_headers);
    OPERON_RUN_TEST(an_unrecorded_call_should_fail_the_run_naming_it);
    OPERON_RUN_TEST(the_not_recorded_message_should_list_what_the_recording_holds);
    OPERON_RUN_TEST(a_recorded_error_should_reach_the_reconciler_with_its_kind);
    OPERON_RUN_TEST(responses_should_answer_headers_json_and_ok);
    OPERON_RUN_TEST(admission_should_be_denied_every_call);
    operon_arena_release(mark);
    return operon_test_summary();
}
