// Calls out (ctx.http, contract 0.2's egress): the API, the replay of recorded
// exchanges in FakeCluster and in fixtures, and how the guest sees errors.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type Context,
  HTTP_ERROR_KINDS,
  HttpError,
  type HttpOptions,
  type HttpRequest,
  HttpResponse,
  type KubeObject,
  Outcome,
  type Reconciler,
  type Request,
  type Review,
  Transient,
  describeCall,
  kinds,
} from "../src/index.js";
import {
  Exchange,
  type ExchangeFixture,
  FakeCluster,
  Replay,
  Unrecorded,
  fromFixture,
  mutate,
  reconcile,
  request,
  review,
} from "../src/testing.js";

const API = "https://dns.example/api/zones";

/**
 * Keeps a DNS zone named by the parent's data: looks it up, creates it when
 * missing (JSON body), deletes it when finalizing; records in the status
 * what the API answered or why it did not.
 */
class Zones implements Reconciler<KubeObject> {
  manifest() {
    return { name: "zones", for: kinds.ConfigMap };
  }
  reconcile(req: Request<KubeObject>, ctx: Context) {
    const zone = (req.object.data as { zone: string }).zone;
    const url = `${API}/${zone}`;
    try {
      if (req.finalizing) {
        ctx.http({ method: "DELETE", url, credential: "pdns" });
        return new Outcome().finish();
      }
      const found = ctx.http({ method: "GET", url, credential: "pdns", headers: { accept: "application/json" } });
      if (found.status === 404) {
        const created = ctx.http({ method: "POST", url: API, json: { name: zone, kind: "Native" }, credential: "pdns" });
        return new Outcome().setStatus({ created: created.ok, serial: created.json<{ serial: number }>().serial });
      }
      return new Outcome().setStatus({ serial: found.json<{ serial: number }>().serial, server: found.header("Server") ?? null });
    } catch (error) {
      if (error instanceof HttpError) return new Outcome().setStatus({ error: error.kind, message: error.message });
      throw error;
    }
  }
}

const zoneParent = (zone = "a."): KubeObject => ({
  apiVersion: "v1",
  kind: "ConfigMap",
  metadata: { name: "z", namespace: "dns" },
  data: { zone },
});

test("a fixture with egress should answer the calls from its recording", () => {
  // As `operon test` reads created.yaml; JSON here (the SDK has no YAML parser).
  const fixture = JSON.parse(`{
    "object": ${JSON.stringify(zoneParent())},
    "egress": [
      {"request": {"method": "get", "url": "${API}/a.", "credential": "pdns", "headers": {"x-ignored": "yes"}},
       "response": {"status": 404}},
      {"request": {"method": "POST", "url": "${API}", "credential": "pdns", "body": "{\\"name\\":\\"a.\\",\\"kind\\":\\"Native\\"}"},
       "response": {"status": 201, "body": "{\\"serial\\": 1}"}},
      {"request": {"method": "GET", "url": "https://dns.example/unused"}, "response": {"status": 500}}
    ]
  }`);
  const { request: req, cluster } = fromFixture(fixture);
  assert.deepEqual(reconcile(new Zones(), req, cluster).status, { created: true, serial: 1 });

  const existing = fromFixture({
    object: zoneParent(),
    egress: [
      {
        request: { method: "GET", url: `${API}/a.`, credential: "pdns" },
        response: { status: 200, headers: { "content-type": "application/json", server: "pdns" }, body: '{"serial": 7}' },
      },
    ],
  });
  assert.deepEqual(reconcile(new Zones(), existing.request, existing.cluster).status, { serial: 7, server: "pdns" });
});

test("a call the recording does not hold should fail the test naming it, whatever the guest made of it", () => {
  // The guest catches the notRecorded error and answers a status: the run fails anyway.
  const other = fromFixture({
    object: zoneParent(),
    egress: [{ request: { method: "GET", url: `${API}/b.`, credential: "pdns" }, response: { status: 200, body: "{}" } }],
  });
  assert.throws(
    () => reconcile(new Zones(), other.request, other.cluster),
    (error: unknown) =>
      error instanceof Unrecorded &&
      error.message ===
        'the guest made calls the fixture\'s `egress` does not hold: GET https://dns.example/api/zones/a. with credential "pdns"' &&
      error.calls.length === 1,
  );
  // No egress at all: every call is not recorded.
  const gone = fromFixture({ object: zoneParent(), finalizing: true });
  assert.throws(
    () => reconcile(new Zones(), gone.request, gone.cluster),
    /does not hold: DELETE https:\/\/dns\.example\/api\/zones\/a\. with credential "pdns"$/,
  );
  assert.throws(() => reconcile(new Zones(), request(zoneParent())), Unrecorded);
});

test("a recorded error should reach the guest as an HttpError of its kind", () => {
  for (const kind of HTTP_ERROR_KINDS) {
    const { request: req, cluster } = fromFixture({
      object: zoneParent(),
      egress: [{ request: { method: "GET", url: `${API}/a.`, credential: "pdns" }, error: { [kind]: `the ${kind} message` } }],
    });
    assert.deepEqual(reconcile(new Zones(), req, cluster).status, { error: kind, message: `the ${kind} message` }, kind);
  }
});

