package operon

import (
	"fmt"
	"sort"
	"time"

	"operon.dev/sdk/go/internal/abi"
)

// Event is an event to record on the parent (events.k8s.io/v1): Normal,
// or Warning when Warning is set. Reason is short UpperCamelCase
// (`Scaled`), Message is for humans.
type Event = abi.Event

// Outcome is what a reconcile wants: the children that should exist, the
// parent's new status, events, when to run again and, while finalizing,
// whether clean-up is done. It is the whole truth for the parent: children
// that exist but are not in Desired are deleted.
//
// Fill the fields, or chain the methods:
//
//	return operon.NewOutcome().
//		Apply(configMap).
//		SetStatus(status).
//		Eventf("Published", "wrote configmap %s", name), nil
type Outcome struct {
	// Desired holds every child that should exist: values that marshal to
	// a JSON object with `apiVersion`, `kind` and `metadata.name` (an
	// [Object], a struct of yours). The host sets the namespace to the
	// parent's when it is missing, adds the controller ownerReference and
	// server-side applies them. Their kinds must be in Manifest.Owns.
	Desired []any
	// Status is the parent's new `status` (a value that marshals to a JSON
	// object), or nil to leave it untouched. Keep it deterministic: no
	// clock readings (use [Request.Now]), so an unchanged cluster gives an
	// unchanged status. The host sets `observedGeneration` to the parent's
	// `metadata.generation` unless it is set.
	Status any
	// Events to record on the parent.
	Events []Event
	// RequeueAfter reconciles again after this delay even if nothing
	// changes (to poll something outside the cluster); 0 means no requeue,
	// as in controller-runtime. The host raises values under its floor
	// (100 ms by default) to the floor.
	RequeueAfter time.Duration
	// RequeueTime reconciles again at this time even if nothing changes
	// (schedules, expiries, TTLs); the zero time means none. It is
	// measured from [Request.Now]: a time already past means the host's
	// floor. With RequeueAfter too, the earlier wins.
	RequeueTime time.Time
	// Finalized says clean-up is complete: the host may remove the
	// finalizer. Only meaningful when [Request.Finalizing].
	Finalized bool
	// NeedsFinalizer says whether the parent needs clean-up when it is
	// deleted: the host keeps Manifest.Finalizer on it while true (adding
	// it now) and releases it when false. Nil means the default: true when
	// the manifest has a finalizer, except in an answer to a finalizing
	// request (false there); false without a manifest finalizer.
	NeedsFinalizer *bool
	// ParentMetadata is the set of labels and annotations to keep on the
	// parent (written with server-side apply under the plugin's field
	// manager: a key no longer returned is removed, others' keys are left
	// alone), or nil to leave the parent's metadata alone. Keys under
	// `operon.dev/`, and labels the Reconciler's selector reads, refuse the
	// outcome.
	ParentMetadata *ParentMetadata
}

// ParentMetadata is the labels and annotations a reconciler keeps on its
// parent (a decorator's marks).
type ParentMetadata struct {
	Labels      map[string]string
	Annotations map[string]string
}

// NewOutcome returns an outcome that wants nothing: no children (every
// existing one is deleted), status untouched, no events.
func NewOutcome() *Outcome { return &Outcome{} }

// Apply adds desired children.
func (o *Outcome) Apply(objects ...any) *Outcome {
	o.Desired = append(o.Desired, objects...)
	return o
}

// SetStatus sets the parent's new status.
func (o *Outcome) SetStatus(status any) *Outcome {
	o.Status = status
	return o
}

// Eventf records a Normal event.
func (o *Outcome) Eventf(reason, format string, args ...any) *Outcome {
	o.Events = append(o.Events, Event{Reason: reason, Message: fmt.Sprintf(format, args...)})
	return o
}

// Warningf records a Warning event.
func (o *Outcome) Warningf(reason, format string, args ...any) *Outcome {
	o.Events = append(o.Events, Event{Warning: true, Reason: reason, Message: fmt.Sprintf(format, args...)})
	return o
}

// Requeue reconciles again after delay.
func (o *Outcome) Requeue(delay time.Duration) *Outcome {
	o.RequeueAfter = delay
	return o
}

// RequeueAt reconciles again at t.
func (o *Outcome) RequeueAt(t time.Time) *Outcome {
	o.RequeueTime = t
	return o
}

// SetNeedsFinalizer says whether the parent needs the manifest's finalizer
// (see [Outcome.NeedsFinalizer] for the default).
func (o *Outcome) SetNeedsFinalizer(needs bool) *Outcome {
	o.NeedsFinalizer = &needs
	return o
}

// SetParentMetadata keeps labels and annotations on the parent (nil maps
// are empty: the keys this reconciler set before are removed).
func (o *Outcome) SetParentMetadata(labels, annotations map[string]string) *Outcome {
	o.ParentMetadata = &ParentMetadata{Labels: labels, Annotations: annotations}
	return o
}

// Finalize says clean-up is complete.
func (o *Outcome) Finalize() *Outcome {
	o.Finalized = true
	return o
}

// toRaw serializes the outcome into the WIT record; needsFinalizer is the
// default of NeedsFinalizer.
//
// Errors are terminal: a desired object or the status does not marshal to
// a JSON object, or a desired object has no apiVersion or kind.
func (o *Outcome) toRaw(needsFinalizer bool) (RawOutcome, error) {
	out := RawOutcome{Desired: make([]string, 0, len(o.Desired)), Events: o.Events, Finalized: o.Finalized, NeedsFinalizer: needsFinalizer}
	if o.NeedsFinalizer != nil {
		out.NeedsFinalizer = *o.NeedsFinalizer
	}
	if !o.RequeueTime.IsZero() {
		at := o.RequeueTime.UTC().Format(time.RFC3339Nano)
		out.RequeueAt = &at
	}
	if m := o.ParentMetadata; m != nil {
		out.ParentMetadata = &abi.ParentMetadata{Labels: sortedPairs(m.Labels), Annotations: sortedPairs(m.Annotations)}
	}
	for _, d := range o.Desired {
		text, err := marshal(d)
		if err != nil {
			return out, Terminalf("cannot serialize a desired object: %v", err)
		}
		head, err := ParseObject(text)
		if err != nil {
			return out, Terminalf("a desired object must serialize to a JSON object, not %.40s", text)
		}
		for _, field := range []string{"apiVersion", "kind"} {
			if head.String(field) == "" {
				name := head.Name()
				if name == "" {
					name = "<unnamed>"
				}
				return out, Terminalf("desired object %s has no %s", name, field)
			}
		}
		out.Desired = append(out.Desired, string(text))
	}
	if o.Status != nil {
		status, err := statusText(o.Status)
		if err != nil {
			return out, err
		}
		out.Status = &status
	}
	if o.RequeueAfter > 0 {
		ms := uint64(o.RequeueAfter / time.Millisecond)
		out.RequeueAfterMs = &ms
	}
	if out.Events == nil {
		out.Events = []Event{}
	}
	return out, nil
}

// statusText serializes a status, which must be a JSON object.
func statusText(status any) (string, error) {
	text, err := marshal(status)
	if err != nil {
		return "", Terminalf("cannot serialize the status: %v", err)
	}
	if len(text) == 0 || text[0] != '{' {
		return "", Terminalf("the status must serialize to a JSON object, not %.40s", text)
	}
	return string(text), nil
}

// sortedPairs are m's entries sorted by key, so the outcome is the same on
// every call (Go's map order is random).
func sortedPairs(m map[string]string) [][2]string {
	out := make([][2]string, 0, len(m))
	for k, v := range m {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}
