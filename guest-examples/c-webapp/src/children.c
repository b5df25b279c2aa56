/* The children a WebApp wants, all named after it. */
#include <string.h>

#include "webapp.h"

static operon_json_t *labels(const char *name) {
    operon_json_t *l = operon_json_object();
    operon_json_set(l, "app.kubernetes.io/name", operon_json_str(name));
    return operon_json_set(l, "app.kubernetes.io/managed-by", operon_json_str("operon"));
}

/* The pods' selector: the name label only (a Deployment's selector is immutable). */
static operon_json_t *selector(const char *name) {
    return operon_json_set(operon_json_object(), "app.kubernetes.io/name", operon_json_str(name));
}

static operon_json_t *child(operon_gvk_t kind, const char *name) {
    operon_json_t *o = operon_new_object(kind, name);
    operon_json_set((operon_json_t *)operon_json_get(o, "metadata"), "labels", labels(name));
    return o;
}

operon_json_t *webapp_deployment(const char *name, const webapp_spec_t *spec) {
    operon_json_t *port = operon_json_object();
    operon_json_set(port, "name", operon_json_str("http"));
    operon_json_set(port, "containerPort", operon_json_integer(spec->port));
    operon_json_t *container = operon_json_object();
    operon_json_set(container, "name", operon_json_str("web"));
    operon_json_set(container, "image", operon_json_str(spec->image));
    operon_json_set(container, "ports", operon_json_push(operon_json_array(), port));
    if (spec->env_len) {
        operon_json_t *env = operon_json_array();
        for (size_t i = 0; i < spec->env_len; i++) {
            operon_json_t *var = operon_json_set(operon_json_object(), "name", operon_json_str(spec->env[i].name));
            operon_json_push(env, operon_json_set(var, "value", operon_json_str(spec->env[i].value)));
        }
        operon_json_set(container, "env", env);
    }
    operon_json_t *pod = operon_json_set(operon_json_object(), "containers", operon_json_push(operon_json_array(), container));
    operon_json_t *template_ = operon_json_object();
    operon_json_set(template_, "metadata", operon_json_set(operon_json_object(), "labels", labels(name)));
    operon_json_set(template_, "spec", pod);
    operon_json_t *s = operon_json_object();
    operon_json_set(s, "replicas", operon_json_integer(spec->replicas));
    operon_json_set(s, "selector", operon_json_set(operon_json_object(), "matchLabels", selector(name)));
    operon_json_set(s, "template", template_);
    return operon_json_set(child(OPERON_DEPLOYMENT, name), "spec", s);
}

operon_json_t *webapp_service(const char *name, const webapp_spec_t *spec) {
    operon_json_t *port = operon_json_object();
    operon_json_set(port, "name", operon_json_str("http"));
    operon_json_set(port, "port", operon_json_integer(spec->port));
    operon_json_set(port, "targetPort", operon_json_str("http"));
    operon_json_t *s = operon_json_object();
    operon_json_set(s, "type", operon_json_str("ClusterIP"));
    operon_json_set(s, "selector", selector(name));
    operon_json_set(s, "ports", operon_json_push(operon_json_array(), port));
    return operon_json_set(child(OPERON_SERVICE, name), "spec", s);
}

operon_json_t *webapp_ingress(const char *name, const webapp_spec_t *spec) {
    operon_json_t *port = operon_json_set(operon_json_object(), "name", operon_json_str("http"));
    operon_json_t *service = operon_json_set(operon_json_object(), "name", operon_json_str(name));
    operon_json_set(service, "port", port);
    operon_json_t *path = operon_json_object();
    operon_json_set(path, "path", operon_json_str(spec->ingress.path ? spec->ingress.path : "/"));
    operon_json_set(path, "pathType", operon_json_str("Prefix"));
    operon_json_set(path, "backend", operon_json_set(operon_json_object(), "service", service));
    operon_json_t *rule = operon_json_set(operon_json_object(), "host", operon_json_str(spec->ingress.host));
    operon_json_set(rule, "http", operon_json_set(operon_json_object(), "paths", operon_json_push(operon_json_array(), path)));
    operon_json_t *s = operon_json_object();
    if (spec->ingress.class_name) operon_json_set(s, "ingressClassName", operon_json_str(spec->ingress.class_name));
    operon_json_set(s, "rules", operon_json_push(operon_json_array(), rule));
    return operon_json_set(child(OPERON_INGRESS, name), "spec", s);
}
