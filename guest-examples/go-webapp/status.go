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
	Generation         *int64
	Replicas           *int32
	Images             []*string
	HasStatus          bool
	ObservedGeneration *int64
	UpdatedReplicas    *int32
	ReadyReplicas      *int32
	// Times holds lastUpdateTime and lastTransitionTime of every condition.
	Times []*string
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

func deref32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
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
	if v, ok := root["metadata"]; ok {
		md := r.object(v, "struct DeploymentMeta")
		d.Generation = r.optI64(md["generation"])
	}
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
		d.HasStatus = true
		d.ObservedGeneration = r.optI64(status["observedGeneration"])
		d.UpdatedReplicas = r.optI32(status["updatedReplicas"])
		d.ReadyReplicas = r.optI32(status["readyReplicas"])
		if v, ok := status["conditions"]; ok {
			for _, c := range r.seq(v) {
				cond := r.object(c, "struct DeploymentCondition")
				d.Times = append(d.Times, r.optStr(cond["lastUpdateTime"]), r.optStr(cond["lastTransitionTime"]))
			}
		}
	}
	if r.err != nil {
		return nil, operon.Terminalf("Deployment %s/%s is invalid: %v", child.Namespace(), name, r.err)
	}
	return d, nil
}

// rollout is what the existing Deployment says about the rollout.
type rollout struct {
	readyReplicas int32
	exists        bool
	// current: the Deployment runs the spec (image, replicas), its
	// controller has seen its latest generation and every replica is
	// updated.
	current bool
}

func observe(d *Deployment, spec *WebAppSpec) rollout {
	if d == nil {
		return rollout{}
	}
	var observed, generation int64
	if d.ObservedGeneration != nil {
		observed = *d.ObservedGeneration
	}
	if d.Generation != nil {
		generation = *d.Generation
	}
	return rollout{
		readyReplicas: deref32(d.ReadyReplicas),
		exists:        true,
		current: d.replicas() == spec.Replicas &&
			len(d.Images) > 0 && d.Images[0] != nil && *d.Images[0] == spec.Image &&
			observed >= generation &&
			deref32(d.UpdatedReplicas) >= spec.Replicas,
	}
}

// newStatus is the new status. lastTransitionTime never reads the clock:
// it is kept from the existing Ready condition while its status holds;
// otherwise it is the latest time the request shows (the Deployment's
// condition timestamps, the previous transition, the WebApp's creation).
func newStatus(spec *WebAppSpec, generation int64, creationTimestamp string, previous *WebAppStatus, d *Deployment, name string) *WebAppStatus {
	r := observe(d, spec)
	ready := r.current && r.readyReplicas >= spec.Replicas
	value, reason := operon.ConditionFalse, "Progressing"
	if ready {
		value, reason = operon.ConditionTrue, "Available"
	}
	counts := fmt.Sprintf("%d of %d replicas ready", r.readyReplicas, spec.Replicas)
	message := counts
	switch {
	case ready:
	case !r.exists:
		message = fmt.Sprintf("deployment %s does not exist yet", name)
	case !r.current:
		message = fmt.Sprintf("deployment %s is being updated: %s", name, counts)
	}
	var prev *Condition
	if previous != nil {
		for i := range previous.Conditions {
			if previous.Conditions[i].Type == Ready {
				prev = &previous.Conditions[i]
				break
			}
		}
	}
	var transition string
	if prev != nil && prev.Status == value {
		transition = prev.LastTransitionTime
	} else {
		transition = latestTime(d, prev, creationTimestamp)
	}
	gen := generation
	return &WebAppStatus{
		ObservedGeneration: generation,
		ReadyReplicas:      r.readyReplicas,
		Conditions: []Condition{{
			Type: Ready, Status: value, ObservedGeneration: &gen,
			LastTransitionTime: transition, Reason: reason, Message: message,
		}},
	}
}

// latestTime is the newest of the timestamps the request shows. The API
// writes them in one format (2006-01-02T15:04:05Z), so text order is time
// order.
func latestTime(d *Deployment, previous *Condition, creationTimestamp string) string {
	var times []string
	if d != nil {
		for _, t := range d.Times {
			if t != nil {
				times = append(times, *t)
			}
		}
	}
	if previous != nil {
		times = append(times, previous.LastTransitionTime)
	}
	if creationTimestamp != "" {
		times = append(times, creationTimestamp)
	}
	if len(times) == 0 {
		return "1970-01-01T00:00:00Z"
	}
	latest := times[0]
	for _, t := range times[1:] {
		if t > latest {
			latest = t
		}
	}
	return latest
}
