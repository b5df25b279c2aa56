package main

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	operon "operon.dev/sdk/go"
)

// Validate refuses WebApps the reconciler could not run, before they are
// stored: the first failing check wins.
//
// A null field counts as absent, as Kubernetes treats it. Integers are JSON
// numbers with an integral value (3.0 is 3, as it is in JavaScript); the
// refused value is quoted as JSON.
func (WebAppReconciler) Validate(_ context.Context, review *operon.Review) ([]string, error) {
	if review.Operation == operon.Delete || review.Operation == operon.Connect {
		return nil, nil
	}
	var object operon.Object
	if err := review.DecodeObject(&object); err != nil {
		return nil, operon.Deny("the object is not valid JSON: %v", err)
	}
	image, _ := object.Lookup("spec", "image")
	if s, ok := image.(string); !ok || strings.TrimSpace(s) == "" {
		return nil, operon.Deny("spec.image must not be empty")
	}
	if v, ok := present(object, "replicas"); ok && !integerIn(v, 0, 50) {
		return nil, operon.Deny("spec.replicas must be between 0 and 50, not %s", jsonText(v))
	}
	if v, ok := present(object, "port"); ok && !integerIn(v, 1, 65535) {
		return nil, operon.Deny("spec.port must be between 1 and 65535, not %s", jsonText(v))
	}
	return nil, nil
}

// Mutate defaults spec.port to 8080 on create and update.
func (WebAppReconciler) Mutate(_ context.Context, review *operon.Review) (any, error) {
	if review.Operation != operon.Create && review.Operation != operon.Update {
		return nil, nil
	}
	var object operon.Object
	if err := review.DecodeObject(&object); err != nil {
		return nil, operon.Deny("the object is not valid JSON: %v", err)
	}
	if _, ok := present(object, "port"); ok {
		return nil, nil
	}
	spec, found := object.Lookup("spec")
	if _, isMap := spec.(map[string]any); found && spec != nil && !isMap {
		return nil, nil // not a WebApp spec: Validate refuses it
	}
	object.Set(json.Number("8080"), "spec", "port")
	return object, nil
}

// present returns spec.<field> unless it is absent or null.
func present(object operon.Object, field string) (any, bool) {
	v, ok := object.Lookup("spec", field)
	return v, ok && v != nil
}

func integerIn(v any, min, max int64) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	return err == nil && f == math.Trunc(f) && f >= float64(min) && f <= float64(max)
}

func jsonText(v any) string {
	text, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(text)
}
