package main

// The reconcile logic natively, through operon.Run (the component's code
// path). The shared fixtures (../webapp/fixtures, run by `operon test`)
// cover whole scenarios; these tests pin single rules, as the Rust
// example's do.

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	operon "operon.dev/sdk/go"
	"operon.dev/sdk/go/operontest"
)

func webapp(spec map[string]any) operon.Object {
	return operon.Object{
		"apiVersion": "example.operon.dev/v1alpha1",
		"kind":       "WebApp",
		"metadata": map[string]any{
			"name": "shop", "namespace": "default", "uid": "3f0c6a52-8d1e-4b7a-9c2d-5e8f1a2b3c4d",
			"generation": 5, "creationTimestamp": "2026-11-20T10:00:00Z",
		},
		"spec": spec,
	}
}

// now is the request's time in these tests, as the host writes it.
const now = "2026-11-26T04:05:06.789Z"

var (
	current = operon.Readiness{Status: operon.ReadinessCurrent, Message: "Deployment is available. Replicas: 2"}
	rolling = operon.Readiness{Status: operon.ReadinessInProgress, Message: "Available: 1/2"}
	stuck   = operon.Readiness{Status: operon.ReadinessFailed, Message: "Progress deadline exceeded"}
	serving = operon.Readiness{Status: operon.ReadinessCurrent, Message: "Service is ready"}
)

func serviceChild() operon.Object { return operon.NewObject(operon.ServiceKind, "shop") }

func ingressChild() operon.Object { return operon.NewObject(operon.IngressKind, "shop") }

// request is a reconcile of spec at now with a Deployment (replicas, ready,
// image, readiness) and a current Service.
func request(spec map[string]any, replicas, ready int, image string, readiness operon.Readiness) *operontest.RequestBuilder {
	return operontest.Request(webapp(spec)).Now(now).
		ChildWithReadiness(deploymentChild(replicas, ready, image), readiness).
		ChildWithReadiness(serviceChild(), serving)
}

