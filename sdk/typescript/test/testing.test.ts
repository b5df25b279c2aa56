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
import { FakeCluster, mutate, reconcile, request, review, validate } from "../src/testing.js";

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
