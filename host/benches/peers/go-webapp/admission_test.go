package main

// The Go webhooks against the shared admission fixtures (the files every
// language's WebApp answers the same way): mutate, then validate the
// mutated object, as the API server calls them.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

type reviewFixture struct {
	Review struct {
		Operation string          `json:"operation"`
		Object    json.RawMessage `json:"object"`
		OldObject json.RawMessage `json:"oldObject"`
	} `json:"review"`
}

type reviewExpected struct {
	Allowed  bool     `json:"allowed"`
	Message  string   `json:"message"`
	Code     *int32   `json:"code"`
	Warnings []string `json:"warnings"`
	Patched  any      `json:"patched"`
}

func request(op admissionv1.Operation, object, old []byte) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "00000000-0000-0000-0000-000000000000",
		Operation: op,
		Object:    runtime.RawExtension{Raw: object},
		OldObject: runtime.RawExtension{Raw: old},
	}}
}

// answer is what the API server would make of the two webhooks: the object
// after mutate's patch (nil when unpatched) and validate's verdict.
func answer(t *testing.T, req admission.Request) (patched []byte, verdict admission.Response) {
	t.Helper()
	mutated := Defaulter{}.Handle(context.Background(), req)
	if !mutated.Allowed {
		t.Fatalf("mutate refused: %v", mutated.Result)
	}
	if len(mutated.Patches) > 0 {
		ops, err := json.Marshal(mutated.Patches)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(ops)
		if err != nil {
			t.Fatal(err)
		}
		if patched, err = patch.Apply(req.Object.Raw); err != nil {
			t.Fatalf("applying %s: %v", ops, err)
		}
		req.Object.Raw = patched
	}
	return patched, Validator{}.Handle(context.Background(), req)
}

func TestAdmissionFixtures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(fixtures, "admission", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no admission fixtures in %s: %v", fixtures, err)
	}
	for _, path := range paths {
		if strings.HasSuffix(path, ".expected.yaml") {
			continue
		}
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			var f reviewFixture
			var want reviewExpected
			load(t, path, &f)
			load(t, strings.TrimSuffix(path, ".yaml")+".expected.yaml", &want)
			op := admissionv1.Operation(f.Review.Operation)
			if op == "" {
				op = admissionv1.Create
			}
			patched, verdict := answer(t, request(op, f.Review.Object, f.Review.OldObject))

			var got any
			if patched != nil {
				if err := json.Unmarshal(patched, &got); err != nil {
					t.Fatal(err)
				}
			}
			if !reflect.DeepEqual(got, want.Patched) {
				t.Errorf("patched: got %v, want %v", got, want.Patched)
			}
			if verdict.Allowed != want.Allowed {
				t.Fatalf("allowed: got %v (%v), want %v", verdict.Allowed, verdict.Result, want.Allowed)
			}
			if !want.Allowed {
				if verdict.Result.Message != want.Message {
					t.Errorf("message: got %q, want %q", verdict.Result.Message, want.Message)
				}
				code := int32(http.StatusForbidden)
				if want.Code != nil {
					code = *want.Code
				}
				if verdict.Result.Code != code {
					t.Errorf("code: got %d, want %d", verdict.Result.Code, code)
				}
			}
			if len(verdict.Warnings) != len(want.Warnings) {
				t.Errorf("warnings: got %v, want %v", verdict.Warnings, want.Warnings)
			}
		})
	}
}

// Served the way the API server calls it: an AdmissionReview in, one out
// with a JSON patch that only adds the port.
func TestDefaulterShouldAnswerWithAJSONPatch(t *testing.T) {
	object := []byte(`{"apiVersion":"example.operon.dev/v1alpha1","kind":"WebApp",` +
		`"metadata":{"name":"app","namespace":"default"},"spec":{"image":"nginx:1.27","replicas":3}}`)
	req := request(admissionv1.Create, object, nil)
	review := admissionv1.AdmissionReview{Request: &req.AdmissionRequest}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	post := httptest.NewRequest(http.MethodPost, MutatePath, bytes.NewReader(body))
	post.Header.Set("Content-Type", "application/json")
	(&webhook.Admission{Handler: Defaulter{}}).ServeHTTP(rec, post)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
	}
	if out.Response == nil || !out.Response.Allowed || out.Response.UID != review.Request.UID {
		t.Fatalf("response: %+v", out.Response)
	}
	if out.Response.PatchType == nil || *out.Response.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type: %v", out.Response.PatchType)
	}
	if got := string(out.Response.Patch); got != `[{"op":"add","path":"/spec/port","value":8080}]` {
		t.Errorf("patch: %s", got)
	}
}

// The handlers in-process, through controller-runtime's webhook.Admission
// (review decoding, the handler, the response and its patch; no TLS): the
// Go side of "Operon's handler in-process" in `cargo xtask bench admission`.
// `go test -run '^$' -bench Webhook`.
func BenchmarkWebhook(b *testing.B) {
	object := []byte(`{"apiVersion":"example.operon.dev/v1alpha1","kind":"WebApp",` +
		`"metadata":{"name":"app","namespace":"default"},"spec":{"image":"nginx:1.27","replicas":3,` +
		`"env":[{"name":"MODE","value":"production"}]}}`)
	req := request(admissionv1.Create, object, nil)
	review := admissionv1.AdmissionReview{Request: &req.AdmissionRequest}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	if err != nil {
		b.Fatal(err)
	}
	for _, hook := range []struct {
		name    string
		handler admission.Handler
	}{{"mutate", Defaulter{}}, {"validate", Validator{}}} {
		b.Run(hook.name, func(b *testing.B) {
			wh := &webhook.Admission{Handler: hook.handler}
			for b.Loop() {
				rec := httptest.NewRecorder()
				post := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
				post.Header.Set("Content-Type", "application/json")
				wh.ServeHTTP(rec, post)
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Body.String())
				}
			}
		})
	}
}
