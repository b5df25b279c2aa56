// The WebApp reconciler natively, through the SDK's testing path (the same
// code the component runs). The shared fixtures (guest-examples/webapp/fixtures)
// run through the component with `operon test`; these tests pin single
// rules, as rust-webapp's do, and admission.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ConversionError, Denied, type KubeObject, Terminal } from "@operon/sdk";
import {
  type TestRequest,
  convert,
  mutate,
  reconcile,
  request,
  review,
  validate,
  withReadiness,
} from "@operon/sdk/testing";
import { FINALIZER, WebAppReconciler } from "../src/index.js";

const webapp = (spec: KubeObject, status?: KubeObject): KubeObject => ({
  apiVersion: "example.operon.dev/v1alpha1",
  kind: "WebApp",
  metadata: {
    name: "shop",
    namespace: "default",
    uid: "3f0c6a52-8d1e-4b7a-9c2d-5e8f1a2b3c4d",
    generation: 5,
    creationTimestamp: "2026-11-20T10:00:00Z",
  },
  spec,
  ...(status ? { status } : {}),
});

const deployment = (replicas: number, ready: number, image: string): KubeObject => ({
  apiVersion: "apps/v1",
  kind: "Deployment",
  metadata: { name: "shop", namespace: "default", generation: 7 },
  spec: { replicas, template: { spec: { containers: [{ name: "web", image }] } } },
  status: { observedGeneration: 7, updatedReplicas: replicas, readyReplicas: ready },
});
const service = (): KubeObject => ({ apiVersion: "v1", kind: "Service", metadata: { name: "shop", namespace: "default" } });
const ingress = (): KubeObject => ({
  apiVersion: "networking.k8s.io/v1",
  kind: "Ingress",
  metadata: { name: "shop", namespace: "default" },
});

// Readiness is stated here (the host's rules are pinned by the shared fixtures).
const current = (child: KubeObject) => withReadiness(child, "current", "Resource is current");
/** Every child a WebApp without an ingress wants, all current. */
const settled = (replicas: number, ready: number, image: string) => [
  current(deployment(replicas, ready, image)),
  current(service()),
];
const NOW = "2026-11-26T04:05:06.789Z";

const run = (req: TestRequest) => reconcile(new WebAppReconciler(), req);
const ready = (out: ReturnType<typeof run>) => (out.status?.conditions as KubeObject[])[0] as KubeObject;
const at = (object: unknown, ...path: (string | number)[]): unknown =>
  path.reduce<unknown>((o, key) => (o as Record<string | number, unknown>)[key], object);

test("manifest should own deployment, service and ingress in that order", () => {
  const m = new WebAppReconciler().manifest();
  assert.equal(m.name, "webapp");
  assert.deepEqual(m.for, { group: "example.operon.dev", version: "v1alpha1", kind: "WebApp" });
  assert.deepEqual(m.owns?.map((k) => k.kind), ["Deployment", "Service", "Ingress"]);
  assert.equal(m.finalizer, FINALIZER);
});

test("spec defaults should match the CRD", () => {
  const out = run(request(webapp({ image: "nginx:1.27" })));
  const d = out.find("Deployment", "shop");
  assert.equal(at(d, "spec", "replicas"), 1);
  assert.equal(at(d, "spec", "template", "spec", "containers", 0, "ports", 0, "containerPort"), 8080);
  assert.equal(at(d, "spec", "template", "spec", "containers", 0, "env"), undefined);
  assert.equal(at(out.find("Service", "shop"), "spec", "ports", 0, "port"), 8080);
});

test("children should carry the labels and select the pods", () => {
  const out = run(request(webapp({ image: "nginx:1.27" })));
  const labels = { "app.kubernetes.io/name": "shop", "app.kubernetes.io/managed-by": "operon" };
  for (const object of out.desired) assert.deepEqual(at(object, "metadata", "labels"), labels);
  const d = out.find("Deployment", "shop");
  assert.deepEqual(at(d, "spec", "selector", "matchLabels"), { "app.kubernetes.io/name": "shop" });
  assert.deepEqual(at(d, "spec", "template", "metadata", "labels"), labels);
  assert.deepEqual(at(out.find("Service", "shop"), "spec", "selector"), { "app.kubernetes.io/name": "shop" });
});

test("ingress should follow spec.ingress", () => {
  const out = run(request(webapp({ image: "nginx:1.27", ingress: { host: "shop.example.com" } })));
  const ingress = out.find("Ingress", "shop");
  assert.equal(at(ingress, "spec", "rules", 0, "http", "paths", 0, "path"), "/");
  assert.deepEqual(at(ingress, "spec", "rules", 0, "http", "paths", 0, "backend", "service"), {
    name: "shop",
    port: { name: "http" },
  });
  assert.equal(at(ingress, "spec", "ingressClassName"), undefined);
  const without = run(request(webapp({ image: "nginx:1.27" })));
  assert.equal(without.desired.length, 2);
});

