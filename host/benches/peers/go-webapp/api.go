package main

// The WebApp custom resource (example.operon.dev/v1alpha1), as in
// guest-examples/webapp/crd.yaml: typed structs, as kubebuilder's
// `api/v1alpha1/webapp_types.go` would hold them. DeepCopy is written out by
// hand (what controller-gen would generate), so the build needs no
// generator.

import (
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
	ObservedGeneration int64              `json:"observedGeneration"`
	ReadyReplicas      int32              `json:"readyReplicas"`
	Conditions         []metav1.Condition `json:"conditions"`
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
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
}
