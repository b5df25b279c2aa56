/*
 * Conversion between the WebApp's versions (the CRD's conversion webhook):
 * v1alpha1 spec {image, port, env, replicas, ingress} <-> v1 spec
 * {container: {image, port, env}, replicas, ingress}. Everything else of
 * an object is kept as it is; any object that is not a WebApp of these
 * versions refuses the whole request.
 */
#include <string.h>

#include "operon.h"

#define V1ALPHA1 "example.operon.dev/v1alpha1"
#define V1 "example.operon.dev/v1"
#define VERSIONS "WebApp has versions " V1ALPHA1 " and " V1

/* The fields of the container, in v1alpha1's spec. */
static const char *const CONTAINER_FIELDS[] = {"image", "port", "env"};

static operon_json_t *to_v1(operon_json_t *object) {
    operon_json_t *spec = (operon_json_t *)operon_json_get(object, "spec");
    if (operon_json_type(spec) != OPERON_OBJECT) return object;
    operon_json_t *container = operon_json_object();
    for (size_t i = 0; i < OPERON_LEN(CONTAINER_FIELDS); i++) {
        const operon_json_t *v = operon_json_get(spec, CONTAINER_FIELDS[i]);
        if (!v) continue;
        operon_json_set(container, CONTAINER_FIELDS[i], (operon_json_t *)v);
        operon_json_set(spec, CONTAINER_FIELDS[i], NULL);
    }
    if (operon_json_len(container)) operon_json_set(spec, "container", container);
    return object;
}

static operon_json_t *to_v1alpha1(operon_json_t *object) {
    operon_json_t *spec = (operon_json_t *)operon_json_get(object, "spec");
    const operon_json_t *container = operon_json_get(spec, "container");
    if (!container) return object;
    for (size_t i = 0; i < operon_json_len(container); i++)
        operon_json_set(spec, operon_json_key(container, i), (operon_json_t *)operon_json_value(container, i));
    operon_json_set(spec, "container", NULL);
    return object;
}

operon_result_t operon_convert(const operon_json_t *const *objects, size_t len, const char *desired,
                               operon_conversion_t *answer) {
    if (strcmp(desired, V1ALPHA1) != 0 && strcmp(desired, V1) != 0)
        return operon_conversion_error(answer, "cannot convert to %s: " VERSIONS, desired);
    for (size_t i = 0; i < len; i++) {
        const char *api_version = operon_json_string_at(objects[i], "apiVersion", "");
        const char *kind = operon_json_string_at(objects[i], "kind", "");
        if ((strcmp(api_version, V1ALPHA1) != 0 && strcmp(api_version, V1) != 0) || strcmp(kind, "WebApp") != 0)
            return operon_conversion_error(answer, "cannot convert %s %s: " VERSIONS, api_version, kind);
    }
    for (size_t i = 0; i < len; i++) {
        operon_json_t *object = operon_json_copy(objects[i]);
        if (strcmp(operon_json_string_at(object, "apiVersion", ""), desired) != 0) {
            object = strcmp(desired, V1) == 0 ? to_v1(object) : to_v1alpha1(object);
            operon_json_set(object, "apiVersion", operon_json_str(desired));
        }
        operon_converted(answer, object);
    }
    return OPERON_OK;
}
