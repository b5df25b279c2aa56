package main

import operon "operon.dev/sdk/go"

// The container's and its port's name.
const (
	container = "web"
	portName  = "http"
)

// labels are on every child and on the pods.
func labels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "operon"}
}

// selector selects the pods of the Deployment and the Service: the name
// label only, because a Deployment's selector is immutable.
func selector(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": name}
}

func child(kind operon.GVK, name string) operon.Object {
	o := operon.NewObject(kind, name)
	o.Set(labels(name), "metadata", "labels")
	return o
}

// deployment runs spec.replicas pods of one container running spec.image,
// listening on spec.port (named http), with spec.env.
func deployment(name string, spec *WebAppSpec) operon.Object {
	c := map[string]any{
		"name":  container,
		"image": spec.Image,
		"ports": []any{map[string]any{"name": portName, "containerPort": spec.Port}},
	}
	if len(spec.Env) > 0 {
		c["env"] = spec.Env
	}
	d := child(operon.DeploymentKind, name)
	d["spec"] = map[string]any{
		"replicas": spec.Replicas,
		"selector": map[string]any{"matchLabels": selector(name)},
		"template": map[string]any{
			"metadata": map[string]any{"labels": labels(name)},
			"spec":     map[string]any{"containers": []any{c}},
		},
	}
	return d
}

// service is a ClusterIP Service, spec.port to the pods' http port.
func service(name string, spec *WebAppSpec) operon.Object {
	s := child(operon.ServiceKind, name)
	s["spec"] = map[string]any{
		"type":     "ClusterIP",
		"selector": selector(name),
		"ports":    []any{map[string]any{"name": portName, "port": spec.Port, "targetPort": portName}},
	}
	return s
}

// ingress routes spec.ingress.host and path (a prefix, / by default) to the
// Service's http port; nil without spec.ingress.
func ingress(name string, spec *WebAppSpec) operon.Object {
	wanted := spec.Ingress
	if wanted == nil {
		return nil
	}
	path := map[string]any{
		"path":     wanted.pathOrRoot(),
		"pathType": "Prefix",
		"backend":  map[string]any{"service": map[string]any{"name": name, "port": map[string]any{"name": portName}}},
	}
	ingressSpec := map[string]any{
		"rules": []any{map[string]any{"host": wanted.Host, "http": map[string]any{"paths": []any{path}}}},
	}
	if wanted.ClassName != nil {
		ingressSpec["ingressClassName"] = *wanted.ClassName
	}
	i := child(operon.IngressKind, name)
	i["spec"] = ingressSpec
	return i
}
