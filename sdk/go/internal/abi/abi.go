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

// The mappings of the WIT `mapping` variant, in the WIT order.
const (
	MappingLabel MappingKind = iota
	MappingAnnotation
	MappingAllInNamespace
	MappingReference
	MappingSelector
)

// Mapping is the WIT `mapping` variant.
type Mapping struct {
	Kind MappingKind
	// The label or annotation name, or the parent's field path of a
	// reference or a selector (empty for MappingAllInNamespace).
	Name string
}

// Watch is a kind whose changes reconcile the parent Mapping points at.
type Watch struct {
	Kind    GVK
	Mapping Mapping
}

// UpdateStrategy is the WIT `update-strategy` enum.
type UpdateStrategy uint8

// The update strategies, in the WIT order.
const (
	UpdateInPlace UpdateStrategy = iota
	UpdateRecreate
	UpdateOnDelete
)

// OwnedUpdate is the WIT `owned-update`: the update strategy of one owned
// kind.
type OwnedUpdate struct {
	Kind     GVK
	Strategy UpdateStrategy
}

// Manifest is the WIT `reconciler-manifest`. An empty Finalizer means none.
type Manifest struct {
	Name      string
	For       GVK
	Owns      []GVK
	Watches   []Watch
	Reads     []GVK
	Updates   []OwnedUpdate
	Finalizer string
}

// ReadinessStatus is the WIT `readiness-status` enum.
type ReadinessStatus uint8

// The readiness statuses, in the WIT order.
const (
	ReadinessCurrent ReadinessStatus = iota
	ReadinessInProgress
	ReadinessFailed
	ReadinessTerminating
	ReadinessUnknown
)

// Readiness is the WIT `readiness`.
type Readiness struct {
	Status  ReadinessStatus
	Message string
}

// Child is the WIT `child`: an existing child as JSON text, with its
// readiness.
type Child struct {
	Object    string
	Readiness Readiness
}

// Children are the existing children of one owned kind.
type Children struct {
	Kind    GVK
	Objects []Child
}

// Request is the WIT `request`.
type Request struct {
	Object     string
	Children   []Children
	Related    []string
	Finalizing bool
	Attempt    uint32
	Now        string
}

// ParentMetadata is the WIT `parent-metadata`.
type ParentMetadata struct {
	Labels      [][2]string
	Annotations [][2]string
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
	RequeueAt      *string
	Finalized      bool
	NeedsFinalizer bool
	ParentMetadata *ParentMetadata
}

// Failure is the WIT `failure` variant and its `failure-detail`.
type Failure struct {
	Terminal bool
	Message  string
	// Status is the parent's status to write before backing off; nil is
	// WIT `none`.
	Status *string
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

// HTTPRequest is the WIT egress `http-request`. A nil Body, an empty
// Credential and a zero TimeoutMs are WIT `none`.
type HTTPRequest struct {
	Method     string
	URL        string
	Headers    [][2]string
	Body       []byte
	Credential string
	TimeoutMs  uint32
}

// HTTPResponse is the WIT egress `http-response`.
type HTTPResponse struct {
	Status  int
	Headers [][2]string
	Body    []byte
}

// HTTPError is the WIT egress `http-error` variant: its case, as fixtures
// name it (one of HTTPErrorKinds), and its message.
type HTTPError struct {
	Kind    string
	Message string
}

// HTTPErrorKinds are the cases of the WIT `http-error`, in the WIT order,
// as fixtures and metrics name them.
var HTTPErrorKinds = [...]string{"denied", "invalid", "timeout", "unreachable", "tooLarge", "budget", "notRecorded"}

// Egress is the WIT `egress` interface: outbound HTTP made by the host.
// The wasm glue implements it with the import; tests with recorded
// exchanges.
type Egress interface {
	// Fetch makes one request: the answer, whatever its status, or why
	// none came.
	Fetch(request HTTPRequest) (HTTPResponse, *HTTPError)
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
	// Convert answers the converted objects, or the message of a refusal.
	Convert func(host Host, objects []string, desiredAPIVersion string) ([]string, *string)
}
