package main

// The WebApp logic, ported line by line from guest-examples/rust-webapp/src
// (lib.rs, status.rs, children.rs, webapp.rs; contract 0.2, as
// guest-examples/go-webapp has it too): validation, the status with its
// Ready condition, the events, and the desired children. Pure functions of
// the objects read from the cache, the reconcile's time and the children's
// readiness (readiness.go), so logic_test.go can run them over the shared
// fixtures (guest-examples/webapp/fixtures).

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	// Finalizer is the finalizer every WebApp gets.
	Finalizer = "example.operon.dev/cleanup"
	// ReadyCondition is the type of the one condition.
	ReadyCondition = "Ready"
	containerName  = "web"
	portName       = "http"
)

// Validate checks what the CRD schema also checks (webapp.rs). An error is
// terminal: retrying an invalid spec cannot help.
func Validate(spec *WebAppSpec) error {
	if strings.TrimSpace(spec.Image) == "" {
		return fmt.Errorf("spec.image must not be empty")
	}
	if r := spec.ReplicasOrDefault(); r < 0 {
		return fmt.Errorf("spec.replicas must be 0 or more, not %d", r)
	}
	if p := spec.PortOrDefault(); p < 1 || p > 65535 {
		return fmt.Errorf("spec.port must be between 1 and 65535, not %d", p)
	}
	for i, v := range spec.Env {
		if v.Name == "" {
			return fmt.Errorf("spec.env[%d].name must not be empty", i)
		}
		for _, earlier := range spec.Env[:i] {
			if earlier.Name == v.Name {
				return fmt.Errorf("spec.env[%d]: %s is set twice", i, v.Name)
			}
		}
	}
	if in := spec.Ingress; in != nil {
		if in.Host == "" {
			return fmt.Errorf("spec.ingress.host must not be empty")
		}
		if in.Path != nil && !strings.HasPrefix(*in.Path, "/") {
			return fmt.Errorf("spec.ingress.path must start with /")
		}
	}
	return nil
}

// Check is the terminal failure of a WebApp the reconciler cannot run (nil
// when it can), with the guests' messages: a spec that does not fit the
// type says so, naming the WebApp ("WebApp default/shop is invalid:
// missing field `image`"); else the first rule of Validate it breaks.
func Check(w *WebApp) error {
	if w.Spec.unfit != "" {
		return fmt.Errorf("%s is invalid: %s", describe(w), w.Spec.unfit)
	}
	return Validate(&w.Spec)
}

// describe names a WebApp as the SDKs name an object in their messages:
// `WebApp default/shop`.
func describe(w *WebApp) string {
	if w.Namespace == "" {
		return "WebApp " + w.Name
	}
	return "WebApp " + w.Namespace + "/" + w.Name
}

// Labels of every child and of the pods.
func Labels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "operon"}
}

// selector of the Deployment and the Service: the name label only.
func selector(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": name}
}

func setLabels(meta *metav1.ObjectMeta, labels map[string]string) {
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	for k, v := range labels {
		meta.Labels[k] = v
	}
}

// MutateDeployment sets the fields the WebApp owns on a Deployment, in place,
// keeping what the API server defaulted (so an unchanged Deployment compares
// equal and CreateOrUpdate writes nothing).
func MutateDeployment(d *appsv1.Deployment, name string, spec *WebAppSpec) {
	setLabels(&d.ObjectMeta, Labels(name))
	d.Spec.Replicas = ptr(spec.ReplicasOrDefault())
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: selector(name)}
	setLabels(&d.Spec.Template.ObjectMeta, Labels(name))
	var c *corev1.Container
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == containerName {
			c = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil {
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: containerName})
		c = &d.Spec.Template.Spec.Containers[len(d.Spec.Template.Spec.Containers)-1]
	}
	c.Image = spec.Image
	c.Ports = []corev1.ContainerPort{{Name: portName, ContainerPort: spec.PortOrDefault(), Protocol: corev1.ProtocolTCP}}
	c.Env = nil
	for _, v := range spec.Env {
		c.Env = append(c.Env, corev1.EnvVar{Name: v.Name, Value: v.Value})
	}
}

