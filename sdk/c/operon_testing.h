/*
 * operon_testing.h — run a reconciler natively, without wasm and without a
 * cluster, through operon_run_reconcile (the code path of the component's
 * export): what passes here passes in the component.
 *
 *     operon_fake_cluster_t *cluster = operon_fake_cluster_new();
 *     operon_fake_cluster_add(cluster, "{\"apiVersion\":\"v1\",\"kind\":\"Secret\",...}");
 *     operon_raw_outcome_t out;
 *     const char *children[] = {"{...a ConfigMap...}"};
 *     operon_test_reconcile(cluster, parent_json, children, 1, false, &out);
 *     CHECK(!out.failed);
 *     operon_raw_outcome_free(&out);
 *
 * The fake cluster answers operon_get and operon_list (objects with no
 * metadata.namespace match any namespace; a read without a namespace means
 * the parent's), and operon_http from recorded exchanges
 * (operon_fake_cluster_egress). Its selectors are Kubernetes label
 * selectors (operon_selector_parse); a malformed one fails the list. It lets
 * every kind be read: check manifest.reads yourself.
 *
 * A tiny test harness comes with it: CHECK(cond) and CHECK_STR(a, b)
 * record failures, OPERON_RUN_TEST(fn) runs a test function, and
 * operon_test_summary() prints "N passed, M failed" and returns the exit
 * status.
 */
#ifndef OPERON_TESTING_H
#define OPERON_TESTING_H

#include <stdio.h>
#include <string.h>

#include "operon.h"

typedef struct operon_fake_cluster operon_fake_cluster_t;

operon_fake_cluster_t *operon_fake_cluster_new(void);
/* Adds an object (JSON text, copied). */
void operon_fake_cluster_add(operon_fake_cluster_t *cluster, const char *json);
void operon_fake_cluster_free(operon_fake_cluster_t *cluster);
/* A label selector in Kubernetes syntax, as the fake cluster's operon_list
 * reads it: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`,
 * `!k`, comma-separated; "" matches everything. Keys and values follow the
 * Kubernetes label rules. It is held to the host's verdicts by the shared
 * cases in contract/selectors/cases.json. */
typedef struct operon_selector operon_selector_t;
/* Parses text (arena memory); NULL when it is not a selector, with *error
 * (arena memory, if error is not NULL) saying why. */
const operon_selector_t *operon_selector_parse(const char *text, const char **error);
/* Whether labels (a JSON object; NULL is no labels) satisfy every requirement. */
bool operon_selector_matches(const operon_selector_t *selector, const operon_json_t *labels);

/* The number of lines logged so far, and line i's message. */
size_t operon_fake_cluster_logs(const operon_fake_cluster_t *cluster);
const char *operon_fake_cluster_log(const operon_fake_cluster_t *cluster, size_t i);

/* Records HTTP exchanges the cluster answers operon_http with (contract
 * 0.2's egress): `egress` is the JSON text of one exchange or of a list, in
 * the format of a fixture's `egress:` key:
 *
 *     operon_fake_cluster_egress(cluster, "[{\"request\": {\"method\": \"GET\", \"url\": \"https://dns.example/z\","
 *         " \"credential\": \"pdns\"}, \"response\": {\"status\": 200, \"body\": \"{}\"}},"
 *         " {\"request\": {\"method\": \"DELETE\", \"url\": \"https://dns.example/b\"},"
 *         " \"error\": {\"timeout\": \"no answer in 10s\"}}]");
 *
 * (headers: a map; a body: text, or {"base64": ...}; an error: one key of
 * denied, invalid, timeout, unreachable, tooLarge, budget, notRecorded).
 * Each call takes the first exchange not yet used whose request has the
 * same method (without case), URL, body (none is empty) and credential;
 * headers and timeoutMs are not compared. A call none answers gets an
 * OPERON_HTTP_NOT_RECORDED error naming it and is remembered: the run then
 * fails with out->unrecorded set and out->failure "the guest made calls
 * the fixture's `egress` does not hold: GET https://...", whatever the
 * reconciler made of the error. Exchanges left unused are fine; a used one
 * stays used for later runs on the same cluster. Malformed text aborts (a
 * broken test). Admission and conversion calls are denied, as the host
 * denies them. */
void operon_fake_cluster_egress(operon_fake_cluster_t *cluster, const char *egress);
/* The calls of the last run no exchange answered, and call i described
 * (`POST https://a.example/x (7 bytes of body) with credential "api"`). */
size_t operon_fake_cluster_missed(const operon_fake_cluster_t *cluster);
const char *operon_fake_cluster_missed_call(const operon_fake_cluster_t *cluster, size_t i);

