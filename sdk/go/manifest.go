package operon

import "operon.dev/sdk/go/internal/abi"

// Manifest describes a reconciler to the host: its name, the kind it
// reconciles, the kinds it owns, watches and reads, and its finalizer.
// Write it as a struct literal:
//
//	operon.Manifest{
//		Name:      "webapp",
//		For:       operon.Kind("example.operon.dev/v1alpha1", "WebApp"),
//		Owns:      []operon.GVK{operon.DeploymentKind, operon.ServiceKind},
//		Finalizer: "example.operon.dev/cleanup",
//	}
//
// Name is lowercase `[a-z0-9-]`: it names the field manager
// (`operon/<name>`), metrics and events. The host hands existing children
// in the order of Owns and prunes the ones an outcome no longer returns. An
// empty Finalizer means none; with one, a deleted parent is reconciled with
// [Request.Finalizing] until the outcome is Finalized.
type Manifest = abi.Manifest

// Watch declares a kind whose changes reconcile the parent its Mapping
// points at; the mapped objects arrive in [Request.Related].
type Watch = abi.Watch

// Mapping says how a watched object names its parent; build one with
// [ByLabel], [ByAnnotation] or [AllInNamespace].
type Mapping = abi.Mapping

// ByLabel maps a watched object to the parent named by its label `name`,
// in the watched object's namespace.
func ByLabel(name string) Mapping { return Mapping{Kind: abi.MappingLabel, Name: name} }

// ByAnnotation maps a watched object to the parent its annotation `name`
// holds (`namespace/name`, or `name` in the watched object's namespace).
func ByAnnotation(name string) Mapping { return Mapping{Kind: abi.MappingAnnotation, Name: name} }

// AllInNamespace maps a watched object to every parent in its namespace
// (a fan-out: for small kinds such as a shared ConfigMap).
func AllInNamespace() Mapping { return Mapping{Kind: abi.MappingAllInNamespace} }