// MutateService sets the fields the WebApp owns on its ClusterIP Service.
func MutateService(s *corev1.Service, name string, spec *WebAppSpec) {
	setLabels(&s.ObjectMeta, Labels(name))
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.Selector = selector(name)
	s.Spec.Ports = []corev1.ServicePort{{
		Name:       portName,
		Port:       spec.PortOrDefault(),
		TargetPort: intstr.FromString(portName),
		Protocol:   corev1.ProtocolTCP,
	}}
}

// MutateIngress sets the fields of the Ingress that spec.ingress asks for.
func MutateIngress(in *networkingv1.Ingress, name string, wanted *IngressSpec) {
	setLabels(&in.ObjectMeta, Labels(name))
	path := "/"
	if wanted.Path != nil {
		path = *wanted.Path
	}
	prefix := networkingv1.PathTypePrefix
	in.Spec.IngressClassName = wanted.ClassName
	in.Spec.Rules = []networkingv1.IngressRule{{
		Host: wanted.Host,
		IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{
				Path:     path,
				PathType: &prefix,
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: name,
					Port: networkingv1.ServiceBackendPort{Name: portName},
				}},
			}},
		}},
	}}
}

func deploymentReplicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func deploymentImage(d *appsv1.Deployment) (string, bool) {
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return "", false
	}
	return d.Spec.Template.Spec.Containers[0].Image, true
}

// Children are the WebApp's existing children as read from the cache: nil
// when there is none, or when the WebApp does not control it (the host
// hands a guest only the children it owns).
type Children struct {
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	Ingress    *networkingv1.Ingress
}

// wantedChild is one child the WebApp wants, in the order the status
// checks them, with its readiness (nil: it does not exist).
type wantedChild struct {
	kind      string // `Deployment`, as a readiness message names it
	readiness *Readiness
}

// wanted are the Deployment, the Service and, with spec.ingress, the
// Ingress, each rated as the host rates a child (readiness.go). An
// existing Ingress no longer wanted does not count.
func (c Children) wanted(spec *WebAppSpec) []wantedChild {
	out := []wantedChild{{kind: "Deployment"}, {kind: "Service"}}
	if c.Deployment != nil {
		out[0].readiness = ptr(RateDeployment(c.Deployment))
	}
	if c.Service != nil {
		out[1].readiness = ptr(RateService(c.Service))
	}
	if spec.Ingress != nil {
		ingress := wantedChild{kind: "Ingress"}
		if c.Ingress != nil {
			ingress.readiness = ptr(RateIngress(c.Ingress))
		}
		out = append(out, ingress)
	}
	return out
}

// readyReplicas is the Deployment's status.readyReplicas, 0 without one.
func readyReplicas(d *appsv1.Deployment) int32 {
	if d == nil {
		return 0
	}
	return d.Status.ReadyReplicas
}

// Verdict is the Ready condition's status, reason and message (status.rs
// `verdict`, go-webapp's status.go `readyCondition`). The first that
// applies wins: a wanted child is missing; the Deployment does not run the
// spec yet; a wanted child is not Current (its readiness, kstatus's rules:
// no rollout arithmetic here); else available.
func Verdict(name string, spec *WebAppSpec, children Children) (value, reason, message string) {
	wanted := children.wanted(spec)
	for _, c := range wanted {
		if c.readiness == nil {
			return conditionFalse, "Progressing", fmt.Sprintf("%s %s does not exist yet", strings.ToLower(c.kind), name)
		}
	}
	d := children.Deployment // exists: the first check answered otherwise
	counts := fmt.Sprintf("%d of %d replicas ready", readyReplicas(d), spec.ReplicasOrDefault())
	if image, _ := deploymentImage(d); deploymentReplicas(d) != spec.ReplicasOrDefault() || image != spec.Image {
		return conditionFalse, "Progressing", fmt.Sprintf("deployment %s is being updated: %s", name, counts)
	}
	for _, c := range wanted {
		if c.readiness.Status == Current {
			continue
		}
		reason := "Progressing"
		if c.readiness.Status == Failed {
			reason = "Failed"
		}
		return conditionFalse, reason, fmt.Sprintf("%s %s: %s", c.kind, name, c.readiness.Message)
	}
	return conditionTrue, "Available", counts
}

const (
	conditionTrue  = "True"
	conditionFalse = "False"
)