func deploymentChild(replicas, ready int, image string) operon.Object {
	var o operon.Object
	text := `{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": {"name": "shop", "namespace": "default", "generation": 7},
		"spec": {"replicas": ` + itoa(replicas) + `, "template": {"spec": {"containers": [{"name": "web", "image": "` + image + `"}]}}},
		"status": {"observedGeneration": 7, "updatedReplicas": ` + itoa(replicas) + `, "readyReplicas": ` + itoa(ready) + `,
			"conditions": [{"type": "Available", "lastUpdateTime": "2026-11-20T10:07:00Z", "lastTransitionTime": "2026-11-20T10:02:00Z"}]}}`
	o, err := operon.ParseObject([]byte(text))
	if err != nil {
		panic(err)
	}
	return o
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func run(t *testing.T, req *operontest.RequestBuilder) *operontest.Result {
	t.Helper()
	got, err := operontest.Reconcile(WebAppReconciler{}, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func condition(status operon.Object) operon.Object {
	conditions, _ := status.Lookup("conditions")
	return operon.Object(conditions.([]any)[0].(map[string]any))
}

func ready(r *operontest.Result) operon.Object { return condition(r.Status) }

func TestManifestShouldOwnDeploymentServiceAndIngressInThatOrder(t *testing.T) {
	m := WebAppReconciler{}.Manifest()
	owned := []string{}
	for _, k := range m.Owns {
		owned = append(owned, operon.KindString(k))
	}
	if m.Name != "webapp" || operon.KindString(m.For) != "example.operon.dev/v1alpha1 WebApp" || m.Finalizer != Finalizer {
		t.Errorf("manifest: %+v", m)
	}
	if want := []string{"apps/v1 Deployment", "v1 Service", "networking.k8s.io/v1 Ingress"}; !reflect.DeepEqual(owned, want) {
		t.Errorf("owns: %v", owned)
	}
}

func TestSpecDefaultsShouldMatchTheCRD(t *testing.T) {
	got := run(t, operontest.Request(webapp(map[string]any{"image": "nginx:1.27"})))
	d := got.Find("Deployment", "shop")
	if n, _ := d.Int64("spec", "replicas"); n != 1 {
		t.Errorf("replicas: %v", d)
	}
	c, _ := d.Lookup("spec", "template", "spec", "containers")
	container := operon.Object(c.([]any)[0].(map[string]any))
	if _, hasEnv := container["env"]; hasEnv {
		t.Error("no env without spec.env")
	}
	p, _ := container.Lookup("ports")
	if port, _ := operon.Object(p.([]any)[0].(map[string]any)).Int64("containerPort"); port != 8080 {
		t.Errorf("port: %v", port)
	}
}

func TestChildrenShouldCarryTheLabelsAndSelectThePods(t *testing.T) {
	got := run(t, operontest.Request(webapp(map[string]any{"image": "nginx:1.27"})))
	want := map[string]string{"app.kubernetes.io/name": "shop", "app.kubernetes.io/managed-by": "operon"}
	for _, o := range got.Desired {
		if !reflect.DeepEqual(o.Labels(), want) {
			t.Errorf("%s labels: %v", o.String("kind"), o.Labels())
		}
	}
	sel, _ := got.Find("Deployment", "shop").Lookup("spec", "selector", "matchLabels")
	svc, _ := got.Find("Service", "shop").Lookup("spec", "selector")
	if !reflect.DeepEqual(sel, map[string]any{"app.kubernetes.io/name": "shop"}) || !reflect.DeepEqual(sel, svc) {
		t.Errorf("selectors: %v %v", sel, svc)
	}
}

func TestIngressShouldFollowSpecIngress(t *testing.T) {
	with := run(t, operontest.Request(webapp(map[string]any{"image": "nginx:1.27", "ingress": map[string]any{"host": "shop.example.com"}})))
	i := with.Find("Ingress", "shop")
	paths, _ := i.Lookup("spec", "rules")
	path := paths.([]any)[0].(map[string]any)["http"].(map[string]any)["paths"].([]any)[0].(map[string]any)
	if path["path"] != "/" || path["pathType"] != "Prefix" {
		t.Errorf("path: %v", path)
	}
	if _, ok := i.Lookup("spec", "ingressClassName"); ok {
		t.Error("no class name unless asked")
	}
	without := run(t, operontest.Request(webapp(map[string]any{"image": "nginx:1.27"})))
	if len(without.Desired) != 2 || without.Find("Ingress", "shop") != nil {
		t.Errorf("without: %v", without.Desired)
	}
}

func TestReadyShouldSayWhichWantedChildIsMissingFirst(t *testing.T) {
	spec := map[string]any{"image": "nginx:1.27", "replicas": 2, "ingress": map[string]any{"host": "shop.example.com"}}
	cases := []struct {
		req  *operontest.RequestBuilder
		want string
	}{
		{operontest.Request(webapp(spec)).ChildWithReadiness(serviceChild(), serving), "deployment shop does not exist yet"},
		{operontest.Request(webapp(spec)).ChildWithReadiness(deploymentChild(2, 2, "nginx:1.27"), current), "service shop does not exist yet"},
		{request(spec, 2, 2, "nginx:1.27", current), "ingress shop does not exist yet"},
	}
	for _, tc := range cases {
		c := ready(run(t, tc.req))
		if c.String("status") != "False" || c.String("reason") != "Progressing" || c.String("message") != tc.want {
			t.Errorf("want %q: %v", tc.want, c)
		}
	}
}

func TestAnIngressNoLongerWantedShouldNotCount(t *testing.T) {
	spec := map[string]any{"image": "nginx:1.27", "replicas": 2}
	req := request(spec, 2, 2, "nginx:1.27", current).
		ChildWithReadiness(ingressChild(), operon.Readiness{Status: operon.ReadinessTerminating, Message: "being deleted"})
	got := run(t, req)
	if c := ready(got); c.String("status") != "True" || c.String("message") != "2 of 2 replicas ready" {
		t.Errorf("ready: %v", c)
	}
	if !reflect.DeepEqual(got.Reasons(), []string{"IngressRemoved", "Available"}) {
		t.Errorf("events: %v", got.Events)
	}
}

func TestReadyShouldNeedTheDeploymentToRunTheSpec(t *testing.T) {
	spec := map[string]any{"image": "nginx:1.27", "replicas": 2}
	for _, tc := range []struct {
		replicas int
		image    string
		events   []string
	}{{2, "nginx:1.26", []string{"Updated"}}, {3, "nginx:1.27", []string{"Scaled"}}} {
		// The Deployment is current for kstatus, but not of this spec.
		got := run(t, request(spec, tc.replicas, 1, tc.image, current))
		c := ready(got)
		if c.String("status") != "False" || c.String("reason") != "Progressing" ||
			c.String("message") != "deployment shop is being updated: 1 of 2 replicas ready" {
			t.Errorf("%v: %v", tc, c)
		}
		if !reflect.DeepEqual(got.Reasons(), tc.events) {
			t.Errorf("%v events: %v", tc, got.Events)
		}
	}
}

func TestReadyShouldFollowTheChildrensReadiness(t *testing.T) {
	spec := map[string]any{"image": "nginx:1.27", "replicas": 2}
	cases := []struct {
		req                     *operontest.RequestBuilder
		status, reason, message string
	}{
		{request(spec, 2, 1, "nginx:1.27", rolling), "False", "Progressing", "Deployment shop: Available: 1/2"},
		{request(spec, 2, 1, "nginx:1.27", stuck), "False", "Failed", "Deployment shop: Progress deadline exceeded"},
		{operontest.Request(webapp(spec)).ChildWithReadiness(deploymentChild(2, 2, "nginx:1.27"), current).
			ChildWithReadiness(serviceChild(), operon.Readiness{Status: operon.ReadinessUnknown, Message: "no idea"}),
			"False", "Progressing", "Service shop: no idea"},
		{request(spec, 2, 2, "nginx:1.27", current), "True", "Available", "2 of 2 replicas ready"},
	}
	for _, tc := range cases {
		c := ready(run(t, tc.req))
		if c.String("status") != tc.status || c.String("reason") != tc.reason || c.String("message") != tc.message {
			t.Errorf("want %s %s %q: %v", tc.status, tc.reason, tc.message, c)
		}
	}
}

func TestStatusShouldReportTheGenerationAndTheReadyReplicas(t *testing.T) {
	got := run(t, request(map[string]any{"image": "nginx:1.27", "replicas": 2}, 2, 1, "nginx:1.27", rolling))
	generation, _ := got.Status.Int64("observedGeneration")
	readyReplicas, _ := got.Status.Int64("readyReplicas")
	conditionGeneration, _ := ready(got).Int64("observedGeneration")
	if generation != 5 || readyReplicas != 1 || conditionGeneration != 5 {
		t.Errorf("status: %v", got.Status)
	}
}

func TestLastTransitionTimeShouldBeKeptWhileTheConditionHolds(t *testing.T) {
	spec := map[string]any{"image": "nginx:1.27", "replicas": 2}
	parent := webapp(spec)
	parent["status"] = map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-20T10:03:00Z",
		"reason": "Available", "message": "2 of 2 replicas ready",
	}}}
	withParent := func(readiness operon.Readiness) *operontest.RequestBuilder {
		return operontest.Request(parent).Now(now).
			ChildWithReadiness(deploymentChild(2, 2, "nginx:1.27"), readiness).ChildWithReadiness(serviceChild(), serving)
	}
	got := run(t, withParent(current))
	if ltt := ready(got).String("lastTransitionTime"); ltt != "2026-11-20T10:03:00Z" {
		t.Errorf("kept: %s", ltt)
	}
	if len(got.Events) != 0 {
		t.Errorf("a steady state records no events: %v", got.Events)
	}
	// The status changes: the request's time, exactly as the host wrote it.
	if ltt := ready(run(t, withParent(rolling))).String("lastTransitionTime"); ltt != now {
		t.Errorf("turned False: %s", ltt)
	}
	changed := run(t, request(spec, 2, 2, "nginx:1.27", current))
	if ltt := ready(changed).String("lastTransitionTime"); ltt != now || !reflect.DeepEqual(changed.Reasons(), []string{"Available"}) {
		t.Errorf("changed: %s %v", ltt, changed.Events)
	}
}

