// Package wit is where `operon build` puts the bindings that wit-bindgen's
// Go generator writes for the project's world (wit_exports,
// operon_reconciler_types, operon_reconciler_host, ...).
//
// The generated files never exist on disk here: `operon build` writes them
// under the project's .operon/build/go and hands them to `go build
// -overlay`, so a vendored SDK stays untouched and two projects with
// different worlds can share one SDK directory. The directories below hold
// only a doc.go each, so that `go mod tidy` and `go vet ./...` resolve the
// import paths without a build; the hand-written glue in export_* is
// compiled only for GOOS=wasip1.
package wit