test("Ready should wait for every wanted child to exist, in order", () => {
  const spec = { image: "nginx:1.27", replicas: 2 };
  const none = run(request(webapp(spec)));
  assert.deepEqual(ready(none), {
    type: "Ready",
    status: "False",
    observedGeneration: 5,
    lastTransitionTime: "1970-01-01T00:00:00.000Z",
    reason: "Progressing",
    message: "deployment shop does not exist yet",
  });
  assert.equal(none.status?.observedGeneration, 5);
  assert.equal(none.status?.readyReplicas, 0);
  const noService = run(request(webapp(spec), { children: [current(deployment(2, 2, "nginx:1.27"))] }));
  assert.equal(ready(noService).message, "service shop does not exist yet");
  assert.equal(noService.status?.readyReplicas, 2);
  const withIngress = { ...spec, ingress: { host: "shop.example.com" } };
  const noIngress = run(request(webapp(withIngress), { children: settled(2, 2, "nginx:1.27") }));
  assert.equal(ready(noIngress).message, "ingress shop does not exist yet");
  const all = run(request(webapp(withIngress), { children: [...settled(2, 2, "nginx:1.27"), current(ingress())] }));
  assert.equal(ready(all).status, "True");
});

test("Ready should need the Deployment to run the spec", () => {
  const spec = { image: "nginx:1.27", replicas: 2 };
  const oldImage = run(request(webapp(spec), { children: settled(2, 2, "nginx:1.26") }));
  assert.equal(ready(oldImage).status, "False");
  assert.equal(ready(oldImage).reason, "Progressing");
  assert.equal(ready(oldImage).message, "deployment shop is being updated: 2 of 2 replicas ready");
  assert.deepEqual(oldImage.reasons, ["Updated"]);
  const scaling = run(request(webapp(spec), { children: settled(3, 1, "nginx:1.27") }));
  assert.equal(ready(scaling).message, "deployment shop is being updated: 1 of 2 replicas ready");
  assert.deepEqual(scaling.reasons, ["Scaled"]);
});

test("Ready should follow each wanted child's readiness", () => {
  const spec = { image: "nginx:1.27", replicas: 2 };
  const rolling = run(
    request(webapp(spec), {
      children: [withReadiness(deployment(2, 1, "nginx:1.27"), "in-progress", "Available: 1/2"), current(service())],
    }),
  );
  assert.equal(ready(rolling).status, "False");
  assert.equal(ready(rolling).reason, "Progressing");
  assert.equal(ready(rolling).message, "Deployment shop: Available: 1/2");
  assert.equal(rolling.status?.readyReplicas, 1);
  const stuck = run(
    request(webapp(spec), {
      children: [
        withReadiness(deployment(2, 1, "nginx:1.27"), "failed", "Progress deadline exceeded"),
        withReadiness(service(), "in-progress", "waiting"),
      ],
    }),
  );
  assert.equal(ready(stuck).reason, "Failed");
  assert.equal(ready(stuck).message, "Deployment shop: Progress deadline exceeded", "the Deployment first");
  const serviceOnly = run(
    request(webapp(spec), {
      children: [current(deployment(2, 2, "nginx:1.27")), withReadiness(service(), "unknown", "not rated")],
    }),
  );
  assert.equal(ready(serviceOnly).reason, "Progressing");
  assert.equal(ready(serviceOnly).message, "Service shop: not rated");
  const ok = run(request(webapp(spec), { children: settled(2, 2, "nginx:1.27") }));
  assert.equal(ready(ok).status, "True");
  assert.equal(ready(ok).reason, "Available");
  assert.equal(ready(ok).message, "2 of 2 replicas ready");
  assert.equal(ok.status?.readyReplicas, 2);
});

test("an Ingress no longer wanted should not hold Ready back", () => {
  const leftover = withReadiness(ingress(), "terminating", "Resource is being deleted");
  const out = run(request(webapp({ image: "nginx:1.27", replicas: 2 }), { children: [...settled(2, 2, "nginx:1.27"), leftover] }));
  assert.equal(ready(out).status, "True");
  assert.deepEqual(out.reasons, ["IngressRemoved", "Available"]);
});

