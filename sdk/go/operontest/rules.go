package operontest

// The host's checks of an outcome before it writes anything, as operon
// test makes them: the same rules (rules.json, a byte-identical copy of
// contract/src/rules.json) and the same messages as the host's
// operon_contract::rules, held to the host's verdicts by the shared cases
// in contract/rules/cases (rules_test.go).

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	operon "operon.dev/sdk/go"
)

//go:embed rules.json
var rulesJSON []byte

type kindRule struct {
	Group string  `json:"group"`
	Kind  *string `json:"kind"`
	Why   string  `json:"why"`
}

func (r kindRule) matches(k operon.GVK) bool {
	return r.Group == k.Group && (r.Kind == nil || *r.Kind == k.Kind)
}

type rulesData struct {
	MaxDesired     int        `json:"maxDesired"`
	MaxEvents      int        `json:"maxEvents"`
	MaxObjectBytes int        `json:"maxObjectBytes"`
	MaxReasonBytes int        `json:"maxReasonBytes"`
	MaxNameBytes   int        `json:"maxNameBytes"`
	Reserved       []kindRule `json:"reserved"`
	ClusterScoped  []kindRule `json:"clusterScoped"`
}

var rules = func() rulesData {
	var r rulesData
	if err := json.Unmarshal(rulesJSON, &r); err != nil {
		panic(fmt.Sprintf("operontest: rules.json: %v", err))
	}
	return r
}()

// Refused is an outcome the host would refuse before writing anything:
// Reconcile returns it, naming the rule, as operon test fails the fixture.
type Refused struct {
	Message string
}

func (r *Refused) Error() string {
	return "outcome refused, nothing written: " + r.Message + " (the host checks this before writing)"
}

func refused(format string, args ...any) *Refused {
	return &Refused{Message: fmt.Sprintf(format, args...)}
}

func validName(name string) bool {
	if name == "" || len(name) > rules.MaxNameBytes {
		return false
	}
	for _, b := range []byte(name) {
		if !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '.') {
			return false
		}
	}
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
	return alnum(name[0]) && alnum(name[len(name)-1])
}

func jsonLen(v any) int {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return int(^uint(0) >> 1)
	}
	return buf.Len() - 1 // Encode adds a newline
}

