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
        operon_raw_outcome_free(&out);
    }
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
    const char *children[] = {
        "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"shop\",\"namespace\":\"default\","
        "\"generation\":7},\"spec\":{\"replicas\":2,\"template\":{\"spec\":{\"containers\":[{\"name\":\"web\",\"image\":"
        "\"nginx:1.27\"}]}}},\"status\":{\"observedGeneration\":7,\"updatedReplicas\":2,\"readyReplicas\":2}}"};
    operon_test_reconcile(NULL, steady, children, 1, false, &out);
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

int main(void) {
    void *mark = operon_arena_mark();
    OPERON_RUN_TEST(invalid_specs_should_be_terminal);
    OPERON_RUN_TEST(defaults_should_match_the_crd_and_steady_states_record_no_events);
    OPERON_RUN_TEST(validate_should_check_image_replicas_and_port_in_order);
    OPERON_RUN_TEST(mutate_should_default_the_port_on_create_and_update);
    operon_arena_release(mark);
    return operon_test_summary();
}
