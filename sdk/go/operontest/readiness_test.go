package operontest_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	operon "operon.dev/sdk/go"
	"operon.dev/sdk/go/operontest"
)

// watcher owns Deployments and reports the readiness its children carry.
type watcher struct{ seen *[]operon.ChildReadiness }

func (watcher) Manifest() operon.Manifest {
	return operon.Manifest{Name: "watcher", For: operon.Kind("demo.operon.dev/v1", "App"), Owns: []operon.GVK{operon.DeploymentKind}}
}

func (w watcher) Reconcile(_ context.Context, req *operon.Request) (*operon.Outcome, error) {
	*w.seen = req.ChildrenReadiness()
	return nil, nil
}

func app() operon.Object {
	return operon.Object{"apiVersion": "demo.operon.dev/v1", "kind": "App", "metadata": map[string]any{"name": "a", "namespace": "default"}}
}

// fakeOperon writes an `operon` whose `readiness -` records its input
// and arguments in dir and prints answer.
func fakeOperon(t *testing.T, answer string) (binary, dir string) {
	dir = t.TempDir()
	binary = filepath.Join(dir, "operon")
	script := "#!/bin/sh\necho \"$@\" >> " + dir + "/calls\ncat > " + dir + "/input\necho '" + answer + "'\n"
	if err := os.WriteFile(binary, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return binary, dir
}

func children(t *testing.T, req *operontest.RequestBuilder) []operon.ChildReadiness {
	t.Helper()
	var seen []operon.ChildReadiness
	if _, err := operontest.Reconcile(watcher{&seen}, nil, req); err != nil {
		t.Fatal(err)
	}
	return seen
}

func TestUnstatedReadinessShouldBeAskedOfOperonOnceForAllChildren(t *testing.T) {
	binary, dir := fakeOperon(t, `[{"status":"InProgress","message":"Available: 1/3"},{"status":"Failed","message":"deadline"}]`)
	t.Setenv("OPERON", binary)
	stated := operon.Readiness{Status: operon.ReadinessCurrent, Message: "said so"}
	got := children(t, operontest.Request(app()).
		Child(operon.NewObject(operon.DeploymentKind, "c")).
		ChildWithReadiness(operon.NewObject(operon.DeploymentKind, "b"), stated).
		Child(operon.NewObject(operon.DeploymentKind, "a")))
	want := []operon.ChildReadiness{
		{Kind: operon.DeploymentKind, Name: "a", Readiness: operon.Readiness{Status: operon.ReadinessInProgress, Message: "Available: 1/3"}},
		{Kind: operon.DeploymentKind, Name: "b", Readiness: stated},
		{Kind: operon.DeploymentKind, Name: "c", Readiness: operon.Readiness{Status: operon.ReadinessFailed, Message: "deadline"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("readiness: %+v", got)
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
	input, _ := os.ReadFile(filepath.Join(dir, "input"))
	if string(calls) != "readiness -\n" || !strings.Contains(string(input), `"name":"a"`) || strings.Contains(string(input), `"name":"b"`) {
		t.Errorf("one call for the unstated children: %q %s", calls, input)
	}
}

func TestStatedReadinessShouldNeedNoBinary(t *testing.T) {
	t.Setenv("OPERON", filepath.Join(t.TempDir(), "missing"))
	stated := operon.Readiness{Status: operon.ReadinessTerminating, Message: "going"}
	got := children(t, operontest.Request(app()).ChildWithReadiness(operon.NewObject(operon.DeploymentKind, "a"), stated))
	if len(got) != 1 || got[0].Readiness != stated {
		t.Errorf("readiness: %+v", got)
	}
}

func TestWithoutABinaryChildrenShouldBeUnknownAndSaySo(t *testing.T) {
	t.Setenv("OPERON", "")
	t.Setenv("PATH", t.TempDir())
	got := children(t, operontest.Request(app()).Child(operon.NewObject(operon.DeploymentKind, "a")))
	want := operon.Readiness{Status: operon.ReadinessUnknown, Message: "not rated: native tests rate children with the operon binary ($OPERON or operon on PATH), or pass a readiness"}
	if len(got) != 1 || got[0].Readiness != want {
		t.Errorf("readiness: %+v", got)
	}
}

func TestOperonOnPathShouldRateWhenOperonIsUnset(t *testing.T) {
	_, dir := fakeOperon(t, `[{"status":"Current","message":"ok"}]`)
	t.Setenv("OPERON", "")
	t.Setenv("PATH", dir)
	got := children(t, operontest.Request(app()).Child(operon.NewObject(operon.DeploymentKind, "a")))
	if len(got) != 1 || got[0].Readiness != (operon.Readiness{Status: operon.ReadinessCurrent, Message: "ok"}) {
		t.Errorf("readiness: %+v", got)
	}
}

func TestABinaryThatFailsShouldStopTheTest(t *testing.T) {
	binary, _ := fakeOperon(t, `not json`)
	t.Setenv("OPERON", binary)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "readiness") {
			t.Errorf("panic: %v", r)
		}
	}()
	children(t, operontest.Request(app()).Child(operon.NewObject(operon.DeploymentKind, "a")))
}

// The real binary, when the repository's is built: the host's rules, not
// a port of them.
func TestTheOperonBinaryShouldGiveTheHostsVerdict(t *testing.T) {
	binary, err := filepath.Abs("../../../target/debug/operon")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(binary); err != nil {
		t.Skip("target/debug/operon is not built")
	}
	t.Setenv("OPERON", binary)
	d := operon.NewObject(operon.DeploymentKind, "a")
	d.Set(map[string]any{"generation": 1, "name": "a"}, "metadata")
	d.Set(map[string]any{"replicas": 2}, "spec")
	d.Set(map[string]any{"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1}, "status")
	got, err := operontest.Rate(d)
	if err != nil || len(got) != 1 || got[0] != (operon.Readiness{Status: operon.ReadinessInProgress, Message: "Available: 1/2"}) {
		t.Errorf("rate: %+v %v", got, err)
	}
}

func TestCheckOutcomeShouldRefuseWhatThe02HostRefuses(t *testing.T) {
	m := watcher{}.Manifest()
	bad := "tomorrow"
	if r := operontest.CheckOutcome(m, app(), nil, nil, operon.RawOutcome{RequeueAt: &bad}); r == nil || !strings.Contains(r.Message, `requeue-at "tomorrow" is not an RFC 3339 time`) {
		t.Errorf("requeue-at: %v", r)
	}
	good := "2026-11-26T05:00:00Z"
	if r := operontest.CheckOutcome(m, app(), nil, nil, operon.RawOutcome{RequeueAt: &good}); r != nil {
		t.Errorf("a good requeue-at: %v", r)
	}
	for _, meta := range []operon.ParentMetadata{
		{Labels: map[string]string{"operon.dev/plugin": "x"}},
		{Annotations: map[string]string{"operon.dev/x": "y"}},
	} {
		out := operon.NewOutcome()
		out.ParentMetadata = &meta
		var refused *operontest.Refused
		_, err := operontest.Reconcile(fixed{out}, nil, operontest.Request(app()))
		if !asRefused(err, &refused) || !strings.Contains(refused.Message, "operon.dev keys are the host's") {
			t.Errorf("%+v: %v", meta, err)
		}
	}
}

type fixed struct{ out *operon.Outcome }

func (fixed) Manifest() operon.Manifest { return watcher{}.Manifest() }
func (f fixed) Reconcile(context.Context, *operon.Request) (*operon.Outcome, error) {
	return f.out, nil
}

func asRefused(err error, target **operontest.Refused) bool {
	r, ok := err.(*operontest.Refused)
	*target = r
	return ok
}
