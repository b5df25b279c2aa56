/* Unit tests of the C WebApp, natively: `make -C guest-examples/c-webapp test`.
 * The shared fixtures (run by `operon test`) cover whole scenarios; these
 * pin single rules and the admission functions. */
#include "operon_testing.h"

static const char *webapp(const char *spec) {
    return operon_sprintf("{\"apiVersion\":\"example.operon.dev/v1alpha1\",\"kind\":\"WebApp\",\"metadata\":{\"name\":"
                          "\"shop\",\"namespace\":\"default\",\"generation\":5,\"creationTimestamp\":"
                          "\"2026-11-20T10:00:00Z\"},\"spec\":%s}",
                          spec);
}

static const operon_readiness_t CURRENT = {OPERON_READINESS_CURRENT, "Resource is current"};

/* A parent with a previous Ready condition (status True or False). */
static const char *with_ready(const char *spec, const char *ready) {
    const char *app = webapp(spec);
    return operon_sprintf("%.*s,\"status\":{\"observedGeneration\":4,\"readyReplicas\":1,\"conditions\":[{\"type\":"
                          "\"Ready\",\"status\":\"%s\",\"observedGeneration\":4,\"lastTransitionTime\":"
                          "\"2026-11-20T10:03:00Z\",\"reason\":\"R\",\"message\":\"m\"}]}}",
                          (int)strlen(app) - 1, app, ready);
}

static const char *deployment(int replicas, const char *image, int ready) {
    return operon_sprintf("{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"shop\","
                          "\"namespace\":\"default\",\"generation\":7},\"spec\":{\"replicas\":%d,\"template\":{\"spec\":"
                          "{\"containers\":[{\"name\":\"web\",\"image\":\"%s\"}]}}},\"status\":{\"readyReplicas\":%d}}",
                          replicas, image, ready);
}

static const char *SERVICE = "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"shop\"}}";
static const char *INGRESS = "{\"apiVersion\":\"networking.k8s.io/v1\",\"kind\":\"Ingress\",\"metadata\":{\"name\":\"shop\"}}";
static const char *NOW = "2026-11-26T04:05:06.789Z";

/* Reconciles parent with children and their readiness at NOW. */
static void run(const char *parent, const operon_test_child_t *children, size_t len, operon_raw_outcome_t *out) {
    operon_test_request_t req = {.object = parent, .children = children, .children_len = len, .now = NOW};
    operon_test_run(NULL, &req, out);
}

/* The Ready condition of a status text: "status reason message @time". */
static const char *ready_of(const char *status) {
    const operon_json_t *s = operon_json_parse(status ? status : "", status ? strlen(status) : 0, NULL);
    const operon_json_t *c = operon_find_condition(operon_json_get(s, "conditions"), "Ready");
    int64_t generation = -1, ready = -1;
    operon_json_int(operon_json_get(c, "observedGeneration"), &generation);
    operon_json_int(operon_json_get(s, "readyReplicas"), &ready);
    return operon_sprintf("%s %s %s @%s gen=%lld ready=%lld", operon_json_string_at(c, "status", "?"),
                          operon_json_string_at(c, "reason", "?"), operon_json_string_at(c, "message", "?"),
                          operon_json_string_at(c, "lastTransitionTime", "?"), (long long)generation, (long long)ready);
}