func TestEveryOutcomeShouldNeedTheFinalizer(t *testing.T) {
	for _, req := range []*operontest.RequestBuilder{
		operontest.Request(webapp(map[string]any{"image": "nginx:1.27"})),
		request(map[string]any{"image": "nginx:1.27", "replicas": 2}, 2, 2, "nginx:1.27", current),
	} {
		if got := run(t, req); !got.NeedsFinalizer {
			t.Errorf("needsFinalizer: %+v", got)
		}
	}
}

func TestInvalidSpecsShouldBeTerminal(t *testing.T) {
	cases := []struct {
		spec    map[string]any
		message string
	}{
		{map[string]any{"replicas": 1}, "WebApp default/shop is invalid: missing field `image`"},
		{map[string]any{"image": 3}, "WebApp default/shop is invalid: invalid type: integer `3`, expected a string"},
		{map[string]any{"image": "x", "replicas": 1.5}, "WebApp default/shop is invalid: invalid type: floating point `1.5`, expected i32"},
		{map[string]any{"image": "x", "port": 1e10}, "WebApp default/shop is invalid: invalid value: integer `10000000000`, expected i32"},
		{map[string]any{"image": " "}, "spec.image must not be empty"},
		{map[string]any{"image": "x", "replicas": -1}, "spec.replicas must be 0 or more, not -1"},
		{map[string]any{"image": "x", "port": 70000}, "spec.port must be between 1 and 65535, not 70000"},
		{map[string]any{"image": "x", "env": []any{map[string]any{"name": "A"}, map[string]any{"name": "A"}}}, "spec.env[1]: A is set twice"},
		{map[string]any{"image": "x", "ingress": map[string]any{"host": "h", "path": "store"}}, "spec.ingress.path must start with /"},
	}
	for _, tc := range cases {
		// Through JSON text, as the host hands it: 1e10 is written 10000000000.
		text, _ := json.Marshal(webapp(tc.spec))
		parent, _ := operon.ParseObject(text)
		_, err := operontest.Reconcile(WebAppReconciler{}, nil, operontest.Request(parent).Now(now).
			ChildWithReadiness(deploymentChild(2, 1, "nginx:1.27"), rolling))
		var f *operontest.Failure
		if !errors.As(err, &f) || !f.Terminal || f.Message != tc.message {
			t.Errorf("%v: got %v, want %q", tc.spec, err, tc.message)
			continue
		}
		// The failure says so in the status too.
		want := map[string]any{
			"observedGeneration": json.Number("5"), "readyReplicas": json.Number("1"),
			"conditions": []any{map[string]any{
				"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": tc.message,
				"observedGeneration": json.Number("5"), "lastTransitionTime": now,
			}},
		}
		if !reflect.DeepEqual(map[string]any(f.Status), want) {
			t.Errorf("%v: status %v", tc.spec, f.Status)
		}
	}
}

