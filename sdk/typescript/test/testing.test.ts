import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type Context,
  Denied,
  type KubeObject,
  Outcome,
  type Reconciler,
  type Request,
  type Review,
  Terminal,
  Transient,
  gvk,
  kinds,
  newObject,
  s,
} from "../src/index.js";
import { Selector } from "../src/selector.js";
import {
  ConversionError,
  type Readiness,
} from "../src/index.js";
import {
  FakeCluster,
  NOT_RATED,
  Refused,
  checkOutcome,
  convert,
  mutate,
  rate,
  reconcile,
  request,
  review,
  toRaw,
  validate,
  withReadiness,
} from "../src/testing.js";
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const Greeting = s.object({ spec: s.object({ message: s.string() }) });
type Greeting = s.Infer<typeof Greeting>;

class Greeter implements Reconciler<Greeting> {
  readonly parent = Greeting;
  manifest() {
    return { name: "greeter", for: gvk("demo.operon.dev", "v1alpha1", "Greeting"), owns: [kinds.ConfigMap] };
  }
  reconcile(req: Request<Greeting>, _ctx: Context) {
    const { message } = req.object.spec;
    if (!message) throw new Terminal("spec.message must not be empty");
    const name = `${req.name}-greeting`;
    return new Outcome()
      .apply(newObject(kinds.ConfigMap, name, {}, { data: { message } }))
      .setStatus({ observedGeneration: req.generation, published: req.hasChild(kinds.ConfigMap, name) });
  }
}

const greeting = (message: string, generation = 1): KubeObject => ({
  apiVersion: "demo.operon.dev/v1alpha1",
  kind: "Greeting",
  metadata: { name: "hello", namespace: "default", generation },
  spec: { message },
});

const secret = (name: string, namespace: string | undefined, labels: Record<string, string> = {}) => ({
  apiVersion: "v1",
  kind: "Secret",
  metadata: namespace === undefined ? { name, labels } : { name, namespace, labels },
});

class Reader implements Reconciler {
  manifest() {
    return { name: "reader", for: kinds.ConfigMap, reads: [kinds.Secret] };
  }
  reconcile(req: Request, ctx: Context) {
    ctx.info("reading", { parent: req.name });
    const found = ctx.get(kinds.Secret, "db");
    const selector = ((req.raw.data ?? {}) as { selector?: string }).selector ?? "";
    const listed = ctx.list(kinds.Secret, { selector });
    if (found === undefined) throw new Transient("secret db does not exist yet");
    return new Outcome().setStatus({ listed: listed.map((o) => (o.metadata as { name: string }).name).sort() });
  }
}

const parent = (selector = "") => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name: "p", namespace: "shop" },
  data: { selector },
});

test("the greeter should publish and report", () => {
  const out = reconcile(new Greeter(), request(greeting("hi", 2)));
  assert.deepEqual(out.find("ConfigMap", "hello-greeting")?.data, { message: "hi" });
  assert.deepEqual(out.status, { observedGeneration: 2, published: false });
  const published = reconcile(new Greeter(), request(greeting("hi"), { children: [newObject(kinds.ConfigMap, "hello-greeting", { namespace: "default" })] }));
  assert.equal(published.status?.published, true);
  assert.throws(() => reconcile(new Greeter(), request(greeting(""))), Terminal);
});

test("reads should see the parent's namespace and cluster-scoped objects", () => {
  const cluster = new FakeCluster([secret("db", "shop", { team: "web" }), secret("x", "other"), secret("g", undefined)]);
  assert.deepEqual(reconcile(new Reader(), request(parent()), cluster).status, { listed: ["db", "g"] });
  assert.deepEqual(cluster.logs[0], { level: "info", message: "reading", fields: [["parent", "p"]] });
});

