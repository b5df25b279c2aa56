package operon_test

// Outbound HTTP (contract 0.2's egress): operon.HTTP, and its replay from
// recorded exchanges by operontest, with the rule every runner follows.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	operon "operon.dev/sdk/go"
	"operon.dev/sdk/go/operontest"
)

// zoneKeeper reads a DNS zone through the host and publishes its serial.
type zoneKeeper struct{}

func (zoneKeeper) Manifest() operon.Manifest {
	return operon.Manifest{Name: "zone-keeper", For: greetingKind, Owns: []operon.GVK{operon.ConfigMapKind}}
}

func (zoneKeeper) Reconcile(ctx context.Context, req *operon.Request) (*operon.Outcome, error) {
	zone := req.Name() + "."
	resp, err := operon.HTTP(ctx, operon.HTTPRequest{
		URL:        "https://dns.example/api/zones/" + zone,
		Headers:    [][2]string{{"accept", "application/json"}},
		Credential: "pdns",
	})
	if operon.IsHTTPError(err, operon.HTTPTimeout) {
		return operon.NewOutcome().SetStatus(map[string]any{"zone": "timed out"}), nil
	}
	if err != nil {
		return nil, err
	}
	if resp.Status == 404 {
		create, err := operon.HTTP(ctx, operon.HTTPRequest{
			Method: "POST", URL: "https://dns.example/api/zones", Credential: "pdns",
			Body: []byte(fmt.Sprintf(`{"name":%q}`, zone)),
		})
		if err != nil {
			return nil, err
		}
		if !create.OK() {
			return nil, fmt.Errorf("creating zone %s: status %d", zone, create.Status)
		}
		return operon.NewOutcome().SetStatus(map[string]any{"zone": "created"}), nil
	}
	var z struct {
		Serial int `json:"serial"`
	}
	if err := resp.JSON(&z); err != nil {
		return nil, err
	}
	return operon.NewOutcome().SetStatus(map[string]any{"zone": "present", "serial": z.Serial, "type": resp.Header("Content-Type")}), nil
}

func getZone() operon.HTTPRequest {
	return operon.HTTPRequest{Method: "GET", URL: "https://dns.example/api/zones/hello.", Credential: "pdns"}
}

func TestACallWithARecordedExchangeShouldGetItsAnswer(t *testing.T) {
	cluster := operontest.NewCluster()
	cluster.AddExchange(operontest.Respond(getZone(), 200, `{"serial": 7}`, [2]string{"content-type", "application/json"}))
	got, err := operontest.Reconcile(zoneKeeper{}, cluster, operontest.Request(parent("hi")))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.String("zone") != "present" || got.Status.String("type") != "application/json" {
		t.Errorf("status: %v", got.Status)
	}
	if serial, _ := got.Status.Lookup("serial"); fmt.Sprint(serial) != "7" {
		t.Errorf("serial: %v", got.Status)
	}
}

func TestReplayShouldMatchMethodWithoutCaseURLBodyAndCredentialNotHeaders(t *testing.T) {
	cluster := operontest.NewCluster()
	recorded := getZone()
	recorded.Method = "get"
	recorded.Headers = [][2]string{{"user-agent", "recorder"}}
	recorded.TimeoutMs = 999
	post := operon.HTTPRequest{Method: "POST", URL: "https://dns.example/api/zones", Credential: "pdns", Body: []byte(`{"name":"hello."}`)}
	cluster.AddExchange(
		operontest.Respond(operon.HTTPRequest{Method: "GET", URL: "https://dns.example/api/zones/hello."}, 500, "no credential: another call"),
		operontest.Respond(recorded, 404, ""),
		operontest.Respond(post, 201, ""),
		operontest.Respond(getZone(), 200, `{"serial":1}`), // left unused: fine
	)
	got, err := operontest.Reconcile(zoneKeeper{}, cluster, operontest.Request(parent("hi")))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.String("zone") != "created" {
		t.Errorf("status: %v", got.Status)
	}
}