/* One existing child of a test request: its JSON, and its readiness when
 * the test states it (NULL: rated as the host rates it, see below). */
typedef struct operon_test_child {
    const char *object;
    const operon_readiness_t *readiness;
} operon_test_child_t;

/* A test request; zero fields are the host's defaults. */
typedef struct operon_test_request {
    const char *object; /* the parent (JSON) */
    const operon_test_child_t *children;
    size_t children_len;
    const char *const *related; /* JSON texts */
    size_t related_len;
    bool finalizing;
    uint32_t attempt;
    const char *now; /* NULL: "1970-01-01T00:00:00.000Z", as fixtures */
} operon_test_request_t;

/* Builds the wire request as the host does (children grouped by the kinds
 * of operon_manifest()->owns, in that order) and runs it. cluster may be
 * NULL (an empty one). A child of a kind the manifest does not own is
 * refused with a failure, as the host would never hand it in.
 *
 * Readiness is never computed here: the children without one are rated by
 * the host's own rules, by running `operon readiness` (the binary $OPERON
 * names, else operon on PATH) once per request. Without that binary they
 * are unknown, with the message OPERON_TEST_NOT_RATED. */
void operon_test_run(operon_fake_cluster_t *cluster, const operon_test_request_t *req, operon_raw_outcome_t *out);
/* The same for a parent and children as JSON texts (the rest defaults). */
void operon_test_reconcile(operon_fake_cluster_t *cluster, const char *parent, const char *const *children,
                           size_t children_len, bool finalizing, operon_raw_outcome_t *out);
/* Every outcome is then checked as the host checks it before writing
 * anything (operon_check_outcome); one the host would refuse becomes a
 * failure with out->refused set and the rule in out->failure:
 * "outcome refused, nothing written: RULE (the host checks this before
 * writing)". */

#define OPERON_TEST_NOT_RATED                                                                                   \
    "not rated: native tests rate children with the operon binary ($OPERON or operon on PATH), or pass a " \
    "readiness"

/* Rates len objects (JSON texts) with `operon readiness`, one run for all,
 * into readiness (messages in the arena). NULL on success, else why the
 * binary failed (a test fails then). */
const char *operon_test_rate(const char *const *objects, size_t len, operon_readiness_t *readiness);

/* The host's checks of an outcome, as operon test makes them (the rules and
 * messages of operon_contract::rules, data in operon_rules.h, with the
 * policy of `operon run --module`: what the manifest owns, any namespace,
 * cluster-scoped kinds allowed, no adoption; and contract 0.2's: requeue-at
 * parses as RFC 3339, no parent-metadata key under operon.dev/). children are the parent's
 * own; cluster's objects are those a child could be written over. NULL when
 * the host writes the outcome, else the rule it breaks (arena memory). */
const char *operon_check_outcome(const operon_manifest_t *m, const char *parent, const char *const *children,
                                 size_t children_len, const operon_fake_cluster_t *cluster,
                                 const operon_raw_outcome_t *out);
/* Runs an admission function on a review of op for object (JSON or NULL). */
void operon_test_admission(operon_admission_fn fn, operon_operation_t op, const char *object,
                           operon_raw_admission_t *out);
/* Runs a convert function on len objects (JSON texts), as the component does. */
void operon_test_convert(operon_convert_fn fn, const char *const *objects, size_t len, const char *desired_api_version,
                         operon_raw_conversion_t *out);

extern int operon_test_passed, operon_test_failed, operon_test_current_failed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            operon_test_current_failed = 1;                                          \
        }                                                                            \
    } while (0)

#define CHECK_STR(a, b)                                                                                    \
    do {                                                                                                   \
        const char *a_ = (a), *b_ = (b);                                                                   \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                                           \
            fprintf(stderr, "%s:%d: %s == %s failed:\n  %s\n  %s\n", __FILE__, __LINE__, #a, #b,           \
                    a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                               \
            operon_test_current_failed = 1;                                                                \
        }                                                                                                  \
    } while (0)

#define OPERON_RUN_TEST(fn)                                      \
    do {                                                         \
        operon_test_current_failed = 0;                          \
        fn();                                                    \
        if (operon_test_current_failed) {                        \
            operon_test_failed++;                                \
            fprintf(stderr, "FAILED  %s\n", #fn);                \
        } else {                                                 \
            operon_test_passed++;                                \
            printf("ok      %s\n", #fn);                         \
        }                                                        \
    } while (0)

/* Prints "N passed, M failed"; returns 0 when nothing failed. */
int operon_test_summary(void);

#endif