test("selectors should filter lists and malformed ones be transient", () => {
  const cluster = new FakeCluster([secret("db", "shop", { team: "web", tier: "db" }), secret("a", "shop", { team: "web" })]);
  assert.deepEqual(reconcile(new Reader(), request(parent("tier=db")), cluster).status, { listed: ["db"] });
  assert.deepEqual(reconcile(new Reader(), request(parent("team in (web),!tier")), cluster).status, { listed: ["a"] });
  assert.throws(
    () => reconcile(new Reader(), request(parent("a===b")), cluster),
    (e: unknown) => e instanceof Transient && e.message.startsWith("cannot list v1 Secret: invalid label selector"),
  );
  assert.throws(() => reconcile(new Reader(), request(parent()), new FakeCluster()), Transient);
});

test("selector should follow kubernetes", () => {
  const cases: [string, Record<string, string>, boolean][] = [
    ["", {}, true],
    ["a=b", { a: "b" }, true],
    ["a==b", { a: "c" }, false],
    ["a!=b", {}, true],
    ["a in (b, c)", { a: "c" }, true],
    ["a notin (b)", { a: "b" }, false],
    ["a", { a: "" }, true],
    ["!a", { a: "" }, false],
    ["a=b,c", { a: "b" }, false],
  ];
  for (const [text, labels, matches] of cases) assert.equal(Selector.parse(text).matches(labels), matches, text);
  assert.throws(() => Selector.parse("a b c"));
});

test("children of kinds not owned should be refused", () => {
  assert.throws(() => reconcile(new Greeter(), request(greeting("hi"), { children: [secret("x", "default")] })), /does not own/);
});

class Guarded extends Greeter {
  validate(r: Review) {
    if ((r.object?.spec as { message?: string } | undefined)?.message === "no") throw new Denied("say something else", 422);
    return ["greetings are public"];
  }
  mutate(r: Review) {
    const object = structuredClone(r.object) as { spec: { message?: string } };
    object.spec.message ??= "hello";
    return object;
  }
}

test("admission should answer warnings, denials and objects", () => {
  assert.deepEqual(validate(new Guarded(), review("create", greeting("hi"))), ["greetings are public"]);
  assert.throws(
    () => validate(new Guarded(), review("update", greeting("no"), greeting("hi"))),
    (e: unknown) => e instanceof Denied && e.message === "say something else" && e.code === 422,
  );
  const object = greeting("x");
  delete (object.spec as { message?: string }).message;
  assert.equal((mutate(new Guarded(), review("create", object))?.spec as { message: string }).message, "hello");
});

test("admission should be optional", () => {
  assert.deepEqual(validate(new Greeter(), review("create", greeting("hi"))), []);
  assert.equal(mutate(new Greeter(), review("create", greeting("hi"))), undefined);
});

/** Runs `body` with `$OPERON` (and `$PATH`) set as given, then restores them. */
function withEnv<T>(env: { OPERON?: string; PATH?: string }, body: () => T): T {
  const saved = { OPERON: process.env.OPERON, PATH: process.env.PATH };
  const set = (key: "OPERON" | "PATH", value: string | undefined) => {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  };
  set("OPERON", env.OPERON);
  if ("PATH" in env) set("PATH", env.PATH);
  try {
    return body();
  } finally {
    set("OPERON", saved.OPERON);
    set("PATH", saved.PATH);
  }
}

/** A stand-in `operon` that logs each call's arguments and stdin and answers `answer`. */
function fakeOperon(answer: string): { dir: string; binary: string; calls: () => string[] } {
  const dir = mkdtempSync(join(tmpdir(), "operon-fake-"));
  const binary = join(dir, "operon");
  const log = join(dir, "calls");
  writeFileSync(log, "");
  writeFileSync(binary, `#!/bin/sh\necho "$@" >> '${log}'\ncat >> '${log}'\necho >> '${log}'\ncat <<'EOF'\n${answer}\nEOF\n`);
  chmodSync(binary, 0o755);
  return { dir, binary, calls: () => readFileSync(log, "utf8").trim().split("\n").filter(Boolean) };
}

class Watcher implements Reconciler {
  manifest() {
    return { name: "watcher", for: kinds.ConfigMap, owns: [kinds.Deployment, kinds.Service] };
  }
  reconcile(req: Request) {
    const seen = req.childrenWithReadiness().map((c) => `${(c.object.metadata as { name: string }).name}=${c.readiness.status}: ${c.readiness.message}`);
    return new Outcome().setStatus({ seen, all: req.allChildrenCurrent(), now: req.now });
  }
}

