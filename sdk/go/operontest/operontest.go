// Package operontest runs reconcilers natively, without wasm and without a
// cluster, through [operon.Run], the code path of the component's export:
// what passes here passes in the component.
//
//	cluster := operontest.NewCluster(secret)
//	req := operontest.Request(greeting).Child(configMap)
//	got, err := operontest.Reconcile(Greeter{}, cluster, req)
//
// A [Cluster] stands in for the host's cache (the objects Get and List
// see, and the objects a child could be written over). Every outcome is
// checked as the host checks it before writing ([CheckOutcome]). Unlike the host, it lets every kind be read: check Manifest.Reads
// yourself.
//
// A request runs at [DefaultNow] unless [RequestBuilder.Now] says
// otherwise, as fixtures do. Each child carries a readiness: the one a test
// states ([RequestBuilder.ChildWithReadiness]), else the host's verdict,
// asked of `operon readiness` (the binary $OPERON names, else operon on
// PATH) once per request; the rules are never ported here. Without the
// binary a child's readiness is unknown, saying so ([NotRated]).
//
// A reconciler that calls out ([operon.HTTP]) is answered from recorded
// exchanges ([Cluster.AddExchange], [Respond], [Fail], or a fixture's
// `egress:` list as JSON with [ParseEgress]), by the rule `operon test`
// replays fixtures with: a call the cluster does not hold is answered
// not-recorded and fails [Reconcile] with an [*Unrecorded] naming it.
package operontest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	operon "operon.dev/sdk/go"
)

// LogLine is a line logged through operon.Logger.
type LogLine struct {
	Level   operon.Level
	Message string
	Fields  [][2]string
}

// Cluster is an in-memory stand-in for the host's cache. It implements
// operon.Host, and operon.Egress with the HTTP exchanges recorded with
// [Cluster.AddExchange]. An empty namespace in a read means the parent's namespace
// during [Reconcile], any namespace otherwise; cluster-scoped objects (no
// metadata.namespace) match any namespace.
type Cluster struct {
	objects   []operon.Object
	namespace string
	// Logs holds what was logged, in order.
	Logs []LogLine
	// The recorded HTTP exchanges (egress.go) and the calls none answered.
	exchanges []*recorded
	missed    []operon.HTTPRequest
}

// NewCluster returns a cluster holding objects (see [Cluster.Add]).
func NewCluster(objects ...any) *Cluster {
	c := &Cluster{}
	for _, o := range objects {
		c.Add(o)
	}
	return c
}

// Add stores an object: anything that marshals to a JSON object with
// apiVersion, kind and metadata.name. It panics otherwise (a broken test).
func (c *Cluster) Add(object any) {
	c.objects = append(c.objects, mustObject(object))
}

func mustObject(object any) operon.Object {
	text, err := json.Marshal(object)
	if err != nil {
		panic(fmt.Sprintf("operontest: %v", err))
	}
	o, err := operon.ParseObject(text)
	if err != nil || o.String("apiVersion") == "" || o.String("kind") == "" {
		panic(fmt.Sprintf("operontest: not an object with apiVersion and kind: %s", text))
	}
	return o
}

// Log implements operon.Host.
func (c *Cluster) Log(level operon.Level, message string, fields [][2]string) {
	c.Logs = append(c.Logs, LogLine{Level: level, Message: message, Fields: fields})
}

func (c *Cluster) scoped(kind operon.GVK, namespace string) []operon.Object {
	if namespace == "" {
		namespace = c.namespace
	}
	var out []operon.Object
	for _, o := range c.objects {
		ns := o.Namespace()
		if o.GVK() == kind && (ns == "" || namespace == "" || ns == namespace) {
			out = append(out, o)
		}
	}
	return out
}

// Get implements operon.Host.
func (c *Cluster) Get(ref operon.ObjectRef) (string, bool, error) {
	for _, o := range c.scoped(ref.Kind, ref.Namespace) {
		if o.Name() == ref.Name {
			text, err := json.Marshal(o)
			return string(text), true, err
		}
	}
	return "", false, nil
}

