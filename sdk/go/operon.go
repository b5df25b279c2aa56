// Package operon writes Operon reconcilers in Go.
//
// A reconciler is a pure function compiled to a WebAssembly component: the
// host hands it one object (the parent) with its children and related
// objects, and it answers with the children that should exist, the
// parent's status, events and when to run again. The host does all the
// I/O: it watches the cluster, server-side applies the answer, deletes the
// children no longer wanted, writes the status and records the events.
//
// Implement [Reconciler] and register it once from the main package:
//
//	func init() { operon.Export(Greeter{}) }
//
//	func main() {} // required by Go, never called in a component
//
// `operon build` compiles the package for GOOS=wasip1 with the bindings of
// the project's WIT world and turns it into a component. Natively (go
// test), the same [Run] code path runs with a fake cluster
// ([operon.dev/sdk/go/operontest]).
//
// # The contract
//
//   - Level-based: the host may call Reconcile any number of times for the
//     same object. Derive the answer from the Request alone; keep no state
//     between calls (an instance may be fresh for every call).
//   - Whole truth: the Outcome lists every child that should exist; existing
//     children it leaves out are deleted.
//   - Deterministic: no clock readings (the time is an input,
//     [Request.Now]), no randomness, so an unchanged cluster causes no
//     writes.
//   - Errors: a returned error is transient (retried with backoff) unless it
//     wraps [TerminalError] (not retried until the object changes); either
//     may carry the parent's status ([WithStatus]).
//
// # Contract 0.2
//
// This SDK speaks operon:reconciler@0.2: the request's time ([Request.Now],
// [Request.NowTime]); each child's readiness as the host rates it
// ([Request.Readiness], [Request.AllChildrenCurrent]); an outcome's
// [Outcome.RequeueAt], [Outcome.SetNeedsFinalizer] (by default true when
// the manifest has a finalizer, except when finalizing) and
// [Outcome.SetParentMetadata]; failures with a status ([WithStatus]);
// watches [ByReference] and [BySelector]; update strategies per owned kind
// ([OwnedUpdate]); and conversion ([Converter]) for the worlds
// `reconciler-with-conversion` and `reconciler-with-admission-and-conversion`.
//
// # Calling out (egress)
//
// A reconciler that manages something outside the cluster (DNS records,
// buckets, users of an identity provider) calls it through the host with
// [HTTP]:
//
//	resp, err := operon.HTTP(ctx, operon.HTTPRequest{
//		Method: "PATCH", URL: "https://dns.example/api/zones/" + zone,
//		Headers: [][2]string{{"content-type", "application/json"}},
//		Body: body, Credential: "pdns",
//	})
//
// The answer is an [HTTPResponse] whatever its status ([HTTPResponse.OK],
// [HTTPResponse.Header], [HTTPResponse.JSON]); no answer is an
// [*HTTPError] whose Kind says why ([HTTPDenied], [HTTPTimeout], ...;
// [IsHTTPError]). The host makes the call, and only what the Reconciler
// grants: `spec.grants.egress` lists the hosts, ports, methods and paths
// allowed (nothing by default), and `spec.credentials` the credentials a
// request may name; their values never enter the component (docs/egress.md
// says it all). Only Reconcile may call out; clean up outside state when
// [Request.Finalizing].
//
// Fixtures record the calls and their answers under `egress:`, and `operon
// test` replays them with no network:
//
//	egress:
//	- request: {method: GET, url: "https://dns.example/api/zones/a.", credential: pdns}
//	  response: {status: 200, headers: {content-type: application/json}, body: '{"serial": 1}'}
//	- request: {method: DELETE, url: "https://dns.example/api/zones/b."}
//	  error: {timeout: "no answer in 10s"}
//
// Each call takes the first unused exchange with the same method (without
// case), URL, body and credential (headers and timeout are not compared);
// a call none answers gets a [HTTPNotRecorded] error and fails the
// fixture, naming the call, whatever the reconciler made of the error.
// Natively, [operon.dev/sdk/go/operontest.Cluster.AddExchange] records
// exchanges and replays them by the same rule
// ([operon.dev/sdk/go/operontest.ParseEgress] reads a fixture's list
// written as JSON).
package operon

import (
	"context"

	"operon.dev/sdk/go/internal/abi"
)

// Version is this SDK's release: one version for every Operon SDK and the
// host (`cargo xtask version` sets it), published as the module version
// tag sdk/go/v<Version>. Its minor is that of the WIT contract it speaks,
// operon:reconciler@0.2.
const Version = "0.2.0"

// Reconciler computes the desired state of one parent object.
type Reconciler interface {
	// Manifest describes the reconciler. Must be pure and cheap: the host
	// calls it when it loads (and smoke-tests) the module.
	Manifest() Manifest
	// Reconcile computes the desired state of one parent. A nil error with
	// a nil Outcome means an empty outcome (every child deleted). An error
	// is transient unless it wraps [TerminalError]; nothing of the
	// reconcile is written either way.
	Reconcile(ctx context.Context, req *Request) (*Outcome, error)
}

// Export registers r as the component's reconciler. Call it once, from an
// init function of the main package. When r also implements [Validator]
// or [Mutator], they are the component's admission functions, exported
// when operon.toml's world is "reconciler-with-admission" or
// "reconciler-with-admission-and-conversion"; when it implements
// [Converter], that is its `convert`, exported by the worlds "...-conversion".
func Export(r Reconciler) {
	abi.Exports.Manifest = func() abi.Manifest { return r.Manifest() }
	abi.Exports.Reconcile = func(host abi.Host, req abi.Request) (abi.Outcome, *abi.Failure) {
		defer afterCall()
		return Run(host, r, req)
	}
	abi.Exports.Validate, abi.Exports.Mutate, abi.Exports.Convert = nil, nil, nil
	if v, ok := r.(Validator); ok {
		abi.Exports.Validate = func(host abi.Host, review abi.Review) ([]string, *abi.Denial) {
			defer afterCall()
			return RunValidate(host, v, review)
		}
	}
	if m, ok := r.(Mutator); ok {
		abi.Exports.Mutate = func(host abi.Host, review abi.Review) (*string, *abi.Denial) {
			defer afterCall()
			return RunMutate(host, m, review)
		}
	}
	if c, ok := r.(Converter); ok {
		abi.Exports.Convert = func(host abi.Host, objects []string, desired string) ([]string, *string) {
			defer afterCall()
			return RunConvert(host, c, objects, desired)
		}
	}
}

// afterCall runs at the end of every exported call; in a component it
// collects garbage there (see export_wasip1.go).
var afterCall = func() {}

// Host is what a component imports from the host: logging and reads of
// the host's cache. The SDK implements it with the WIT imports inside a
// component; [operon.dev/sdk/go/operontest.Cluster] implements it natively.
type Host = abi.Host

// Level is a log severity of [Host.Log].
type Level = abi.Level

// Log levels.
const (
	LevelTrace = abi.LevelTrace
	LevelDebug = abi.LevelDebug
	LevelInfo  = abi.LevelInfo
	LevelWarn  = abi.LevelWarn
	LevelError = abi.LevelError
)
