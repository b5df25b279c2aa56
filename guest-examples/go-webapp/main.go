// Command go-webapp is the WebApp reconciler in Go, with exactly the
// behaviour of the Rust example (guest-examples/rust-webapp/src/lib.rs): a
// WebApp (example.operon.dev/v1alpha1, ../webapp/crd.yaml) yields a
// Deployment, a ClusterIP Service and, when spec.ingress is set, an Ingress.
//
//   - Children: all named after the WebApp, labelled
//     app.kubernetes.io/name=<name> and app.kubernetes.io/managed-by=operon.
//   - Status: observedGeneration, readyReplicas and a Ready condition: a
//     wanted child missing, the Deployment not running the spec yet, a
//     child not current (the host's readiness), else Available. Its
//     lastTransitionTime is the request's time (request.now), never the
//     clock's.
//   - Events only when something is about to change: Created, Scaled,
//     Updated, IngressCreated, IngressRemoved, Available, and Cleanup when
//     the WebApp is deleted (finalizer example.operon.dev/cleanup, which
//     every outcome asks for).
//   - No requeue: the Deployment is owned, so its changes reconcile again.
//   - A spec that does not parse or validate is a terminal failure, with the
//     Rust example's messages (the shared fixtures pin them), carrying a
//     status whose Ready condition says InvalidSpec.
//   - Admission (admission.go): validate and default WebApps.
//   - Conversion (conversion.go): WebApps between v1alpha1 and v1.
package main

import operon "operon.dev/sdk/go"

func init() { operon.Export(WebAppReconciler{}) }

// main is required by Go and never called: the host calls the exports.
func main() {}