// List implements operon.Host.
func (c *Cluster) List(kind operon.GVK, namespace, labelSelector string) ([]string, error) {
	selector, err := ParseSelector(labelSelector)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, o := range c.scoped(kind, namespace) {
		if selector.Matches(o.Labels()) {
			text, err := json.Marshal(o)
			if err != nil {
				return nil, err
			}
			out = append(out, string(text))
		}
	}
	return out, nil
}

// DefaultNow is the time of a request that does not set one: the Unix
// epoch, as a fixture without `now:`.
const DefaultNow = "1970-01-01T00:00:00.000Z"

// NotRated is the message of a child's unknown readiness when no test
// stated it and no operon binary could rate it.
const NotRated = "not rated: native tests rate children with the operon binary ($OPERON or operon on PATH), or pass a readiness"

// RequestBuilder builds the WIT request of one reconcile.
type RequestBuilder struct {
	parent     operon.Object
	children   []child
	related    []operon.Object
	finalizing bool
	attempt    uint32
	now        string
}

type child struct {
	object operon.Object
	// readiness is nil until stated or rated.
	readiness *operon.Readiness
}

// Request starts a request for parent (anything that marshals to an object).
func Request(parent any) *RequestBuilder {
	return &RequestBuilder{parent: mustObject(parent), now: DefaultNow}
}

// Child adds an existing child, whose readiness the operon binary rates.
func (b *RequestBuilder) Child(object any) *RequestBuilder {
	b.children = append(b.children, child{object: mustObject(object)})
	return b
}

// ChildWithReadiness adds an existing child with the readiness the test
// states (no binary asked).
func (b *RequestBuilder) ChildWithReadiness(object any, readiness operon.Readiness) *RequestBuilder {
	b.children = append(b.children, child{object: mustObject(object), readiness: &readiness})
	return b
}

// Now sets the host's clock of the request (RFC 3339, as the host gives it:
// `2026-11-26T04:05:06.789Z`).
func (b *RequestBuilder) Now(now string) *RequestBuilder {
	b.now = now
	return b
}

// Related adds a related object (of a watched kind).
func (b *RequestBuilder) Related(object any) *RequestBuilder {
	b.related = append(b.related, mustObject(object))
	return b
}

// Finalizing marks the parent as being deleted with the finalizer.
func (b *RequestBuilder) Finalizing(finalizing bool) *RequestBuilder {
	b.finalizing = finalizing
	return b
}

// Attempt sets how many failures in a row came before.
func (b *RequestBuilder) Attempt(n uint32) *RequestBuilder {
	b.attempt = n
	return b
}

// Build returns the WIT request as the host builds it: children grouped by
// the kinds of manifest.Owns, in that order, sorted by namespace then name,
// each with its readiness (stated, or rated by the operon binary). It
// panics on a child whose kind is not owned (the host would never hand it
// in), and when the operon binary fails.
func (b *RequestBuilder) Build(manifest operon.Manifest) operon.RawRequest {
	raw := operon.RawRequest{Object: string(mustJSON(b.parent)), Finalizing: b.finalizing, Attempt: b.attempt, Now: b.now}
	children := append([]child(nil), b.children...)
	sort.SliceStable(children, func(i, j int) bool {
		a, z := children[i].object, children[j].object
		if a.Namespace() != z.Namespace() {
			return a.Namespace() < z.Namespace()
		}
		return a.Name() < z.Name()
	})
	for _, c := range children {
		owned := false
		for _, kind := range manifest.Owns {
			owned = owned || c.object.GVK() == kind
		}
		if !owned {
			panic(fmt.Sprintf("operontest: child %s %s is of a kind the manifest does not own", c.object.String("kind"), c.object.Name()))
		}
	}
	if err := rate(children); err != nil {
		panic(fmt.Sprintf("operontest: %v", err))
	}
	for _, kind := range manifest.Owns {
		group := operon.Children{Kind: kind, Objects: []operon.RawChild{}}
		for _, c := range children {
			if c.object.GVK() == kind {
				group.Objects = append(group.Objects, operon.RawChild{Object: string(mustJSON(c.object)), Readiness: *c.readiness})
			}
		}
		raw.Children = append(raw.Children, group)
	}
	for _, r := range b.related {
		raw.Related = append(raw.Related, string(mustJSON(r)))
	}
	return raw
}

