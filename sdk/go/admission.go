package operon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"operon.dev/sdk/go/internal/abi"
)

// Validator is implemented by a reconciler that also validates its parent
// kind (a validating admission webhook, served by the host when operon.toml
// says world = "reconciler-with-admission" or
// "reconciler-with-admission-and-conversion").
type Validator interface {
	// Validate accepts the request (nil error, with warnings kubectl prints)
	// or refuses it: return [Deny] or [DenyCode]; any other error refuses it
	// with its text. Must be deterministic and free of side effects.
	Validate(ctx context.Context, review *Review) (warnings []string, err error)
}

// Mutator is implemented by a reconciler that also defaults its parent kind
// (a mutating admission webhook).
type Mutator interface {
	// Mutate returns the whole object as it should be stored, or nil to
	// leave it as it is. The host computes the patch and refuses one that
	// touches apiVersion, kind, metadata.name or metadata.namespace. Errors
	// refuse the request, as for Validate.
	Mutate(ctx context.Context, review *Review) (object any, err error)
}

// Operation is what an admission request does to the object.
type Operation = abi.Operation

// The admission operations.
const (
	Create  = abi.OperationCreate
	Update  = abi.OperationUpdate
	Delete  = abi.OperationDelete
	Connect = abi.OperationConnect
)

// UserInfo is who is asking, as the API server authenticated them.
type UserInfo = abi.UserInfo

// Review is one admission request.
type Review struct {
	// UID is the AdmissionReview's request UID (for logs).
	UID       string
	Operation Operation
	// Kind is the kind of the object, as the request names it.
	Kind GVK
	// SubResource is set when the request is for one (`scale`, ...).
	SubResource string
	// Namespace is empty for cluster-scoped kinds.
	Namespace string
	// Name may be empty on create with generateName.
	Name string
	// Object is the object as it would be stored; nil for Delete.
	Object json.RawMessage
	// OldObject is the object as it is stored now; for Update and Delete.
	OldObject json.RawMessage
	UserInfo  UserInfo
	// DryRun is true when the request will not be persisted.
	DryRun bool
}

// DecodeObject unmarshals the review's object into v (an [Object] keeps
// every field; a struct of yours keeps only its own).
func (r *Review) DecodeObject(v any) error {
	if r.Object == nil {
		return fmt.Errorf("the %s request carries no object", operationName(r.Operation))
	}
	if o, ok := v.(*Object); ok {
		parsed, err := ParseObject(r.Object)
		*o = parsed
		return err
	}
	return json.Unmarshal(r.Object, v)
}

func operationName(op Operation) string {
	switch op {
	case Create:
		return "create"
	case Update:
		return "update"
	case Delete:
		return "delete"
	default:
		return "connect"
	}
}

// Denial refuses an admission request. It is an error: return it from
// Validate or Mutate.
type Denial struct {
	// Message is shown to the user by kubectl, prefixed by the plugin's name.
	Message string
	// Code is the HTTP status code; 0 means 403 (Forbidden).
	Code uint16
}

func (d *Denial) Error() string { return d.Message }

// Deny refuses a request with a message (HTTP 403).
func Deny(format string, args ...any) error {
	return &Denial{Message: fmt.Sprintf(format, args...)}
}

// DenyCode refuses a request with an HTTP status code.
func DenyCode(code uint16, format string, args ...any) error {
	return &Denial{Message: fmt.Sprintf(format, args...), Code: code}
}

func reviewFromRaw(r RawReview) *Review {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	raw := func(p *string) json.RawMessage {
		if p == nil {
			return nil
		}
		return json.RawMessage(*p)
	}
	return &Review{
		UID: r.UID, Operation: r.Operation, Kind: r.Kind, SubResource: str(r.SubResource),
		Namespace: str(r.Namespace), Name: r.Name, Object: raw(r.Object), OldObject: raw(r.OldObject),
		UserInfo: r.UserInfo, DryRun: r.DryRun,
	}
}

func denial(err error) *RawDenial {
	var d *Denial
	if errors.As(err, &d) {
		return &RawDenial{Message: d.Message, Code: d.Code}
	}
	return &RawDenial{Message: err.Error()}
}
