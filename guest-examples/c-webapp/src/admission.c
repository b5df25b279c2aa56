/*
 * Admission for WebApps: validate refuses what the reconciler could not
 * run (first failing check wins); mutate defaults spec.port to 8080.
 *
 * A null field counts as absent, as Kubernetes treats it. Integers are JSON
 * numbers with an integral value (3.0 is 3, as in JavaScript); the refused
 * value is quoted as JSON.
 */
#include <math.h>
#include <string.h>

#include "operon.h"

/* spec.<field>, NULL when absent or null. */
static const operon_json_t *present(const operon_json_t *object, const char *field) {
    const operon_json_t *v = operon_json_get(operon_json_get(object, "spec"), field);
    return operon_json_type(v) == OPERON_NULL ? NULL : v;
}

static bool integer_in(const operon_json_t *v, double min, double max) {
    double d;
    return operon_json_number(v, &d) && d == floor(d) && d >= min && d <= max;
}

operon_result_t operon_validate(const operon_review_t *review, operon_admission_t *answer) {
    if (review->operation == OPERON_DELETE || review->operation == OPERON_CONNECT) return OPERON_OK;
    if (!review->object) return operon_deny(answer, 0, "the object is not valid JSON");
    const char *image = operon_json_string(present(review->object, "image"));
    size_t blank = image ? strspn(image, " \t\n\r\f\v") : 0;
    if (!image || image[blank] == '\0') return operon_deny(answer, 0, "spec.image must not be empty");
    const operon_json_t *v;
    if ((v = present(review->object, "replicas")) && !integer_in(v, 0, 50))
        return operon_deny(answer, 0, "spec.replicas must be between 0 and 50, not %s", operon_json_text(v, NULL));
    if ((v = present(review->object, "port")) && !integer_in(v, 1, 65535))
        return operon_deny(answer, 0, "spec.port must be between 1 and 65535, not %s", operon_json_text(v, NULL));
    return OPERON_OK;
}

operon_result_t operon_mutate(const operon_review_t *review, operon_admission_t *answer) {
    if (review->operation != OPERON_CREATE && review->operation != OPERON_UPDATE) return OPERON_OK;
    if (!review->object) return operon_deny(answer, 0, "the object is not valid JSON");
    if (present(review->object, "port")) return OPERON_OK;
    const operon_json_t *spec = operon_json_get(review->object, "spec");
    if (operon_json_type(spec) > OPERON_NULL && operon_json_type(spec) != OPERON_OBJECT) return OPERON_OK;
    operon_json_t *object = operon_json_copy(review->object);
    operon_json_t *new_spec = operon_json_type(spec) == OPERON_OBJECT ? (operon_json_t *)operon_json_get(object, "spec")
                                                                       : operon_json_object();
    operon_json_set(new_spec, "port", operon_json_integer(8080));
    operon_json_set(object, "spec", new_spec);
    operon_admission_patch(answer, object);
    return OPERON_OK;
}