const deployment = (name: string) => ({ apiVersion: "apps/v1", kind: "Deployment", metadata: { name, namespace: "shop" } });
const service = (name: string) => ({ apiVersion: "v1", kind: "Service", metadata: { name, namespace: "shop" } });

test("children without a stated readiness should be rated by one call of operon readiness", () => {
  const fake = fakeOperon('[{"status":"InProgress","message":"Available: 1/2"},{"status":"Failed","message":"stuck"}]');
  const out = withEnv({ OPERON: fake.binary }, () =>
    reconcile(
      new Watcher(),
      request(parent(), {
        children: [deployment("b"), withReadiness(service("s"), "current", "Service is ready"), deployment("a")],
      }),
    ),
  );
  assert.deepEqual(out.status?.seen, ["a=failed: stuck", "b=in-progress: Available: 1/2", "s=current: Service is ready"]);
  assert.equal(out.status?.all, false);
  const calls = fake.calls();
  assert.equal(calls.length, 2, "one call: its arguments and its input");
  assert.equal(calls[0], "readiness -");
  assert.deepEqual(JSON.parse(calls[1]!), [deployment("b"), deployment("a")], "only the unrated children, in the test's order");
});

test("operon on PATH should be used when $OPERON is not set, and no call made when nothing is unrated", () => {
  const fake = fakeOperon('[{"status":"Current","message":"ok"}]');
  const raw = withEnv({ OPERON: undefined, PATH: `${fake.dir}:${process.env.PATH}` }, () => toRaw(request(parent(), { children: [service("s")] }), [kinds.Service]));
  assert.deepEqual(raw.children[0]![1][0]!.readiness, { status: "current", message: "ok" });
  withEnv({ OPERON: fake.binary }, () =>
    toRaw(request(parent(), { children: [withReadiness(service("s"), "terminating")] }), [kinds.Service]),
  );
  assert.equal(fake.calls().length, 2, "the second request asked nothing");
});

test("without an operon binary a child should be unknown, saying how to rate it", () => {
  const out = withEnv({ OPERON: "/nonexistent/operon" }, () => reconcile(new Watcher(), request(parent(), { children: [service("s")] })));
  assert.deepEqual(out.status?.seen, [`s=unknown: ${NOT_RATED}`]);
  assert.deepEqual(
    withEnv({ OPERON: undefined, PATH: mkdtempSync(join(tmpdir(), "empty-")) }, () => rate([service("s")])),
    [{ status: "unknown", message: NOT_RATED }] satisfies Readiness[],
  );
});

test("an operon binary that fails or answers nonsense should fail the test", () => {
  const fake = fakeOperon("[]");
  assert.throws(() => withEnv({ OPERON: fake.binary }, () => rate([service("s")])), /answered \[\] for 1 objects/);
  const bad = fakeOperon('[{"status":"Ready","message":"?"}]');
  assert.throws(() => withEnv({ OPERON: bad.binary }, () => rate([service("s")])), /not a readiness/);
  assert.throws(() => withEnv({ OPERON: "/bin/false" }, () => rate([service("s")])), /readiness failed/);
});

// The real verdicts, when this repository's operon is built (`cargo build -p operon`).
const built = resolve(import.meta.dirname, "../../../target/debug/operon");
test("the host's operon should rate a rolling Deployment", { skip: !existsSync(built) && "target/debug/operon is not built" }, () => {
  const rolling = {
    ...deployment("web"),
    metadata: { name: "web", namespace: "shop", generation: 1 },
    spec: { replicas: 2 },
    status: { observedGeneration: 1, replicas: 2, updatedReplicas: 2, readyReplicas: 1, availableReplicas: 1 },
  };
  assert.deepEqual(withEnv({ OPERON: built }, () => rate([rolling, service("web")])), [
    { status: "in-progress", message: "Available: 1/2" },
    { status: "current", message: "Service is ready" },
  ]);
});

