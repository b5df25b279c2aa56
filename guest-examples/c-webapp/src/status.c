/* The WebApp's status: ready replicas and the Ready condition. */
#include <string.h>

#include "webapp.h"

/* The status with one Ready condition. Its lastTransitionTime is the
 * previous one while the status holds (operon_condition), else the
 * request's now exactly as the host gave it: never the clock. */
static operon_json_t *status_of(const operon_request_t *req, const operon_json_t *previous, int64_t ready_replicas,
                                bool ready, const char *reason, const char *message) {
    operon_json_t *condition = operon_condition(previous, "Ready", ready ? "True" : "False", req->generation, req->now,
                                                reason, message);
    operon_json_t *status = operon_json_object();
    operon_json_set(status, "observedGeneration", operon_json_integer(req->generation));
    operon_json_set(status, "readyReplicas", operon_json_integer(ready_replicas));
    operon_json_set(status, "conditions", operon_json_push(operon_json_array(), condition));
    return status;
}

/* A wanted child: its kind, and whether it is wanted at all. */
typedef struct wanted {
    operon_gvk_t kind;
    bool wanted;
} wanted_t;

operon_json_t *webapp_status(const webapp_spec_t *spec, const operon_request_t *req, const operon_json_t *previous,
                             const deployment_t *d) {
    const char *name = req->name;
    int32_t ready_replicas = d->exists ? d->ready_replicas : 0;
    const wanted_t children[] = {{OPERON_DEPLOYMENT, true}, {OPERON_SERVICE, true}, {OPERON_INGRESS, spec->has_ingress}};
    /* 1. A wanted child is missing. */
    for (size_t i = 0; i < OPERON_LEN(children); i++) {
        if (!children[i].wanted || operon_child(req, children[i].kind, name)) continue;
        const char *kind = children[i].kind.kind;
        char *lower = (char *)operon_sprintf("%s", kind);
        for (char *c = lower; *c; c++)
            if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
        return status_of(req, previous, ready_replicas, false, "Progressing",
                         operon_sprintf("%s %s does not exist yet", lower, name));
    }
    const char *counts = operon_sprintf("%d of %d replicas ready", (int)ready_replicas, (int)spec->replicas);
    /* 2. The Deployment does not run the spec yet. */
    if ((d->has_replicas ? d->replicas : 1) != spec->replicas || !d->image || strcmp(d->image, spec->image) != 0)
        return status_of(req, previous, ready_replicas, false, "Progressing",
                         operon_sprintf("deployment %s is being updated: %s", name, counts));
    /* 3. A wanted child is not current, by the host's readiness (kstatus). */
    for (size_t i = 0; i < OPERON_LEN(children); i++) {
        if (!children[i].wanted) continue;
        const operon_readiness_t *r = operon_child_readiness(req, children[i].kind, name);
        if (r->status == OPERON_READINESS_CURRENT) continue;
        return status_of(req, previous, ready_replicas, false,
                         r->status == OPERON_READINESS_FAILED ? "Failed" : "Progressing",
                         operon_sprintf("%s %s: %s", children[i].kind.kind, name, r->message));
    }
    /* 4. Ready. */
    return status_of(req, previous, ready_replicas, true, "Available", counts);
}

operon_json_t *webapp_invalid_status(const operon_request_t *req, const char *message) {
    /* Read leniently: the parent itself may be what does not parse. */
    const operon_json_t *previous = operon_json_at(req->object, "status.conditions");
    int64_t ready_replicas = 0;
    operon_json_int(operon_json_at(operon_child(req, OPERON_DEPLOYMENT, req->name), "status.readyReplicas"),
                    &ready_replicas);
    return status_of(req, previous, ready_replicas, false, "InvalidSpec", message);
}