func TestAnInvalidSpecShouldKeepTheTimeOfAnUnchangedCondition(t *testing.T) {
	parent := webapp(map[string]any{"image": ""})
	parent["status"] = map[string]any{"conditions": []any{map[string]any{
		"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-20T10:03:00Z", "reason": "InvalidSpec",
	}}}
	_, err := operontest.Reconcile(WebAppReconciler{}, nil, operontest.Request(parent).Now(now))
	var f *operontest.Failure
	if !errors.As(err, &f) || condition(f.Status).String("lastTransitionTime") != "2026-11-20T10:03:00Z" {
		t.Errorf("got %v %v", err, f)
	}
	if ready, _ := f.Status.Int64("readyReplicas"); ready != 0 {
		t.Errorf("no Deployment, no ready replicas: %v", f.Status)
	}
}

func TestFinalizingShouldWantNothingAndFinish(t *testing.T) {
	got := run(t, operontest.Request(webapp(map[string]any{"image": "nginx:1.27"})).ChildWithReadiness(deploymentChild(1, 1, "nginx:1.27"), current).Finalizing(true))
	if len(got.Desired) != 0 || !got.Finalized || got.NeedsFinalizer || got.Status != nil || !reflect.DeepEqual(got.Reasons(), []string{"Cleanup"}) {
		t.Errorf("finalizing: %+v", got)
	}
	// A WebApp deleted with an invalid spec is still let go.
	broken := run(t, operontest.Request(webapp(map[string]any{"replicas": "x"})).Finalizing(true))
	if !broken.Finalized || broken.NeedsFinalizer {
		t.Errorf("finalizing an invalid WebApp: %+v", broken)
	}
}

