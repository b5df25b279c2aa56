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
// in the order of Owns and prunes the ones an outcome no longer returns.
// Updates sets a strategy per owned kind ([OwnedUpdate]). An empty
// Finalizer means none; with one, the host keeps it on the parents whose
// outcome needs it ([Outcome.NeedsFinalizer], true by default), and a
// parent carrying it that is deleted or leaves the Reconciler's selector is
// reconciled with [Request.Finalizing] until the outcome is Finalized.
type Manifest = abi.Manifest

// Watch declares a kind whose changes reconcile the parent its Mapping
// points at; the mapped objects arrive in [Request.Related].
type Watch = abi.Watch

// Mapping says how a watched object names its parent; build one with
// [ByLabel], [ByAnnotation], [AllInNamespace], [ByReference] or
// [BySelector].
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

// ByReference maps a watched object to the parents whose field at path
// (dotted, e.g. `spec.configRef`) names it: `name` (the parent's
// namespace) or `namespace/name`. The host indexes these references, so an
// event reconciles exactly the parents naming the object, which they find
// in [Request.Related].
func ByReference(path string) Mapping { return Mapping{Kind: abi.MappingReference, Name: path} }

// BySelector maps a watched object to the parents whose field at path
// (e.g. `spec.selector`) is a label selector — a LabelSelector
// (`matchLabels`, `matchExpressions`) or a plain map of labels — matching
// its labels before or after the change; the matching objects, in the
// parent's namespace, are in [Request.Related]. A missing or empty
// selector selects nothing.
func BySelector(path string) Mapping { return Mapping{Kind: abi.MappingSelector, Name: path} }

// OwnedUpdate sets how the host changes an existing child of one owned
// kind (Manifest.Updates); kinds not listed are updated in place.
type OwnedUpdate = abi.OwnedUpdate

// UpdateStrategy is how the host changes an existing child whose desired
// form changed.
type UpdateStrategy = abi.UpdateStrategy

// The update strategies.
const (
	// UpdateInPlace server-side applies over the child (the default): a
	// change to an immutable field fails the reconcile.
	UpdateInPlace = abi.UpdateInPlace
	// UpdateRecreate server-side applies, and when the API server refuses
	// because a field is immutable (a Job's template, a Pod's spec)
	// deletes the child and creates it anew on the next reconcile.
	UpdateRecreate = abi.UpdateRecreate
	// UpdateOnDelete never changes an existing child: only missing ones
	// are created (delete one to have it replaced).
	UpdateOnDelete = abi.UpdateOnDelete
)
