/*
 * The WebApp reconciler in C, with exactly the behaviour of the Rust
 * example (guest-examples/rust-webapp/src/lib.rs): a WebApp
 * (example.operon.dev/v1alpha1, ../webapp/crd.yaml) yields a Deployment, a
 * ClusterIP Service and, when spec.ingress is set, an Ingress.
 *
 * - Children: all named after the WebApp, labelled
 *   app.kubernetes.io/name=<name> and app.kubernetes.io/managed-by=operon.
 * - Status (status.c): observedGeneration, readyReplicas and a Ready
 *   condition from the children's readiness (the host's kstatus verdicts),
 *   whose lastTransitionTime is the request's now, never the clock.
 * - Events only when something is about to change: Created, Scaled,
 *   Updated, IngressCreated, IngressRemoved, Available, and Cleanup when the
 *   WebApp is deleted.
 * - The finalizer example.operon.dev/cleanup: every outcome asks for it,
 *   the answer to a finalizing request releases it.
 * - No requeue: the Deployment is owned, so its changes reconcile again.
 * - A spec that does not parse or validate is a terminal failure, with the
 *   Rust example's messages (the shared fixtures pin them), carrying a
 *   status whose Ready condition says InvalidSpec.
 * - Admission (admission.c): validate and default WebApps; conversion
 *   (convert.c) between v1alpha1 and v1.
 */
#include "webapp.h"

#include <stdio.h>
#include <string.h>

#include "strict.h"

static const operon_gvk_t OWNS[] = {
    {"apps", "v1", "Deployment"},
    {"", "v1", "Service"},
    {"networking.k8s.io", "v1", "Ingress"},
};

static const operon_manifest_t MANIFEST = {
    .name = "webapp",
    .for_kind = {"example.operon.dev", "v1alpha1", "WebApp"},
    .owns = OWNS,
    .owns_len = OPERON_LEN(OWNS),
    .finalizer = WEBAPP_FINALIZER,
};

const operon_manifest_t *operon_manifest(void) { return &MANIFEST; }

/* ------------------------------------------------------------- parsing */

/* Reads the parent strictly (see strict.c); NULL when it does not fit. */
static const char *parse_webapp(const operon_json_t *object, webapp_t *app) {
    strict_t r = {0};
    memset(app, 0, sizeof *app);
    const operon_json_t *root = strict_object(&r, object, "struct WebApp");
    const operon_json_t *spec = strict_object(&r, strict_required(&r, root, "spec"), "struct WebAppSpec");
    webapp_spec_t *s = &app->spec;
    s->replicas = 1;
    s->port = 8080;
    s->image = strict_str(&r, strict_required(&r, spec, "image"));
    const operon_json_t *v;
    if ((v = operon_json_get(spec, "replicas"))) s->replicas = strict_i32(&r, v);
    if ((v = operon_json_get(spec, "port"))) s->port = strict_i32(&r, v);
    if ((v = operon_json_get(spec, "env"))) {
        const operon_json_t *env = strict_seq(&r, v);
        s->env_len = operon_json_len(env);
        s->env = operon_alloc(s->env_len * sizeof *s->env);
        for (size_t i = 0; i < s->env_len; i++) {
            const operon_json_t *item = strict_object(&r, operon_json_item(env, i), "struct EnvVar");
            s->env[i].name = strict_str(&r, strict_required(&r, item, "name"));
            const operon_json_t *value = operon_json_get(item, "value");
            s->env[i].value = value ? strict_str(&r, value) : "";
        }
    }
    if ((v = operon_json_get(spec, "ingress")) && operon_json_type(v) != OPERON_NULL) {
        const operon_json_t *ingress = strict_object(&r, v, "struct IngressSpec");
        s->has_ingress = true;
        s->ingress.host = strict_str(&r, strict_required(&r, ingress, "host"));
        s->ingress.path = strict_opt_str(&r, operon_json_get(ingress, "path"));
        s->ingress.class_name = strict_opt_str(&r, operon_json_get(ingress, "className"));
    }
    if ((v = operon_json_get(root, "status")) && operon_json_type(v) != OPERON_NULL) {
        const operon_json_t *status = strict_object(&r, v, "struct WebAppStatus");
        app->has_status = true;
        strict_opt_i64(&r, operon_json_get(status, "observedGeneration"), &app->status_observed_generation);
        if ((v = operon_json_get(status, "conditions"))) {
            const operon_json_t *conditions = strict_seq(&r, v);
            for (size_t i = 0; i < operon_json_len(conditions); i++) {
                const operon_json_t *c = strict_object(&r, operon_json_item(conditions, i), "struct Condition");
                static const char *const required[] = {"type", "status", "lastTransitionTime", "reason", "message"};
                for (size_t k = 0; k < OPERON_LEN(required); k++) strict_str(&r, strict_required(&r, c, required[k]));
                int64_t ignored;
                strict_opt_i64(&r, operon_json_get(c, "observedGeneration"), &ignored);
            }
            app->status_conditions = conditions;
        }
        int32_t ignored;
        strict_opt_i32(&r, operon_json_get(status, "readyReplicas"), &ignored);
    }
    return r.error;
}

