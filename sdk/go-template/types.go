package main

// The Greeting's spec and status as the reconciler reads and writes them.
// Their comments and `+kubebuilder` markers are the CRD's schema: `operon
// build` generates crd.yaml from them (with api.go) through controller-gen.

// GreetingSpec is what a Greeting asks for.
type GreetingSpec struct {
	// The text to publish in the ConfigMap <name>-greeting.
	Message string `json:"message"`
}

// GreetingStatus is what the reconciler reports.
type GreetingStatus struct {
	// The generation of the Greeting this status describes.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Whether the ConfigMap exists.
	Published bool `json:"published"`
}
