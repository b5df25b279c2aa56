package main

// The port of the host's readiness rules (readiness.go) against the cases
// of contract/src/readiness.rs for the kinds a WebApp owns, and, when an
// operon binary is at hand, against the host's own verdicts.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// rateJSON decodes an object of an owned kind and rates it.
func rateJSON(t *testing.T, text []byte) Readiness {
	t.Helper()
	var meta metav1.TypeMeta
	if err := json.Unmarshal(text, &meta); err != nil {
		t.Fatal(err)
	}
	decode := func(into any) {
		if err := json.Unmarshal(text, into); err != nil {
			t.Fatalf("%v: %s", err, text)
		}
	}
	switch meta.Kind {
	case "Deployment":
		var d appsv1.Deployment
		decode(&d)
		return RateDeployment(&d)
	case "Service":
		var s corev1.Service
		decode(&s)
		return RateService(&s)
	case "Ingress":
		var in networkingv1.Ingress
		decode(&in)
		return RateIngress(&in)
	}
	t.Fatalf("not a kind the WebApp owns: %s", text)
	return Readiness{}
}

// A Deployment's status (generation 2 observed) with its rollout done
// (readiness.rs `dep_status`), and variations.
func deployment(spec, status string) string {
	return `{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "default", "generation": 2},
		"spec": ` + spec + `, "status": ` + status + `}`
}

func depStatus(replicas, updated, ready, available string, conditions ...string) string {
	if len(conditions) == 0 {
		conditions = []string{`{"type": "Available", "status": "True"}`,
			`{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}`}
	}
	return `{"observedGeneration": 2, "replicas": ` + replicas + `, "updatedReplicas": ` + updated +
		`, "readyReplicas": ` + ready + `, "availableReplicas": ` + available +
		`, "conditions": [` + strings.Join(conditions, ", ") + `]}`
}

func service(spec, status string) string {
	return `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "namespace": "default"}, "spec": ` + spec +
		`, "status": ` + status + `}`
}

var readinessCases = []struct {
	name   string
	object string
	want   Readiness
}{
	{"deletion", strings.Replace(deployment(`{"replicas": 1}`, depStatus("1", "1", "1", "1")),
		`"generation": 2`, `"generation": 2, "deletionTimestamp": "2024-01-01T00:00:00Z"`, 1),
		Readiness{Terminating, "object is being deleted"}},
	{"observedGeneration behind", strings.Replace(deployment(`{"replicas": 1}`, depStatus("1", "1", "1", "1")),
		`"observedGeneration": 2`, `"observedGeneration": 1`, 1),
		Readiness{InProgress, "status.observedGeneration 1 is behind metadata.generation 2"}},
	{"observedGeneration not reported", `{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": {"name": "x", "generation": 1}, "spec": {"replicas": 2}}`,
		Readiness{InProgress, "Replicas: 0/2"}},
	{"Stalled on a Service", service(`{}`, `{"conditions": [{"type": "Stalled", "status": "True", "message": "stuck"}]}`),
		Readiness{Failed, "stuck"}},
	{"Reconciling on a Deployment", deployment(`{"replicas": 1}`, depStatus("1", "1", "1", "1",
		`{"type": "Reconciling", "status": "True", "reason": "Scaling"}`)),
		Readiness{InProgress, "Reconciling is True: Scaling"}},
	{"deployment available", deployment(`{"replicas": 3}`, depStatus("3", "3", "3", "3")),
		Readiness{Current, "Deployment is available. Replicas: 3"}},
	{"deployment default replicas", deployment(`{}`, depStatus("1", "1", "1", "1")),
		Readiness{Current, "Deployment is available. Replicas: 1"}},
	{"deployment scaling up", deployment(`{"replicas": 3}`, depStatus("1", "1", "1", "1")),
		Readiness{InProgress, "Replicas: 1/3"}},
	{"deployment updating", deployment(`{"replicas": 3}`, depStatus("3", "2", "3", "3")),
		Readiness{InProgress, "Updated: 2/3"}},
	{"deployment old pods", deployment(`{"replicas": 3}`, depStatus("4", "3", "3", "3")),
		Readiness{InProgress, "Pending termination: 1"}},
	{"deployment unavailable", deployment(`{"replicas": 3}`, depStatus("3", "3", "3", "1")),
		Readiness{InProgress, "Available: 1/3"}},
	{"deployment unready", deployment(`{"replicas": 3}`, depStatus("3", "3", "2", "3")),
		Readiness{InProgress, "Ready: 2/3"}},
	{"deployment rollout not complete", deployment(`{"replicas": 1, "progressDeadlineSeconds": 600}`,
		depStatus("1", "1", "1", "1", `{"type": "Available", "status": "True"}`,
			`{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}`)),
		Readiness{InProgress, "Rollout not complete: new ReplicaSet not available"}},
	{"deployment rollout complete", deployment(`{"replicas": 1, "progressDeadlineSeconds": 600}`,
		depStatus("1", "1", "1", "1")),
		Readiness{Current, "Deployment is available. Replicas: 1"}},
	{"deployment not Available", deployment(`{"replicas": 1}`, depStatus("1", "1", "1", "1",
		`{"type": "Available", "status": "False"}`)),
		Readiness{InProgress, "Deployment not Available"}},
	{"deployment deadline exceeded", deployment(`{"replicas": 3}`, depStatus("3", "1", "1", "1",
		`{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet x has timed out"}`)),
		Readiness{Failed, "Progress deadline exceeded: ReplicaSet x has timed out"}},
	{"service clusterip", service(`{"type": "ClusterIP"}`, `{}`), Readiness{Current, "Service is ready"}},
	{"service lb waiting", service(`{"type": "LoadBalancer"}`, `{"loadBalancer": {}}`),
		Readiness{InProgress, "Waiting for the load balancer's ingress"}},
	{"service lb ready", service(`{"type": "LoadBalancer"}`, `{"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}`),
		Readiness{Current, "Service is ready"}},
	{"ingress", `{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "x", "generation": 3},
		"spec": {"rules": [{"host": "h"}]}, "status": {"loadBalancer": {}}}`,
		Readiness{Current, "Resource is current"}},
	{"ingress deleted", `{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
		"metadata": {"name": "x", "deletionTimestamp": "2024-01-01T00:00:00Z"}}`,
		Readiness{Terminating, "object is being deleted"}},
}