/* Checks what the CRD schema also checks, for objects that did not go
 * through it; NULL when the spec is valid. */
static const char *validate_spec(const webapp_spec_t *s) {
    const char *image = s->image;
    while (*image == ' ' || *image == '\t' || *image == '\n' || *image == '\r' || *image == '\f' || *image == '\v')
        image++;
    if (!*image) return "spec.image must not be empty";
    if (s->replicas < 0) return operon_sprintf("spec.replicas must be 0 or more, not %d", (int)s->replicas);
    if (s->port < 1 || s->port > 65535)
        return operon_sprintf("spec.port must be between 1 and 65535, not %d", (int)s->port);
    for (size_t i = 0; i < s->env_len; i++) {
        if (!*s->env[i].name) return operon_sprintf("spec.env[%zu].name must not be empty", i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(s->env[j].name, s->env[i].name) == 0)
                return operon_sprintf("spec.env[%zu]: %s is set twice", i, s->env[i].name);
    }
    if (s->has_ingress) {
        if (!*s->ingress.host) return "spec.ingress.host must not be empty";
        if (s->ingress.path && s->ingress.path[0] != '/') return "spec.ingress.path must start with /";
    }
    return NULL;
}

/* The slim view of the existing Deployment called name; NULL error when it
 * fits (d->exists says whether there is one). */
static const char *parse_deployment(const operon_request_t *req, const char *name, deployment_t *d) {
    memset(d, 0, sizeof *d);
    const operon_json_t *child = operon_child(req, OPERON_DEPLOYMENT, name);
    if (!child) return NULL;
    d->exists = true;
    /* Read strictly as the Rust example's slim view is, so a Deployment it
     * refuses is refused here too; only some fields are kept. */
    strict_t r = {0};
    int64_t ignored64;
    int32_t ignored32;
    const operon_json_t *v, *meta = strict_object(&r, operon_json_get(child, "metadata"), "struct DeploymentMeta");
    strict_opt_i64(&r, operon_json_get(meta, "generation"), &ignored64);
    if ((v = operon_json_get(child, "spec")) && operon_json_type(v) != OPERON_NULL) {
        const operon_json_t *spec = strict_object(&r, v, "struct DeploymentSpec");
        d->has_replicas = strict_opt_i32(&r, operon_json_get(spec, "replicas"), &d->replicas);
        if ((v = operon_json_get(spec, "template"))) {
            const operon_json_t *pod = strict_object(&r, operon_json_get(strict_object(&r, v, "struct PodTemplate"), "spec"),
                                                     "struct PodSpec");
            if ((v = operon_json_get(pod, "containers"))) {
                const operon_json_t *containers = strict_seq(&r, v);
                for (size_t i = 0; i < operon_json_len(containers); i++) {
                    const operon_json_t *c = strict_object(&r, operon_json_item(containers, i), "struct Container");
                    const char *image = strict_opt_str(&r, operon_json_get(c, "image"));
                    if (i == 0) d->image = image;
                }
            }
        }
    }
    if ((v = operon_json_get(child, "status")) && operon_json_type(v) != OPERON_NULL) {
        const operon_json_t *status = strict_object(&r, v, "struct DeploymentStatus");
        strict_opt_i64(&r, operon_json_get(status, "observedGeneration"), &ignored64);
        strict_opt_i32(&r, operon_json_get(status, "updatedReplicas"), &ignored32);
        strict_opt_i32(&r, operon_json_get(status, "readyReplicas"), &d->ready_replicas);
        if ((v = operon_json_get(status, "conditions"))) {
            const operon_json_t *conditions = strict_seq(&r, v);
            for (size_t i = 0; i < operon_json_len(conditions); i++) {
                const operon_json_t *c = strict_object(&r, operon_json_item(conditions, i), "struct DeploymentCondition");
                strict_opt_str(&r, operon_json_get(c, "lastUpdateTime"));
                strict_opt_str(&r, operon_json_get(c, "lastTransitionTime"));
            }
        }
    }
    if (r.error) return operon_sprintf("Deployment %s/%s is invalid: %s", req->namespace_, name, r.error);
    return NULL;
}

