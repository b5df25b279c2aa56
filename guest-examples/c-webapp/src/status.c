/* The WebApp's status: ready replicas and the Ready condition. */
#include <string.h>

#include "webapp.h"

/* lastTransitionTime never reads the clock: it is kept while the Ready
 * status holds (operon_condition), else it is the latest time the request
 * shows: the Deployment's condition timestamps, the previous transition,
 * the WebApp's creation. The API writes one format, so text order is time
 * order. */
static const char *latest_time(const deployment_t *d, const operon_json_t *previous, const char *creation) {
    const char *candidates[] = {d->exists ? d->latest_time : NULL,
                                operon_json_string_at(previous, "lastTransitionTime", NULL), creation};
    const char *latest = NULL;
    for (size_t i = 0; i < OPERON_LEN(candidates); i++)
        if (candidates[i] && (!latest || strcmp(candidates[i], latest) > 0)) latest = candidates[i];
    return latest ? latest : "1970-01-01T00:00:00Z";
}

operon_json_t *webapp_status(const webapp_spec_t *spec, const operon_request_t *req, const operon_json_t *previous,
                             const deployment_t *d) {
    int32_t ready_replicas = d->exists ? d->ready_replicas : 0;
    /* current: the Deployment runs the spec, its controller has seen its
     * latest generation and every replica is updated. */
    bool current = d->exists && (d->has_replicas ? d->replicas : 1) == spec->replicas && d->image &&
                   strcmp(d->image, spec->image) == 0 &&
                   (d->has_observed ? d->observed_generation : 0) >= (d->has_generation ? d->generation : 0) &&
                   d->updated_replicas >= spec->replicas;
    bool ready = current && ready_replicas >= spec->replicas;
    const char *counts = operon_sprintf("%d of %d replicas ready", (int)ready_replicas, (int)spec->replicas);
    const char *message = counts;
    if (!ready && !d->exists) message = operon_sprintf("deployment %s does not exist yet", req->name);
    else if (!ready && !current) message = operon_sprintf("deployment %s is being updated: %s", req->name, counts);
    const char *value = ready ? "True" : "False";
    const operon_json_t *previous_ready = operon_find_condition(previous, "Ready");
    const char *creation = operon_json_string_at(req->object, "metadata.creationTimestamp", NULL);
    operon_json_t *condition = operon_condition(previous, "Ready", value, req->generation,
                                                latest_time(d, previous_ready, creation),
                                                ready ? "Available" : "Progressing", message);
    operon_json_t *status = operon_json_object();
    operon_json_set(status, "observedGeneration", operon_json_integer(req->generation));
    operon_json_set(status, "readyReplicas", operon_json_integer(ready_replicas));
    operon_json_set(status, "conditions", operon_json_push(operon_json_array(), condition));
    return status;
}
