package main

import (
	"context"
	"fmt"
	"strings"

	operon "operon.dev/sdk/go"
)

// Finalizer is the finalizer the host adds to every WebApp.
const Finalizer = "example.operon.dev/cleanup"

// WebAppKind is the parent kind.
var WebAppKind = operon.Kind("example.operon.dev/v1alpha1", "WebApp")

// WebAppReconciler reconciles WebApps.
type WebAppReconciler struct{}

// Manifest owns Deployments, Services and Ingresses, in that order.
func (WebAppReconciler) Manifest() operon.Manifest {
	return operon.Manifest{
		Name:      "webapp",
		For:       WebAppKind,
		Owns:      []operon.GVK{operon.DeploymentKind, operon.ServiceKind, operon.IngressKind},
		Finalizer: Finalizer,
	}
}

// Reconcile computes the children, the status and the events of one WebApp.
// Every outcome asks for the finalizer, until the WebApp is deleted.
func (WebAppReconciler) Reconcile(_ context.Context, req *operon.Request) (*operon.Outcome, error) {
	name := req.Name()
	if req.Finalizing {
		// Nothing outside the cluster to clean up; the children go with the
		// WebApp (the host prunes them, their ownerReferences too).
		return operon.NewOutcome().
			Eventf("Cleanup", "webapp %s deleted; its children are deleted with it", name).
			Finalize().
			SetNeedsFinalizer(false), nil
	}
	existing, err := existingDeployment(req, name)
	if err != nil {
		return nil, err
	}
	app, err := parseWebApp(req.Object)
	if err != nil {
		return nil, invalid(req, existing, operon.Terminalf("%s is invalid: %v", req.Describe(), err))
	}
	spec := &app.Spec
	if err := spec.validate(); err != nil {
		return nil, invalid(req, existing, operon.TerminalError(err))
	}
	hadIngress := req.HasChild(operon.IngressKind, name)
	value, reason, message := readyCondition(req, spec, existing, name)
	status := newStatus(req, existing.readyReplicas(), value, reason, message)

	out := operon.NewOutcome().Apply(deployment(name, spec), service(name, spec)).SetNeedsFinalizer(true)
	if ingress := ingress(name, spec); ingress != nil {
		out.Apply(ingress)
	}
	for _, e := range events(name, spec, existing, hadIngress, app.Status, status) {
		out.Eventf(e.reason, "%s", e.message)
	}
	return out.SetStatus(status), nil
}

// invalid is the terminal failure of an invalid spec, carrying the status
// that says so: Ready False, reason InvalidSpec, the failure's message.
func invalid(req *operon.Request, existing *Deployment, err error) error {
	status := newStatus(req, existing.readyReplicas(), operon.ConditionFalse, "InvalidSpec", err.Error())
	return operon.WithStatus(err, status)
}

type event struct{ reason, message string }

// events are what the outcome is about to change, so a steady state records
// none.
func events(name string, spec *WebAppSpec, existing *Deployment, hadIngress bool, previous *WebAppStatus, status *WebAppStatus) []event {
	var out []event
	if existing == nil {
		out = append(out, event{"Created", fmt.Sprintf("creating deployment and service %s (%d x %s)", name, spec.Replicas, spec.Image)})
	} else {
		if replicas := existing.replicas(); replicas != spec.Replicas {
			out = append(out, event{"Scaled", fmt.Sprintf("scaling deployment %s from %d to %d replicas", name, replicas, spec.Replicas)})
		}
		if image := existing.image(); image != spec.Image {
			out = append(out, event{"Updated", fmt.Sprintf("updating deployment %s from image %s to %s", name, image, spec.Image)})
		}
	}
	switch {
	case spec.Ingress != nil && !hadIngress:
		out = append(out, event{"IngressCreated", fmt.Sprintf("exposing service %s at %s%s", name, spec.Ingress.Host, spec.Ingress.pathOrRoot())})
	case spec.Ingress == nil && hadIngress:
		out = append(out, event{"IngressRemoved", fmt.Sprintf("deleting ingress %s: spec.ingress was removed", name)})
	}
	if status.isReady() && (previous == nil || !previous.isReady()) {
		out = append(out, event{"Available", fmt.Sprintf("all %d replicas of %s are ready", spec.Replicas, name)})
	}
	return out
}

