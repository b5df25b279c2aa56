package operon_test

// What contract 0.2 adds: the time, the children's readiness, requeue-at,
// the finalizer on demand, the parent's metadata, failures with a status,
// watches by reference and selector, update strategies and conversion.

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	operon "operon.dev/sdk/go"
	"operon.dev/sdk/go/internal/abi"
	"operon.dev/sdk/go/operontest"
)

// probe answers with whatever its answer function says, under a manifest
// with or without a finalizer.
type probe struct {
	finalizer string
	answer    func(req *operon.Request) (*operon.Outcome, error)
}

func (p probe) Manifest() operon.Manifest {
	return operon.Manifest{
		Name: "probe", For: greetingKind, Finalizer: p.finalizer,
		Owns:    []operon.GVK{operon.DeploymentKind, operon.ServiceKind},
		Watches: []operon.Watch{{Kind: operon.ConfigMapKind, Mapping: operon.ByReference("spec.configRef")}},
		Updates: []operon.OwnedUpdate{{Kind: operon.DeploymentKind, Strategy: operon.UpdateRecreate}},
	}
}

func (p probe) Reconcile(_ context.Context, req *operon.Request) (*operon.Outcome, error) {
	return p.answer(req)
}

// seen runs p once and returns the request its Reconcile saw.
func seen(t *testing.T, req *operontest.RequestBuilder) *operon.Request {
	t.Helper()
	var got *operon.Request
	p := probe{answer: func(r *operon.Request) (*operon.Outcome, error) { got = r; return nil, nil }}
	if _, err := operontest.Reconcile(p, nil, req); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestNowShouldBeTheHostsTextAndATime(t *testing.T) {
	req := seen(t, operontest.Request(parent("hi")).Now("2026-11-26T04:05:06.789Z"))
	if req.Now != "2026-11-26T04:05:06.789Z" || !req.NowTime.Equal(time.Date(2026, 11, 26, 4, 5, 6, 789e6, time.UTC)) {
		t.Errorf("now: %q %v", req.Now, req.NowTime)
	}
	epoch := seen(t, operontest.Request(parent("hi")))
	if epoch.Now != "1970-01-01T00:00:00.000Z" || !epoch.NowTime.Equal(time.Unix(0, 0)) {
		t.Errorf("default now: %q %v", epoch.Now, epoch.NowTime)
	}
	_, err := operontest.Reconcile(probe{}, nil, operontest.Request(parent("hi")).Now("yesterday"))
	var f *operontest.Failure
	if !errors.As(err, &f) || !f.Terminal {
		t.Errorf("a now that does not parse: %v", err)
	}
}

func TestChildrenShouldCarryTheirReadiness(t *testing.T) {
	web := operon.NewObject(operon.DeploymentKind, "web")
	api := operon.NewObject(operon.DeploymentKind, "api")
	svc := operon.NewObject(operon.ServiceKind, "web")
	rolling := operon.Readiness{Status: operon.ReadinessInProgress, Message: "Available: 1/3"}
	current := operon.Readiness{Status: operon.ReadinessCurrent, Message: "ok"}
	req := seen(t, operontest.Request(parent("hi")).
		ChildWithReadiness(svc, current).ChildWithReadiness(web, rolling).ChildWithReadiness(api, current))
	if r, ok := req.Readiness(operon.DeploymentKind, "web"); !ok || r != rolling {
		t.Errorf("web: %v %v", r, ok)
	}
	if _, ok := req.Readiness(operon.ServiceKind, "api"); ok {
		t.Error("no Service api")
	}
	if req.AllChildrenCurrent() {
		t.Error("web is rolling out")
	}
	want := []operon.ChildReadiness{
		{Kind: operon.DeploymentKind, Name: "api", Readiness: current},
		{Kind: operon.DeploymentKind, Name: "web", Readiness: rolling},
		{Kind: operon.ServiceKind, Name: "web", Readiness: current},
	}
	if got := req.ChildrenReadiness(); !reflect.DeepEqual(got, want) {
		t.Errorf("in the order of owns, then by name: %+v", got)
	}
	if got := req.RawChildren(operon.DeploymentKind); len(got) != 2 {
		t.Errorf("raw children: %v", got)
	}
	all := seen(t, operontest.Request(parent("hi")).ChildWithReadiness(api, current).ChildWithReadiness(svc, current))
	if !all.AllChildrenCurrent() {
		t.Error("every child is current")
	}
}

func TestReadinessShouldParseTheVerdictsOfOperonReadiness(t *testing.T) {
	for i, name := range []string{"Current", "InProgress", "Failed", "Terminating", "Unknown"} {
		r, err := operon.ParseReadiness([]byte(`{"status": "` + name + `", "message": "m"}`))
		if err != nil || r.Status != operon.ReadinessStatus(i) || r.Message != "m" || operon.ReadinessStatusName(r.Status) != name {
			t.Errorf("%s: %+v %v", name, r, err)
		}
	}
	if _, err := operon.ParseReadiness([]byte(`{"status": "Ready"}`)); err == nil {
		t.Error("an unknown status is an error")
	}
}

func outcomeOf(t *testing.T, p probe, req *operontest.RequestBuilder) *operontest.Result {
	t.Helper()
	got, err := operontest.Reconcile(p, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestNeedsFinalizerShouldDefaultToTheManifestsFinalizer(t *testing.T) {
	plain := func(*operon.Request) (*operon.Outcome, error) { return operon.NewOutcome(), nil }
	done := func(*operon.Request) (*operon.Outcome, error) { return operon.NewOutcome().Finalize(), nil }
	keep := func(*operon.Request) (*operon.Outcome, error) {
		return operon.NewOutcome().SetNeedsFinalizer(true), nil
	}
	release := func(*operon.Request) (*operon.Outcome, error) {
		return operon.NewOutcome().SetNeedsFinalizer(false), nil
	}
	cases := []struct {
		finalizer  string
		finalizing bool
		answer     func(*operon.Request) (*operon.Outcome, error)
		want       bool
	}{
		{"x.dev/cleanup", false, plain, true},
		{"x.dev/cleanup", true, done, false},
		{"", false, plain, false},
		{"x.dev/cleanup", false, release, false},
		{"x.dev/cleanup", true, keep, true},
		{"", false, keep, true},
	}
	for i, tc := range cases {
		got := outcomeOf(t, probe{finalizer: tc.finalizer, answer: tc.answer}, operontest.Request(parent("hi")).Finalizing(tc.finalizing))
		if got.NeedsFinalizer != tc.want {
			t.Errorf("case %d: needsFinalizer %v", i, got.NeedsFinalizer)
		}
	}
	// A nil outcome too.
	if got := outcomeOf(t, probe{finalizer: "x.dev/cleanup", answer: func(*operon.Request) (*operon.Outcome, error) { return nil, nil }}, operontest.Request(parent("hi"))); !got.NeedsFinalizer {
		t.Error("a nil outcome asks for the finalizer too")
	}
}

func TestRequeueAtShouldBeWrittenInRFC3339(t *testing.T) {
	at := time.Date(2026, 11, 26, 5, 0, 0, 0, time.FixedZone("CET", 3600))
	got := outcomeOf(t, probe{answer: func(req *operon.Request) (*operon.Outcome, error) {
		return operon.NewOutcome().RequeueAt(at), nil
	}}, operontest.Request(parent("hi")))
	if got.RequeueAt != "2026-11-26T04:00:00Z" {
		t.Errorf("requeue-at: %q", got.RequeueAt)
	}
	none := outcomeOf(t, probe{answer: func(*operon.Request) (*operon.Outcome, error) { return nil, nil }}, operontest.Request(parent("hi")))
	if none.RequeueAt != "" {
		t.Errorf("none: %q", none.RequeueAt)
	}
}

func TestParentMetadataShouldBeSortedPairs(t *testing.T) {
	p := probe{answer: func(*operon.Request) (*operon.Outcome, error) {
		return operon.NewOutcome().SetParentMetadata(map[string]string{"b": "2", "a": "1", "c": "3"}, nil), nil
	}}
	raw, failure := operon.Run(operontest.NewCluster(), p, operontest.Request(parent("hi")).Build(p.Manifest()))
	if failure != nil {
		t.Fatal(failure)
	}
	want := &abi.ParentMetadata{Labels: [][2]string{{"a", "1"}, {"b", "2"}, {"c", "3"}}, Annotations: [][2]string{}}
	if !reflect.DeepEqual(raw.ParentMetadata, want) {
		t.Errorf("parent metadata: %+v", raw.ParentMetadata)
	}
	untouched, _ := operon.Run(operontest.NewCluster(), probe{answer: func(*operon.Request) (*operon.Outcome, error) { return nil, nil }}, operontest.Request(parent("hi")).Build(p.Manifest()))
	if untouched.ParentMetadata != nil {
		t.Error("no parent metadata unless set")
	}
}

func TestAFailureShouldCarryItsStatusAndKeepItsKind(t *testing.T) {
	status := map[string]any{"phase": "Broken"}
	cases := []struct {
		err      error
		terminal bool
	}{
		{operon.WithStatus(errors.New("later"), status), false},
		{operon.WithStatus(operon.Terminalf("never"), status), true},
		{operon.TerminalError(operon.WithStatus(errors.New("never"), status)), true},
	}
	for _, tc := range cases {
		_, err := operontest.Reconcile(probe{answer: func(*operon.Request) (*operon.Outcome, error) { return nil, tc.err }}, nil, operontest.Request(parent("hi")))
		var f *operontest.Failure
		if !errors.As(err, &f) || f.Terminal != tc.terminal || f.Message != tc.err.Error() || f.Status.String("phase") != "Broken" {
			t.Errorf("%v: %+v", tc.err, f)
		}
	}
	_, err := operontest.Reconcile(probe{answer: func(*operon.Request) (*operon.Outcome, error) { return nil, errors.New("plain") }}, nil, operontest.Request(parent("hi")))
	if f := (*operontest.Failure)(nil); !errors.As(err, &f) || f.Status != nil {
		t.Errorf("no status unless attached: %v", err)
	}
	// A status that is not a JSON object cannot be written, ever.
	_, err = operontest.Reconcile(probe{answer: func(*operon.Request) (*operon.Outcome, error) {
		return nil, operon.WithStatus(errors.New("later"), []int{1})
	}}, nil, operontest.Request(parent("hi")))
	if f := (*operontest.Failure)(nil); !errors.As(err, &f) || !f.Terminal || f.Status != nil {
		t.Errorf("bad status: %v", err)
	}
	if operon.WithStatus(nil, status) != nil {
		t.Error("WithStatus(nil) is nil")
	}
}

func TestExportShouldDescribeTheNewManifestFields(t *testing.T) {
	operon.Export(probe{})
	m := abi.Exports.Manifest()
	if m.Watches[0].Mapping != (abi.Mapping{Kind: abi.MappingReference, Name: "spec.configRef"}) {
		t.Errorf("watch: %+v", m.Watches)
	}
	if m.Updates[0] != (abi.OwnedUpdate{Kind: operon.DeploymentKind, Strategy: abi.UpdateRecreate}) {
		t.Errorf("updates: %+v", m.Updates)
	}
	if sel := operon.BySelector("spec.selector"); sel.Kind != abi.MappingSelector || sel.Name != "spec.selector" {
		t.Errorf("selector: %+v", sel)
	}
	if abi.Exports.Convert != nil {
		t.Error("no Converter, no convert")
	}
	operon.Export(converter{})
	if abi.Exports.Convert == nil {
		t.Error("a Converter is exported")
	}
}

// converter renames the version of Greetings, and refuses other kinds.
type converter struct{ greeter }

func (converter) Convert(_ context.Context, objects []operon.Object, desired string) ([]operon.Object, error) {
	for _, o := range objects {
		if o.String("kind") != "Greeting" {
			return nil, errors.New("not a Greeting: " + o.String("kind"))
		}
		o["apiVersion"] = desired
	}
	return objects, nil
}

func TestConvertShouldRoundTripObjectsAndRefusals(t *testing.T) {
	text := `{"apiVersion":"demo.operon.dev/v1alpha1","kind":"Greeting","metadata":{"name":"a"},"spec":{"big":12345678901234567890}}`
	out, refusal := operon.RunConvert(operontest.NewCluster(), converter{}, []string{text}, "demo.operon.dev/v1")
	if refusal != nil || len(out) != 1 {
		t.Fatalf("%v %v", out, refusal)
	}
	var got map[string]any
	d := json.NewDecoder(bytesReader(out[0]))
	d.UseNumber()
	if err := d.Decode(&got); err != nil || got["apiVersion"] != "demo.operon.dev/v1" ||
		got["spec"].(map[string]any)["big"] != json.Number("12345678901234567890") {
		t.Errorf("converted: %s", out[0])
	}
	_, refusal = operon.RunConvert(operontest.NewCluster(), converter{}, []string{`{"kind":"Other"}`}, "v1")
	if refusal == nil || *refusal != "not a Greeting: Other" {
		t.Errorf("refusal: %v", refusal)
	}
	_, refusal = operon.RunConvert(operontest.NewCluster(), converter{}, []string{`[]`}, "v1")
	if refusal == nil {
		t.Error("an object that is not a JSON object is refused")
	}
	objects, err := operontest.Convert(converter{}, "demo.operon.dev/v1", parent("x"))
	if err != nil || objects[0].String("apiVersion") != "demo.operon.dev/v1" {
		t.Errorf("operontest.Convert: %v %v", objects, err)
	}
}

func bytesReader(s string) *strings.Reader { return strings.NewReader(s) }