// ComputeStatus is the new status (status.rs `status`): observedGeneration,
// readyReplicas and the Ready condition of Verdict. now is the time of this
// reconcile, as Timestamp writes it.
func ComputeStatus(name string, spec *WebAppSpec, generation int64, previous *WebAppStatus, children Children,
	now string) WebAppStatus {
	value, reason, message := Verdict(name, spec, children)
	return withReady(generation, previous, readyReplicas(children.Deployment), value, reason, message, now)
}

// InvalidStatus is the status of a WebApp whose spec is invalid (status.rs
// `invalid`): Ready False, reason InvalidSpec, the failure's message.
func InvalidStatus(generation int64, previous *WebAppStatus, d *appsv1.Deployment, message, now string) WebAppStatus {
	return withReady(generation, previous, readyReplicas(d), conditionFalse, "InvalidSpec", message, now)
}

// withReady is a status with one Ready condition. Its lastTransitionTime is
// the previous Ready condition's while its status holds, else now: the
// reconcile's time, exactly as the guests take request.now.
func withReady(generation int64, previous *WebAppStatus, ready int32, value, reason, message, now string) WebAppStatus {
	transition := now
	if prev := readyCondition(previous); prev != nil && prev.Status == value {
		transition = prev.LastTransitionTime
	}
	return WebAppStatus{
		ObservedGeneration: generation,
		ReadyReplicas:      ready,
		Conditions: []Condition{{
			Type:               ReadyCondition,
			Status:             value,
			ObservedGeneration: ptr(generation),
			LastTransitionTime: transition,
			Reason:             reason,
			Message:            message,
		}},
	}
}

func readyCondition(s *WebAppStatus) *Condition {
	if s == nil {
		return nil
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == ReadyCondition {
			return &s.Conditions[i]
		}
	}
	return nil
}

// Timestamp is t as the host writes request.now (operon_contract::rfc3339):
// UTC, with milliseconds, `2026-11-20T10:01:31.000Z`.
func Timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// Event is one event to record: what the reconcile is about to change.
type Event struct {
	Reason  string
	Message string
}

// Events of one reconcile (lib.rs `events`): only when something is about to
// change, so a steady state records none.
func Events(name string, spec *WebAppSpec, d *appsv1.Deployment, hadIngress bool, previous *WebAppStatus,
	status *WebAppStatus) []Event {
	var events []Event
	if d == nil {
		events = append(events, Event{"Created",
			fmt.Sprintf("creating deployment and service %s (%d x %s)", name, spec.ReplicasOrDefault(), spec.Image)})
	} else {
		if r := deploymentReplicas(d); r != spec.ReplicasOrDefault() {
			events = append(events, Event{"Scaled",
				fmt.Sprintf("scaling deployment %s from %d to %d replicas", name, r, spec.ReplicasOrDefault())})
		}
		if image, _ := deploymentImage(d); image != spec.Image {
			events = append(events, Event{"Updated",
				fmt.Sprintf("updating deployment %s from image %s to %s", name, image, spec.Image)})
		}
	}
	switch {
	case spec.Ingress != nil && !hadIngress:
		path := "/"
		if spec.Ingress.Path != nil {
			path = *spec.Ingress.Path
		}
		events = append(events, Event{"IngressCreated", fmt.Sprintf("exposing service %s at %s%s", name, spec.Ingress.Host, path)})
	case spec.Ingress == nil && hadIngress:
		events = append(events, Event{"IngressRemoved", fmt.Sprintf("deleting ingress %s: spec.ingress was removed", name)})
	}
	isReady := func(s *WebAppStatus) bool {
		c := readyCondition(s)
		return c != nil && c.Status == conditionTrue
	}
	if isReady(status) && !isReady(previous) {
		events = append(events, Event{"Available", fmt.Sprintf("all %d replicas of %s are ready", spec.ReplicasOrDefault(), name)})
	}
	return events
}

// CleanupEvent is the one event of a deleted WebApp that still has the
// finalizer (lib.rs, when finalizing).
func CleanupEvent(name string) Event {
	return Event{"Cleanup", fmt.Sprintf("webapp %s deleted; its children are deleted with it", name)}
}

func ptr[T any](v T) *T { return &v }
