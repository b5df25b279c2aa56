package operon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"operon.dev/sdk/go/internal/abi"
)

// HTTPRequest is one outbound HTTP request, made by the host for the
// reconciler ([HTTP]).
type HTTPRequest struct {
	// Method is `GET`, `HEAD`, `POST`, `PUT`, `PATCH` or `DELETE`; empty
	// means GET.
	Method string
	// URL is absolute: `https://...` (or, when the grant says so,
	// `http://...`).
	URL string
	// Headers to send, as name/value pairs. `host`, `content-length`,
	// hop-by-hop headers and the header a credential sets are the host's.
	Headers [][2]string
	// Body is the body to send; nil means none.
	Body []byte
	// Credential names one of the Reconciler's `spec.credentials`: the
	// host adds it to the request (a bearer token, basic auth or a named
	// header) when the URL's host is one the credential is for. Its value
	// never reaches the reconciler. Empty means none.
	Credential string
	// TimeoutMs is the call's deadline in milliseconds; 0 means the host's
	// default (10 s). Never past what remains of the reconcile's deadline.
	TimeoutMs uint32
}

// HTTPResponse is an HTTP answer, whatever its status: a 404 or a 500 is
// an answer, not an error.
type HTTPResponse struct {
	Status  int
	Headers [][2]string
	Body    []byte
}

// Header returns the value of the first header called name (compared
// without case), or "" when there is none.
func (r HTTPResponse) Header(name string) string {
	for _, h := range r.Headers {
		if strings.EqualFold(h[0], name) {
			return h[1]
		}
	}
	return ""
}

// OK reports whether the status is a success (2xx).
func (r HTTPResponse) OK() bool { return r.Status >= 200 && r.Status < 300 }

// JSON decodes the body into v (as [encoding/json.Unmarshal]).
func (r HTTPResponse) JSON(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("the HTTP answer (status %d) is not the JSON expected: %w", r.Status, err)
	}
	return nil
}

// The kinds of [HTTPError], as fixtures name them (`error: {timeout: ...}`).
const (
	// HTTPDenied: not allowed by the Reconciler's grants or the host's
	// rules (an ungranted host or method, a private address, an unknown
	// credential); nothing was sent.
	HTTPDenied = "denied"
	// HTTPInvalid: the request is malformed (a URL, a method, a header).
	HTTPInvalid = "invalid"
	// HTTPTimeout: no answer in time (the call's deadline or the
	// reconcile's).
	HTTPTimeout = "timeout"
	// HTTPUnreachable: no connection, or it broke (name not found,
	// refused, TLS).
	HTTPUnreachable = "unreachable"
	// HTTPTooLarge: the answer is larger than the host takes (1 MiB by
	// default).
	HTTPTooLarge = "tooLarge"
	// HTTPBudget: this reconcile made as many calls as the host allows
	// (16 by default).
	HTTPBudget = "budget"
	// HTTPNotRecorded: replaying a recording (`operon test`, operontest),
	// the recording holds no such call.
	HTTPNotRecorded = "notRecorded"
)

// HTTPError is why an [HTTP] call got no answer: its Kind (one of
// [HTTPDenied], [HTTPInvalid], [HTTPTimeout], [HTTPUnreachable],
// [HTTPTooLarge], [HTTPBudget], [HTTPNotRecorded]) and a message for
// people. Returned as is from Reconcile, it is a transient failure.
type HTTPError struct {
	Kind    string
	Message string
}

func (e *HTTPError) Error() string {
	what := map[string]string{
		HTTPDenied:      "denied",
		HTTPInvalid:     "invalid request",
		HTTPTimeout:     "timed out",
		HTTPUnreachable: "unreachable",
		HTTPTooLarge:    "answer too large",
		HTTPBudget:      "call budget spent",
		HTTPNotRecorded: "not recorded",
	}[e.Kind]
	if what == "" {
		what = e.Kind
	}
	return what + ": " + e.Message
}

// IsHTTPError reports whether err is (or wraps) an [HTTPError] of kind.
func IsHTTPError(err error, kind string) bool {
	var e *HTTPError
	return errors.As(err, &e) && e.Kind == kind
}

// HTTP makes one HTTP request through the host (contract 0.2's `egress`),
// for a reconciler that manages something outside the cluster (DNS
// records, buckets, users of an identity provider) and cleans it up when
// the request is finalizing:
//
//	resp, err := operon.HTTP(ctx, operon.HTTPRequest{
//		Method:     "GET",
//		URL:        "https://dns.example/api/zones/" + zone,
//		Credential: "pdns",
//	})
//	if err != nil {
//		return nil, err // *operon.HTTPError: transient, retried with backoff
//	}
//	if resp.Status == 404 { ... }
//	var z Zone
//	if err := resp.JSON(&z); err != nil { ... }
//
// The host makes the call, not the component: only what the Reconciler's
// `spec.grants.egress` allows (nothing by default), with a credential of
// its `spec.credentials` named by Credential, bounded in time, size and
// number of calls per reconcile. Only Reconcile may call out: in the
// manifest, admission and conversion every call is denied.
//
// The error is an [*HTTPError] when no answer came (a status code is an
// answer: check [HTTPResponse.OK]), or an error saying that ctx carries
// no host. Fixtures hold the calls and their answers (`egress:`), and
// `operon test` replays them; natively, [operon.dev/sdk/go/operontest]
// does ([operontest.Cluster.AddExchange]).
func HTTP(ctx context.Context, request HTTPRequest) (HTTPResponse, error) {
	host, err := hostFrom(ctx)
	if err != nil {
		return HTTPResponse{}, err
	}
	egress, ok := host.(Egress)
	if !ok {
		return HTTPResponse{}, &HTTPError{Kind: HTTPDenied, Message: "the host in the context makes no HTTP calls (it is no operon.Egress)"}
	}
	if request.Method == "" {
		request.Method = "GET"
	}
	response, failure := egress.Fetch(abi.HTTPRequest(request))
	if failure != nil {
		return HTTPResponse{}, &HTTPError{Kind: failure.Kind, Message: failure.Message}
	}
	return HTTPResponse(response), nil
}

// Egress is what a host implements to make HTTP calls for [HTTP]: the
// WIT `egress` import inside a component,
// [operon.dev/sdk/go/operontest.Cluster] (recorded exchanges) natively.
type Egress = abi.Egress

// The records of the WIT `egress` interface, as [Egress.Fetch] takes and
// answers them (a nil Body, an empty Credential, a zero TimeoutMs are
// none; RawHTTPError.Kind is one of the [HTTPError] kinds).
type (
	RawHTTPRequest  = abi.HTTPRequest
	RawHTTPResponse = abi.HTTPResponse
	RawHTTPError    = abi.HTTPError
)
