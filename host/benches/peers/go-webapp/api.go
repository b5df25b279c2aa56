package main

// The WebApp custom resource (example.operon.dev/v1alpha1), as in
// guest-examples/webapp/crd.yaml: typed structs, as kubebuilder's
// `api/v1alpha1/webapp_types.go` would hold them. DeepCopy is written out by
// hand (what controller-gen would generate), so the build needs no
// generator.

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	crscheme "sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion of the WebApp kind.
var GroupVersion = schema.GroupVersion{Group: "example.operon.dev", Version: "v1alpha1"}

// SchemeBuilder registers the WebApp types.
var SchemeBuilder = &crscheme.Builder{GroupVersion: GroupVersion}

func init() {
	SchemeBuilder.Register(&WebApp{}, &WebAppList{})
}

// WebApp is a web application: an image served by a Deployment, a Service
// in front of it and, optionally, an Ingress.
type WebApp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WebAppSpec    `json:"spec"`
	Status *WebAppStatus `json:"status,omitempty"`
}

// WebAppList is a list of WebApps.
type WebAppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WebApp `json:"items"`
}

// WebAppSpec is what the user wants. The CRD defaults replicas (1), port
// (8080) and env ([]); the accessors apply the same defaults for objects that
// did not go through the API server.
type WebAppSpec struct {
	Image    string       `json:"image"`
	Replicas *int32       `json:"replicas,omitempty"`
	Port     *int32       `json:"port,omitempty"`
	Env      []EnvVar     `json:"env,omitempty"`
	Ingress  *IngressSpec `json:"ingress,omitempty"`

	// unfit is why the decoded spec does not fit the type, worded as serde
	// words it in the Rust guest ("missing field `image`"); "" when it fits.
	// Check reports it. See UnmarshalJSON.
	unfit string
}

// UnmarshalJSON decodes a spec as encoding/json does, noting what the
// guests refuse while reading it rather than while validating it: a null
// spec ("missing field `spec`", as serde reads `spec: null`), a missing
// image ("missing field `image`") and a null one. The CRD's schema refuses
// all three before they are stored, so only fixtures show them; a field of
// another wrong type fails the decoding, as it does for any typed client.
func (s *WebAppSpec) UnmarshalJSON(text []byte) error {
	if string(text) == "null" {
		*s = WebAppSpec{unfit: "missing field `spec`"}
		return nil
	}
	type fields WebAppSpec // the same fields, without this method
	var spec struct {
		fields
		Image json.RawMessage `json:"image"` // the shallower field wins
	}
	if err := json.Unmarshal(text, &spec); err != nil {
		return err
	}
	*s = WebAppSpec(spec.fields)
	switch string(spec.Image) {
	case "":
		s.unfit = "missing field `image`"
	case "null":
		s.unfit = "invalid type: null, expected a string"
	default:
		return json.Unmarshal(spec.Image, &s.Image)
	}
	return nil
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// IngressSpec is spec.ingress.
type IngressSpec struct {
	Host      string  `json:"host"`
	Path      *string `json:"path,omitempty"`
	ClassName *string `json:"className,omitempty"`
}

// WebAppStatus is what the reconciler last reported. Every field is always
// written, as the Rust guest writes them.
type WebAppStatus struct {
	ObservedGeneration int64       `json:"observedGeneration"`
	ReadyReplicas      int32       `json:"readyReplicas"`
	Conditions         []Condition `json:"conditions"`
}

// Condition is a metav1.Condition whose lastTransitionTime stays text, as
// in both guests (rust-webapp's webapp.rs, go-webapp's status.go): a kept
// time round-trips exactly, and a new one is written as the host writes
// request.now (milliseconds, `2026-11-20T10:01:31.000Z`), which
// metav1.Time would cut to seconds. observedGeneration is always written,
// 0 included.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
}

// ReplicasOrDefault is spec.replicas, 1 when unset.
func (s *WebAppSpec) ReplicasOrDefault() int32 {
	if s.Replicas == nil {
		return 1
	}
	return *s.Replicas
}

// PortOrDefault is spec.port, 8080 when unset.
func (s *WebAppSpec) PortOrDefault() int32 {
	if s.Port == nil {
		return 8080
	}
	return *s.Port
}

// DeepCopyInto copies the receiver into out.
func (in *WebApp) DeepCopyInto(out *WebApp) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	if in.Status != nil {
		out.Status = new(WebAppStatus)
		in.Status.DeepCopyInto(out.Status)
	}
}

// DeepCopy copies the receiver.
func (in *WebApp) DeepCopy() *WebApp {
	if in == nil {
		return nil
	}
	out := new(WebApp)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *WebApp) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

// DeepCopyInto copies the receiver into out.
func (in *WebAppList) DeepCopyInto(out *WebAppList) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]WebApp, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (in *WebAppList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(WebAppList)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies the receiver into out.
func (in *WebAppSpec) DeepCopyInto(out *WebAppSpec) {
	*out = *in
	if in.Replicas != nil {
		out.Replicas = new(int32)
		*out.Replicas = *in.Replicas
	}
	if in.Port != nil {
		out.Port = new(int32)
		*out.Port = *in.Port
	}
	if in.Env != nil {
		out.Env = make([]EnvVar, len(in.Env))
		copy(out.Env, in.Env)
	}
	if in.Ingress != nil {
		out.Ingress = new(IngressSpec)
		*out.Ingress = *in.Ingress
		if in.Ingress.Path != nil {
			out.Ingress.Path = new(string)
			*out.Ingress.Path = *in.Ingress.Path
		}
		if in.Ingress.ClassName != nil {
			out.Ingress.ClassName = new(string)
			*out.Ingress.ClassName = *in.Ingress.ClassName
		}
	}
}

// DeepCopyInto copies the receiver into out.
func (in *WebAppStatus) DeepCopyInto(out *WebAppStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]Condition, len(in.Conditions))
		for i := range in.Conditions {
			out.Conditions[i] = in.Conditions[i]
			if g := in.Conditions[i].ObservedGeneration; g != nil {
				out.Conditions[i].ObservedGeneration = new(int64)
				*out.Conditions[i].ObservedGeneration = *g
			}
		}
	}
}
