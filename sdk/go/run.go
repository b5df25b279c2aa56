package operon

import (
	"context"
	"fmt"

	"operon.dev/sdk/go/internal/abi"
)

// The records of the WIT contract, as they cross the component boundary:
// the input and output of [Run]. Reconcilers rarely need them.
type (
	// RawRequest is the WIT `request`.
	RawRequest = abi.Request
	// RawOutcome is the WIT `outcome`.
	RawOutcome = abi.Outcome
	// RawFailure is the WIT `failure`.
	RawFailure = abi.Failure
	// Children are the existing children of one owned kind.
	Children = abi.Children
	// RawChild is the WIT `child`: one existing child as JSON text, with
	// its readiness.
	RawChild = abi.Child
	// RawReview is the WIT admission `review`.
	RawReview = abi.Review
	// RawDenial is the WIT admission `denial`.
	RawDenial = abi.Denial
)

// Run is the one code path from a WIT request to a WIT outcome: it parses
// the request, calls r.Reconcile with host in the context, and serializes
// the outcome. The component's export calls it with the WIT imports;
// operontest calls it with a fake cluster, so what passes natively passes
// in the component.
//
// A panic in Reconcile is not recovered: inside a component it is a trap,
// which the host reports as a failed reconcile.
func Run(host Host, r Reconciler, raw RawRequest) (RawOutcome, *RawFailure) {
	req, err := NewRequest(raw)
	if err != nil {
		return RawOutcome{}, failure(err)
	}
	outcome, err := r.Reconcile(WithHost(context.Background(), host), req)
	if err != nil {
		return RawOutcome{}, failure(err)
	}
	if outcome == nil {
		outcome = NewOutcome()
	}
	// Contract 0.2 adds the finalizer only where an outcome asks for it;
	// asking by default keeps 0.1's behaviour for code that never says.
	needsFinalizer := r.Manifest().Finalizer != "" && !req.Finalizing
	out, err := outcome.toRaw(needsFinalizer)
	if err != nil {
		return RawOutcome{}, failure(err)
	}
	return out, nil
}

func failure(err error) *RawFailure {
	f := &RawFailure{Terminal: IsTerminal(err), Message: err.Error()}
	if status, ok := FailureStatus(err); ok && status != nil {
		text, serr := statusText(status)
		if serr != nil {
			// The status is broken, which retrying will not fix.
			return &RawFailure{Terminal: true, Message: fmt.Sprintf("%s (and its status: %v)", f.Message, serr)}
		}
		f.Status = &text
	}
	return f
}

// RunValidate is the code path of the `validate` export.
func RunValidate(host Host, v Validator, raw RawReview) ([]string, *RawDenial) {
	warnings, err := v.Validate(WithHost(context.Background(), host), reviewFromRaw(raw))
	if err != nil {
		return nil, denial(err)
	}
	if warnings == nil {
		warnings = []string{}
	}
	return warnings, nil
}

// RunMutate is the code path of the `mutate` export: nil means unchanged.
func RunMutate(host Host, m Mutator, raw RawReview) (*string, *RawDenial) {
	object, err := m.Mutate(WithHost(context.Background(), host), reviewFromRaw(raw))
	if err != nil {
		return nil, denial(err)
	}
	if object == nil {
		return nil, nil
	}
	if o, ok := object.(Object); ok && o == nil {
		return nil, nil
	}
	text, err := marshal(object)
	if err != nil {
		return nil, &RawDenial{Message: "cannot serialize the mutated object: " + err.Error(), Code: 500}
	}
	s := string(text)
	return &s, nil
}
