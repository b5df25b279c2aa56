package operon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	operon "operon.dev/sdk/go"
	"operon.dev/sdk/go/internal/abi"
	"operon.dev/sdk/go/operontest"
)

var greetingKind = operon.Kind("demo.operon.dev/v1alpha1", "Greeting")

type greeting struct {
	Spec struct {
		Message string `json:"message"`
	} `json:"spec"`
}

// greeter is the scaffold's reconciler, plus a read and a log line.
type greeter struct{}

func (greeter) Manifest() operon.Manifest {
	return operon.Manifest{
		Name:  "greeter",
		For:   greetingKind,
		Owns:  []operon.GVK{operon.ConfigMapKind},
		Reads: []operon.GVK{operon.SecretKind},
	}
}

func (greeter) Reconcile(ctx context.Context, req *operon.Request) (*operon.Outcome, error) {
	var g greeting
	if err := req.Decode(&g); err != nil {
		return nil, err
	}
	if req.Finalizing {
		return operon.NewOutcome().Finalize(), nil
	}
	if g.Spec.Message == "" {
		return nil, operon.Terminalf("spec.message must not be empty")
	}
	secret, err := operon.Get(ctx, operon.SecretKind, "", "token")
	if err != nil {
		return nil, err
	}
	if secret == nil {
		return nil, errors.New("secret token does not exist yet")
	}
	operon.Logger(ctx).Info("greeting", "name", req.Name(), "attempt", req.Attempt)
	name := req.Name() + "-greeting"
	cm := operon.NewObject(operon.ConfigMapKind, name)
	cm["data"] = map[string]string{"message": g.Spec.Message}
	return operon.NewOutcome().
		Apply(cm).
		SetStatus(map[string]any{"observedGeneration": req.Meta.Generation, "published": req.HasChild(operon.ConfigMapKind, name)}).
		Eventf("Published", "wrote configmap %s", name).
		Requeue(90 * time.Second), nil
}

func parent(message string) operon.Object {
	return operon.Object{
		"apiVersion": "demo.operon.dev/v1alpha1", "kind": "Greeting",
		"metadata": map[string]any{"name": "hello", "namespace": "default", "generation": 3},
		"spec":     map[string]any{"message": message},
	}
}

func token(namespace string) operon.Object {
	o := operon.NewObject(operon.SecretKind, "token")
	o.Set(namespace, "metadata", "namespace")
	return o
}

func TestReconcileShouldProduceTheOutcomeOfTheBuilder(t *testing.T) {
	cluster := operontest.NewCluster(token("default"))
	got, err := operontest.Reconcile(greeter{}, cluster, operontest.Request(parent("hi")).Attempt(2))
	if err != nil {
		t.Fatal(err)
	}
	cm := got.Find("ConfigMap", "hello-greeting")
	if cm == nil || cm.String("data", "message") != "hi" || cm.String("apiVersion") != "v1" {
		t.Fatalf("desired: %v", got.Desired)
	}
	if n, _ := got.Status.Int64("observedGeneration"); n != 3 {
		t.Errorf("observedGeneration: %v", got.Status)
	}
	if published, _ := got.Status.Lookup("published"); published != false {
		t.Errorf("published: %v", got.Status)
	}
	if want := []string{"Published"}; !reflect.DeepEqual(got.Reasons(), want) {
		t.Errorf("events: %v", got.Events)
	}
	if got.RequeueAfter != 90*time.Second {
		t.Errorf("requeue: %v", got.RequeueAfter)
	}
	want := []operontest.LogLine{{Level: operon.LevelInfo, Message: "greeting", Fields: [][2]string{{"name", "hello"}, {"attempt", "2"}}}}
	if !reflect.DeepEqual(cluster.Logs, want) {
		t.Errorf("logs: %+v", cluster.Logs)
	}
}

func TestChildrenShouldBeSeenByKindAndName(t *testing.T) {
	existing := operon.NewObject(operon.ConfigMapKind, "hello-greeting")
	got, err := operontest.Reconcile(greeter{}, operontest.NewCluster(token("default")), operontest.Request(parent("hi")).Child(existing))
	if err != nil {
		t.Fatal(err)
	}
	if published, _ := got.Status.Lookup("published"); published != true {
		t.Errorf("published: %v", got.Status)
	}
}