func TestAnUnrecordedCallShouldFailTheRunNamingItWhateverTheGuestDid(t *testing.T) {
	// The recording answers the GET with a 404; the POST that follows is
	// not recorded (another body). The guest turns the not-recorded error
	// into a failure, but a guest that swallowed it would fail the same.
	cluster := operontest.NewCluster()
	cluster.AddExchange(
		operontest.Respond(getZone(), 404, ""),
		operontest.Respond(operon.HTTPRequest{Method: "POST", URL: "https://dns.example/api/zones", Credential: "pdns", Body: []byte(`{}`)}, 201, ""),
	)
	_, err := operontest.Reconcile(zoneKeeper{}, cluster, operontest.Request(parent("hi")))
	var unrecorded *operontest.Unrecorded
	if !errors.As(err, &unrecorded) {
		t.Fatalf("got %v", err)
	}
	want := "the guest made calls the fixture's `egress` does not hold: POST https://dns.example/api/zones (17 bytes of body) with credential \"pdns\""
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}

	swallow := probeHTTP(func(ctx context.Context) error {
		_, err := operon.HTTP(ctx, operon.HTTPRequest{URL: "https://a.example/x"})
		if !operon.IsHTTPError(err, operon.HTTPNotRecorded) {
			t.Errorf("the guest should see notRecorded, got %v", err)
		}
		if !strings.Contains(err.Error(), "GET https://a.example/x is not in the recording (it holds no calls)") {
			t.Errorf("message: %v", err)
		}
		return nil // swallowed
	})
	empty := operontest.NewCluster()
	_, err = operontest.Reconcile(swallow, empty, operontest.Request(parent("hi")))
	if err == nil || err.Error() != "the guest made calls the fixture's `egress` does not hold: GET https://a.example/x" {
		t.Errorf("got %v", err)
	}
	if missed := empty.Missed(); len(missed) != 1 || missed[0].URL != "https://a.example/x" {
		t.Errorf("missed: %v", missed)
	}
}

func TestTheNotRecordedMessageShouldListWhatTheRecordingHolds(t *testing.T) {
	cluster := operontest.NewCluster()
	cluster.AddExchange(operontest.Respond(operon.HTTPRequest{Method: "POST", URL: "https://a.example/y", Body: []byte("abc")}, 200, ""))
	var message string
	p := probeHTTP(func(ctx context.Context) error {
		_, err := operon.HTTP(ctx, operon.HTTPRequest{URL: "https://a.example/x"})
		message = err.(*operon.HTTPError).Message
		return err
	})
	if _, err := operontest.Reconcile(p, cluster, operontest.Request(parent("hi"))); err == nil {
		t.Fatal("an unrecorded call should fail")
	}
	if want := "GET https://a.example/x is not in the recording (it holds: POST https://a.example/y (3 bytes of body))"; message != want {
		t.Errorf("got  %s\nwant %s", message, want)
	}
}

func TestARecordedErrorShouldReachTheGuestWithItsKind(t *testing.T) {
	cluster := operontest.NewCluster()
	cluster.AddExchange(operontest.Fail(getZone(), operon.HTTPTimeout, "no answer in 10s"))
	got, err := operontest.Reconcile(zoneKeeper{}, cluster, operontest.Request(parent("hi")))
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.String("zone") != "timed out" {
		t.Errorf("status: %v", got.Status)
	}

	for _, kind := range []string{operon.HTTPDenied, operon.HTTPInvalid, operon.HTTPUnreachable, operon.HTTPTooLarge, operon.HTTPBudget} {
		cluster := operontest.NewCluster()
		cluster.AddExchange(operontest.Fail(getZone(), kind, "because"))
		_, err := operontest.Reconcile(zoneKeeper{}, cluster, operontest.Request(parent("hi")))
		var failure *operontest.Failure
		if !errors.As(err, &failure) || failure.Terminal {
			t.Fatalf("%s: a returned HTTP error should be a transient failure, got %v", kind, err)
		}
		var httpErr *operon.HTTPError
		want := (&operon.HTTPError{Kind: kind, Message: "because"}).Error()
		if failure.Message != want || errors.As(err, &httpErr) {
			t.Errorf("%s: %q, want %q", kind, failure.Message, want)
		}
	}
}

