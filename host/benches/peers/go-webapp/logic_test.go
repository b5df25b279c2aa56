package main

// The Go port against the shared WebApp fixtures (the golden files the Rust
// guest is tested with): same status, same events, same desired children.
// `go test ./...` in this directory.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"
)

// fixtures holds the shared request fixtures (NAME.yaml) and their
// outcomes (NAME.expected.yaml), contract 0.2's format (contract/src/
// fixture.rs). TestFixtures reads the files at its top only: admission/ is
// admission_test.go's, and conversion/ is about `convert`, which the peer
// does not do (the CRD serves v1alpha1 only without a conversion webhook).
const fixtures = "../../../../guest-examples/webapp/fixtures"

// defaultNow is request.now for a fixture without `now:`: the Unix epoch,
// as the host writes it.
const defaultNow = "1970-01-01T00:00:00.000Z"

type fixture struct {
	Object     WebApp            `json:"object"`
	Children   []json.RawMessage `json:"children"`
	Finalizing bool              `json:"finalizing"`
	// Now is request.now: the host's clock for the call.
	Now string `json:"now"`
}

type expected struct {
	Desired []map[string]any `json:"desired"`
	Status  map[string]any   `json:"status"`
	Events  []struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Warning bool   `json:"warning"`
	} `json:"events"`
	RequeueAfterMs *int64            `json:"requeueAfterMs"`
	Finalized      bool              `json:"finalized"`
	NeedsFinalizer bool              `json:"needsFinalizer"`
	Error          map[string]string `json:"error"`
}

// children decodes a fixture's children by kind. The fixtures state no
// readiness (the host rates every child), so Verdict rates them natively;
// TestReadinessShouldBeTheHosts holds that rating to the host's.
func children(t *testing.T, raws []json.RawMessage) Children {
	t.Helper()
	var c Children
	for _, raw := range raws {
		var meta metav1.TypeMeta
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch meta.Kind {
		case "Deployment":
			c.Deployment = &appsv1.Deployment{}
			into = c.Deployment
		case "Service":
			c.Service = &corev1.Service{}
			into = c.Service
		case "Ingress":
			c.Ingress = &networkingv1.Ingress{}
			into = c.Ingress
		default:
			t.Fatalf("a child of a kind the WebApp does not own: %s", raw)
		}
		if err := json.Unmarshal(raw, into); err != nil {
			t.Fatal(err)
		}
	}
	return c
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
			if f.Now == "" {
				f.Now = defaultNow
			}
			webapp := &f.Object
			name := webapp.Name
			existing := children(t, f.Children)
			ran++
			if f.Finalizing {
				// The rest of the finalizing path is I/O (controller.go
				// finalize): no status, the Cleanup event, the finalizer
				// removed.
				cleanup := CleanupEvent(name)
				if want.Status != nil || !want.Finalized || want.NeedsFinalizer || len(want.Desired) != 0 ||
					len(want.Events) != 1 || want.Events[0].Reason != cleanup.Reason || want.Events[0].Message != cleanup.Message {
					t.Errorf("finalizing: got %v, want %+v", cleanup, want)
				}
				return
			}
			if want.Error != nil {
				err := Check(webapp)
				if err == nil || want.Error["terminal"] == "" || err.Error() != want.Error["terminal"] {
					t.Fatalf("want the terminal failure %v, got %v", want.Error, err)
				}
				status := InvalidStatus(webapp.Generation, webapp.Status, existing.Deployment, err.Error(), f.Now)
				if got := asMap(t, status); !reflect.DeepEqual(got, want.Status) {
					t.Errorf("status\n got %v\nwant %v", got, want.Status)
				}
				return
			}
			if err := Check(webapp); err != nil {
				t.Fatal(err)
			}
			// The controller always keeps the finalizer and never requeues.
			if !want.NeedsFinalizer || want.Finalized || want.RequeueAfterMs != nil {
				t.Errorf("an outcome the controller does not make: %+v", want)
			}
			status := ComputeStatus(name, &webapp.Spec, webapp.Generation, webapp.Status, existing, f.Now)
			if got := asMap(t, status); !reflect.DeepEqual(got, want.Status) {
				t.Errorf("status\n got %v\nwant %v", got, want.Status)
			}
			events := Events(name, &webapp.Spec, existing.Deployment, existing.Ingress != nil, webapp.Status, &status)
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
		})
	}
	if ran < 8 { // the eight request fixtures of contract 0.2
		t.Fatalf("only %d fixtures compared", ran)
	}
}

// The cache decodes WebApps with apimachinery's codec (sigs.k8s.io/json),
// not encoding/json: WebAppSpec.UnmarshalJSON must see them there too.
func TestCheckShouldNameASpecThatDoesNotFitThroughTheCodec(t *testing.T) {
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	for _, tc := range []struct{ spec, want string }{
		{`{"image": "nginx:1.27", "replicas": 2}`, ""},
		{`{"replicas": 2}`, "WebApp default/shop is invalid: missing field `image`"},
		{`{"image": null}`, "WebApp default/shop is invalid: invalid type: null, expected a string"},
		{`null`, "WebApp default/shop is invalid: missing field `spec`"},
		{`{"image": " "}`, "spec.image must not be empty"},
	} {
		text := `{"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
			"metadata": {"name": "shop", "namespace": "default"}, "spec": ` + tc.spec + `}`
		object, _, err := decoder.Decode([]byte(text), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		webapp, ok := object.(*WebApp)
		if !ok {
			t.Fatalf("%s: decoded a %T", tc.spec, object)
		}
		err = Check(webapp.DeepCopy())
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("%s: got %v, want %q", tc.spec, err, tc.want)
		}
		if tc.want == "" && (webapp.Spec.Image != "nginx:1.27" || webapp.Spec.ReplicasOrDefault() != 2) {
			t.Errorf("%s: decoded %+v", tc.spec, webapp.Spec)
		}
	}
}

func TestTimestampShouldBeWrittenAsTheHostWritesNow(t *testing.T) {
	at := time.Date(2026, 11, 20, 11, 1, 31, 42_000_000, time.FixedZone("CET", 3600))
	if got := Timestamp(at); got != "2026-11-20T10:01:31.042Z" {
		t.Errorf("got %s", got)
	}
}
