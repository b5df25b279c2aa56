//go:build operon_crd

// The kind as controller-gen reads it, as kubebuilder writes it: `operon
// build` generates crd.yaml from this file and the types it names
// (types.go). It is built only with the operon_crd tag, so the component
// never links Kubernetes' own packages.

// +groupName=demo.operon.dev
// +versionName=v1alpha1
package main

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Greeting wants a ConfigMap holding its message.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name=Message,type=string,JSONPath=.spec.message
// +kubebuilder:printcolumn:name=Published,type=boolean,JSONPath=.status.published
type Greeting struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GreetingSpec   `json:"spec"`
	Status GreetingStatus `json:"status,omitempty"`
}
