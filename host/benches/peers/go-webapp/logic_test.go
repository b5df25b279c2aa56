package main

// The Go port against the shared WebApp fixtures (the golden files the Rust
// guest is tested with): same status, same events, same desired children.
// `go test ./...` in this directory.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const fixtures = "../../../../guest-examples/webapp/fixtures"

type fixture struct {
	Object     WebApp            `json:"object"`
	Children   []json.RawMessage `json:"children"`
	Finalizing bool              `json:"finalizing"`
}

type expected struct {
	Desired []map[string]any `json:"desired"`
	Status  map[string]any   `json:"status"`
	Events  []struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Warning bool   `json:"warning"`
	} `json:"events"`
	Error map[string]string `json:"error"`
}

func load(t *testing.T, path string, into any) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(text, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// asMap is v as generic JSON.
func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	text, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(text, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// subset: every field of want is in got with the same value (lists
// element-wise). The Go objects carry fields the guest leaves to the API
// server's defaults (protocol: TCP, null creationTimestamps).
func subset(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !subset(v, g[k]) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !subset(w[i], g[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(want, got)
	}
}

func TestFixtures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(fixtures, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtures, err)
	}
	ran := 0
	for _, path := range paths {
		if strings.HasSuffix(path, ".expected.yaml") {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(name, func(t *testing.T) {
			var f fixture
			var want expected
			load(t, path, &f)
			load(t, strings.TrimSuffix(path, ".yaml")+".expected.yaml", &want)
			webapp := &f.Object
			if want.Error != nil {
				if Validate(&webapp.Spec) == nil {
					t.Fatalf("want a terminal failure (%v), the spec validates", want.Error)
				}
				return
			}
			if f.Finalizing {
				// The finalizing path is I/O only (controller.go finalize).
				return
			}
			if err := Validate(&webapp.Spec); err != nil {
				t.Fatal(err)
			}
			var deployment *appsv1.Deployment
			hadIngress := false
			for _, raw := range f.Children {
				var meta metav1.TypeMeta
				if err := json.Unmarshal(raw, &meta); err != nil {
					t.Fatal(err)
				}
				switch meta.Kind {
				case "Deployment":
					deployment = &appsv1.Deployment{}
					if err := json.Unmarshal(raw, deployment); err != nil {
						t.Fatal(err)
					}
				case "Ingress":
					hadIngress = true
				}
			}
			name := webapp.Name
			status := ComputeStatus(&webapp.Spec, webapp.Generation, webapp.CreationTimestamp, webapp.Status, deployment, name)
			if got := asMap(t, status); !reflect.DeepEqual(got, want.Status) {
				t.Errorf("status\n got %v\nwant %v", got, want.Status)
			}
			events := Events(name, &webapp.Spec, deployment, hadIngress, webapp.Status, &status)
			if len(events) != len(want.Events) {
				t.Fatalf("events: got %v, want %v", events, want.Events)
			}
			for i, e := range events {
				w := want.Events[i]
				if e.Reason != w.Reason || e.Message != w.Message || w.Warning {
					t.Errorf("event %d: got %v, want %v", i, e, w)
				}
			}
			d := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}}
			d.Name = name
			MutateDeployment(d, name, &webapp.Spec)
			s := &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}}
			s.Name = name
			MutateService(s, name, &webapp.Spec)
			desired := []any{d, s}
			if webapp.Spec.Ingress != nil {
				in := &networkingv1.Ingress{TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}}
				in.Name = name
				MutateIngress(in, name, webapp.Spec.Ingress)
				desired = append(desired, in)
			}
			if len(desired) != len(want.Desired) {
				t.Fatalf("desired: got %d objects, want %d", len(desired), len(want.Desired))
			}
			for i, obj := range desired {
				if got := asMap(t, obj); !subset(want.Desired[i], got) {
					t.Errorf("desired[%d]\n got %v\nwant %v", i, got, want.Desired[i])
				}
			}
			ran++
		})
	}
	if ran < 4 {
		t.Fatalf("only %d fixtures compared", ran)
	}
}