func TestReconcileShouldBeDeterministicAndNeverRequeue(t *testing.T) {
	req := request(map[string]any{"image": "nginx:1.27", "env": []any{map[string]any{"name": "A", "value": "1"}}}, 3, 1, "nginx:1.27", rolling)
	first, second := run(t, req), run(t, req)
	if !reflect.DeepEqual(first, second) || first.RequeueAfter != 0 || first.RequeueAt != "" {
		t.Errorf("not deterministic or requeues: %+v", first)
	}
}

func validate(t *testing.T, op operon.Operation, spec any) (warnings []string, denial *operon.RawDenial) {
	t.Helper()
	object := webapp(nil)
	object["spec"] = spec
	review := operontest.Review(op, object)
	if op == operon.Delete {
		review.Object = nil
	}
	return operon.RunValidate(operontest.NewCluster(), WebAppReconciler{}, review)
}

func TestValidateShouldCheckImageReplicasAndPortInOrder(t *testing.T) {
	cases := []struct {
		spec any
		want string
	}{
		{map[string]any{"image": "nginx", "replicas": 3, "port": 80}, ""},
		{map[string]any{"image": "nginx"}, ""},
		{map[string]any{"image": "nginx", "replicas": nil, "port": nil}, ""},
		{map[string]any{"replicas": 3}, "spec.image must not be empty"},
		{map[string]any{"image": "  ", "replicas": 99}, "spec.image must not be empty"},
		{map[string]any{"image": 7}, "spec.image must not be empty"},
		{nil, "spec.image must not be empty"},
		{map[string]any{"image": "x", "replicas": 51, "port": 0}, "spec.replicas must be between 0 and 50, not 51"},
		{map[string]any{"image": "x", "replicas": -1}, "spec.replicas must be between 0 and 50, not -1"},
		{map[string]any{"image": "x", "replicas": "3"}, `spec.replicas must be between 0 and 50, not "3"`},
		{map[string]any{"image": "x", "replicas": 2.5}, "spec.replicas must be between 0 and 50, not 2.5"},
		{map[string]any{"image": "x", "replicas": 50, "port": 0}, "spec.port must be between 1 and 65535, not 0"},
		{map[string]any{"image": "x", "port": 65536}, "spec.port must be between 1 and 65535, not 65536"},
	}
	for _, tc := range cases {
		warnings, denial := validate(t, operon.Create, tc.spec)
		switch {
		case tc.want == "" && (denial != nil || len(warnings) != 0):
			t.Errorf("%v: want ok, got %v %+v", tc.spec, warnings, denial)
		case tc.want != "" && (denial == nil || denial.Message != tc.want || denial.Code != 0):
			t.Errorf("%v: want %q, got %+v", tc.spec, tc.want, denial)
		}
	}
	for _, op := range []operon.Operation{operon.Delete, operon.Connect} {
		if warnings, denial := validate(t, op, map[string]any{}); denial != nil || len(warnings) != 0 {
			t.Errorf("op %d: %v %+v", op, warnings, denial)
		}
	}
	if _, denial := validate(t, operon.Update, map[string]any{"image": ""}); denial == nil {
		t.Error("updates are validated too")
	}
}

func TestMutateShouldDefaultThePortOnCreateAndUpdate(t *testing.T) {
	mutate := func(op operon.Operation, spec any) *string {
		object := webapp(nil)
		object["spec"] = spec
		out, denial := operon.RunMutate(operontest.NewCluster(), WebAppReconciler{}, operontest.Review(op, object))
		if denial != nil {
			t.Fatalf("denied: %+v", denial)
		}
		return out
	}
	for _, spec := range []any{map[string]any{"image": "x"}, map[string]any{"image": "x", "port": nil}} {
		for _, op := range []operon.Operation{operon.Create, operon.Update} {
			out := mutate(op, spec)
			if out == nil {
				t.Fatalf("%v: not mutated", spec)
			}
			o, _ := operon.ParseObject([]byte(*out))
			if port, _ := o.Int64("spec", "port"); port != 8080 || o.String("spec", "image") != "x" || o.Name() != "shop" {
				t.Errorf("mutated: %s", *out)
			}
		}
	}
	if out := mutate(operon.Create, map[string]any{"image": "x", "port": 80}); out != nil {
		t.Errorf("a set port stays: %s", *out)
	}
	if out := mutate(operon.Connect, map[string]any{"image": "x"}); out != nil {
		t.Errorf("connect is not mutated: %s", *out)
	}
}

