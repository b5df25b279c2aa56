/* Unit tests of src/main.c, natively: `make test`. */
#include "operon_testing.h"

static const char *greeting(const char *message) {
    return operon_sprintf("{\"apiVersion\":\"demo.operon.dev/v1alpha1\",\"kind\":\"Greeting\","
                          "\"metadata\":{\"name\":\"hello\",\"namespace\":\"default\",\"generation\":2},"
                          "\"spec\":{\"message\":\"%s\"}}",
                          message);
}

static void a_greeting_should_want_its_configmap(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, greeting("hi"), NULL, 0, false, &out);
    CHECK(!out.failed && out.desired_len == 1);
    if (out.desired_len == 1) {
        const operon_json_t *cm = operon_json_parse(out.desired[0], strlen(out.desired[0]), NULL);
        CHECK_STR(operon_json_string_at(cm, "metadata.name", NULL), "hello-greeting");
        CHECK_STR(operon_json_string_at(cm, "data.message", NULL), "hi");
    }
    CHECK_STR(out.status, "{\"observedGeneration\":2,\"published\":false}");
    operon_raw_outcome_free(&out);
}

static void status_should_say_whether_the_configmap_exists(void) {
    const char *children[] = {"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"hello-greeting\"}}"};
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, greeting("hi"), children, 1, false, &out);
    CHECK_STR(out.status, "{\"observedGeneration\":2,\"published\":true}");
    operon_raw_outcome_free(&out);
}

static void an_empty_message_should_be_terminal(void) {
    operon_raw_outcome_t out;
    operon_test_reconcile(NULL, greeting(""), NULL, 0, false, &out);
    CHECK(out.failed && out.terminal);
    CHECK_STR(out.failure, "spec.message must not be empty");
    operon_raw_outcome_free(&out);
}

int main(void) {
    void *mark = operon_arena_mark();
    OPERON_RUN_TEST(a_greeting_should_want_its_configmap);
    OPERON_RUN_TEST(status_should_say_whether_the_configmap_exists);
    OPERON_RUN_TEST(an_empty_message_should_be_terminal);
    operon_arena_release(mark);
    return operon_test_summary();
}