func TestExchangesShouldParseFromTheFixtureFormat(t *testing.T) {
	exchanges, err := operontest.ParseEgress([]byte(`[
		{"request": {"method": "GET", "url": "https://dns.example/api/zones/hello.", "credential": "pdns", "headers": {"b": "2", "a": "1"}, "timeoutMs": 500},
		 "response": {"status": 200, "headers": {"content-type": "application/json"}, "body": "{\"serial\": 3}"}},
		{"request": {"method": "PUT", "url": "https://x.example/", "body": {"base64": "/wA="}},
		 "response": {"status": 204, "body": {"base64": "AAE="}}},
		{"request": {"method": "DELETE", "url": "https://dns.example/api/zones/b."}, "error": {"tooLarge": "1 MiB"}}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(exchanges) != 3 {
		t.Fatalf("%d exchanges", len(exchanges))
	}
	first := exchanges[0]
	if first.Request.Credential != "pdns" || first.Request.TimeoutMs != 500 || fmt.Sprint(first.Request.Headers) != "[[a 1] [b 2]]" || first.Request.Body != nil {
		t.Errorf("request: %+v", first.Request)
	}
	if first.Response.Status != 200 || first.Response.Header("Content-Type") != "application/json" || string(first.Response.Body) != `{"serial": 3}` {
		t.Errorf("response: %+v", first.Response)
	}
	if string(exchanges[1].Request.Body) != "\xff\x00" || string(exchanges[1].Response.Body) != "\x00\x01" {
		t.Errorf("base64 bodies: %+v", exchanges[1])
	}
	if e := exchanges[2].Error; e == nil || e.Kind != operon.HTTPTooLarge || e.Message != "1 MiB" {
		t.Errorf("error: %+v", exchanges[2])
	}

	cluster := operontest.NewCluster()
	cluster.AddExchange(exchanges...)
	got, err := operontest.Reconcile(zoneKeeper{}, cluster, operontest.Request(parent("hi")))
	if err != nil {
		t.Fatal(err)
	}
	if serial, _ := got.Status.Lookup("serial"); fmt.Sprint(serial) != "3" {
		t.Errorf("status: %v", got.Status)
	}

	for _, bad := range []string{
		`[{"request": {"method": "GET", "url": "https://a/"}, "error": {"slow": "x"}}]`,
		`[{"request": {"method": "GET", "url": "https://a/", "extra": 1}}]`,
		`[{"response": {"status": 200}}]`,
		`[{"request": {"method": "GET", "url": "https://a/", "body": {"hex": "00"}}}]`,
	} {
		if _, err := operontest.ParseEgress([]byte(bad)); err == nil {
			t.Errorf("should refuse %s", bad)
		}
	}
}

func TestResponseHelpers(t *testing.T) {
	r := operon.HTTPResponse{Status: 201, Headers: [][2]string{{"ETag", "x1"}}, Body: []byte("not json")}
	if !r.OK() || r.Header("etag") != "x1" || r.Header("missing") != "" {
		t.Errorf("%+v", r)
	}
	var v any
	if err := r.JSON(&v); err == nil || !strings.Contains(err.Error(), "status 201") {
		t.Errorf("JSON: %v", err)
	}
	if (operon.HTTPResponse{Status: 404}).OK() {
		t.Error("404 is not OK")
	}
}

func TestOutsideReconcileEveryCallShouldBeDenied(t *testing.T) {
	// A host that is no operon.Egress (a hand-written fake), and
	// conversion through operontest, where the host refuses every call.
	_, err := operon.HTTP(operon.WithHost(context.Background(), readOnlyHost{}), operon.HTTPRequest{URL: "https://a.example/"})
	if !operon.IsHTTPError(err, operon.HTTPDenied) {
		t.Errorf("got %v", err)
	}
	c := converterHTTP(func(ctx context.Context) error {
		_, err := operon.HTTP(ctx, operon.HTTPRequest{URL: "https://a.example/"})
		if !operon.IsHTTPError(err, operon.HTTPDenied) {
			return fmt.Errorf("want denied, got %v", err)
		}
		return nil
	})
	if _, err := operontest.Convert(c, "demo.operon.dev/v1", parent("hi")); err != nil {
		t.Error(err)
	}
}

// probeHTTP runs call in Reconcile and answers an empty outcome.
type probeHTTP func(ctx context.Context) error

func (probeHTTP) Manifest() operon.Manifest {
	return operon.Manifest{Name: "probe-http", For: greetingKind}
}

func (p probeHTTP) Reconcile(ctx context.Context, _ *operon.Request) (*operon.Outcome, error) {
	return nil, p(ctx)
}

type converterHTTP func(ctx context.Context) error

func (c converterHTTP) Convert(ctx context.Context, objects []operon.Object, desiredAPIVersion string) ([]operon.Object, error) {
	if err := c(ctx); err != nil {
		return nil, err
	}
	for _, o := range objects {
		o["apiVersion"] = desiredAPIVersion
	}
	return objects, nil
}

type readOnlyHost struct{}

func (readOnlyHost) Log(operon.Level, string, [][2]string) {}
func (readOnlyHost) Get(operon.ObjectRef) (string, bool, error) {
	return "", false, nil
}
func (readOnlyHost) List(operon.GVK, string, string) ([]string, error) { return nil, nil }