test("lastTransitionTime should be kept while the condition holds", () => {
  const parent = webapp(
    { image: "nginx:1.27", replicas: 2 },
    {
      conditions: [
        {
          type: "Ready",
          status: "True",
          lastTransitionTime: "2026-11-20T10:03:00Z",
          reason: "Available",
          message: "2 of 2 replicas ready",
        },
      ],
    },
  );
  const out = run(request(parent, { children: settled(2, 2, "nginx:1.27"), now: NOW }));
  assert.equal(ready(out).lastTransitionTime, "2026-11-20T10:03:00Z");
  assert.deepEqual(out.events, [], "a steady state records no events");
});

test("lastTransitionTime should be request.now, as the host gave it, on a change", () => {
  const out = run(request(webapp({ image: "nginx:1.27", replicas: 2 }), { children: settled(2, 2, "nginx:1.27"), now: NOW }));
  assert.equal(ready(out).lastTransitionTime, NOW);
  assert.deepEqual(out.reasons, ["Available"]);
});

test("every outcome should need the finalizer, and finalizing release it", () => {
  assert.equal(run(request(webapp({ image: "nginx:1.27" }))).needsFinalizer, true);
  const finalizing = run(request(webapp({ image: "nginx:1.27" }), { finalizing: true }));
  assert.equal(finalizing.needsFinalizer, false);
});

test("reconcile should be deterministic and never requeue", () => {
  const req = request(webapp({ image: "nginx:1.27", env: [{ name: "A", value: "1" }] }), {
    children: settled(3, 1, "nginx:1.27"),
    now: NOW,
  });
  const first = run(req);
  assert.deepEqual(first, run(req));
  assert.equal(first.requeueAfterMs, undefined, "owned Deployment changes trigger reconciles; no polling");
  assert.equal(first.requeueAt, undefined);
});

test("invalid specs should be terminal and say so in the status", () => {
  const cases: [KubeObject, string][] = [
    [{ replicas: 1 }, "WebApp default/shop is invalid: missing field `image`"],
    [{ image: " " }, "spec.image must not be empty"],
    [{ image: "x", replicas: -1 }, "spec.replicas must be 0 or more, not -1"],
    [{ image: "x", port: 70000 }, "spec.port must be between 1 and 65535, not 70000"],
    [{ image: "x", env: [{ name: "A" }, { name: "A" }] }, "spec.env[1]: A is set twice"],
    [{ image: "x", env: [{ name: "" }] }, "spec.env[0].name must not be empty"],
    [{ image: "x", ingress: { host: "h", path: "store" } }, "spec.ingress.path must start with /"],
    [{ image: "x", ingress: { host: "" } }, "spec.ingress.host must not be empty"],
    [{ image: "x", replicas: "2" }, 'WebApp default/shop is invalid: invalid type: string "2", expected i32'],
  ];
  for (const [spec, message] of cases) {
    assert.throws(
      () => run(request(webapp(spec), { now: NOW })),
      (e: unknown) =>
        e instanceof Terminal &&
        e.message === message &&
        JSON.stringify(e.status) ===
          JSON.stringify({
            observedGeneration: 5,
            readyReplicas: 0,
            conditions: [
              { type: "Ready", status: "False", observedGeneration: 5, lastTransitionTime: NOW, reason: "InvalidSpec", message },
            ],
          }),
      message,
    );
  }
});

test("an invalid spec's status should keep a False Ready's time and count the Deployment's ready pods", () => {
  const previous = {
    observedGeneration: 4,
    readyReplicas: 2,
    conditions: [
      { type: "Ready", status: "False", lastTransitionTime: "2026-11-20T10:03:00Z", reason: "Progressing", message: "m" },
    ],
  };
  assert.throws(
    () => run(request(webapp({ image: "" }, previous), { children: settled(2, 2, "nginx:1.27"), now: NOW })),
    (e: unknown) => {
      const status = (e as Terminal).status as KubeObject;
      return (
        status.readyReplicas === 2 &&
        at(status, "conditions", 0, "lastTransitionTime") === "2026-11-20T10:03:00Z" &&
        at(status, "conditions", 0, "reason") === "InvalidSpec"
      );
    },
  );
});

test("finalizing should want nothing and finish", () => {
  const out = run(
    request(webapp({ image: "nginx:1.27" }), { children: [current(deployment(1, 1, "nginx:1.27"))], finalizing: true }),
  );
  assert.deepEqual(out.desired, []);
  assert.ok(out.finalized);
  assert.equal(out.status, undefined);
  assert.deepEqual(out.reasons, ["Cleanup"]);
});

