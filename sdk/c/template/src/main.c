/*
 * {{name}}: an Operon reconciler in C. A Greeting
 * (demo.operon.dev/v1alpha1, see crd.yaml) wants a ConfigMap
 * <name>-greeting holding spec.message, and reports in its status whether
 * that ConfigMap exists.
 *
 * `operon build` compiles the .c files in src/ for wasm32-wasi into a component;
 * `make test` runs test/ natively; `operon test` runs fixtures/ through the
 * component. Everything the SDK gives you lives until the call returns:
 * there is nothing to free.
 */
#include "operon.h"

static const operon_gvk_t OWNS[] = {{"", "v1", "ConfigMap"}};

static const operon_manifest_t MANIFEST = {
    .name = "{{name}}",
    .for_kind = {"demo.operon.dev", "v1alpha1", "Greeting"},
    .owns = OWNS,
    .owns_len = OPERON_LEN(OWNS),
};

const operon_manifest_t *operon_manifest(void) { return &MANIFEST; }

/* Reads only the request (no clock, no state): the host may call it any
 * number of times. */
operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out) {
    const char *message = operon_json_string_at(req->object, "spec.message", "");
    if (!*message) return operon_terminal(out, "spec.message must not be empty"); /* wait for a change */

    const char *name = operon_sprintf("%s-greeting", req->name);
    operon_json_t *config_map = operon_new_object(OPERON_CONFIGMAP, name);
    operon_json_set(config_map, "data", operon_json_set(operon_json_object(), "message", operon_json_str(message)));
    operon_apply(out, config_map);

    operon_json_t *status = operon_json_object();
    operon_json_set(status, "observedGeneration", operon_json_integer(req->generation));
    operon_json_set(status, "published", operon_json_boolean(operon_child(req, OPERON_CONFIGMAP, name) != NULL));
    operon_set_status(out, status);
    operon_log(OPERON_DEBUG, "publishing %s", name);
    return OPERON_OK;
}