/* ---------------------------------------------------------- reconcile */

static bool condition_ready(const operon_json_t *conditions) {
    for (size_t i = 0; i < operon_json_len(conditions); i++) {
        const operon_json_t *c = operon_json_item(conditions, i);
        const char *type = operon_json_string_at(c, "type", ""), *status = operon_json_string_at(c, "status", "");
        if (strcmp(type, "Ready") == 0 && strcmp(status, "True") == 0) return true;
    }
    return false;
}

/* A terminal failure for an invalid spec, with the status that says so. */
static operon_result_t invalid(const operon_request_t *req, operon_outcome_t *out, const char *message) {
    return operon_terminal_with_status(out, webapp_invalid_status(req, message), "%s", message);
}

operon_result_t operon_reconcile(const operon_request_t *req, operon_outcome_t *out) {
    webapp_t app;
    const char *error = parse_webapp(req->object, &app);
    if (error) return invalid(req, out, operon_sprintf("%s is invalid: %s", operon_describe(req), error));
    const char *name = req->name;
    if (req->finalizing) {
        /* Nothing outside the cluster to clean up; the children go with the
         * WebApp (the host prunes them, their ownerReferences too). */
        operon_event(out, "Cleanup", "webapp %s deleted; its children are deleted with it", name);
        operon_finalized(out);
        operon_needs_finalizer(out, false);
        return OPERON_OK;
    }
    const webapp_spec_t *spec = &app.spec;
    if ((error = validate_spec(spec))) return invalid(req, out, error);
    deployment_t existing;
    if ((error = parse_deployment(req, name, &existing))) return operon_terminal(out, "%s", error);
    bool had_ingress = operon_child(req, OPERON_INGRESS, name) != NULL;
    operon_json_t *status = webapp_status(spec, req, app.status_conditions, &existing);

    operon_apply(out, webapp_deployment(name, spec));
    operon_apply(out, webapp_service(name, spec));
    if (spec->has_ingress) operon_apply(out, webapp_ingress(name, spec));

    /* Events: only what the outcome is about to change. */
    if (!existing.exists) {
        operon_event(out, "Created", "creating deployment and service %s (%d x %s)", name, (int)spec->replicas,
                     spec->image);
    } else {
        int32_t replicas = existing.has_replicas ? existing.replicas : 1;
        if (replicas != spec->replicas)
            operon_event(out, "Scaled", "scaling deployment %s from %d to %d replicas", name, (int)replicas,
                         (int)spec->replicas);
        const char *image = existing.image ? existing.image : "";
        if (strcmp(image, spec->image) != 0)
            operon_event(out, "Updated", "updating deployment %s from image %s to %s", name, image, spec->image);
    }
    if (spec->has_ingress && !had_ingress)
        operon_event(out, "IngressCreated", "exposing service %s at %s%s", name, spec->ingress.host,
                     spec->ingress.path ? spec->ingress.path : "/");
    else if (!spec->has_ingress && had_ingress)
        operon_event(out, "IngressRemoved", "deleting ingress %s: spec.ingress was removed", name);
    if (condition_ready(operon_json_get(status, "conditions")) &&
        !(app.has_status && condition_ready(app.status_conditions)))
        operon_event(out, "Available", "all %d replicas of %s are ready", (int)spec->replicas, name);

    operon_set_status(out, status);
    /* The SDK's default with a manifest finalizer, said for the reader. */
    operon_needs_finalizer(out, true);
    return OPERON_OK;
}
