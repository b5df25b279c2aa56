package operon

import (
	"fmt"
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
	// clock readings, so an unchanged cluster gives an unchanged status.
	Status any
	// Events to record on the parent.
	Events []Event
	// RequeueAfter reconciles again after this delay even if nothing
	// changes (to poll something outside the cluster); 0 means no requeue,
	// as in controller-runtime. The host raises values under its floor
	// (100 ms by default) to the floor.
	RequeueAfter time.Duration
	// Finalized says clean-up is complete: the host may remove the
	// finalizer. Only meaningful when [Request.Finalizing].
	Finalized bool
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

// Finalize says clean-up is complete.
func (o *Outcome) Finalize() *Outcome {
	o.Finalized = true
	return o
}

// toRaw serializes the outcome into the WIT record.
//
// Errors are terminal: a desired object or the status does not marshal to
// a JSON object, or a desired object has no apiVersion or kind.
func (o *Outcome) toRaw() (RawOutcome, error) {
	out := RawOutcome{Desired: make([]string, 0, len(o.Desired)), Events: o.Events, Finalized: o.Finalized}
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
		text, err := marshal(o.Status)
		if err != nil {
			return out, Terminalf("cannot serialize the status: %v", err)
		}
		if len(text) == 0 || text[0] != '{' {
			return out, Terminalf("the status must serialize to a JSON object, not %.40s", text)
		}
		s := string(text)
		out.Status = &s
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