static void invalid_specs_should_be_terminal(void) {
    const char *cases[][2] = {
        {"{\"replicas\":1}", "WebApp default/shop is invalid: missing field `image`"},
        {"{\"image\":3}", "WebApp default/shop is invalid: invalid type: integer `3`, expected a string"},
        {"{\"image\":\"x\",\"replicas\":1.5}", "WebApp default/shop is invalid: invalid type: floating point `1.5`, expected i32"},
        {"{\"image\":\"x\",\"port\":10000000000}", "WebApp default/shop is invalid: invalid value: integer `10000000000`, expected i32"},
        {"{\"image\":\" \"}", "spec.image must not be empty"},
        {"{\"image\":\"x\",\"replicas\":-1}", "spec.replicas must be 0 or more, not -1"},
        {"{\"image\":\"x\",\"port\":70000}", "spec.port must be between 1 and 65535, not 70000"},
        {"{\"image\":\"x\",\"env\":[{\"name\":\"A\"},{\"name\":\"A\"}]}", "spec.env[1]: A is set twice"},
        {"{\"image\":\"x\",\"ingress\":{\"host\":\"h\",\"path\":\"store\"}}", "spec.ingress.path must start with /"},
    };
    for (size_t i = 0; i < OPERON_LEN(cases); i++) {
        operon_raw_outcome_t out;
        operon_test_reconcile(NULL, webapp(cases[i][0]), NULL, 0, false, &out);
        CHECK(out.failed && out.terminal);
        CHECK_STR(out.failure, cases[i][1]);
        /* The failure carries the status that says why. */
        CHECK_STR(ready_of(out.failure_status),
                  operon_sprintf("False InvalidSpec %s @1970-01-01T00:00:00.000Z gen=5 ready=0", cases[i][1]));
        operon_raw_outcome_free(&out);
    }
}

static void an_invalid_spec_should_keep_the_transition_time_and_the_ready_replicas(void) {
    operon_test_child_t children[] = {{deployment(2, "nginx:1.27", 2), &CURRENT}};
    operon_raw_outcome_t out;
    run(with_ready("{\"image\":\"x\",\"replicas\":-1}", "False"), children, 1, &out);
    CHECK(out.failed && out.terminal);
    CHECK_STR(ready_of(out.failure_status),
              "False InvalidSpec spec.replicas must be 0 or more, not -1 @2026-11-20T10:03:00Z gen=5 ready=2");
    operon_raw_outcome_free(&out);
    run(with_ready("{\"replicas\":1}", "True"), children, 1, &out);
    CHECK_STR(ready_of(out.failure_status),
              operon_sprintf("False InvalidSpec WebApp default/shop is invalid: missing field `image` @%s gen=5 ready=2", NOW));
    operon_raw_outcome_free(&out);
}

