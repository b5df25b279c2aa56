/* The WebApp custom resource and the parts of its reconciler. */
#ifndef WEBAPP_H
#define WEBAPP_H

#include "operon.h"

#define WEBAPP_FINALIZER "example.operon.dev/cleanup"

typedef struct webapp_env {
    const char *name, *value;
} webapp_env_t;

typedef struct webapp_spec {
    const char *image;
    int32_t replicas; /* default 1 */
    int32_t port;     /* default 8080 */
    webapp_env_t *env;
    size_t env_len;
    bool has_ingress;
    struct {
        const char *host;
        const char *path;       /* NULL: "/" */
        const char *class_name; /* NULL: the cluster's default */
    } ingress;
} webapp_spec_t;

typedef struct webapp {
    webapp_spec_t spec;
    bool has_status;
    int64_t status_observed_generation;
    const operon_json_t *status_conditions; /* the previous conditions, or NULL */
} webapp_t;

/* The slim view of an existing Deployment. */
typedef struct deployment {
    bool exists;
    bool has_replicas;
    int32_t replicas, ready_replicas;
    const char *image; /* the first container's, or NULL */
} deployment_t;

operon_json_t *webapp_deployment(const char *name, const webapp_spec_t *spec);
operon_json_t *webapp_service(const char *name, const webapp_spec_t *spec);
operon_json_t *webapp_ingress(const char *name, const webapp_spec_t *spec);
/* The status (status.c): the first of missing child, Deployment not
 * running the spec, child not current, else ready. */
operon_json_t *webapp_status(const webapp_spec_t *spec, const operon_request_t *req, const operon_json_t *previous,
                             const deployment_t *deployment);
/* The status a terminal failure for an invalid spec carries. */
operon_json_t *webapp_invalid_status(const operon_request_t *req, const char *message);

#endif