test("validate should deny the first problem", () => {
  const cases: [KubeObject, string][] = [
    [{}, "spec.image must not be empty"],
    [{ image: "  " }, "spec.image must not be empty"],
    [{ image: 5 }, "spec.image must not be empty"],
    [{ image: "x", replicas: 51 }, "spec.replicas must be between 0 and 50, not 51"],
    [{ image: "x", replicas: -1 }, "spec.replicas must be between 0 and 50, not -1"],
    [{ image: "x", replicas: "3" }, 'spec.replicas must be between 0 and 50, not "3"'],
    [{ image: "x", replicas: 2.5 }, "spec.replicas must be between 0 and 50, not 2.5"],
    [{ image: "x", port: 0 }, "spec.port must be between 1 and 65535, not 0"],
    [{ image: "x", port: 65536 }, "spec.port must be between 1 and 65535, not 65536"],
    [{ image: "", replicas: 99, port: 0 }, "spec.image must not be empty"],
    [{ image: "x", replicas: 99, port: 0 }, "spec.replicas must be between 0 and 50, not 99"],
  ];
  for (const [spec, message] of cases) {
    assert.throws(
      () => validate(new WebAppReconciler(), review("create", webapp(spec))),
      (e: unknown) => e instanceof Denied && e.message === message && e.code === undefined,
      message,
    );
  }
});

test("validate should allow good specs, deletes and connects", () => {
  const r = new WebAppReconciler();
  assert.deepEqual(validate(r, review("create", webapp({ image: "x", replicas: 0, port: 1 }))), []);
  assert.deepEqual(validate(r, review("update", webapp({ image: "x", replicas: 50, port: 65535 }), webapp({}))), []);
  assert.deepEqual(validate(r, review("delete", undefined, webapp({}))), []);
  assert.deepEqual(validate(r, review("connect", webapp({}))), []);
  // A null field counts as absent.
  assert.deepEqual(validate(r, review("create", webapp({ image: "x", replicas: null, port: null }))), []);
});

test("mutate should default the port on create and update only", () => {
  const r = new WebAppReconciler();
  assert.deepEqual(mutate(r, review("create", webapp({ image: "x" }))), webapp({ image: "x", port: 8080 }));
  assert.equal(at(mutate(r, review("update", webapp({ image: "x", port: null }))), "spec", "port"), 8080);
  assert.equal(mutate(r, review("create", webapp({ image: "x", port: 9000 }))), undefined);
  assert.equal(mutate(r, review("delete", undefined, webapp({ image: "x" }))), undefined);
});

const V1ALPHA1 = "example.operon.dev/v1alpha1";
const V1 = "example.operon.dev/v1";
const VERSIONS = `WebApp has versions ${V1ALPHA1} and ${V1}`;
const alpha = webapp(
  { image: "nginx:1.27", port: 8080, env: [{ name: "A", value: "1" }], replicas: 2, ingress: { host: "h" } },
  { readyReplicas: 2 },
);
const v1 = {
  ...alpha,
  apiVersion: V1,
  spec: { replicas: 2, ingress: { host: "h" }, container: { image: "nginx:1.27", port: 8080, env: [{ name: "A", value: "1" }] } },
};

test("convert should move the container's fields under spec.container and back", () => {
  const r = new WebAppReconciler();
  assert.deepEqual(convert(r, [alpha], V1), [v1]);
  assert.deepEqual(convert(r, [v1], V1ALPHA1), [alpha]);
  assert.deepEqual(convert(r, [alpha, v1], V1), [v1, v1], "one already there is returned as it is");
  const bare = webapp({ replicas: 3 });
  assert.deepEqual(convert(r, [bare], V1), [{ ...bare, apiVersion: V1 }], "no container fields, no container");
  const imageOnly = webapp({ image: "x" });
  assert.deepEqual(convert(r, [imageOnly], V1)[0]?.spec, { container: { image: "x" } });
  assert.deepEqual(convert(r, [{ ...imageOnly, apiVersion: V1, spec: { container: { image: "x" } } }], V1ALPHA1)[0]?.spec, { image: "x" });
});

test("convert should refuse other versions and kinds with the exact texts", () => {
  const r = new WebAppReconciler();
  assert.throws(
    () => convert(r, [alpha], "example.operon.dev/v2"),
    (e: unknown) => e instanceof ConversionError && e.message === `cannot convert to example.operon.dev/v2: ${VERSIONS}`,
  );
  assert.throws(
    () => convert(r, [alpha, { ...alpha, apiVersion: "example.operon.dev/v0" }], V1),
    (e: unknown) => e instanceof ConversionError && e.message === `cannot convert example.operon.dev/v0 WebApp: ${VERSIONS}`,
  );
  assert.throws(
    () => convert(r, [{ ...alpha, kind: "Gadget" }], V1),
    (e: unknown) => e instanceof ConversionError && e.message === `cannot convert ${V1ALPHA1} Gadget: ${VERSIONS}`,
  );
});