static void status_should_say_the_first_thing_that_is_not_ready(void) {
    const char *spec = "{\"image\":\"nginx:1.27\",\"replicas\":2,\"ingress\":{\"host\":\"shop.example.com\"}}";
    const char *running = deployment(2, "nginx:1.27", 1);
    operon_readiness_t rolling = {OPERON_READINESS_IN_PROGRESS, "Available: 1/2"};
    operon_readiness_t stuck = {OPERON_READINESS_FAILED, "Progress deadline exceeded"};
    operon_readiness_t pending = {OPERON_READINESS_UNKNOWN, "no address yet"};
    struct {
        operon_test_child_t children[3];
        size_t len;
        const char *ready;
    } cases[] = {
        {{{SERVICE, &CURRENT}}, 1, "False Progressing deployment shop does not exist yet"},
        {{{running, &CURRENT}}, 1, "False Progressing service shop does not exist yet"},
        {{{running, &CURRENT}, {SERVICE, &CURRENT}}, 2, "False Progressing ingress shop does not exist yet"},
        {{{deployment(3, "nginx:1.27", 1), &CURRENT}, {SERVICE, &CURRENT}, {INGRESS, &CURRENT}}, 3,
         "False Progressing deployment shop is being updated: 1 of 2 replicas ready"},
        {{{deployment(2, "nginx:1.26", 1), &CURRENT}, {SERVICE, &CURRENT}, {INGRESS, &CURRENT}}, 3,
         "False Progressing deployment shop is being updated: 1 of 2 replicas ready"},
        {{{running, &rolling}, {SERVICE, &stuck}, {INGRESS, &CURRENT}}, 3,
         "False Progressing Deployment shop: Available: 1/2"},
        {{{running, &CURRENT}, {SERVICE, &stuck}, {INGRESS, &pending}}, 3,
         "False Failed Service shop: Progress deadline exceeded"},
        {{{running, &CURRENT}, {SERVICE, &CURRENT}, {INGRESS, &pending}}, 3,
         "False Progressing Ingress shop: no address yet"},
        {{{running, &CURRENT}, {SERVICE, &CURRENT}, {INGRESS, &CURRENT}}, 3, "True Available 1 of 2 replicas ready"},
    };
    for (size_t i = 0; i < OPERON_LEN(cases); i++) {
        operon_raw_outcome_t out;
        run(with_ready(spec, "False"), cases[i].children, cases[i].len, &out);
        CHECK(!out.failed && out.needs_finalizer);
        bool ready = cases[i].ready[0] == 'T';
        /* The transition time moves with the status only. */
        const char *when = ready ? NOW : "2026-11-20T10:03:00Z";
        int replicas = cases[i].children[0].object == SERVICE ? 0 : 1;
        CHECK_STR(ready_of(out.status), operon_sprintf("%s @%s gen=5 ready=%d", cases[i].ready, when, replicas));
        /* Available is recorded when Ready turns True. */
        bool available = false;
        for (size_t e = 0; e < out.events_len; e++) available = available || strcmp(out.events[e].reason, "Available") == 0;
        CHECK(available == ready);
        operon_raw_outcome_free(&out);
    }
    /* An Ingress no longer wanted is ignored. */
    operon_readiness_t gone = {OPERON_READINESS_TERMINATING, "Resource is being deleted"};
    operon_test_child_t children[] = {{running, &CURRENT}, {SERVICE, &CURRENT}, {INGRESS, &gone}};
    operon_raw_outcome_t out;
    run(with_ready("{\"image\":\"nginx:1.27\",\"replicas\":2}", "True"), children, 3, &out);
    CHECK_STR(ready_of(out.status), "True Available 1 of 2 replicas ready @2026-11-20T10:03:00Z gen=5 ready=1");
    CHECK(out.events_len == 1 && strcmp(out.events[0].reason, "IngressRemoved") == 0);
    operon_raw_outcome_free(&out);
}

static void finalizing_should_clean_up_and_release_the_finalizer(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, webapp("{\"image\":\"nginx\"}"), NULL, 0, true, &out);
    CHECK(!out.failed && out.finalized && !out.needs_finalizer && out.status == NULL && out.desired_len == 0);
    CHECK(out.events_len == 1);
    if (out.events_len) CHECK_STR(out.events[0].message, "webapp shop deleted; its children are deleted with it");
    operon_raw_outcome_free(&out);
}

static void defaults_should_match_the_crd_and_steady_states_record_no_events(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, webapp("{\"image\":\"nginx:1.27\"}"), NULL, 0, false, &out);
    CHECK(!out.failed && out.desired_len == 2 && !out.has_requeue);
    if (out.desired_len == 2) {
        CHECK(strstr(out.desired[0], "\"replicas\":1,") && strstr(out.desired[0], "\"containerPort\":8080"));
        CHECK(!strstr(out.desired[0], "\"env\""));
    }
    operon_raw_outcome_free(&out);
    const char *steady = webapp("{\"image\":\"nginx:1.27\",\"replicas\":2}");
    steady = operon_sprintf("%.*s,\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":"
                            "\"2026-11-20T10:03:00Z\",\"reason\":\"Available\",\"message\":\"2 of 2 replicas ready\"}]}}",
                            (int)strlen(steady) - 1, steady);
    operon_test_child_t children[] = {{deployment(2, "nginx:1.27", 2), &CURRENT}, {SERVICE, &CURRENT}};
    run(steady, children, 2, &out);
    CHECK(!out.failed && out.events_len == 0);
    CHECK(out.status && strstr(out.status, "\"lastTransitionTime\":\"2026-11-20T10:03:00Z\""));
    operon_raw_outcome_free(&out);
}