// rate gives every child without a readiness the host's verdict, asking
// `operon readiness` once for all of them.
func rate(children []child) error {
	var unrated []int
	for i, c := range children {
		if c.readiness == nil {
			unrated = append(unrated, i)
		}
	}
	if len(unrated) == 0 {
		return nil
	}
	verdicts, err := Rate(func() []any {
		objects := make([]any, len(unrated))
		for i, at := range unrated {
			objects[i] = children[at].object
		}
		return objects
	}()...)
	if err != nil {
		return err
	}
	for i, at := range unrated {
		children[at].readiness = &verdicts[i]
	}
	return nil
}

// Rate returns the host's readiness of each object, from `operon
// readiness` (the binary $OPERON names, else operon on PATH): one call for
// all of them. Without a binary every object is unknown ([NotRated]); a
// binary that fails is an error.
func Rate(objects ...any) ([]operon.Readiness, error) {
	binary := os.Getenv("OPERON")
	if binary == "" {
		found, err := exec.LookPath("operon")
		if err != nil {
			if !errors.Is(err, exec.ErrNotFound) {
				return nil, err
			}
			out := make([]operon.Readiness, len(objects))
			for i := range out {
				out[i] = operon.Readiness{Status: operon.ReadinessUnknown, Message: NotRated}
			}
			return out, nil
		}
		binary = found
	}
	list := make([]operon.Object, len(objects))
	for i, o := range objects {
		list[i] = mustObject(o)
	}
	input, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "readiness", "-")
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	output, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s readiness: %v: %s", binary, err, strings.TrimSpace(stderr.String()))
	}
	var verdicts []json.RawMessage
	if err := json.Unmarshal(output, &verdicts); err != nil || len(verdicts) != len(objects) {
		return nil, fmt.Errorf("%s readiness: expected %d verdicts, got %q", binary, len(objects), output)
	}
	out := make([]operon.Readiness, len(verdicts))
	for i, v := range verdicts {
		if out[i], err = operon.ParseReadiness(v); err != nil {
			return nil, fmt.Errorf("%s readiness: %v", binary, err)
		}
	}
	return out, nil
}

func mustJSON(o operon.Object) []byte {
	text, err := json.Marshal(o)
	if err != nil {
		panic(fmt.Sprintf("operontest: %v", err))
	}
	return text
}

// Result is a decoded outcome, for assertions.
type Result struct {
	Desired      []operon.Object
	Status       operon.Object
	Events       []operon.Event
	RequeueAfter time.Duration
	// RequeueAt is the outcome's requeue-at as written ("" for none).
	RequeueAt      string
	Finalized      bool
	NeedsFinalizer bool
	// ParentMetadata is nil when the outcome leaves the parent's metadata
	// alone.
	ParentMetadata *operon.ParentMetadata
}

// Find returns the desired object of kind (e.g. "Deployment") called name.
func (r *Result) Find(kind, name string) operon.Object {
	for _, o := range r.Desired {
		if o.String("kind") == kind && o.Name() == name {
			return o
		}
	}
	return nil
}

// Reasons returns the events' reasons, in order.
func (r *Result) Reasons() []string {
	out := []string{}
	for _, e := range r.Events {
		out = append(out, e.Reason)
	}
	return out
}

// Failure is a reconcile that produced no outcome, as the host sees it.
type Failure struct {
	Terminal bool
	Message  string
	// Status is the parent's status the failure carries (nil for none).
	Status operon.Object
}

func (f *Failure) Error() string {
	if f.Terminal {
		return "terminal failure: " + f.Message
	}
	return "transient failure: " + f.Message
}

