import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ConversionError,
  type KubeObject,
  Outcome,
  type Readiness,
  Request,
  Terminal,
  Transient,
  gvk,
  kinds,
  parseRfc3339,
  s,
} from "../src/index.js";
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

const current = { status: "current", message: "Resource is current" } as const;
const child = (object: KubeObject, readiness: Readiness = current) => ({ object, readiness });

test("children should be found by kind and name", () => {
  const parent = obj("v1", "ConfigMap", "p");
  const request = new Request(parent, parent, [
    [kinds.Deployment, [child(obj("apps/v1", "Deployment", "a")), child(obj("apps/v1", "Deployment", "b"))]],
    [kinds.Service, [child(obj("v1", "Service", "svc"))]],
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
  const raw = {
    object: JSON.stringify(obj("v1", "ConfigMap", "p")),
    children: [],
    related: [],
    finalizing: false,
    attempt: 0,
    now: "1970-01-01T00:00:00.000Z",
  };
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

test("each child's readiness should be looked up, and every child current told", () => {
  const parent = obj("v1", "ConfigMap", "p");
  const rolling = { status: "in-progress", message: "Available: 1/2" } as const;
  const request = new Request(parent, parent, [
    [kinds.Deployment, [child(obj("apps/v1", "Deployment", "web"), rolling)]],
    [kinds.Service, [child(obj("v1", "Service", "web"))]],
  ]);
  assert.deepEqual(request.readiness(kinds.Deployment, "web"), rolling);
  assert.deepEqual(request.readiness(kinds.Service, "web"), current);
  assert.equal(request.readiness(kinds.Service, "db"), undefined);
  assert.ok(!request.allChildrenCurrent());
  assert.deepEqual(request.childrenWithReadiness().map((c) => [c.object.kind, c.readiness.status]), [
    ["Deployment", "in-progress"],
    ["Service", "current"],
  ]);
  assert.equal(request.childrenWithReadiness(kinds.Service).length, 1);
  const settled = new Request(parent, parent, [[kinds.Service, [child(obj("v1", "Service", "web"))]]]);
  assert.ok(settled.allChildrenCurrent());
  assert.ok(new Request(parent, parent).allChildrenCurrent(), "no children: nothing is waited for");
});

test("now should be the host's text and a Date", () => {
  const parent = obj("v1", "ConfigMap", "p");
  const request = new Request(parent, parent, [], [], false, 0, "2026-11-26T04:05:06.789Z");
  assert.equal(request.now, "2026-11-26T04:05:06.789Z");
  assert.equal(request.nowDate.getTime(), Date.UTC(2026, 10, 26, 4, 5, 6, 789));
  assert.equal(new Request(parent, parent).now, "1970-01-01T00:00:00.000Z");
});

test("requeueAt should take RFC 3339 text or a Date and refuse anything else", () => {
  assert.equal(new Outcome().requeueAt("2026-11-26T05:00:00Z").toRaw().requeueAt, "2026-11-26T05:00:00Z");
  assert.equal(new Outcome().requeueAt("2026-11-26T06:00:00.5+01:00").toRaw().requeueAt, "2026-11-26T06:00:00.5+01:00");
  assert.equal(new Outcome().requeueAt(new Date(Date.UTC(2026, 0, 1, 9, 30))).toRaw().requeueAt, "2026-01-01T09:30:00.000Z");
  for (const bad of [
    "2026-11-26",
    "tomorrow",
    "2026-11-26T05:00:00",
    "2026-13-01T00:00:00Z",
    "2026-02-30T00:00:00Z",
    "2026-02-29T00:00:00Z",
    "2026-01-01T24:00:00Z",
    "2026-01-01T00:00:00.1234567891Z",
    "",
  ]) {
    assert.throws(() => new Outcome().requeueAt(bad), RangeError, bad);
  }
  assert.throws(() => new Outcome().requeueAt(new Date(Number.NaN)), RangeError);
  assert.equal(new Outcome().toRaw().requeueAt, undefined);
});

test("RFC 3339 times should read as the host reads them", () => {
  assert.equal(parseRfc3339("2026-01-01T10:00:00.1239+01:00"), Date.UTC(2026, 0, 1, 9, 0, 0, 123));
  assert.equal(parseRfc3339("2028-02-29t00:00:00z"), Date.UTC(2028, 1, 29));
  assert.equal(parseRfc3339("2026-06-30T23:59:60Z"), Date.UTC(2026, 5, 30, 23, 59, 59), "a leap second reads as :59");
  assert.equal(parseRfc3339("0001-01-01T00:00:00-00:30"), new Date("0001-01-01T00:30:00Z").getTime(), "not 1901");
  assert.equal(parseRfc3339("2026-01-02T00:00:00+24:00"), Date.UTC(2026, 0, 1));
  assert.equal(parseRfc3339("2026-01-01T00:00:00+26:00"), undefined);
});

test("needsFinalizer and the parent's metadata should reach the raw outcome only when set", () => {
  const plain = new Outcome().toRaw();
  assert.equal(plain.needsFinalizer, undefined, "the default is run.reconcile's");
  assert.equal(plain.parentMetadata, undefined);
  assert.equal(new Outcome().needsFinalizer().toRaw().needsFinalizer, true);
  assert.equal(new Outcome().needsFinalizer(false).toRaw().needsFinalizer, false);
  const raw = new Outcome().setParentMetadata({ "example.com/decorated": "yes" }, { "example.com/by": "me" }).toRaw();
  assert.deepEqual(raw.parentMetadata, { labels: [["example.com/decorated", "yes"]], annotations: [["example.com/by", "me"]] });
  assert.deepEqual(new Outcome().setParentMetadata({}).toRaw().parentMetadata, { labels: [], annotations: [] });
  assert.throws(() => new Outcome().setParentMetadata({ a: 1 as unknown as string }), TypeError);
});

const finalizing = (finalizer: string | undefined, say?: boolean) => ({
  manifest: () => ({ name: "f", for: kinds.ConfigMap, finalizer }),
  reconcile: () => (say === undefined ? new Outcome() : new Outcome().needsFinalizer(say)),
});

test("needsFinalizer should default to the manifest's finalizer, except when finalizing", () => {
  const raw = (finalizingNow: boolean) => ({
    object: JSON.stringify(obj("v1", "ConfigMap", "p")),
    children: [],
    related: [],
    finalizing: finalizingNow,
    attempt: 0,
    now: "1970-01-01T00:00:00.000Z",
  });
  const host = new FakeCluster();
  assert.equal(run.reconcile(finalizing("x.io/f"), host, raw(false)).needsFinalizer, true);
  assert.equal(run.reconcile(finalizing("x.io/f"), host, raw(true)).needsFinalizer, false);
  assert.equal(run.reconcile(finalizing(undefined), host, raw(false)).needsFinalizer, false);
  assert.equal(run.reconcile(finalizing("x.io/f", false), host, raw(false)).needsFinalizer, false, "explicit wins");
  assert.equal(run.reconcile(finalizing("x.io/f", true), host, raw(true)).needsFinalizer, true, "explicit wins");
  assert.equal(run.reconcile(finalizing(undefined, true), host, raw(false)).needsFinalizer, true);
});

test("a failure should carry a status through context and withStatus", () => {
  const failure = new Terminal("spec.image must not be empty", { status: { phase: "Invalid" } });
  assert.deepEqual(failure.status, { phase: "Invalid" });
  const wrapped = failure.context("webapp shop");
  assert.ok(wrapped instanceof Terminal && wrapped.message === "webapp shop: spec.image must not be empty");
  assert.deepEqual(wrapped.status, { phase: "Invalid" });
  const later = new Transient("not yet").withStatus({ phase: "Waiting" });
  assert.ok(later instanceof Transient && later.message === "not yet");
  assert.deepEqual(later.status, { phase: "Waiting" });
  assert.equal(new Transient("x").status, undefined);
  assert.throws(() => new Terminal("x", { status: [] }), TypeError);
});

test("convert should go through JSON and refuse with ConversionError", () => {
  const upper = {
    manifest: () => ({ name: "c", for: kinds.ConfigMap }),
    reconcile: () => new Outcome(),
    convert: (objects: KubeObject[], desired: string) => {
      if (desired !== "v2") throw new ConversionError(`no ${desired}`);
      return objects.map((o) => ({ ...o, apiVersion: desired }));
    },
  };
  assert.deepEqual(run.convert(upper, ['{"apiVersion":"v1","kind":"K"}'], "v2"), ['{"apiVersion":"v2","kind":"K"}']);
  assert.throws(() => run.convert(upper, [], "v3"), (e: unknown) => e instanceof ConversionError && e.message === "no v3");
  const broken = { ...upper, convert: () => "nope" as unknown as KubeObject[] };
  assert.throws(() => run.convert(broken, [], "v2"), TypeError);
  const none = { manifest: upper.manifest, reconcile: upper.reconcile };
  assert.throws(() => run.convert(none, [], "v2"), ConversionError);
});