static const char *admission(operon_admission_fn fn, operon_operation_t op, const char *spec, bool *denied) {
    operon_raw_admission_t out;
    operon_test_admission(fn, op, spec ? webapp(spec) : NULL, &out);
    *denied = out.denied;
    const char *answer = out.denied ? operon_sprintf("%s (code %u)", out.message, out.code)
                                    : out.patched ? operon_sprintf("%s", out.patched) : "";
    CHECK(out.warnings_len == 0);
    operon_raw_admission_free(&out);
    return answer;
}

static void validate_should_check_image_replicas_and_port_in_order(void) {
    const char *cases[][2] = {
        {"{\"image\":\"nginx\",\"replicas\":3,\"port\":80}", ""},
        {"{\"image\":\"nginx\",\"replicas\":null,\"port\":null}", ""},
        {"{\"replicas\":3}", "spec.image must not be empty (code 0)"},
        {"{\"image\":\"  \",\"replicas\":99}", "spec.image must not be empty (code 0)"},
        {"{\"image\":7}", "spec.image must not be empty (code 0)"},
        {"null", "spec.image must not be empty (code 0)"},
        {"{\"image\":\"x\",\"replicas\":51,\"port\":0}", "spec.replicas must be between 0 and 50, not 51 (code 0)"},
        {"{\"image\":\"x\",\"replicas\":\"3\"}", "spec.replicas must be between 0 and 50, not \"3\" (code 0)"},
        {"{\"image\":\"x\",\"replicas\":2.5}", "spec.replicas must be between 0 and 50, not 2.5 (code 0)"},
        {"{\"image\":\"x\",\"replicas\":50,\"port\":0}", "spec.port must be between 1 and 65535, not 0 (code 0)"},
        {"{\"image\":\"x\",\"port\":65536}", "spec.port must be between 1 and 65535, not 65536 (code 0)"},
    };
    for (size_t i = 0; i < OPERON_LEN(cases); i++) {
        bool denied;
        CHECK_STR(admission(operon_validate, OPERON_CREATE, cases[i][0], &denied), cases[i][1]);
        CHECK(denied == (cases[i][1][0] != '\0'));
    }
    bool denied;
    CHECK_STR(admission(operon_validate, OPERON_DELETE, NULL, &denied), "");
    CHECK_STR(admission(operon_validate, OPERON_CONNECT, "{}", &denied), "");
    admission(operon_validate, OPERON_UPDATE, "{\"image\":\"\"}", &denied);
    CHECK(denied);
}

static void mutate_should_default_the_port_on_create_and_update(void) {
    bool denied;
    const char *out = admission(operon_mutate, OPERON_CREATE, "{\"image\":\"x\"}", &denied);
    CHECK(!denied && strstr(out, "\"spec\":{\"image\":\"x\",\"port\":8080}") && strstr(out, "\"name\":\"shop\""));
    out = admission(operon_mutate, OPERON_UPDATE, "{\"image\":\"x\",\"port\":null}", &denied);
    CHECK(strstr(out, "\"port\":8080") != NULL);
    CHECK_STR(admission(operon_mutate, OPERON_CREATE, "{\"image\":\"x\",\"port\":80}", &denied), "");
    CHECK_STR(admission(operon_mutate, OPERON_CONNECT, "{\"image\":\"x\"}", &denied), "");
}

/* ---------------------------------------------------------- conversion */

static const char *convert(const char *object, const char *desired, bool *failed) {
    operon_raw_conversion_t out;
    operon_test_convert(operon_convert, &object, 1, desired, &out);
    *failed = out.failed;
    const char *answer = out.failed ? operon_sprintf("%s", out.error) : out.len == 1 ? operon_sprintf("%s", out.objects[0]) : "?";
    operon_raw_conversion_free(&out);
    return answer;
}

