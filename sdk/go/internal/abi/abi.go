// Package abi holds the records of the WIT contract as plain Go values, and
// the functions a component exports, registered by [operon.Export].
//
// It sits below both the public package and the wasm glue
// (internal/wit/export_*), so that neither imports the other: the glue
// converts wit-bindgen's types to these, and the public package aliases
// them.
package abi

// GVK is a Kubernetes kind: group (empty for the core group), version, kind.
type GVK struct {
	Group   string
	Version string
	Kind    string
}

// ObjectRef names one object. An empty Namespace means the parent's (for
// namespaced kinds) or none (cluster-scoped).
type ObjectRef struct {
	Kind      GVK
	Namespace string
	Name      string
}

// MappingKind says how a watched object maps to its parent.
type MappingKind uint8

// The three mappings of the WIT `mapping` variant.
const (
	MappingLabel MappingKind = iota
	MappingAnnotation
	MappingAllInNamespace
)

// Mapping is the WIT `mapping` variant.
type Mapping struct {
	Kind MappingKind
	// The label or annotation name (empty for MappingAllInNamespace).
	Name string
}

// Watch is a kind whose changes reconcile the parent Mapping points at.
type Watch struct {
	Kind    GVK
	Mapping Mapping
}

// Manifest is the WIT `reconciler-manifest`. An empty Finalizer means none.
type Manifest struct {
	Name      string
	For       GVK
	Owns      []GVK
	Watches   []Watch
	Reads     []GVK
	Finalizer string
}

// Children are the existing children of one owned kind, as JSON text.
type Children struct {
	Kind    GVK
	Objects []string
}

// Request is the WIT `request`.
type Request struct {
	Object     string
	Children   []Children
	Related    []string
	Finalizing bool
	Attempt    uint32
}

// Event is the WIT `event`.
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// Outcome is the WIT `outcome`. Nil pointers are WIT `none`.
type Outcome struct {
	Desired        []string
	Status         *string
	Events         []Event
	RequeueAfterMs *uint64
	Finalized      bool
}

// Failure is the WIT `failure` variant.
type Failure struct {
	Terminal bool
	Message  string
}

// Level is the WIT `level` enum.
type Level uint8

// Log levels, in the WIT order.
const (
	LevelTrace Level = iota
	LevelDebug
	LevelInfo
	LevelWarn
	LevelError
)

// Host is the WIT `host` interface: what the component imports. The wasm
// glue implements it with the imports; tests implement it with a fake.
type Host interface {
	// Log writes a line through the host's logger.
	Log(level Level, message string, fields [][2]string)
	// Get returns one object as JSON; found is false when it does not exist.
	Get(ref ObjectRef) (object string, found bool, err error)
	// List returns the objects of kind in namespace (empty: the parent's)
	// matching labelSelector (empty: all).
	List(kind GVK, namespace, labelSelector string) ([]string, error)
}

// Operation is the WIT admission `operation` enum.
type Operation uint8

// The operations, in the WIT order.
const (
	OperationCreate Operation = iota
	OperationUpdate
	OperationDelete
	OperationConnect
)

// UserInfo is the WIT `user-info`.
type UserInfo struct {
	Username string
	UID      string
	Groups   []string
}

// Review is the WIT admission `review`. Nil pointers are WIT `none`.
type Review struct {
	UID         string
	Operation   Operation
	Kind        GVK
	SubResource *string
	Namespace   *string
	Name        string
	Object      *string
	OldObject   *string
	UserInfo    UserInfo
	DryRun      bool
}

// Denial is the WIT admission `denial`. Code 0 means none (403).
type Denial struct {
	Message string
	Code    uint16
}

// Exports are the component's exported functions, set by operon.Export.
// Nil functions were not exported by the author.
var Exports struct {
	Manifest  func() Manifest
	Reconcile func(host Host, request Request) (Outcome, *Failure)
	Validate  func(host Host, review Review) ([]string, *Denial)
	Mutate    func(host Host, review Review) (*string, *Denial)
}