// WebApp is the custom resource: spec and status (metadata is in the
// request).
type WebApp struct {
	Spec   WebAppSpec
	Status *WebAppStatus
}

// WebAppSpec is what the user wants. Defaults match the CRD's.
type WebAppSpec struct {
	Image    string
	Replicas int32 // default 1
	Port     int32 // default 8080
	Env      []EnvVar
	Ingress  *IngressSpec
}

// EnvVar is one environment variable of the container.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// IngressSpec exposes the Service.
type IngressSpec struct {
	Host      string
	Path      *string // "/" when absent
	ClassName *string // the cluster's default class when absent
}

func (i *IngressSpec) pathOrRoot() string {
	if i.Path == nil {
		return "/"
	}
	return *i.Path
}

// validate checks what the CRD schema also checks, for objects that did not
// go through it (fixtures, an API server without the schema).
func (s *WebAppSpec) validate() error {
	if strings.TrimSpace(s.Image) == "" {
		return fmt.Errorf("spec.image must not be empty")
	}
	if s.Replicas < 0 {
		return fmt.Errorf("spec.replicas must be 0 or more, not %d", s.Replicas)
	}
	if s.Port < 1 || s.Port > 65535 {
		return fmt.Errorf("spec.port must be between 1 and 65535, not %d", s.Port)
	}
	for i, v := range s.Env {
		if v.Name == "" {
			return fmt.Errorf("spec.env[%d].name must not be empty", i)
		}
		for _, earlier := range s.Env[:i] {
			if earlier.Name == v.Name {
				return fmt.Errorf("spec.env[%d]: %s is set twice", i, v.Name)
			}
		}
	}
	if s.Ingress != nil {
		if s.Ingress.Host == "" {
			return fmt.Errorf("spec.ingress.host must not be empty")
		}
		if s.Ingress.Path != nil && !strings.HasPrefix(*s.Ingress.Path, "/") {
			return fmt.Errorf("spec.ingress.path must start with /")
		}
	}
	return nil
}

// parseWebApp reads the parent strictly, with the Rust example's (serde's)
// messages: a missing required field, a value of the wrong type, an integer
// out of range.
func parseWebApp(o operon.Object) (*WebApp, error) {
	r := &strict{}
	root := r.object(map[string]any(o), "struct WebApp")
	app := &WebApp{}
	specValue, ok := r.required(root, "spec")
	spec := r.object(specValue, "struct WebAppSpec")
	if ok && r.err == nil {
		app.Spec = WebAppSpec{Replicas: 1, Port: 8080}
		if v, ok := r.required(spec, "image"); ok {
			app.Spec.Image = r.str(v)
		}
		if v, ok := spec["replicas"]; ok {
			app.Spec.Replicas = r.i32(v)
		}
		if v, ok := spec["port"]; ok {
			app.Spec.Port = r.i32(v)
		}
		if v, ok := spec["env"]; ok {
			for _, item := range r.seq(v) {
				m := r.object(item, "struct EnvVar")
				var env EnvVar
				if v, ok := r.required(m, "name"); ok {
					env.Name = r.str(v)
				}
				if v, ok := m["value"]; ok {
					env.Value = r.str(v)
				}
				app.Spec.Env = append(app.Spec.Env, env)
			}
		}
		if v, ok := spec["ingress"]; ok && v != nil {
			m := r.object(v, "struct IngressSpec")
			ingress := &IngressSpec{}
			if v, ok := r.required(m, "host"); ok {
				ingress.Host = r.str(v)
			}
			ingress.Path = r.optStr(m["path"])
			ingress.ClassName = r.optStr(m["className"])
			app.Spec.Ingress = ingress
		}
	}
	if v, ok := root["status"]; ok && v != nil && r.err == nil {
		app.Status = parseStatus(r, v)
	}
	if r.err != nil {
		return nil, r.err
	}
	return app, nil
}
