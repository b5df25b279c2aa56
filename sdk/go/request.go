package operon

import (
	"encoding/json"
	"fmt"
	"time"

	"operon.dev/sdk/go/internal/abi"
)

// Request is one call of Reconcile: the parent with its children and
// related objects as the host's cache has them.
type Request struct {
	// Object is the parent, including its current `status`.
	Object Object
	// Raw is the parent as JSON text, for [Request.Decode].
	Raw json.RawMessage
	// Meta is the parent's metadata.
	Meta Meta
	// Finalizing is true when the parent still carries the manifest's
	// finalizer and is being deleted or no longer matches the Reconciler's
	// selector: clean up, then answer an Outcome with Finalized set.
	Finalizing bool
	// Attempt counts the failures in a row before this call (0 on the
	// first try and after a success).
	Attempt uint32
	// Now is the host's clock when the reconcile began, as the host gave
	// it: RFC 3339 in UTC with milliseconds (`2026-11-26T04:05:06.789Z`),
	// one value for the whole call (fixtures fix it; without one they run
	// at the Unix epoch). Write it as is into a status, so an unchanged
	// input gives an unchanged output.
	Now string
	// NowTime is Now as a [time.Time].
	NowTime time.Time

	children []abi.Children
	related  []string
}

// NewRequest parses the WIT request.
//
// Errors are terminal: the parent is not a JSON object.
func NewRequest(raw RawRequest) (*Request, error) {
	object, err := ParseObject([]byte(raw.Object))
	if err != nil {
		return nil, Terminalf("the parent is not a Kubernetes object: %v", err)
	}
	r := &Request{
		Object:     object,
		Raw:        json.RawMessage(raw.Object),
		Finalizing: raw.Finalizing,
		Attempt:    raw.Attempt,
		Now:        raw.Now,
		children:   raw.Children,
		related:    raw.Related,
	}
	if r.NowTime, err = time.Parse(time.RFC3339Nano, raw.Now); err != nil {
		return nil, Terminalf("request.now %q is not an RFC 3339 time: %v", raw.Now, err)
	}
	if md, ok := object.Lookup("metadata"); ok && md != nil {
		var head struct {
			Metadata Meta `json:"metadata"`
		}
		if err := json.Unmarshal(r.Raw, &head); err != nil {
			return nil, Terminalf("the parent's metadata is invalid: %v", err)
		}
		r.Meta = head.Metadata
	}
	return r, nil
}

// Name returns the parent's `metadata.name`.
func (r *Request) Name() string { return r.Meta.Name }

// Namespace returns the parent's `metadata.namespace` ("" when
// cluster-scoped).
func (r *Request) Namespace() string { return r.Meta.Namespace }

// Kind returns the parent's kind.
func (r *Request) Kind() GVK { return r.Object.GVK() }

// Describe names the parent for messages: `WebApp default/shop`.
func (r *Request) Describe() string {
	if r.Meta.Namespace == "" {
		return r.Object.String("kind") + " " + r.Meta.Name
	}
	return r.Object.String("kind") + " " + r.Meta.Namespace + "/" + r.Meta.Name
}

// Decode unmarshals the parent into v (a struct of yours with `json` tags).
//
// Errors are terminal, naming the parent: `WebApp default/shop is
// invalid: ...`. JSON that does not fit v will not fit it on a retry.
func (r *Request) Decode(v any) error {
	if err := json.Unmarshal(r.Raw, v); err != nil {
		return Terminalf("%s is invalid: %v", r.Describe(), err)
	}
	return nil
}

// RawChildren returns the existing children of kind as JSON text, sorted
// by namespace then name; empty when there are none or kind is not in
// Manifest.Owns.
func (r *Request) RawChildren(kind GVK) []string {
	for _, c := range r.children {
		if c.Kind == kind {
			out := make([]string, len(c.Objects))
			for i, o := range c.Objects {
				out[i] = o.Object
			}
			return out
		}
	}
	return nil
}

// Children returns the existing children of kind, decoded.
//
// Errors are terminal: a child is not a JSON object.
func (r *Request) Children(kind GVK) ([]Object, error) {
	texts := r.RawChildren(kind)
	out := make([]Object, 0, len(texts))
	for _, text := range texts {
		o, err := ParseObject([]byte(text))
		if err != nil {
			return nil, Terminalf("a child %s is invalid: %v", KindString(kind), err)
		}
		out = append(out, o)
	}
	return out, nil
}

// Child returns the existing child of kind called name, or nil.
//
// Errors are terminal: a child is not a JSON object.
func (r *Request) Child(kind GVK, name string) (Object, error) {
	children, err := r.Children(kind)
	if err != nil {
		return nil, err
	}
	for _, c := range children {
		if c.Name() == name {
			return c, nil
		}
	}
	return nil, nil
}

// HasChild reports whether a child of kind called name exists.
func (r *Request) HasChild(kind GVK, name string) bool {
	c, _ := r.Child(kind, name)
	return c != nil
}

// DecodeChild unmarshals the child of kind called name into v; found is
// false when there is none.
//
// Errors are terminal, naming the child.
func (r *Request) DecodeChild(kind GVK, name string, v any) (found bool, err error) {
	for _, text := range r.RawChildren(kind) {
		var head struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if json.Unmarshal([]byte(text), &head) != nil || head.Metadata.Name != name {
			continue
		}
		if err := json.Unmarshal([]byte(text), v); err != nil {
			return true, Terminalf("%s %s/%s is invalid: %v", kind.Kind, head.Metadata.Namespace, name, err)
		}
		return true, nil
	}
	return false, nil
}

// Related returns the related objects (of watched kinds) of kind, decoded.
//
// Errors are terminal: an object is not a JSON object.
func (r *Request) Related(kind GVK) ([]Object, error) {
	var out []Object
	for _, text := range r.related {
		o, err := ParseObject([]byte(text))
		if err != nil {
			return nil, Terminalf("a related object is invalid: %v", err)
		}
		if o.GVK() == kind {
			out = append(out, o)
		}
	}
	return out, nil
}

// RawRelated returns every related object as JSON text, in the host's
// order.
func (r *Request) RawRelated() []string { return r.related }

func (r *Request) String() string { return fmt.Sprintf("reconcile %s", r.Describe()) }