func TestErrorsShouldBeTransientUnlessMarkedTerminal(t *testing.T) {
	_, err := operontest.Reconcile(greeter{}, nil, operontest.Request(parent("")))
	var f *operontest.Failure
	if !errors.As(err, &f) || !f.Terminal || f.Message != "spec.message must not be empty" {
		t.Errorf("empty message: %v", err)
	}
	// The secret is in another namespace: reads default to the parent's.
	_, err = operontest.Reconcile(greeter{}, operontest.NewCluster(token("other")), operontest.Request(parent("hi")))
	if !errors.As(err, &f) || f.Terminal || f.Message != "secret token does not exist yet" {
		t.Errorf("missing secret: %v", err)
	}
	wrapped := fmt.Errorf("context: %w", operon.TerminalError(errors.New("bad")))
	if !operon.IsTerminal(wrapped) || operon.IsTerminal(errors.New("x")) || operon.TerminalError(nil) != nil {
		t.Error("IsTerminal must see through wrapping")
	}
}

func TestAParentThatDoesNotFitShouldBeATerminalFailureNamingIt(t *testing.T) {
	p := parent("hi")
	p["spec"] = "not an object"
	_, err := operontest.Reconcile(greeter{}, nil, operontest.Request(p))
	var f *operontest.Failure
	if !errors.As(err, &f) || !f.Terminal || f.Message[:36] != "Greeting default/hello is invalid: j" {
		t.Errorf("got %v", err)
	}
	_, failure := operon.Run(operontest.NewCluster(), greeter{}, operon.RawRequest{Object: "[1]"})
	if failure == nil || !failure.Terminal {
		t.Errorf("non-object parent: %v", failure)
	}
}

type bad struct{ greeter }

func (bad) Reconcile(context.Context, *operon.Request) (*operon.Outcome, error) {
	return operon.NewOutcome().Apply(map[string]any{"apiVersion": "v1", "metadata": map[string]any{"name": "x"}}), nil
}

func TestDesiredObjectsWithoutAKindShouldBeRefused(t *testing.T) {
	_, err := operontest.Reconcile(bad{}, nil, operontest.Request(parent("hi")))
	if err == nil || err.Error() != "terminal failure: desired object x has no kind" {
		t.Errorf("got %v", err)
	}
}

func TestNumbersShouldStayIntegers(t *testing.T) {
	o, err := operon.ParseObject([]byte(`{"a": 9007199254740993, "b": 1.5}`))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := o.Int64("a"); !ok || n != 9007199254740993 {
		t.Errorf("a: %v", n)
	}
	if _, ok := o.Int64("b"); ok {
		t.Error("1.5 is not an integer")
	}
	if _, err := operon.ParseObject([]byte(`null`)); err == nil {
		t.Error("null is not an object")
	}
}

func TestConditionsShouldKeepTheirTransitionTimeWhileTheStatusHolds(t *testing.T) {
	conditions := []operon.Condition{{Type: "Ready", Status: operon.ConditionTrue, LastTransitionTime: "t1"}}
	same := operon.SetCondition(conditions, operon.Condition{Type: "Ready", Status: operon.ConditionTrue, LastTransitionTime: "t2", Reason: "Available"})
	if same[0].LastTransitionTime != "t1" || same[0].Reason != "Available" || conditions[0].Reason != "" {
		t.Errorf("same status: %+v", same)
	}
	changed := operon.SetCondition(conditions, operon.Condition{Type: "Ready", Status: operon.ConditionFalse, LastTransitionTime: "t2"})
	if changed[0].LastTransitionTime != "t2" || operon.IsConditionTrue(changed, "Ready") {
		t.Errorf("changed status: %+v", changed)
	}
	added := operon.SetCondition(nil, operon.Condition{Type: "Synced", Status: operon.ConditionTrue})
	if len(added) != 1 || !operon.IsConditionTrue(added, "Synced") || operon.FindCondition(added, "Ready") != nil {
		t.Errorf("added: %+v", added)
	}
}

func TestKindsShouldRoundTripTheirAPIVersion(t *testing.T) {
	for _, tc := range []struct{ apiVersion, group string }{{"v1", ""}, {"apps/v1", "apps"}, {"example.operon.dev/v1alpha1", "example.operon.dev"}} {
		k := operon.Kind(tc.apiVersion, "X")
		if k.Group != tc.group || operon.APIVersion(k) != tc.apiVersion {
			t.Errorf("%s: %+v", tc.apiVersion, k)
		}
	}
	if s := operon.KindString(operon.DeploymentKind); s != "apps/v1 Deployment" {
		t.Error(s)
	}
}