test("bodies should be read as text or base64, both ways", () => {
  class Blob implements Reconciler<KubeObject> {
    manifest() {
      return { name: "blob", for: kinds.ConfigMap };
    }
    reconcile(_req: Request<KubeObject>, ctx: Context) {
      const answer = ctx.http({ method: "PUT", url: "https://blobs.example/b", body: new Uint8Array([0, 255, 16]) });
      return new Outcome().setStatus({ bytes: [...answer.body], type: answer.header("CONTENT-TYPE") ?? null });
    }
  }
  const cluster = new FakeCluster([], undefined, [
    {
      request: { method: "PUT", url: "https://blobs.example/b", body: { base64: "AP8Q" } },
      response: { status: 200, headers: { "Content-Type": "application/octet-stream" }, body: { base64: "/wA=" } },
    },
  ]);
  assert.deepEqual(reconcile(new Blob(), request(zoneParent()), cluster).status, {
    bytes: [255, 0],
    type: "application/octet-stream",
  });
  assert.deepEqual([...cluster.calls[0]!.body!], [0, 255, 16]);
  assert.throws(
    () =>
      new FakeCluster([], undefined, [
        { request: { method: "GET", url: "https://x/" }, response: { status: 200, body: { base64: "not base64!" } } },
      ]),
    /egress\[0\]\.response\.body\.base64/,
  );
});

test("json should be sent compact with its content type, and read back", () => {
  const cluster = new FakeCluster([], undefined, [
    { request: { method: "GET", url: `${API}/a.`, credential: "pdns" }, response: { status: 404 } },
    {
      request: { method: "POST", url: API, credential: "pdns", body: '{"name":"a.","kind":"Native"}' },
      response: { status: 201, body: '{"serial": 3, "name": "a."}' },
    },
  ]);
  assert.deepEqual(reconcile(new Zones(), request(zoneParent()), cluster).status, { created: true, serial: 3 });
  const post = cluster.calls[1]!;
  assert.equal(post.method, "POST");
  assert.equal(new TextDecoder().decode(post.body), '{"name":"a.","kind":"Native"}');
  assert.deepEqual(post.headers, [["content-type", "application/json"]]);
  assert.deepEqual(cluster.calls[0]!.headers, [["accept", "application/json"]]);
});

test("each reconcile should replay the recording from its start", () => {
  const cluster = new FakeCluster().record(
    new Exchange({ method: "GET", url: `${API}/a.`, headers: [], credential: "pdns" }, {
      status: 200,
      headers: [],
      body: new TextEncoder().encode('{"serial": 9}'),
    }),
  );
  for (let i = 0; i < 2; i++) {
    assert.deepEqual(reconcile(new Zones(), request(zoneParent()), cluster).status, { serial: 9, server: null });
  }
  assert.equal(cluster.calls.length, 1);
});

test("an HttpError the reconciler lets escape should be transient, naming the call", () => {
  class Careless implements Reconciler<KubeObject> {
    manifest() {
      return { name: "careless", for: kinds.ConfigMap };
    }
    reconcile(_req: Request<KubeObject>, ctx: Context): Outcome {
      ctx.http({ method: "get", url: "https://a.example/x", body: "é" });
      return new Outcome();
    }
  }
  const cluster = new FakeCluster([], undefined, [
    { request: { method: "GET", url: "https://a.example/x", body: "é" }, error: { timeout: "no answer in 10s" } },
  ]);
  assert.throws(
    () => reconcile(new Careless(), request(zoneParent()), cluster),
    (error: unknown) =>
      error instanceof Transient && error.message === "GET https://a.example/x (2 bytes of body): timeout: no answer in 10s",
  );
});

test("the replay should take the first unused matching exchange, comparing method, url, body and credential", () => {
  const get = { method: "GET", url: "https://a.example/x" };
  const answer = (body: string): ExchangeFixture["response"] => ({ status: 200, body });
  const replay = new Replay([
    { request: get, response: answer("first") },
    { request: { ...get, credential: "c" }, response: answer("credential") },
    { request: get, response: answer("second") },
    { request: { ...get, body: "b" }, response: answer("body") },
  ]);
  const ask: HttpRequest = { method: "Get", url: "https://a.example/x", headers: [["user-agent", "x"]], timeoutMs: 5 };
  const textOf = (r: { body: Uint8Array }) => new TextDecoder().decode(r.body);
  assert.equal(textOf(replay.fetch(ask)), "first");
  assert.equal(textOf(replay.fetch(ask)), "second");
  assert.equal(textOf(replay.fetch({ ...get, headers: [], body: new TextEncoder().encode("b") })), "body");
  assert.equal(textOf(replay.fetch({ ...get, headers: [], credential: "c" })), "credential");
  assert.equal(replay.verdict(), undefined);
  assert.throws(
    () => replay.fetch({ method: "GET", url: "https://a.example/x/", headers: [] }),
    (error: unknown) =>
      error instanceof HttpError &&
      error.kind === "notRecorded" &&
      error.message.startsWith("GET https://a.example/x/ is not in the recording (it holds: GET https"),
  );
  assert.throws(
    () => new Replay().fetch({ method: "DELETE", url: "https://b/", headers: [] }),
    { message: "DELETE https://b/ is not in the recording (it holds no calls)" },
  );
  // An empty body and no body are the same call.
  const empty = new Replay([{ request: { ...get, body: "" }, response: { status: 204 } }]);
  assert.equal(empty.fetch({ ...get, headers: [] }).status, 204);
});