func TestReadinessShouldFollowTheHostsRules(t *testing.T) {
	for _, tc := range readinessCases {
		if got := rateJSON(t, []byte(tc.object)); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// operonBinary is the operon binary that rates objects as the host does
// (`operon readiness -`): $OPERON, else operon on PATH, as the Go SDK's
// tests find it; "" when there is none.
func operonBinary(t *testing.T) string {
	if binary := os.Getenv("OPERON"); binary != "" {
		return binary
	}
	found, err := exec.LookPath("operon")
	if err != nil {
		if !errors.Is(err, exec.ErrNotFound) {
			t.Fatal(err)
		}
		return ""
	}
	return found
}

// TestReadinessShouldBeTheHosts rates the cases above and every child of
// the shared fixtures both natively and with `operon readiness` (the
// host's code), and wants the same verdicts.
func TestReadinessShouldBeTheHosts(t *testing.T) {
	binary := operonBinary(t)
	if binary == "" {
		t.Skip("no operon binary to compare with: set OPERON (e.g. target/release/operon) or put operon on PATH")
	}
	var objects []json.RawMessage
	var names []string
	for _, tc := range readinessCases {
		objects = append(objects, json.RawMessage(tc.object))
		names = append(names, tc.name)
	}
	paths, err := filepath.Glob(filepath.Join(fixtures, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if strings.HasSuffix(path, ".expected.yaml") {
			continue
		}
		var f struct {
			Children []json.RawMessage `json:"children"`
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(text, &f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for i, child := range f.Children {
			objects = append(objects, child)
			names = append(names, fmt.Sprintf("%s children[%d]", filepath.Base(path), i))
		}
	}
	input, err := json.Marshal(objects)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "readiness", "-")
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	output, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s readiness: %v: %s", binary, err, stderr.String())
	}
	var host []Readiness
	if err := json.Unmarshal(output, &host); err != nil || len(host) != len(objects) {
		t.Fatalf("%s readiness: want %d verdicts, got %s (%v)", binary, len(objects), output, err)
	}
	for i, object := range objects {
		if got := rateJSON(t, object); got != host[i] {
			t.Errorf("%s: native %+v, host %+v", names[i], got, host[i])
		}
	}
}