func convert(t *testing.T, desired string, objects ...any) []operon.Object {
	t.Helper()
	out, err := operontest.Convert(WebAppReconciler{}, desired, objects...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func parse(t *testing.T, text string) operon.Object {
	t.Helper()
	o, err := operon.ParseObject([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

const (
	alpha = `{"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp",
		"metadata": {"name": "shop", "namespace": "default", "uid": "u1"},
		"spec": {"image": "nginx:1.27", "port": 8080, "env": [{"name": "A", "value": "1"}], "replicas": 2, "ingress": {"host": "h"}},
		"status": {"readyReplicas": 2}}`
	v1 = `{"apiVersion": "example.operon.dev/v1", "kind": "WebApp",
		"metadata": {"name": "shop", "namespace": "default", "uid": "u1"},
		"spec": {"container": {"image": "nginx:1.27", "port": 8080, "env": [{"name": "A", "value": "1"}]}, "replicas": 2, "ingress": {"host": "h"}},
		"status": {"readyReplicas": 2}}`
)

func TestConvertShouldMoveTheContainersFieldsBothWays(t *testing.T) {
	if got := convert(t, V1, parse(t, alpha)); !reflect.DeepEqual(got, []operon.Object{parse(t, v1)}) {
		t.Errorf("to v1: %v", got)
	}
	if got := convert(t, V1alpha1, parse(t, v1)); !reflect.DeepEqual(got, []operon.Object{parse(t, alpha)}) {
		t.Errorf("to v1alpha1: %v", got)
	}
	// Only the fields present move; none present, no container.
	some := parse(t, `{"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp", "metadata": {"name": "a"}, "spec": {"image": "x", "replicas": 1}}`)
	if got := convert(t, V1, some)[0]; !reflect.DeepEqual(got["spec"], map[string]any{"container": map[string]any{"image": "x"}, "replicas": json.Number("1")}) {
		t.Errorf("image only: %v", got)
	}
	none := parse(t, `{"apiVersion": "example.operon.dev/v1alpha1", "kind": "WebApp", "metadata": {"name": "a"}, "spec": {"replicas": 1}}`)
	if got := convert(t, V1, none)[0]; !reflect.DeepEqual(got["spec"], map[string]any{"replicas": json.Number("1")}) {
		t.Errorf("none: %v", got)
	}
}

func TestConvertShouldKeepObjectsAtTheDesiredVersionAndTheOrder(t *testing.T) {
	got := convert(t, V1, parse(t, v1), parse(t, alpha))
	if !reflect.DeepEqual(got, []operon.Object{parse(t, v1), parse(t, v1)}) {
		t.Errorf("got %v", got)
	}
}

func TestConvertShouldRefuseOtherVersionsAndKinds(t *testing.T) {
	versions := "WebApp has versions example.operon.dev/v1alpha1 and example.operon.dev/v1"
	cases := []struct {
		desired string
		object  string
		want    string
	}{
		{"example.operon.dev/v2", alpha, "cannot convert to example.operon.dev/v2: " + versions},
		{V1, `{"apiVersion": "example.operon.dev/v2", "kind": "WebApp", "metadata": {"name": "a"}}`, "cannot convert example.operon.dev/v2 WebApp: " + versions},
		{V1, `{"apiVersion": "example.operon.dev/v1alpha1", "kind": "Shop", "metadata": {"name": "a"}}`, "cannot convert example.operon.dev/v1alpha1 Shop: " + versions},
	}
	for _, tc := range cases {
		_, err := operontest.Convert(WebAppReconciler{}, tc.desired, parse(t, alpha), parse(t, tc.object))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %q", tc.desired, err, tc.want)
		}
	}
}
