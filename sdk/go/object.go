package operon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Object is one Kubernetes object as decoded JSON: `apiVersion`, `kind`,
// `metadata`, `spec`, ... Numbers decode as [json.Number], so integers
// keep their exact value and are written back as integers.
//
// Build desired objects as literals or start from [NewObject]:
//
//	cm := operon.NewObject(operon.ConfigMapKind, "web-settings")
//	cm["data"] = map[string]string{"mode": "production"}
//
// Any value that marshals to a JSON object works as a desired object too:
// a struct of yours with `json` tags, or a type from k8s.io/api (which
// makes the component much larger).
type Object map[string]any

// NewObject returns an object of kind with `apiVersion`, `kind` and
// `metadata.name` set.
func NewObject(kind GVK, name string) Object {
	return Object{"apiVersion": APIVersion(kind), "kind": kind.Kind, "metadata": map[string]any{"name": name}}
}

// ParseObject decodes one object from JSON text, numbers as [json.Number].
func ParseObject(text []byte) (Object, error) {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	var o Object
	if err := d.Decode(&o); err != nil {
		return nil, err
	}
	if o == nil {
		return nil, fmt.Errorf("not a JSON object: %.40s", text)
	}
	return o, nil
}

// Lookup returns the value at path (map keys) and whether it exists.
func (o Object) Lookup(path ...string) (any, bool) {
	var v any = map[string]any(o)
	for _, key := range path {
		m, ok := asMap(v)
		if !ok {
			return nil, false
		}
		if v, ok = m[key]; !ok {
			return nil, false
		}
	}
	return v, true
}

// String returns the string at path, or "" when it is missing or not a
// string.
func (o Object) String(path ...string) string {
	v, _ := o.Lookup(path...)
	s, _ := v.(string)
	return s
}

// Int64 returns the integer at path; ok is false when it is missing or not
// an integer.
func (o Object) Int64(path ...string) (n int64, ok bool) {
	v, found := o.Lookup(path...)
	if !found {
		return 0, false
	}
	return asInt64(v)
}

// Set stores value at path, creating the maps on the way.
func (o Object) Set(value any, path ...string) {
	if len(path) == 0 {
		return
	}
	m := map[string]any(o)
	for _, key := range path[:len(path)-1] {
		next, ok := asMap(m[key])
		if !ok {
			next = map[string]any{}
			m[key] = next
		}
		m = next
	}
	m[path[len(path)-1]] = value
}

// Name returns `metadata.name`.
func (o Object) Name() string { return o.String("metadata", "name") }

// Namespace returns `metadata.namespace`.
func (o Object) Namespace() string { return o.String("metadata", "namespace") }

// Labels returns `metadata.labels` (nil when there are none).
func (o Object) Labels() map[string]string {
	v, _ := o.Lookup("metadata", "labels")
	m, _ := asMap(v)
	return stringMap(m)
}

// GVK returns the object's kind from its `apiVersion` and `kind`.
func (o Object) GVK() GVK { return Kind(o.String("apiVersion"), o.String("kind")) }

func asMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case Object:
		return m, true
	}
	return nil, false
}

func asInt64(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := strconv.ParseInt(string(n), 10, 64)
		return i, err == nil
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n == float64(int64(n)) {
			return int64(n), true
		}
	}
	return 0, false
}

func stringMap(m map[string]any) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// Meta is the parent's `metadata`, as far as reconcilers commonly need it.
// Missing fields are zero.
type Meta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	UID               string            `json:"uid"`
	Generation        int64             `json:"generation"`
	ResourceVersion   string            `json:"resourceVersion"`
	CreationTimestamp string            `json:"creationTimestamp"`
	DeletionTimestamp string            `json:"deletionTimestamp"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	Finalizers        []string          `json:"finalizers"`
}

// marshal writes v as JSON without HTML escaping (`<` stays `<`).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
