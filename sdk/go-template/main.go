// Command {{name}} is an Operon reconciler: a Greeting
// (demo.operon.dev/v1alpha1, see crd.yaml) wants a ConfigMap
// `<name>-greeting` holding spec.message, and reports in its status whether
// that ConfigMap exists.
//
// `operon build` compiles this package for GOOS=wasip1 into a component;
// `go test` runs it natively; `operon test` runs fixtures/ through the
// component.
package main

import (
	"context"

	operon "operon.dev/sdk/go"
)

// Greeter reconciles Greetings.
type Greeter struct{}

// Greeting is the custom resource: only the fields this reconciler reads.
type Greeting struct {
	Spec struct {
		Message string `json:"message"`
	} `json:"spec"`
}

// GreetingStatus is what the reconciler reports.
type GreetingStatus struct {
	ObservedGeneration int64 `json:"observedGeneration"`
	Published          bool  `json:"published"`
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
	var greeting Greeting
	if err := req.Decode(&greeting); err != nil {
		return nil, err
	}
	if greeting.Spec.Message == "" {
		// Retrying cannot help: wait until the Greeting changes.
		return nil, operon.Terminalf("spec.message must not be empty")
	}
	name := req.Name() + "-greeting"
	configMap := operon.NewObject(operon.ConfigMapKind, name)
	configMap["data"] = map[string]string{"message": greeting.Spec.Message}
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
