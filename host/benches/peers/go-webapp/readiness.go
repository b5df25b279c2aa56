package main

// A child's readiness by kstatus's rules, ported from the host's
// contract/src/readiness.rs (operon_contract::Readiness, which the host's
// cache rates each child with: host/src/cache/object.rs `readiness`), for
// the three kinds a WebApp owns only: Deployment, Service and Ingress.
// Operon hands a guest each child's readiness (contract 0.2); a native
// controller has no host, so it rates the children it reads itself, as the
// native kube-rs peer does (host/benches/manager/native.rs). Same checks,
// same order, same messages; readiness_test.go holds the port to the
// host's verdicts.
//
// The rules read typed objects here, not JSON: a field the API server
// omits when zero (status.observedGeneration, the counts) reads as 0, which
// is what the Rust rules make of it too (absent counts are 0; an absent
// observedGeneration is not compared). Malformed objects, which the Rust
// rules rate Unknown, do not decode into these types at all.

import (
	"fmt"
	"math"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReadinessStatus is kstatus's status, spelled as kstatus spells it.
type ReadinessStatus string

// kstatus's status values.
const (
	Current     ReadinessStatus = "Current"
	InProgress  ReadinessStatus = "InProgress"
	Failed      ReadinessStatus = "Failed"
	Terminating ReadinessStatus = "Terminating"
	Unknown     ReadinessStatus = "Unknown"
)

// Readiness is one object's readiness: the status and why.
type Readiness struct {
	Status  ReadinessStatus `json:"status"`
	Message string          `json:"message"`
}

// condition is one entry of status.conditions, whatever its Go type.
type condition struct{ kind, status, reason, message string }

// describe is the condition's own message, or what it says in its fields.
func (c condition) describe() string {
	switch {
	case c.message != "":
		return c.message
	case c.reason != "":
		return fmt.Sprintf("%s is %s: %s", c.kind, c.status, c.reason)
	default:
		return fmt.Sprintf("%s is %s", c.kind, c.status)
	}
}

func newCondition(kind, status, reason, message string) condition {
	if status == "" {
		status = "Unknown" // as the Rust rules read a condition without one
	}
	return condition{kind, status, reason, message}
}

func find(conditions []condition, kind string) *condition {
	for i := range conditions {
		if conditions[i].kind == kind {
			return &conditions[i]
		}
	}
	return nil
}

func trueCondition(conditions []condition, kind string) *condition {
	if c := find(conditions, kind); c != nil && c.status == "True" {
		return c
	}
	return nil
}

func withDetail(summary, detail string) string {
	if detail == "" {
		return summary
	}
	return summary + ": " + detail
}

// common is what kstatus looks at before any kind's rules: deletion, the
// generation the controller has observed (0: none reported), and the
// abnormal-true conditions any controller may set. nil: no verdict yet.
func common(meta *metav1.ObjectMeta, observedGeneration int64, conditions []condition) *Readiness {
	if meta.DeletionTimestamp != nil {
		return &Readiness{Terminating, "object is being deleted"}
	}
	if observedGeneration != 0 && meta.Generation > observedGeneration {
		return &Readiness{InProgress, fmt.Sprintf("status.observedGeneration %d is behind metadata.generation %d",
			observedGeneration, meta.Generation)}
	}
	if c := trueCondition(conditions, "Stalled"); c != nil {
		return &Readiness{Failed, c.describe()}
	}
	if c := trueCondition(conditions, "Reconciling"); c != nil {
		return &Readiness{InProgress, c.describe()}
	}
	return nil
}

// RateDeployment is a Deployment's readiness (readiness.rs `deployment`).
func RateDeployment(d *appsv1.Deployment) Readiness {
	var conditions []condition
	for _, c := range d.Status.Conditions {
		conditions = append(conditions, newCondition(string(c.Type), string(c.Status), c.Reason, c.Message))
	}
	if r := common(&d.ObjectMeta, d.Status.ObservedGeneration, conditions); r != nil {
		return *r
	}
	progressing := find(conditions, "Progressing")
	if progressing != nil && progressing.reason == "ProgressDeadlineExceeded" {
		return Readiness{Failed, withDetail("Progress deadline exceeded", progressing.message)}
	}
	want := int64(1) // the controller's default
	if d.Spec.Replicas != nil {
		want = int64(*d.Spec.Replicas)
	}
	replicas := int64(d.Status.Replicas)
	updated := int64(d.Status.UpdatedReplicas)
	ready := int64(d.Status.ReadyReplicas)
	available := int64(d.Status.AvailableReplicas)
	switch {
	case want > replicas:
		return Readiness{InProgress, fmt.Sprintf("Replicas: %d/%d", replicas, want)}
	case want > updated:
		return Readiness{InProgress, fmt.Sprintf("Updated: %d/%d", updated, want)}
	case replicas > want:
		return Readiness{InProgress, fmt.Sprintf("Pending termination: %d", replicas-want)}
	case updated > available:
		return Readiness{InProgress, fmt.Sprintf("Available: %d/%d", available, updated)}
	case want > ready:
		return Readiness{InProgress, fmt.Sprintf("Ready: %d/%d", ready, want)}
	}
	// Without a deadline the controller never marks a rollout complete (it
	// stores "none" as MaxInt32), so there is nothing to wait for.
	deadline := d.Spec.ProgressDeadlineSeconds
	complete := deadline == nil || *deadline == math.MaxInt32 ||
		(progressing != nil && progressing.status == "True" && progressing.reason == "NewReplicaSetAvailable")
	if !complete {
		return Readiness{InProgress, "Rollout not complete: new ReplicaSet not available"}
	}
	if trueCondition(conditions, "Available") == nil {
		return Readiness{InProgress, "Deployment not Available"}
	}
	return Readiness{Current, fmt.Sprintf("Deployment is available. Replicas: %d", replicas)}
}

// RateService is a Service's readiness (readiness.rs `service`). A Service
// reports no observedGeneration.
func RateService(s *corev1.Service) Readiness {
	var conditions []condition
	for _, c := range s.Status.Conditions {
		conditions = append(conditions, newCondition(c.Type, string(c.Status), c.Reason, c.Message))
	}
	if r := common(&s.ObjectMeta, 0, conditions); r != nil {
		return *r
	}
	if s.Spec.Type == corev1.ServiceTypeLoadBalancer && len(s.Status.LoadBalancer.Ingress) == 0 {
		return Readiness{InProgress, "Waiting for the load balancer's ingress"}
	}
	return Readiness{Current, "Service is ready"}
}

// RateIngress is an Ingress's readiness: kstatus has no rules of its own
// for the kind, so the generic ones (readiness.rs `generic`) apply, and a
// networking.k8s.io/v1 Ingress has neither conditions nor an
// observedGeneration for them to read: current unless being deleted.
func RateIngress(in *networkingv1.Ingress) Readiness {
	if r := common(&in.ObjectMeta, 0, nil); r != nil {
		return *r
	}
	return Readiness{Current, "Resource is current"}
}