// CheckOutcome makes the host's checks of an outcome (operon test's, with
// the policy of `operon run --module`: what the manifest owns, any
// namespace, cluster-scoped kinds allowed, no adoption). children are the
// parent's own; cluster holds the other objects a child could be written
// over.
func CheckOutcome(manifest operon.Manifest, parent operon.Object, children, cluster []operon.Object, outcome operon.RawOutcome) *Refused {
	if at := outcome.RequeueAt; at != nil {
		if _, err := time.Parse(time.RFC3339Nano, *at); err != nil {
			return refused("requeue-at %q is not an RFC 3339 time such as 2026-01-01T00:00:00Z (%v)", *at, err)
		}
	}
	if len(outcome.Desired) > rules.MaxDesired {
		return refused("%d desired objects exceed the limit of %d per outcome (the host's --max-children-per-outcome)", len(outcome.Desired), rules.MaxDesired)
	}
	if len(outcome.Events) > rules.MaxEvents {
		return refused("%d events exceed the limit of %d per outcome (the host's --max-events-per-outcome)", len(outcome.Events), rules.MaxEvents)
	}
	owns := []string{}
	for _, k := range manifest.Owns {
		owns = append(owns, operon.KindString(k))
	}
	ownsText := strings.Join(owns, ", ")
	if len(owns) == 0 {
		ownsText = "none"
	}
	parentNs := parent.Namespace()
	uid := parent.String("metadata", "uid")
	owner := map[string]any{
		"apiVersion": parent.String("apiVersion"), "kind": parent.String("kind"), "name": parent.Name(),
		"uid": uid, "controller": true, "blockOwnerDeletion": true,
	}
	if uid == "" {
		owner["uid"] = nil
	}
	type key struct{ kind, ns, name string }
	seen := map[key]bool{}
	var checked []struct {
		kind     operon.GVK
		ns, name string
	}
	for i, text := range outcome.Desired {
		object, err := operon.ParseObject([]byte(text))
		if err != nil || object.String("apiVersion") == "" || object.String("kind") == "" {
			return refused("desired[%d] lacks apiVersion or kind", i)
		}
		kind := object.GVK()
		name := object.Name()
		what := fmt.Sprintf("desired[%d] (%s %s)", i, operon.KindString(kind), name)
		for _, r := range rules.Reserved {
			if r.matches(kind) {
				return refused("%s: %s may never be written by a plugin (%s)", what, operon.KindString(kind), r.Why)
			}
		}
		owned := false
		for _, k := range manifest.Owns {
			owned = owned || k == kind
		}
		if !owned {
			return refused("%s: kind %s is not among the kinds %s may write (%s)", what, operon.KindString(kind), manifest.Name, ownsText)
		}
		if !validName(name) {
			return refused("%s: metadata.name must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; at most 253)", what)
		}
		clusterScoped := false
		for _, r := range rules.ClusterScoped {
			clusterScoped = clusterScoped || r.matches(kind)
		}
		childNs := object.Namespace()
		ns := ""
		switch {
		case !clusterScoped && parentNs != "":
			if childNs != "" && childNs != parentNs {
				return refused("%s: namespace %q differs from the parent's %q; children live in their parent's namespace", what, childNs, parentNs)
			}
			ns = parentNs
		case !clusterScoped:
			// Any namespace is granted offline.
			if childNs == "" {
				return refused("%s: a namespaced child of a cluster-scoped parent needs metadata.namespace", what)
			}
			ns = childNs
		case parentNs != "":
			return refused("%s: %s is cluster-scoped and cannot be owned by a namespaced parent", what, operon.KindString(kind))
		}
		k := key{operon.KindString(kind), ns, name}
		if seen[k] {
			return refused("%s: returned twice", what)
		}
		seen[k] = true
		meta, _ := object["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			object["metadata"] = meta
		}
		for _, field := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation", "selfLink", "deletionTimestamp"} {
			delete(meta, field)
		}
		if ns != "" {
			meta["namespace"] = ns
		}
		meta["ownerReferences"] = []any{owner}
		if size := jsonLen(object); size > rules.MaxObjectBytes {
			return refused("%s: %d bytes exceeds the %d-byte object limit", what, size, rules.MaxObjectBytes)
		}
		checked = append(checked, struct {
			kind     operon.GVK
			ns, name string
		}{kind, ns, name})
	}
	for i, e := range outcome.Events {
		if e.Reason == "" || len(e.Reason) > rules.MaxReasonBytes {
			return refused("events[%d]: reason must be 1-%d characters", i, rules.MaxReasonBytes)
		}
	}
	if m := outcome.ParentMetadata; m != nil {
		for _, set := range []struct {
			what  string
			pairs [][2]string
		}{{"label", m.Labels}, {"annotation", m.Annotations}} {
			for _, kv := range set.pairs {
				if strings.HasPrefix(kv[0], "operon.dev/") {
					return refused("parent-metadata sets the %s %q: operon.dev keys are the host's", set.what, kv[0])
				}
			}
		}
	}
	is := func(o operon.Object, kind operon.GVK, ns, name string) bool {
		return o.GVK() == kind && o.Name() == name && (o.Namespace() == "" || o.Namespace() == ns)
	}
	for _, c := range checked {
		mine := false
		for _, o := range children {
			mine = mine || is(o, c.kind, c.ns, c.name)
		}
		if mine {
			continue
		}
		for _, o := range cluster {
			if !is(o, c.kind, c.ns, c.name) {
				continue
			}
			at := c.name
			if c.ns != "" {
				at = c.ns + "/" + c.name
			}
			owners, _ := o.Lookup("metadata", "ownerReferences")
			list, _ := owners.([]any)
			var controller map[string]any
			for _, ref := range list {
				if r, ok := ref.(map[string]any); ok && r["controller"] == true {
					controller = r
					break
				}
			}
			switch {
			case controller == nil:
				return refused("%s %s exists without a controller owner; adopting it needs spec.grants.adopt: true (or delete it, or rename the child)", c.kind.Kind, at)
			case controller["uid"] != uid:
				return refused("%s %s exists and is controlled by %v %v; it is never taken over (rename the child, or delete the other owner)", c.kind.Kind, at, controller["kind"], controller["name"])
			}
			break
		}
	}
	return nil
}