test("requests should carry now as the host spells it, the epoch by default", () => {
  assert.equal(request(parent()).now, "1970-01-01T00:00:00.000Z");
  assert.equal(request(parent(), { now: "2026-01-01T09:00:00Z" }).now, "2026-01-01T09:00:00.000Z");
  assert.equal(request(parent(), { now: "2026-01-01T10:00:00.1234+01:00" }).now, "2026-01-01T09:00:00.123Z");
  assert.equal(request(parent(), { now: new Date(Date.UTC(2026, 0, 1)) }).now, "2026-01-01T00:00:00.000Z");
  assert.throws(() => request(parent(), { now: "9 o'clock" }), RangeError);
  const out = reconcile(new Watcher(), request(parent(), { now: "2026-01-01T09:00:00Z" }));
  assert.equal(out.status?.now, "2026-01-01T09:00:00.000Z");
});

class Decorator implements Reconciler {
  constructor(private readonly labels: Record<string, string> = { "example.com/seen": "yes" }) {}
  manifest() {
    return { name: "decorator", for: kinds.ConfigMap, finalizer: "example.com/cleanup" };
  }
  reconcile(req: Request) {
    if (req.finalizing) return new Outcome().finish();
    return new Outcome().requeueAt("2026-01-01T09:30:00Z").setParentMetadata(this.labels, { "example.com/note": "n" });
  }
}

test("outcomes should show requeueAt, needsFinalizer and the parent's metadata", () => {
  const out = reconcile(new Decorator(), request(parent()));
  assert.equal(out.requeueAt, "2026-01-01T09:30:00Z");
  assert.equal(out.needsFinalizer, true, "the manifest declares a finalizer");
  assert.deepEqual(out.parentMetadata, { labels: { "example.com/seen": "yes" }, annotations: { "example.com/note": "n" } });
  const done = reconcile(new Decorator(), request(parent(), { finalizing: true }));
  assert.ok(done.finalized && !done.needsFinalizer);
  assert.equal(reconcile(new Greeter(), request(greeting("hi"))).needsFinalizer, false, "no finalizer declared");
});

test("the host's 0.2 refusals should be checked natively", () => {
  assert.throws(
    () => reconcile(new Decorator({ "operon.dev/plugin": "x" }), request(parent())),
    (e: unknown) => e instanceof Refused && e.reason === 'parent-metadata sets the label "operon.dev/plugin": operon.dev keys are the host\'s',
  );
  assert.throws(
    () => checkOutcome("d", [], parent(), [], [], [], [], { requeueAt: "soon" }),
    (e: unknown) => e instanceof Refused && e.reason.startsWith('requeue-at "soon" is not an RFC 3339 time'),
  );
  checkOutcome("d", [], parent(), [], [], [], [], { requeueAt: "2026-01-01T00:00:00Z", parentMetadata: { labels: { a: "b" }, annotations: {} } });
});

class Converter extends Greeter {
  constructor(private readonly rename = false) {
    super();
  }
  convert(objects: KubeObject[], desired: string) {
    if (desired === "demo.operon.dev/v9") throw new ConversionError(`cannot convert to ${desired}`);
    return objects.map((o) => ({ ...o, apiVersion: desired, metadata: this.rename ? { name: "other" } : o.metadata }));
  }
}

test("convert should be checked as the host checks it", () => {
  const old = greeting("hi");
  assert.deepEqual(convert(new Converter(), [old], "demo.operon.dev/v1"), [{ ...old, apiVersion: "demo.operon.dev/v1" }]);
  assert.throws(() => convert(new Converter(), [old], "demo.operon.dev/v9"), ConversionError);
  assert.throws(
    () => convert(new Converter(true), [old], "demo.operon.dev/v1"),
    (e: unknown) =>
      e instanceof Refused &&
      e.reason === 'convert changed metadata.name of object 0 (from "hello" to "other"), which conversion may not change' &&
      e.message.startsWith("conversion answer refused: "),
  );
  const dropping = new Converter();
  dropping.convert = () => [];
  assert.throws(() => convert(dropping, [old], "demo.operon.dev/v1"), /answered 0 objects for 1/);
});