// Reconcile runs r through operon.Run with cluster as the host (nil: an
// empty one). The error is a *Failure, or a *Refused when the host would
// refuse the outcome before writing anything (a kind the manifest does not
// own, another namespace, a bad name, an oversized child, an object of the
// cluster someone else owns): the checks operon test makes, see
// [CheckOutcome]. It is an *Unrecorded, before anything else, when the
// reconciler made HTTP calls that the cluster's exchanges do not hold
// ([Cluster.AddExchange]), as a fixture whose `egress:` misses a call
// fails.
func Reconcile(r operon.Reconciler, cluster *Cluster, req *RequestBuilder) (*Result, error) {
	if cluster == nil {
		cluster = NewCluster()
	}
	cluster.namespace = req.parent.Namespace()
	cluster.missed = nil
	defer func() { cluster.namespace = "" }()
	raw, failure := operon.Run(cluster, r, req.Build(r.Manifest()))
	if len(cluster.missed) > 0 {
		return nil, &Unrecorded{Calls: cluster.Missed()}
	}
	if failure != nil {
		f := &Failure{Terminal: failure.Terminal, Message: failure.Message}
		if failure.Status != nil {
			status, err := operon.ParseObject([]byte(*failure.Status))
			if err != nil {
				return nil, err
			}
			f.Status = status
		}
		return nil, f
	}
	children := make([]operon.Object, len(req.children))
	for i, c := range req.children {
		children[i] = c.object
	}
	if refused := CheckOutcome(r.Manifest(), req.parent, children, cluster.objects, raw); refused != nil {
		return nil, refused
	}
	result := &Result{Events: raw.Events, Finalized: raw.Finalized, NeedsFinalizer: raw.NeedsFinalizer}
	if raw.RequeueAt != nil {
		result.RequeueAt = *raw.RequeueAt
	}
	if m := raw.ParentMetadata; m != nil {
		result.ParentMetadata = &operon.ParentMetadata{Labels: map[string]string{}, Annotations: map[string]string{}}
		for _, kv := range m.Labels {
			result.ParentMetadata.Labels[kv[0]] = kv[1]
		}
		for _, kv := range m.Annotations {
			result.ParentMetadata.Annotations[kv[0]] = kv[1]
		}
	}
	for _, text := range raw.Desired {
		o, err := operon.ParseObject([]byte(text))
		if err != nil {
			return nil, err
		}
		result.Desired = append(result.Desired, o)
	}
	if raw.Status != nil {
		o, err := operon.ParseObject([]byte(*raw.Status))
		if err != nil {
			return nil, err
		}
		result.Status = o
	}
	if raw.RequeueAfterMs != nil {
		result.RequeueAfter = time.Duration(*raw.RequeueAfterMs) * time.Millisecond
	}
	return result, nil
}

// Convert runs c's conversion through operon.RunConvert, the code path of
// the `convert` export: objects (anything that marshals to an object) to
// desiredAPIVersion. The error is the refusal's message.
func Convert(c operon.Converter, desiredAPIVersion string, objects ...any) ([]operon.Object, error) {
	texts := make([]string, len(objects))
	for i, o := range objects {
		texts[i] = string(mustJSON(mustObject(o)))
	}
	converted, refusal := operon.RunConvert(noEgress{NewCluster()}, c, texts, desiredAPIVersion)
	if refusal != nil {
		return nil, errors.New(*refusal)
	}
	out := make([]operon.Object, len(converted))
	for i, text := range converted {
		o, err := operon.ParseObject([]byte(text))
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}

// noEgress is a host whose every HTTP call is denied, as the host denies
// them outside reconcile (manifest, admission, conversion).
type noEgress struct{ *Cluster }

func (noEgress) Fetch(operon.RawHTTPRequest) (operon.RawHTTPResponse, *operon.RawHTTPError) {
	return operon.RawHTTPResponse{}, &operon.RawHTTPError{Kind: operon.HTTPDenied, Message: "only reconcile may call out (admission and conversion may not)"}
}

// Review builds an admission review of op for object (nil for none).
func Review(op operon.Operation, object any) operon.RawReview {
	review := operon.RawReview{UID: "operontest", Operation: op}
	if object != nil {
		o := mustObject(object)
		text := string(mustJSON(o))
		review.Object = &text
		review.Kind = o.GVK()
		review.Name = o.Name()
		if ns := o.Namespace(); ns != "" {
			review.Namespace = &ns
		}
	}
	return review
}
