package main

import (
	"fmt"

	operon "operon.dev/sdk/go"
)

// Ready is the type of the one condition.
const Ready = "Ready"

// WebAppStatus is what the reconciler reports.
type WebAppStatus struct {
	ObservedGeneration int64       `json:"observedGeneration"`
	ReadyReplicas      int32       `json:"readyReplicas"`
	Conditions         []Condition `json:"conditions"`
}

// Condition is a metav1.Condition. ObservedGeneration is always written,
// 0 included, as the Rust example writes it.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
}

func (s *WebAppStatus) isReady() bool {
	for _, c := range s.Conditions {
		if c.Type == Ready && c.Status == operon.ConditionTrue {
			return true
		}
	}
	return false
}

func parseStatus(r *strict, v any) *WebAppStatus {
	m := r.object(v, "struct WebAppStatus")
	s := &WebAppStatus{}
	if v, ok := m["observedGeneration"]; ok {
		s.ObservedGeneration = r.i64(v)
	}
	if v, ok := m["readyReplicas"]; ok {
		s.ReadyReplicas = r.i32(v)
	}
	if v, ok := m["conditions"]; ok {
		for _, item := range r.seq(v) {
			c := r.object(item, "struct Condition")
			var cond Condition
			for _, f := range []struct {
				key string
				to  *string
			}{{"type", &cond.Type}, {"status", &cond.Status}, {"lastTransitionTime", &cond.LastTransitionTime}, {"reason", &cond.Reason}, {"message", &cond.Message}} {
				if v, ok := r.required(c, f.key); ok {
					*f.to = r.str(v)
				}
			}
			cond.ObservedGeneration = r.optI64(c["observedGeneration"])
			s.Conditions = append(s.Conditions, cond)
		}
	}
	return s
}

// Deployment is the slim view of an existing Deployment: only the fields
// this reconciler reads (nil when absent).
type Deployment struct {
	Replicas      *int32
	Images        []*string
	ReadyReplicas *int32
}

// replicas is spec.replicas, 1 when unset (the API server's default).
func (d *Deployment) replicas() int32 {
	if d.Replicas == nil {
		return 1
	}
	return *d.Replicas
}

// image is the first container's image ("" when there is none).
func (d *Deployment) image() string {
	if len(d.Images) == 0 || d.Images[0] == nil {
		return ""
	}
	return *d.Images[0]
}

// readyReplicas is status.readyReplicas, 0 without a Deployment or the field.
func (d *Deployment) readyReplicas() int32 {
	if d == nil || d.ReadyReplicas == nil {
		return 0
	}
	return *d.ReadyReplicas
}

// existingDeployment reads the child Deployment called name, if any.
func existingDeployment(req *operon.Request, name string) (*Deployment, error) {
	child, err := req.Child(operon.DeploymentKind, name)
	if err != nil || child == nil {
		return nil, err
	}
	r := &strict{}
	d := &Deployment{}
	root := r.object(map[string]any(child), "struct Deployment")
	if v, ok := root["spec"]; ok && v != nil {
		spec := r.object(v, "struct DeploymentSpec")
		d.Replicas = r.optI32(spec["replicas"])
		if v, ok := spec["template"]; ok {
			template := r.object(v, "struct PodTemplate")
			if v, ok := template["spec"]; ok {
				pod := r.object(v, "struct PodSpec")
				if v, ok := pod["containers"]; ok {
					for _, c := range r.seq(v) {
						container := r.object(c, "struct Container")
						d.Images = append(d.Images, r.optStr(container["image"]))
					}
				}
			}
		}
	}
	if v, ok := root["status"]; ok && v != nil {
		status := r.object(v, "struct DeploymentStatus")
		d.ReadyReplicas = r.optI32(status["readyReplicas"])
	}
	if r.err != nil {
		return nil, operon.Terminalf("Deployment %s/%s is invalid: %v", child.Namespace(), name, r.err)
	}
	return d, nil
}

// wanted is one child the WebApp wants, in the order the status checks them.
type wanted struct {
	kind operon.GVK
	// what names it in a message: `deployment`.
	what string
}

// wantedChildren are the Deployment, the Service and, with spec.ingress,
// the Ingress (an existing Ingress no longer wanted does not count).
func wantedChildren(spec *WebAppSpec) []wanted {
	out := []wanted{{operon.DeploymentKind, "deployment"}, {operon.ServiceKind, "service"}}
	if spec.Ingress != nil {
		out = append(out, wanted{operon.IngressKind, "ingress"})
	}
	return out
}

// readyCondition is the Ready condition's status, reason and message: the
// first of these that applies wins — a wanted child is missing, the
// Deployment does not run the spec yet, a wanted child is not current (as
// the host rates it), else available. d is nil only when the Deployment is
// missing, which the first check answers.
func readyCondition(req *operon.Request, spec *WebAppSpec, d *Deployment, name string) (value, reason, message string) {
	children := wantedChildren(spec)
	for _, c := range children {
		if !req.HasChild(c.kind, name) {
			return operon.ConditionFalse, "Progressing", fmt.Sprintf("%s %s does not exist yet", c.what, name)
		}
	}
	counts := fmt.Sprintf("%d of %d replicas ready", d.readyReplicas(), spec.Replicas)
	if d.replicas() != spec.Replicas || d.image() != spec.Image {
		return operon.ConditionFalse, "Progressing", fmt.Sprintf("deployment %s is being updated: %s", name, counts)
	}
	for _, c := range children {
		readiness, _ := req.Readiness(c.kind, name)
		if readiness.Status == operon.ReadinessCurrent {
			continue
		}
		reason := "Progressing"
		if readiness.Status == operon.ReadinessFailed {
			reason = "Failed"
		}
		return operon.ConditionFalse, reason, fmt.Sprintf("%s %s: %s", c.kind.Kind, name, readiness.Message)
	}
	return operon.ConditionTrue, "Available", counts
}

// newStatus is the status with one Ready condition. lastTransitionTime is
// the previous Ready condition's while its status holds, else the
// request's time exactly as the host gave it: never the clock.
func newStatus(req *operon.Request, readyReplicas int32, value, reason, message string) *WebAppStatus {
	transition := req.Now
	if status, since, ok := previousReady(req.Object); ok && status == value {
		transition = since
	}
	generation := req.Meta.Generation
	return &WebAppStatus{
		ObservedGeneration: generation,
		ReadyReplicas:      readyReplicas,
		Conditions: []Condition{{
			Type: Ready, Status: value, ObservedGeneration: &generation,
			LastTransitionTime: transition, Reason: reason, Message: message,
		}},
	}
}

// previousReady is the parent's current Ready condition: its status and
// lastTransitionTime. Read leniently, so that the status of an invalid
// spec still keeps its time.
func previousReady(parent operon.Object) (status, since string, ok bool) {
	conditions, _ := parent.Lookup("status", "conditions")
	list, _ := conditions.([]any)
	for _, item := range list {
		c, isMap := item.(map[string]any)
		if !isMap || c["type"] != Ready {
			continue
		}
		status, _ = c["status"].(string)
		since, _ = c["lastTransitionTime"].(string)
		return status, since, true
	}
	return "", "", false
}
