package main

// The WebApp's admission rules, ported from guest-examples/rust-webapp/src/
// admission.rs, as controller-runtime admission.Handlers (the peer of the
// guest's `validate` and `mutate` in `cargo xtask bench admission`):
//
//   - validate, for CREATE and UPDATE (DELETE and CONNECT are allowed
//     unseen), refuses the first of: spec.image missing or blank;
//     spec.replicas present and not an integer in 0..=50; spec.port present
//     and not an integer in 1..=65535. Null counts as absent, an integral
//     float as an integer, and the refused value is quoted as JSON text.
//   - mutate, for CREATE and UPDATE, sets spec.port to 8080 when it is
//     absent or null.
//
// The rules read the object as JSON values, not as the typed WebApp, as the
// guest does: what they refuse (`replicas: "x"`) would not even decode into
// WebAppSpec, so a typed CustomDefaulter/CustomValidator would answer such
// a request with a decoding error instead of the rule's message. The
// handlers are otherwise what kubebuilder scaffolds: admission.Webhook
// decodes the AdmissionReview, the mutating answer is a JSON patch from
// admission.PatchResponseFromRaw, a refusal is admission.Denied (403).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

const (
	// MaxReplicas is the most replicas a WebApp may ask for.
	MaxReplicas = 50
	// DefaultPort is the port a WebApp gets when it names none.
	DefaultPort = 8080
)

// decodeObject reads an object as generic JSON, numbers kept as written (so
// a refused value is quoted as the request wrote it).
func decodeObject(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// field is spec[name]; null counts as absent.
func field(spec map[string]any, name string) (any, bool) {
	v, ok := spec[name]
	return v, ok && v != nil
}

// integerIn says whether v is an integer (an integral float counts) in
// low..=high.
func integerIn(v any, low, high int64) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	if i, err := n.Int64(); err == nil {
		return low <= i && i <= high
	}
	f, err := n.Float64()
	return err == nil && f == math.Trunc(f) && float64(low) <= f && f <= float64(high)
}

// jsonText is v as JSON text, without HTML escaping.
func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ValidateWebApp is the first rule the object breaks, or nil.
func ValidateWebApp(object any) error {
	root, _ := object.(map[string]any)
	spec, _ := root["spec"].(map[string]any)
	image, _ := spec["image"].(string)
	if strings.TrimSpace(image) == "" {
		return fmt.Errorf("spec.image must not be empty")
	}
	if replicas, ok := field(spec, "replicas"); ok && !integerIn(replicas, 0, MaxReplicas) {
		return fmt.Errorf("spec.replicas must be between 0 and %d, not %s", MaxReplicas, jsonText(replicas))
	}
	if port, ok := field(spec, "port"); ok && !integerIn(port, 1, 65535) {
		return fmt.Errorf("spec.port must be between 1 and 65535, not %s", jsonText(port))
	}
	return nil
}

// DefaultWebApp sets spec.port when it is absent or null, and says whether
// it changed the object. An object or spec that is not a JSON object is
// left alone.
func DefaultWebApp(object any) bool {
	root, ok := object.(map[string]any)
	if !ok {
		return false
	}
	if root["spec"] == nil {
		root["spec"] = map[string]any{}
	}
	spec, ok := root["spec"].(map[string]any)
	if !ok {
		return false
	}
	if _, ok := field(spec, "port"); ok {
		return false
	}
	spec["port"] = DefaultPort
	return true
}

// createOrUpdate: the operations the rules look at.
func createOrUpdate(op admissionv1.Operation) bool {
	return op == admissionv1.Create || op == admissionv1.Update
}

// Validator is the validating webhook of WebApps.
type Validator struct{}

// Handle implements admission.Handler.
func (Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	if !createOrUpdate(req.Operation) {
		return admission.Allowed("")
	}
	object, err := decodeObject(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := ValidateWebApp(object); err != nil {
		return admission.Denied(err.Error())
	}
	return admission.Allowed("")
}

// Defaulter is the mutating webhook of WebApps.
type Defaulter struct{}

// Handle implements admission.Handler.
func (Defaulter) Handle(_ context.Context, req admission.Request) admission.Response {
	if !createOrUpdate(req.Operation) {
		return admission.Allowed("")
	}
	object, err := decodeObject(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if !DefaultWebApp(object) {
		return admission.Allowed("")
	}
	defaulted, err := json.Marshal(object)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, defaulted)
}
