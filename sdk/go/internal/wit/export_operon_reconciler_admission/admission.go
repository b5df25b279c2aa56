//go:build wasip1

package export_operon_reconciler_admission

import (
	witTypes "go.bytecodealliance.org/pkg/wit/types"

	"operon.dev/sdk/go/internal/abi"
	guest "operon.dev/sdk/go/internal/wit/export_operon_reconciler_guest"
	admission "operon.dev/sdk/go/internal/wit/operon_reconciler_admission"
)

const notExported = "operon: operon.toml says the world exports admission but the exported reconciler implements neither operon.Validator nor operon.Mutator"

// Validate is the `validate` export. A reconciler without a Validate method
// allows every request.
func Validate(review admission.Review) witTypes.Result[[]string, admission.Denial] {
	if abi.Exports.Validate == nil {
		if abi.Exports.Mutate == nil {
			panic(notExported)
		}
		return witTypes.Ok[[]string, admission.Denial](nil)
	}
	warnings, denial := abi.Exports.Validate(guest.Host, reviewIn(review))
	if denial != nil {
		return witTypes.Err[[]string](denialOut(denial))
	}
	return witTypes.Ok[[]string, admission.Denial](warnings)
}

// Mutate is the `mutate` export. A reconciler without a Mutate method
// leaves every object as it is.
func Mutate(review admission.Review) witTypes.Result[witTypes.Option[string], admission.Denial] {
	if abi.Exports.Mutate == nil {
		if abi.Exports.Validate == nil {
			panic(notExported)
		}
		return witTypes.Ok[witTypes.Option[string], admission.Denial](witTypes.None[string]())
	}
	object, denial := abi.Exports.Mutate(guest.Host, reviewIn(review))
	if denial != nil {
		return witTypes.Err[witTypes.Option[string]](denialOut(denial))
	}
	if object == nil {
		return witTypes.Ok[witTypes.Option[string], admission.Denial](witTypes.None[string]())
	}
	return witTypes.Ok[witTypes.Option[string], admission.Denial](witTypes.Some(*object))
}

func reviewIn(r admission.Review) abi.Review {
	return abi.Review{
		UID:         r.Uid,
		Operation:   abi.Operation(r.Operation),
		Kind:        guest.GVKIn(r.Kind),
		SubResource: optionIn(r.SubResource),
		Namespace:   optionIn(r.Namespace),
		Name:        r.Name,
		Object:      optionIn(r.Object),
		OldObject:   optionIn(r.OldObject),
		UserInfo:    abi.UserInfo{Username: r.UserInfo.Username, UID: r.UserInfo.Uid, Groups: r.UserInfo.Groups},
		DryRun:      r.DryRun,
	}
}

func optionIn(o witTypes.Option[string]) *string {
	if o.IsNone() {
		return nil
	}
	s := o.Some()
	return &s
}

func denialOut(d *abi.Denial) admission.Denial {
	code := witTypes.None[uint16]()
	if d.Code != 0 {
		code = witTypes.Some(d.Code)
	}
	return admission.Denial{Message: d.Message, Code: code}
}
