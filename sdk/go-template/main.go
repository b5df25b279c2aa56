// Command {{name}} is an Operon reconciler: a Greeting
// (demo.operon.dev/v1alpha1, see crd.yaml) wants a ConfigMap
// `<name>-greeting` holding spec.message, and reports in its status whether
// that ConfigMap exists.
//
// `operon build` compiles this package for GOOS=wasip1 into a component
// (and generates crd.yaml from types.go and api.go with controller-gen);
// `go test` runs it natively; `operon test` runs fixtures/ through the
// component.
package main

import (
	"context"

	operon "operon.dev/sdk/go"
)

// Greeter reconciles Greetings.
type Greeter struct{}

// parent is the part of a Greeting this reconciler reads (types.go; the
// whole kind, for the CRD, is in api.go).
type parent struct {
	Spec GreetingSpec `json:"spec"`
}

// Manifest names the reconciler and the kinds it reconciles and owns.
func (Greeter) Manifest() operon.Manifest {
	return operon.Manifest{
		Name: "{{name}}",
		For:  operon.Kind("demo.operon.dev/v1alpha1", "Greeting"),
		Owns: []operon.GVK{operon.ConfigMapKind},
	}
}

// Reconcile wants the ConfigMap and reports whether it exists. It reads
// only the request (no clock, no state): the host may call it any number of
// times.
func (Greeter) Reconcile(ctx context.Context, req *operon.Request) (*operon.Outcome, error) {
	var object parent
	if err := req.Decode(&object); err != nil {
		return nil, err
	}
	if object.Spec.Message == "" {
		// Retrying cannot help: wait until the Greeting changes.
		return nil, operon.Terminalf("spec.message must not be empty")
	}
	name := req.Name() + "-greeting"
	configMap := operon.NewObject(operon.ConfigMapKind, name)
	configMap["data"] = map[string]string{"message": object.Spec.Message}
	operon.Logger(ctx).Debug("publishing", "configmap", name)
	return operon.NewOutcome().
		Apply(configMap).
		SetStatus(GreetingStatus{
			ObservedGeneration: req.Meta.Generation,
			Published:          req.HasChild(operon.ConfigMapKind, name),
		}), nil
}

func init() { operon.Export(Greeter{}) }

// main is required by Go and never called: the component is a library
// whose exports the host calls.
func main() {}