static void convert_should_move_the_container_fields_between_versions(void) {
    const char *alpha = "{\"apiVersion\":\"example.operon.dev/v1alpha1\",\"kind\":\"WebApp\",\"metadata\":{\"name\":\"shop\"},"
                        "\"spec\":{\"image\":\"nginx\",\"port\":80,\"env\":[{\"name\":\"A\"}],\"replicas\":2},"
                        "\"status\":{\"readyReplicas\":1}}";
    const char *v1 = "{\"apiVersion\":\"example.operon.dev/v1\",\"kind\":\"WebApp\",\"metadata\":{\"name\":\"shop\"},"
                     "\"spec\":{\"replicas\":2,\"container\":{\"image\":\"nginx\",\"port\":80,\"env\":[{\"name\":\"A\"}]}},"
                     "\"status\":{\"readyReplicas\":1}}";
    bool failed;
    const char *up = convert(alpha, "example.operon.dev/v1", &failed);
    CHECK(!failed && operon_json_equal(operon_json_parse(up, strlen(up), NULL), operon_json_parse(v1, strlen(v1), NULL)));
    const char *down = convert(v1, "example.operon.dev/v1alpha1", &failed);
    CHECK(!failed && operon_json_equal(operon_json_parse(down, strlen(down), NULL), operon_json_parse(alpha, strlen(alpha), NULL)));
    /* Already there: as it is. */
    CHECK_STR(convert(alpha, "example.operon.dev/v1alpha1", &failed), alpha);
    /* No container field: no container. */
    CHECK_STR(convert("{\"apiVersion\":\"example.operon.dev/v1alpha1\",\"kind\":\"WebApp\",\"spec\":{\"replicas\":1}}",
                      "example.operon.dev/v1", &failed),
              "{\"apiVersion\":\"example.operon.dev/v1\",\"kind\":\"WebApp\",\"spec\":{\"replicas\":1}}");
}

static void convert_should_refuse_other_versions_and_kinds(void) {
    bool failed;
    CHECK_STR(convert("{\"apiVersion\":\"example.operon.dev/v1\",\"kind\":\"WebApp\"}", "example.operon.dev/v2", &failed),
              "cannot convert to example.operon.dev/v2: WebApp has versions example.operon.dev/v1alpha1 and "
              "example.operon.dev/v1");
    CHECK(failed);
    CHECK_STR(convert("{\"apiVersion\":\"example.operon.dev/v2\",\"kind\":\"WebApp\"}", "example.operon.dev/v1", &failed),
              "cannot convert example.operon.dev/v2 WebApp: WebApp has versions example.operon.dev/v1alpha1 and "
              "example.operon.dev/v1");
    CHECK_STR(convert("{\"apiVersion\":\"example.operon.dev/v1\",\"kind\":\"Shop\"}", "example.operon.dev/v1alpha1", &failed),
              "cannot convert example.operon.dev/v1 Shop: WebApp has versions example.operon.dev/v1alpha1 and "
              "example.operon.dev/v1");
    /* One object refused refuses the request. */
    const char *objects[] = {"{\"apiVersion\":\"example.operon.dev/v1\",\"kind\":\"WebApp\"}", "{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}"};
    operon_raw_conversion_t out;
    operon_test_convert(operon_convert, objects, 2, "example.operon.dev/v1", &out);
    CHECK(out.failed && out.len == 0);
    operon_raw_conversion_free(&out);
}

int main(void) {
    void *mark = operon_arena_mark();
    OPERON_RUN_TEST(invalid_specs_should_be_terminal);
    OPERON_RUN_TEST(an_invalid_spec_should_keep_the_transition_time_and_the_ready_replicas);
    OPERON_RUN_TEST(status_should_say_the_first_thing_that_is_not_ready);
    OPERON_RUN_TEST(finalizing_should_clean_up_and_release_the_finalizer);
    OPERON_RUN_TEST(convert_should_move_the_container_fields_between_versions);
    OPERON_RUN_TEST(convert_should_refuse_other_versions_and_kinds);
    OPERON_RUN_TEST(defaults_should_match_the_crd_and_steady_states_record_no_events);
    OPERON_RUN_TEST(validate_should_check_image_replicas_and_port_in_order);
    OPERON_RUN_TEST(mutate_should_default_the_port_on_create_and_update);
    operon_arena_release(mark);
    return operon_test_summary();
}
