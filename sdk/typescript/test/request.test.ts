import assert from "node:assert/strict";
import { test } from "node:test";
import { Outcome, Request, Terminal, Transient, gvk, kinds, s } from "../src/index.js";
import * as run from "../src/run.js";
import { FakeCluster } from "../src/testing.js";

const obj = (apiVersion: string, kind: string, name: string, extra: object = {}) => ({
  apiVersion,
  kind,
  metadata: { name, namespace: "ns" },
  ...extra,
});

test("metadata should be read from the parent", () => {
  const parent = obj("v1", "ConfigMap", "parent");
  Object.assign(parent.metadata, { generation: 4, labels: { team: "web" }, annotations: null });
  const request = new Request(parent, parent, [], [], false, 3);
  assert.equal(request.name, "parent");
  assert.equal(request.namespace, "ns");
  assert.equal(request.generation, 4);
  assert.deepEqual(request.metadata.labels, { team: "web" });
  assert.deepEqual(request.metadata.annotations, {}, "null reads as empty");
  assert.deepEqual(request.kind, kinds.ConfigMap);
  assert.equal(request.attempt, 3);
});

test("children should be found by kind and name", () => {
  const parent = obj("v1", "ConfigMap", "p");
  const request = new Request(parent, parent, [
    [kinds.Deployment, [obj("apps/v1", "Deployment", "a"), obj("apps/v1", "Deployment", "b")]],
    [kinds.Service, [obj("v1", "Service", "svc")]],
  ]);
  assert.deepEqual(request.children(kinds.Deployment).map((d) => (d.metadata as { name: string }).name), ["a", "b"]);
  assert.equal(request.child(kinds.Deployment, "b")?.kind, "Deployment");
  assert.equal(request.child(kinds.Deployment, "svc"), undefined);
  assert.ok(request.hasChild(kinds.Service, "svc") && !request.hasChild(kinds.Service, "a"));
  assert.deepEqual(request.children(kinds.ConfigMap), [], "not owned: empty");
  const Named = s.object({ metadata: s.object({ name: s.string() }) });
  assert.deepEqual(request.children(kinds.Service, Named), [{ metadata: { name: "svc" } }]);
});

test("related objects should be filtered by kind", () => {
  const parent = obj("v1", "ConfigMap", "p");
  const request = new Request(parent, parent, [], [obj("v1", "Secret", "s"), obj("v1", "ConfigMap", "c")]);
  assert.deepEqual(request.related(kinds.ConfigMap).length, 1);
  assert.equal(request.allRelated.length, 2);
});

test("a parent that does not fit should be a terminal failure naming it", () => {
  const strict = {
    parent: s.object({ spec: s.any() }),
    manifest: () => ({ name: "strict", for: kinds.ConfigMap }),
    reconcile: () => new Outcome(),
  };
  const raw = { object: JSON.stringify(obj("v1", "ConfigMap", "p")), children: [], related: [], finalizing: false, attempt: 0 };
  assert.throws(
    () => run.reconcile(strict, new FakeCluster(), raw),
    (e: unknown) => e instanceof Terminal && e.message === "ConfigMap ns/p is invalid: missing field `spec`",
  );
  assert.throws(
    () => run.reconcile(strict, new FakeCluster(), { ...raw, object: "[1]" }),
    (e: unknown) => e instanceof Terminal && e.message.startsWith("the parent is not a Kubernetes object"),
  );
});

test("outcomes should serialize compactly with integer milliseconds", () => {
  const raw = new Outcome()
    .apply({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x" }, data: { n: "1" } })
    .setStatus({ replicas: 3 })
    .event("Configured", "done")
    .warning("Slow", "took long")
    .requeueAfter(1500.7)
    .toRaw();
  assert.deepEqual(raw.desired, ['{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"n":"1"}}']);
  assert.equal(raw.status, '{"replicas":3}');
  assert.deepEqual(raw.events.map((e) => [e.reason, e.warning]), [["Configured", false], ["Slow", true]]);
  assert.equal(raw.requeueAfterMs, 1500);
  assert.ok(!raw.finalized && new Outcome().finish().toRaw().finalized);
});

test("apply should refuse objects without a kind and fill it when given", () => {
  assert.throws(() => new Outcome().apply({ apiVersion: "v1", metadata: { name: "x" } }), /desired object x has no kind/);
  const out = new Outcome().apply({ metadata: { name: "s" } }, gvk("", "v1", "ConfigMap"));
  assert.equal(out.desired[0]?.kind, "ConfigMap");
  assert.throws(() => new Outcome().requeueAfter(-1), RangeError);
  assert.throws(() => new Outcome().setStatus([] as unknown as object), Terminal);
});

test("failures should keep their kind through context", () => {
  const failure = new Transient("not found").context("secret db");
  assert.ok(failure instanceof Transient && failure.message === "secret db: not found" && !failure.terminal);
  assert.ok(new Terminal("x").terminal);
});
