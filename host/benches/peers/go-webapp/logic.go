package main

// The WebApp logic, ported line by line from guest-examples/rust-webapp/src
// (lib.rs, status.rs, children.rs, webapp.rs): validation, the status with
// its Ready condition, the events, and the desired children. Pure functions
// of the objects read from the cache, so logic_test.go can run them over the
// shared fixtures (guest-examples/webapp/fixtures).

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

// rollout is what the existing Deployment says about the rollout.
type rollout struct {
	readyReplicas int32
	exists        bool
	// The Deployment runs the spec (image, replicas), its controller has seen
	// its latest generation and every replica is updated.
	current bool
}

func observe(d *appsv1.Deployment, spec *WebAppSpec) rollout {
	if d == nil {
		return rollout{}
	}
	image, ok := deploymentImage(d)
	return rollout{
		readyReplicas: d.Status.ReadyReplicas,
		exists:        true,
		current: deploymentReplicas(d) == spec.ReplicasOrDefault() &&
			ok && image == spec.Image &&
			d.Status.ObservedGeneration >= d.Generation &&
			d.Status.UpdatedReplicas >= spec.ReplicasOrDefault(),
	}
}

func (r rollout) ready(spec *WebAppSpec) bool {
	return r.current && r.readyReplicas >= spec.ReplicasOrDefault()
}

// ComputeStatus is the new status (status.rs). lastTransitionTime never reads
// the clock: it is kept while the condition's status holds, else it is the
// latest time the request shows (the Deployment's condition timestamps, the
// previous transition, the WebApp's creation).
func ComputeStatus(spec *WebAppSpec, generation int64, created metav1.Time, previous *WebAppStatus,
	d *appsv1.Deployment, name string) WebAppStatus {
	ro := observe(d, spec)
	ready := ro.ready(spec)
	value, reason := metav1.ConditionFalse, "Progressing"
	if ready {
		value, reason = metav1.ConditionTrue, "Available"
	}
	counts := fmt.Sprintf("%d of %d replicas ready", ro.readyReplicas, spec.ReplicasOrDefault())
	message := counts
	switch {
	case ready:
	case !ro.exists:
		message = fmt.Sprintf("deployment %s does not exist yet", name)
	case !ro.current:
		message = fmt.Sprintf("deployment %s is being updated: %s", name, counts)
	}
	prev := readyCondition(previous)
	var transition metav1.Time
	if prev != nil && prev.Status == value {
		transition = prev.LastTransitionTime
	} else {
		transition = latestTime(d, prev, created)
	}
	return WebAppStatus{
		ObservedGeneration: generation,
		ReadyReplicas:      ro.readyReplicas,
		Conditions: []metav1.Condition{{
			Type:               ReadyCondition,
			Status:             value,
			ObservedGeneration: generation,
			LastTransitionTime: transition,
			Reason:             reason,
			Message:            message,
		}},
	}
}

func readyCondition(s *WebAppStatus) *metav1.Condition {
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

func latestTime(d *appsv1.Deployment, prev *metav1.Condition, created metav1.Time) metav1.Time {
	var times []metav1.Time
	if d != nil {
		for _, c := range d.Status.Conditions {
			times = append(times, c.LastUpdateTime, c.LastTransitionTime)
		}
	}
	if prev != nil {
		times = append(times, prev.LastTransitionTime)
	}
	times = append(times, created)
	latest := metav1.NewTime(time.Unix(0, 0).UTC())
	found := false
	for _, t := range times {
		if t.IsZero() {
			continue
		}
		if !found || t.After(latest.Time) {
			latest, found = t, true
		}
	}
	return latest
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
		return c != nil && c.Status == metav1.ConditionTrue
	}
	if isReady(status) && !isReady(previous) {
		events = append(events, Event{"Available", fmt.Sprintf("all %d replicas of %s are ready", spec.ReplicasOrDefault(), name)})
	}
	return events
}

func ptr[T any](v T) *T { return &v }