test("the http API should check its options and read answers", () => {
  const seen: HttpRequest[] = [];
  class Recording extends FakeCluster {
    override fetch(req: HttpRequest) {
      seen.push(req);
      return { status: 204, headers: [], body: new Uint8Array(0) };
    }
  }
  class Probe implements Reconciler<KubeObject> {
    constructor(readonly options: Omit<HttpOptions, "method" | "url">) {}
    manifest() {
      return { name: "probe", for: kinds.ConfigMap };
    }
    reconcile(_req: Request<KubeObject>, ctx: Context) {
      ctx.http({ method: "post", url: "https://a.example/", ...this.options });
      return new Outcome();
    }
  }
  const run = (options: Omit<HttpOptions, "method" | "url">) => reconcile(new Probe(options), request(zoneParent()), new Recording());
  run({ headers: [["X-A", "1"], ["X-A", "2"]], body: "hé", timeoutMs: 250 });
  assert.deepEqual(seen.at(-1), {
    method: "POST",
    url: "https://a.example/",
    headers: [["X-A", "1"], ["X-A", "2"]],
    body: new TextEncoder().encode("hé"),
    credential: undefined,
    timeoutMs: 250,
  });
  run({ json: [1], headers: { "Content-Type": "application/merge-patch+json" } });
  assert.deepEqual(seen.at(-1)!.headers, [["Content-Type", "application/merge-patch+json"]]);
  assert.equal(new TextDecoder().decode(seen.at(-1)!.body), "[1]");
  assert.throws(() => run({ body: "a", json: {} }), /body or json, not both/);
  assert.throws(() => run({ headers: { a: 1 as unknown as string } }), /headers/);
  assert.throws(() => run({ timeoutMs: -1 }), /timeoutMs/);

  const answer = new HttpResponse(503, [["Retry-After", "5"], ["retry-after", "6"]], new TextEncoder().encode('{"x": [1]}'));
  assert.deepEqual([answer.ok, answer.header("retry-after"), answer.header("missing"), answer.json(), answer.text()], [
    false,
    "5",
    undefined,
    { x: [1] },
    '{"x": [1]}',
  ]);
  const error = new HttpError("tooLarge", "over 1 MiB");
  assert.deepEqual([error.kind, error.message, String(error), error instanceof Error], [
    "tooLarge",
    "over 1 MiB",
    "tooLarge: over 1 MiB",
    true,
  ]);
  assert.equal(
    describeCall({ method: "post", url: "https://a.example/x", headers: [], body: new Uint8Array(2), credential: "api" }),
    'POST https://a.example/x (2 bytes of body) with credential "api"',
  );
});

test("admission should not call out", () => {
  class Checker implements Reconciler<KubeObject> {
    manifest() {
      return { name: "checker", for: kinds.ConfigMap };
    }
    reconcile() {
      return new Outcome();
    }
    mutate(rev: Review, ctx: Context) {
      try {
        ctx.http({ method: "GET", url: "https://a.example/" });
        return undefined;
      } catch (error) {
        const e = error as HttpError;
        return { ...rev.object, data: { kind: e.kind, message: e.message } };
      }
    }
  }
  const cluster = new FakeCluster([], undefined, [{ request: { method: "GET", url: "https://a.example/" }, response: { status: 200 } }]);
  assert.deepEqual(mutate(new Checker(), review("create", zoneParent()), cluster)?.data, {
    kind: "denied",
    message: "only reconcile may call out (admission and conversion may not)",
  });
});

test("a malformed egress or fixture should be refused naming where", () => {
  assert.throws(
    () =>
      fromFixture({
        object: zoneParent(),
        egress: [{ request: { method: "GET", url: "https://a.example/", headerz: {} }, response: { status: 200 } }],
      } as never),
    /egress\[0\]\.request: unknown keys headerz/,
  );
  assert.throws(
    () =>
      fromFixture({
        object: zoneParent(),
        egress: [{ request: { method: "GET", url: "https://a.example/" }, error: { teapot: "short and stout" } }],
      } as never),
    /egress\[0\]\.error: one of denied, invalid, timeout/,
  );
  assert.throws(() => fromFixture({ object: zoneParent(), egres: [] } as never), /fixture: unknown keys egres/);
});