func TestListShouldFilterByNamespaceAndSelector(t *testing.T) {
	secret := func(ns, name, app string) operon.Object {
		o := operon.NewObject(operon.SecretKind, name)
		o.Set(ns, "metadata", "namespace")
		o.Set(map[string]any{"app": app}, "metadata", "labels")
		return o
	}
	cluster := operontest.NewCluster(secret("a", "one", "web"), secret("a", "two", "db"), secret("b", "three", "web"))
	ctx := operon.WithHost(context.Background(), cluster)
	for _, tc := range []struct {
		ns, selector string
		want         int
	}{{"a", "", 2}, {"a", "app=web", 1}, {"", "app in (web,db)", 3}, {"a", "app!=web", 1}, {"", "!app", 0}, {"", "app", 3}} {
		got, err := operon.List(ctx, operon.SecretKind, tc.ns, tc.selector)
		if err != nil || len(got) != tc.want {
			t.Errorf("%q %q: %d objects, %v", tc.ns, tc.selector, len(got), err)
		}
	}
	if _, err := operon.List(ctx, operon.SecretKind, "", "app in web"); err == nil {
		t.Error("a malformed selector must be refused")
	}
	if _, err := operon.Get(context.Background(), operon.SecretKind, "", "one"); err == nil {
		t.Error("a context without a host must fail")
	}
}

type admitter struct{ greeter }

func (admitter) Validate(_ context.Context, r *operon.Review) ([]string, error) {
	var g greeting
	if err := r.DecodeObject(&g); err != nil {
		return nil, err
	}
	if g.Spec.Message == "" {
		return nil, operon.DenyCode(422, "spec.message must not be empty")
	}
	return []string{"looks fine"}, nil
}

func (admitter) Mutate(_ context.Context, r *operon.Review) (any, error) {
	var o operon.Object
	if err := r.DecodeObject(&o); err != nil {
		return nil, operon.Deny("%v", err)
	}
	if o.String("spec", "message") != "" {
		return nil, nil
	}
	o.Set("hello", "spec", "message")
	return o, nil
}

func TestAdmissionShouldMapDenialsAndDefaults(t *testing.T) {
	host := operontest.NewCluster()
	warnings, denial := operon.RunValidate(host, admitter{}, operontest.Review(operon.Create, parent("hi")))
	if denial != nil || !reflect.DeepEqual(warnings, []string{"looks fine"}) {
		t.Errorf("valid: %v %v", warnings, denial)
	}
	_, denial = operon.RunValidate(host, admitter{}, operontest.Review(operon.Create, parent("")))
	if denial == nil || denial.Code != 422 || denial.Message != "spec.message must not be empty" {
		t.Errorf("invalid: %+v", denial)
	}
	_, denial = operon.RunValidate(host, admitter{}, operontest.Review(operon.Delete, nil))
	if denial == nil || denial.Code != 0 {
		t.Errorf("no object: %+v", denial)
	}
	mutated, denial := operon.RunMutate(host, admitter{}, operontest.Review(operon.Create, parent("")))
	if denial != nil || mutated == nil {
		t.Fatalf("mutate: %v %v", mutated, denial)
	}
	o, _ := operon.ParseObject([]byte(*mutated))
	if o.String("spec", "message") != "hello" || o.Name() != "hello" {
		t.Errorf("mutated: %s", *mutated)
	}
	unchanged, _ := operon.RunMutate(host, admitter{}, operontest.Review(operon.Create, parent("x")))
	if unchanged != nil {
		t.Errorf("unchanged: %s", *unchanged)
	}
}

func TestExportShouldRegisterAdmissionOnlyWhenImplemented(t *testing.T) {
	operon.Export(greeter{})
	if abi.Exports.Reconcile == nil || abi.Exports.Validate != nil || abi.Exports.Mutate != nil {
		t.Error("a plain reconciler exports no admission")
	}
	if m := abi.Exports.Manifest(); m.Name != "greeter" || m.Owns[0] != operon.ConfigMapKind {
		t.Errorf("manifest: %+v", m)
	}
	operon.Export(admitter{})
	if abi.Exports.Validate == nil || abi.Exports.Mutate == nil {
		t.Error("Validator and Mutator are exported")
	}
}

func TestLoggerShouldCarryGroupsAndLevels(t *testing.T) {
	cluster := operontest.NewCluster()
	log := operon.Logger(operon.WithHost(context.Background(), cluster)).With("a", 1).WithGroup("g")
	log.Warn("careful", "b", "x")
	log.Debug("detail")
	log.Log(context.Background(), slog.LevelError, "broken")
	if len(cluster.Logs) != 3 || cluster.Logs[0].Level != operon.LevelWarn || cluster.Logs[1].Level != operon.LevelDebug || cluster.Logs[2].Level != operon.LevelError {
		t.Fatalf("levels: %+v", cluster.Logs)
	}
	if want := [][2]string{{"a", "1"}, {"g.b", "x"}}; !reflect.DeepEqual(cluster.Logs[0].Fields, want) {
		t.Errorf("fields: %v", cluster.Logs[0].Fields)
	}
}
