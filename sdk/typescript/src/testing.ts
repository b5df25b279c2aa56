/**
 * Run reconcilers natively, with no wasm and no cluster (for `node --test`).
 *
 * {@link reconcile} goes through `run.reconcile`, the function the component's
 * export calls, with a {@link FakeCluster} standing in for the host's cache:
 * what passes here passes in the component. Every outcome is also checked
 * as the host checks it before writing anything ({@link checkOutcome}: owned
 * kinds, namespaces, names, sizes, ownership of the cluster's objects, as
 * `operon test` does); an outcome the host would refuse throws
 * {@link Refused}, naming the rule.
 *
 * ```ts
 * const out = reconcile(new GreetingReconciler(), request(greeting("hi")));
 * assert.deepEqual(out.find("ConfigMap", "hello-greeting")?.data, { message: "hi" });
 * ```
 *
 * Children carry a readiness, as the host hands them: state it with
 * {@link withReadiness}, or let the runner ask the `operon` binary (`$OPERON`,
 * else `operon` on `PATH`) for the host's verdicts with `operon readiness`,
 * once per request. The rules are never ported here: without the binary a
 * child's readiness is `unknown` ({@link NOT_RATED}).
 *
 * Calls out (`ctx.http`, contract 0.2's `egress`) never reach the network:
 * the fake host answers them from recorded exchanges, written as fixtures
 * hold them (`new FakeCluster(objects, namespace, egress)`, a fixture's
 * `egress:` through {@link fromFixture}), with the rule of every Operon
 * runner ({@link Replay}). A call the recording does not hold is answered
 * `notRecorded` and fails the test ({@link Unrecorded}), whatever the
 * reconciler made of the error.
 *
 * ```ts
 * const cluster = new FakeCluster([], undefined, [
 *   { request: { method: "GET", url: "https://dns.example/api/zones/a.", credential: "pdns" },
 *     response: { status: 200, body: '{"serial": 7}' } },
 * ]);
 * const out = reconcile(new Zones(), request(zone("a.")), cluster);
 * ```
 * @module
 */

import { execFileSync } from "node:child_process";
import type { Operation } from "./admission.js";
import { HostError, type Host, type Level } from "./context.js";
import {
  HTTP_ERROR_KINDS,
  HttpError,
  type HttpErrorKind,
  type HttpRequest,
  type RawHttpResponse,
  describeCall,
} from "./egress.js";
import { Failure } from "./failure.js";
import { type Gvk, isKind, kindOf, kindToString, sameKind } from "./kinds.js";
import { type Event, type ParentMetadata, isRfc3339, parseRfc3339 } from "./outcome.js";
import type { Reconciler } from "./reconciler.js";
import { type KubeObject, type Readiness, type ReadinessStatus, metadataOf } from "./request.js";
import * as run from "./run.js";
import { RULES } from "./rules.js";
import { Selector, SelectorError } from "./selector.js";
import type { WitReview } from "./wit.js";

/** A line logged through `ctx.log`. */
export interface LogLine {
  level: Level;
  message: string;
  fields: [string, string][];
}

// --- egress: recorded exchanges and their replay --------------------------------------------

/** A body in fixtures: text (UTF-8), or `{ base64 }` for bytes that are not UTF-8. */
export type BodyFixture = string | { base64: string };

/**
 * One call and what came of it, as a fixture's `egress:` holds it (the
 * format of `operon_contract::egress`): a request, and a `response` or an
 * `error: { KIND: message }`.
 */
export interface ExchangeFixture {
  request: {
    method: string;
    url: string;
    headers?: Record<string, string>;
    body?: BodyFixture;
    credential?: string;
    timeoutMs?: number;
  };
  response?: { status: number; headers?: Record<string, string>; body?: BodyFixture };
  error?: Partial<Record<HttpErrorKind, string>>;
}

/** A recorded exchange, read: see {@link Exchange.parse}. */
export class Exchange {
  constructor(
    readonly request: HttpRequest,
    readonly response?: RawHttpResponse,
    readonly error?: { kind: HttpErrorKind; message: string },
  ) {}

  /**
   * What the recording answers (a copy).
   * @throws {HttpError} the recorded error.
   */
  answer(): RawHttpResponse {
    if (this.error) throw new HttpError(this.error.kind, this.error.message);
    if (!this.response) throw new HttpError("notRecorded", "the recorded exchange has neither response nor error");
    return {
      status: this.response.status,
      headers: this.response.headers.map(([n, v]) => [n, v]),
      body: new Uint8Array(this.response.body),
    };
  }

  /**
   * An exchange as fixtures write it ({@link ExchangeFixture}), `where`
   * naming it in errors.
   * @throws {TypeError} not of that shape.
   */
  static parse(value: unknown, where = "egress[0]"): Exchange {
    if (value instanceof Exchange) return value;
    const fields = record(value, where, ["request", "response", "error"], ["request"]);
    const req = record(fields.request, `${where}.request`, ["method", "url", "headers", "body", "credential", "timeoutMs"], [
      "method",
      "url",
    ]);
    const timeoutMs = req.timeoutMs ?? undefined;
    if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && (timeoutMs as number) >= 0)) {
      throw new TypeError(`${where}.request.timeoutMs: ${JSON.stringify(timeoutMs)} is not a number of milliseconds`);
    }
    const request: HttpRequest = {
      method: text(req.method, `${where}.request.method`),
      url: text(req.url, `${where}.request.url`),
      headers: headerMap(req.headers, `${where}.request.headers`),
      body: req.body === undefined || req.body === null ? undefined : bodyOf(req.body, `${where}.request.body`),
      credential:
        req.credential === undefined || req.credential === null ? undefined : text(req.credential, `${where}.request.credential`),
      timeoutMs: timeoutMs as number | undefined,
    };
    let response: RawHttpResponse | undefined;
    if (fields.response !== undefined && fields.response !== null) {
      const answer = record(fields.response, `${where}.response`, ["status", "headers", "body"], ["status"]);
      const status = answer.status;
      if (typeof status !== "number" || !Number.isInteger(status) || status < 0 || status > 65535) {
        throw new TypeError(`${where}.response.status: ${JSON.stringify(status)} is not a status code`);
      }
      response = {
        status,
        headers: headerMap(answer.headers, `${where}.response.headers`),
        body: answer.body === undefined || answer.body === null ? new Uint8Array(0) : bodyOf(answer.body, `${where}.response.body`),
      };
    }
    let error: { kind: HttpErrorKind; message: string } | undefined;
    if (fields.error !== undefined && fields.error !== null) {
      const entries = typeof fields.error === "object" ? Object.entries(fields.error as object) : [];
      const [kind, message] = entries[0] ?? [];
      if (entries.length !== 1 || !HTTP_ERROR_KINDS.includes(kind as HttpErrorKind)) {
        throw new TypeError(
          `${where}.error: one of ${HTTP_ERROR_KINDS.join(", ")} with a message, not ${JSON.stringify(fields.error)}`,
        );
      }
      error = { kind: kind as HttpErrorKind, message: text(message, `${where}.error.${kind}`) };
    }
    return new Exchange(request, response, error);
  }
}

function record(value: unknown, where: string, allowed: string[], required: string[]): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`${where}: an object with ${allowed.join(", ")}, not ${JSON.stringify(value)}`);
  }
  const unknown = Object.keys(value).filter((k) => !allowed.includes(k));
  if (unknown.length > 0) throw new TypeError(`${where}: unknown keys ${unknown.join(", ")} (it has ${allowed.join(", ")})`);
  const missing = required.filter((k) => !(k in value));
  if (missing.length > 0) throw new TypeError(`${where}: ${missing.join(", ")} missing`);
  return value as Record<string, unknown>;
}

function text(value: unknown, where: string): string {
  if (typeof value === "string") return value;
  if (typeof value === "number") return String(value); // YAML read `ttl: 60` as a number; files mean the text
  throw new TypeError(`${where}: ${JSON.stringify(value)} is not text`);
}

function headerMap(value: unknown, where: string): [string, string][] {
  if (value === undefined || value === null) return [];
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new TypeError(`${where}: a map of names to values, not ${JSON.stringify(value)}`);
  }
  return Object.entries(value)
    .map(([n, v]): [string, string] => [n, text(v, `${where}.${n}`)])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function bodyOf(value: unknown, where: string): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value);
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const b64 = (value as { base64?: unknown }).base64;
    if (Object.keys(value).length !== 1 || typeof b64 !== "string") {
      throw new TypeError(`${where}: text, or { base64 } for bytes that are not UTF-8, not ${JSON.stringify(value)}`);
    }
    if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(b64)) {
      throw new TypeError(`${where}.base64: ${JSON.stringify(b64)} is not base64`);
    }
    return new Uint8Array(Buffer.from(b64, "base64"));
  }
  return new TextEncoder().encode(text(value, where));
}

function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  const x = a ?? new Uint8Array(0);
  const y = b ?? new Uint8Array(0);
  return x.length === y.length && x.every((byte, i) => byte === y[i]);
}

/**
 * Whether a recorded request answers `asked`: the same method (without
 * case), URL, body (absent is empty) and credential. Headers and the timeout
 * are not compared.
 */
export function sameCall(recorded: HttpRequest, asked: HttpRequest): boolean {
  return (
    recorded.method.toUpperCase() === asked.method.toUpperCase() &&
    recorded.url === asked.url &&
    sameBytes(recorded.body, asked.body) &&
    recorded.credential === asked.credential
  );
}

/**
 * Answers calls from recorded exchanges with no network, as every Operon
 * runner does (`operon_contract::egress::Replay`): each call takes the first
 * exchange not yet used that is the {@link sameCall}; a call with none is
 * answered `notRecorded` and remembered, so the test fails naming it
 * ({@link Replay.verdict}). Exchanges not used are fine.
 */
export class Replay {
  readonly exchanges: Exchange[];
  private readonly used: boolean[];
  /** Every call, in order. */
  readonly calls: HttpRequest[] = [];
  /** The calls no exchange answered, in order. */
  readonly missed: HttpRequest[] = [];

  constructor(exchanges: (Exchange | ExchangeFixture)[] = []) {
    this.exchanges = exchanges.map((e, i) => Exchange.parse(e, `egress[${i}]`));
    this.used = this.exchanges.map(() => false);
  }

  /**
   * The answer to one call.
   * @throws {HttpError} the recorded error, or `notRecorded`.
   */
  fetch(asked: HttpRequest): RawHttpResponse {
    this.calls.push(asked);
    const i = this.exchanges.findIndex((e, j) => !this.used[j] && sameCall(e.request, asked));
    if (i >= 0) {
      this.used[i] = true;
      return this.exchanges[i]!.answer();
    }
    this.missed.push(asked);
    const held = this.exchanges.map((e) => describeCall(e.request)).join("; ");
    throw new HttpError(
      "notRecorded",
      `${describeCall(asked)} is not in the recording ${held ? `(it holds: ${held})` : "(it holds no calls)"}`,
    );
  }

  /** Why the run fails, if a call was not recorded: one line naming each. */
  verdict(): string | undefined {
    if (this.missed.length === 0) return undefined;
    return `the guest made calls the fixture's \`egress\` does not hold: ${this.missed.map(describeCall).join("; ")}`;
  }
}

/**
 * The reconciler made calls the recording does not hold (whatever it made of
 * the `notRecorded` error): `calls` are they.
 */
export class Unrecorded extends Error {
  constructor(
    verdict: string,
    readonly calls: HttpRequest[],
  ) {
    super(verdict);
    this.name = "Unrecorded";
  }
}

/**
 * An in-memory stand-in for the host: the objects `ctx.get` and `ctx.list`
 * see, and the recorded exchanges that answer `ctx.http`. A read without a
 * namespace means the parent's namespace (as in the host) when it goes
 * through {@link reconcile}. Cluster-scoped objects (no namespace) match any
 * namespace. Unlike the host, the fake lets every kind be read: check
 * `manifest.reads` yourself.
 *
 * `egress` holds {@link Exchange}s or objects as a fixture's `egress:` holds
 * them ({@link ExchangeFixture}); none by default, so every call is answered
 * `notRecorded`. Each {@link reconcile} replays it from the start (as each
 * fixture does); `calls` are the requests of the last one, headers and all.
 */
export class FakeCluster implements Host {
  readonly logs: LogLine[] = [];
  readonly egress: Exchange[];
  /** The replay answering calls: a fresh one per {@link reconcile}. */
  replay: Replay;

  constructor(
    readonly objects: KubeObject[] = [],
    public namespace?: string,
    egress: (Exchange | ExchangeFixture)[] = [],
  ) {
    this.egress = egress.map((e, i) => Exchange.parse(e, `egress[${i}]`));
    this.replay = new Replay(this.egress);
  }

  /** Adds a recorded exchange; returns the cluster. */
  record(exchange: Exchange | ExchangeFixture): this {
    this.egress.push(Exchange.parse(exchange, `egress[${this.egress.length}]`));
    this.replay = new Replay(this.egress);
    return this;
  }

  /** The HTTP requests made since the replay started, in order. */
  get calls(): HttpRequest[] {
    return this.replay.calls;
  }

  fetch(request: HttpRequest): RawHttpResponse {
    return this.replay.fetch(request);
  }

  private inScope(kind: Gvk, namespace: string | undefined): KubeObject[] {
    const ns = namespace ?? this.namespace;
    return this.objects.filter((o) => {
      const objectNs = metadataOf(o).namespace;
      return isKind(o, kind) && (objectNs === undefined || ns === undefined || objectNs === ns);
    });
  }

  log(level: Level, message: string, fields: [string, string][]): void {
    this.logs.push({ level, message, fields });
  }

  get(kind: Gvk, namespace: string | undefined, name: string): string | undefined {
    const found = this.inScope(kind, namespace).find((o) => metadataOf(o).name === name);
    return found === undefined ? undefined : JSON.stringify(found);
  }

  list(kind: Gvk, namespace: string | undefined, labelSelector: string | undefined): string[] {
    let selector: Selector;
    try {
      selector = Selector.parse(labelSelector);
    } catch (error) {
      if (error instanceof SelectorError) throw new HostError(error.message);
      throw error;
    }
    return this.inScope(kind, namespace)
      .filter((o) => selector.matches(metadataOf(o).labels))
      .map((o) => JSON.stringify(o));
  }
}

/** A child with the readiness a test states for it (see {@link withReadiness}). */
export class RatedChild {
  constructor(
    readonly object: KubeObject,
    readonly readiness: Readiness,
  ) {}
}

/**
 * `child` with the readiness the host would give it, stated by the test
 * rather than asked of `operon readiness`.
 *
 * ```ts
 * request(webapp, { children: [withReadiness(deployment, "in-progress", "Available: 1/2")] })
 * ```
 */
export function withReadiness(child: KubeObject, status: ReadinessStatus, message = ""): RatedChild {
  return new RatedChild(child, { status, message });
}

/** The readiness of a child no `operon` binary could rate. */
export const NOT_RATED =
  "not rated: native tests rate children with the operon binary ($OPERON or operon on PATH), or pass a readiness";

/** The request's time when a test gives none: the Unix epoch, as fixtures without `now:` run. */
export const EPOCH = "1970-01-01T00:00:00.000Z";

/** A request as a test writes it: the parent and a flat list of children. */
export interface TestRequest {
  object: KubeObject;
  children: (KubeObject | RatedChild)[];
  related: KubeObject[];
  finalizing: boolean;
  attempt: number;
  /** `request.now`, as the host spells it (RFC 3339, UTC, milliseconds). */
  now: string;
}

/**
 * A time as the host hands it in `request.now`: RFC 3339 in UTC with
 * milliseconds (`2026-01-01T09:00:00Z` becomes `2026-01-01T09:00:00.000Z`).
 * @throws {RangeError} not an RFC 3339 time.
 */
export function hostTime(time: string | Date): string {
  const ms = typeof time === "string" ? parseRfc3339(time) : time.getTime();
  if (ms === undefined || Number.isNaN(ms)) {
    throw new RangeError(`now: ${JSON.stringify(time)} is not an RFC 3339 time such as 2026-01-01T00:00:00Z`);
  }
  return new Date(ms).toISOString();
}

/**
 * A request for `parent` with its existing children (any order, any owned
 * kind; a child's readiness stated with {@link withReadiness}, else rated by
 * `operon readiness`), at `now` (default {@link EPOCH}).
 */
export function request(
  parent: KubeObject,
  options: {
    children?: (KubeObject | RatedChild)[];
    related?: KubeObject[];
    finalizing?: boolean;
    attempt?: number;
    now?: string | Date;
  } = {},
): TestRequest {
  return {
    object: parent,
    children: options.children ?? [],
    related: options.related ?? [],
    finalizing: options.finalizing ?? false,
    attempt: options.attempt ?? 0,
    now: options.now === undefined ? EPOCH : hostTime(options.now),
  };
}

const STATUSES: Record<string, ReadinessStatus> = {
  Current: "current",
  InProgress: "in-progress",
  Failed: "failed",
  Terminating: "terminating",
  Unknown: "unknown",
};

/**
 * The host's readiness of each object, from `operon readiness` (the binary
 * `$OPERON`, else `operon` on `PATH`) in one call; {@link NOT_RATED} (`unknown`)
 * for each when there is no such binary.
 * @throws {Error} the binary failed or answered something else.
 */
export function rate(objects: KubeObject[]): Readiness[] {
  if (objects.length === 0) return [];
  const binary = process.env.OPERON || "operon";
  let output: string;
  try {
    output = execFileSync(binary, ["readiness", "-"], {
      input: JSON.stringify(objects),
      encoding: "utf8",
      stdio: ["pipe", "pipe", "pipe"],
    });
  } catch (error) {
    const failure = error as NodeJS.ErrnoException & { stderr?: string };
    if (failure.code === "ENOENT") return objects.map(() => ({ status: "unknown", message: NOT_RATED }));
    throw new Error(`${binary} readiness failed: ${failure.stderr?.trim() || failure.message}`);
  }
  const verdicts = JSON.parse(output) as { status?: unknown; message?: unknown }[];
  if (!Array.isArray(verdicts) || verdicts.length !== objects.length) {
    throw new Error(`${binary} readiness answered ${output.trim()} for ${objects.length} objects`);
  }
  return verdicts.map((v) => {
    const status = STATUSES[String(v.status)];
    if (status === undefined || typeof v.message !== "string") {
      throw new Error(`${binary} readiness answered ${JSON.stringify(v)}, not a readiness`);
    }
    return { status, message: v.message };
  });
}

/**
 * The WIT request: children grouped by the owned kinds, sorted by namespace
 * then name, as the host does, each with its readiness (stated, or from
 * {@link rate}: one call of `operon readiness` for those without).
 * @throws {Error} a child lacks apiVersion/kind or is of a kind not owned.
 */
export function toRaw(req: TestRequest, owns: Gvk[]): run.RawRequest {
  const groups: run.RawRequest["children"] = owns.map((kind) => [kind, []]);
  const entries: { object: KubeObject; readiness?: Readiness }[] = req.children.map((c) =>
    c instanceof RatedChild ? { object: c.object, readiness: c.readiness } : { object: c },
  );
  const order = (o: KubeObject) => {
    const m = metadataOf(o);
    return [m.namespace ?? "", m.name] as const;
  };
  entries.forEach((child, i) => {
    const kind = kindOf(child.object);
    if (!kind) throw new Error(`children[${i}] lacks apiVersion or kind`);
    if (!owns.some((k) => sameKind(k, kind))) {
      throw new Error(`children[${i}] is a ${kindToString(kind)}, which the reconciler does not own`);
    }
  });
  const unrated = entries.filter((c) => c.readiness === undefined);
  rate(unrated.map((c) => c.object)).forEach((readiness, i) => {
    unrated[i]!.readiness = readiness;
  });
  const sorted = [...entries].sort((a, b) => {
    const [an, aname] = order(a.object);
    const [bn, bname] = order(b.object);
    return an < bn ? -1 : an > bn ? 1 : aname < bname ? -1 : aname > bname ? 1 : 0;
  });
  for (const child of sorted) {
    const kind = kindOf(child.object)!;
    const group = groups.find(([k]) => sameKind(k, kind))!;
    group[1].push({ object: JSON.stringify(child.object), readiness: child.readiness! });
  }
  return {
    object: JSON.stringify(req.object),
    children: groups,
    related: req.related.map((o) => JSON.stringify(o)),
    finalizing: req.finalizing,
    attempt: req.attempt,
    now: req.now,
  };
}

/** An outcome as a test reads it: objects parsed. */
export class Reconciled {
  constructor(
    readonly desired: KubeObject[],
    readonly status: KubeObject | undefined,
    readonly events: Event[],
    readonly requeueAfterMs: number | undefined,
    readonly finalized: boolean,
    /** RFC 3339, as the reconciler gave it. */
    readonly requeueAt: string | undefined = undefined,
    /** As the host gets it: the reconciler's word, else the SDK's default. */
    readonly needsFinalizer = false,
    readonly parentMetadata: ParentMetadata | undefined = undefined,
  ) {}

  /** The desired object of `kind` (e.g. `Deployment`) called `name`. */
  find(kind: string, name: string): KubeObject | undefined {
    return this.desired.find((o) => o.kind === kind && metadataOf(o).name === name);
  }

  /** The events' reasons, in order. */
  get reasons(): string[] {
    return this.events.map((e) => e.reason);
  }
}

function checkCalls(cluster: FakeCluster): void {
  const verdict = cluster.replay.verdict();
  if (verdict !== undefined) throw new Unrecorded(verdict, [...cluster.replay.missed]);
}

/**
 * Run `reconciler` on `req` through the component's code path, its calls
 * out answered by `cluster`'s recorded exchanges (replayed from the start).
 * @throws {Transient} {Terminal} as the component would answer.
 * @throws {Unrecorded} the reconciler made a call the recording does not hold (whatever it answered).
 * @throws {Refused} the host would refuse the outcome ({@link checkOutcome}).
 */
export function reconcile<T>(reconciler: Reconciler<T>, req: TestRequest, cluster = new FakeCluster()): Reconciled {
  cluster.namespace ??= metadataOf(req.object).namespace;
  const manifest = run.manifest(reconciler as Reconciler<unknown>);
  const raw = toRaw(req, manifest.owns ?? []);
  cluster.replay = new Replay(cluster.egress);
  let out: ReturnType<typeof run.reconcile>;
  try {
    out = run.reconcile(reconciler, cluster, raw);
  } catch (error) {
    if (error instanceof Failure) checkCalls(cluster);
    throw error;
  }
  checkCalls(cluster);
  const parentMetadata =
    out.parentMetadata === undefined
      ? undefined
      : {
          labels: Object.fromEntries(out.parentMetadata.labels),
          annotations: Object.fromEntries(out.parentMetadata.annotations),
        };
  checkOutcome(
    manifest.name,
    manifest.owns ?? [],
    req.object,
    req.children.map((c) => (c instanceof RatedChild ? c.object : c)),
    cluster.objects,
    out.desired.map((o) => JSON.parse(o) as KubeObject),
    out.events.map((e) => e.reason),
    { requeueAt: out.requeueAt, parentMetadata },
  );
  return new Reconciled(
    out.desired.map((o) => JSON.parse(o) as KubeObject),
    out.status === undefined ? undefined : (JSON.parse(out.status) as KubeObject),
    out.events,
    out.requeueAfterMs,
    out.finalized,
    out.requeueAt,
    out.needsFinalizer,
    parentMetadata,
  );
}

/** A request fixture of `operon test` (`NAME.yaml`), parsed. */
export interface RequestFixture {
  object: KubeObject;
  children?: KubeObject[];
  related?: KubeObject[];
  finalizing?: boolean;
  attempt?: number;
  /** Other objects that `get` and `list` see. */
  cluster?: KubeObject[];
  /** RFC 3339; absent: the Unix epoch. */
  now?: string;
  /** Calls out and their answers. */
  egress?: ExchangeFixture[];
}

const FIXTURE_KEYS = ["object", "children", "related", "finalizing", "attempt", "cluster", "now", "egress"];

/**
 * The request and the fake host of a request fixture as `operon test` reads
 * it (parsed from JSON, or from YAML with the parser of your choice): the
 * objects `get` and `list` see are the parent, its children, related and
 * `cluster` objects; calls out are answered from `egress`. Run it with
 * {@link reconcile}, which fails on a call `egress` does not hold.
 *
 * ```ts
 * const { request, cluster } = fromFixture(JSON.parse(readFileSync("fixtures/created.json", "utf8")));
 * const out = reconcile(new Zones(), request, cluster);
 * ```
 * @throws {TypeError} not a request fixture (unknown keys, a malformed exchange).
 */
export function fromFixture(fixture: RequestFixture): { request: TestRequest; cluster: FakeCluster } {
  const spec = record(fixture, "fixture", FIXTURE_KEYS, ["object"]) as unknown as RequestFixture;
  const req = request(spec.object, {
    children: spec.children ?? [],
    related: spec.related ?? [],
    finalizing: spec.finalizing ?? false,
    attempt: spec.attempt ?? 0,
    now: spec.now ?? undefined,
  });
  const egress = spec.egress ?? [];
  if (!Array.isArray(egress)) throw new TypeError("fixture.egress: a list of exchanges ({ request, response or error })");
  const visible = [req.object, ...req.children.map((c) => (c instanceof RatedChild ? c.object : c)), ...req.related, ...(spec.cluster ?? [])];
  return { request: req, cluster: new FakeCluster(visible, undefined, egress) };
}

/**
 * The host would refuse this outcome before writing anything (or this
 * conversion answer before the API server sees it): `message` names the
 * object and the rule.
 */
export class Refused extends Error {
  constructor(
    readonly reason: string,
    what = "outcome refused, nothing written",
  ) {
    super(`${what}: ${reason} (the host checks this)`);
    this.name = "Refused";
  }
}

interface KindRule {
  group: string;
  kind?: string;
  why?: string;
}

const ruleMatches = (rule: KindRule, kind: Gvk) =>
  rule.group === kind.group && (rule.kind === undefined || rule.kind === kind.kind);

const utf8 = (text: string) => new TextEncoder().encode(text).length;

function validName(name: string): boolean {
  return (
    name.length > 0 &&
    utf8(name) <= RULES.maxNameBytes &&
    /^[a-z0-9.-]+$/.test(name) &&
    /^[a-z0-9]/.test(name) &&
    /[a-z0-9]$/.test(name)
  );
}

/**
 * The host's checks of an outcome before it writes anything, with the policy
 * of `operon run --module` (what the manifest owns, any namespace,
 * cluster-scoped kinds allowed, no adoption): the rules and messages of
 * `operon_contract::rules` (`contract/rules/`). `children` are the parent's
 * own; `cluster` the other objects a child could be written over. Contract
 * 0.2's parts, when given: `requeueAt` must be an RFC 3339 time, and
 * `parentMetadata` may not set `operon.dev/` keys (the label keys the
 * Reconciler's selector reads are refused too, which a test cannot know).
 * @throws {Refused} naming the object and the rule.
 */
export function checkOutcome(
  manifestName: string,
  owns: Gvk[],
  parent: KubeObject,
  children: KubeObject[],
  cluster: KubeObject[],
  desired: KubeObject[],
  reasons: string[],
  more: { requeueAt?: string; parentMetadata?: ParentMetadata } = {},
): void {
  if (more.requeueAt !== undefined && !isRfc3339(more.requeueAt)) {
    throw new Refused(`requeue-at ${JSON.stringify(more.requeueAt)} is not an RFC 3339 time such as 2026-01-01T00:00:00Z`);
  }
  for (const [what, keys] of [
    ["label", Object.keys(more.parentMetadata?.labels ?? {})],
    ["annotation", Object.keys(more.parentMetadata?.annotations ?? {})],
  ] as const) {
    const key = keys.find((k) => k.startsWith("operon.dev/"));
    if (key !== undefined) {
      throw new Refused(`parent-metadata sets the ${what} ${JSON.stringify(key)}: operon.dev keys are the host's`);
    }
  }
  if (desired.length > RULES.maxDesired) {
    throw new Refused(
      `${desired.length} desired objects exceed the limit of ${RULES.maxDesired} per outcome (the host's --max-children-per-outcome)`,
    );
  }
  if (reasons.length > RULES.maxEvents) {
    throw new Refused(
      `${reasons.length} events exceed the limit of ${RULES.maxEvents} per outcome (the host's --max-events-per-outcome)`,
    );
  }
  const owned = owns.map(kindToString).join(", ") || "none";
  const parentMeta = metadataOf(parent);
  const parentNs = parentMeta.namespace;
  const uid = (parent.metadata as { uid?: unknown } | undefined)?.uid;
  const owner = {
    apiVersion: parent.apiVersion,
    kind: parent.kind,
    name: parentMeta.name,
    uid: typeof uid === "string" ? uid : null,
    controller: true,
    blockOwnerDeletion: true,
  };
  const seen = new Set<string>();
  const checked: [Gvk, string | undefined, string][] = [];
  desired.forEach((object, i) => {
    const kind = kindOf(object);
    if (!kind) throw new Refused(`desired[${i}] lacks apiVersion or kind`);
    const meta = metadataOf(object);
    const name = meta.name;
    const what = `desired[${i}] (${kindToString(kind)} ${name})`;
    const reserved = (RULES.reserved as KindRule[]).find((r) => ruleMatches(r, kind));
    if (reserved) throw new Refused(`${what}: ${kindToString(kind)} may never be written by a plugin (${reserved.why})`);
    if (!owns.some((k) => sameKind(k, kind))) {
      throw new Refused(`${what}: kind ${kindToString(kind)} is not among the kinds ${manifestName} may write (${owned})`);
    }
    if (!validName(name)) {
      throw new Refused(`${what}: metadata.name must be a lowercase DNS subdomain (a-z, 0-9, '-', '.'; at most 253)`);
    }
    const clusterScoped = (RULES.clusterScoped as KindRule[]).some((r) => ruleMatches(r, kind));
    let ns: string | undefined;
    if (!clusterScoped && parentNs !== undefined) {
      if (meta.namespace !== undefined && meta.namespace !== parentNs) {
        throw new Refused(
          `${what}: namespace "${meta.namespace}" differs from the parent's "${parentNs}"; children live in their parent's namespace`,
        );
      }
      ns = parentNs;
    } else if (!clusterScoped) {
      if (meta.namespace === undefined) {
        throw new Refused(`${what}: a namespaced child of a cluster-scoped parent needs metadata.namespace`);
      }
      ns = meta.namespace;
    } else if (parentNs !== undefined) {
      throw new Refused(`${what}: ${kindToString(kind)} is cluster-scoped and cannot be owned by a namespaced parent`);
    }
    const key = JSON.stringify([kindToString(kind), ns ?? null, name]);
    if (seen.has(key)) throw new Refused(`${what}: returned twice`);
    seen.add(key);
    const prepared = JSON.parse(JSON.stringify(object)) as KubeObject & { metadata?: Record<string, unknown> };
    const preparedMeta = (prepared.metadata ??= {});
    for (const field of [
      "resourceVersion",
      "uid",
      "creationTimestamp",
      "managedFields",
      "generation",
      "selfLink",
      "deletionTimestamp",
    ]) {
      delete preparedMeta[field];
    }
    if (ns !== undefined) preparedMeta.namespace = ns;
    preparedMeta.ownerReferences = [owner];
    const size = utf8(JSON.stringify(prepared));
    if (size > RULES.maxObjectBytes) {
      throw new Refused(`${what}: ${size} bytes exceeds the ${RULES.maxObjectBytes}-byte object limit`);
    }
    checked.push([kind, ns, name]);
  });
  reasons.forEach((reason, i) => {
    if (reason.length === 0 || utf8(reason) > RULES.maxReasonBytes) {
      throw new Refused(`events[${i}]: reason must be 1-${RULES.maxReasonBytes} characters`);
    }
  });
  const same = (o: KubeObject, kind: Gvk, ns: string | undefined, name: string) => {
    const k = kindOf(o);
    const m = metadataOf(o);
    return k !== undefined && sameKind(k, kind) && m.name === name && (m.namespace === undefined || m.namespace === ns);
  };
  for (const [kind, ns, name] of checked) {
    if (children.some((c) => same(c, kind, ns, name))) continue;
    const existing = cluster.find((o) => same(o, kind, ns, name));
    if (!existing) continue;
    const at = ns !== undefined ? `${ns}/${name}` : name;
    const owners = ((existing.metadata as { ownerReferences?: unknown } | undefined)?.ownerReferences ?? []) as Record<
      string,
      unknown
    >[];
    const controller = owners.find((o) => o.controller === true);
    if (!controller) {
      throw new Refused(
        `${kind.kind} ${at} exists without a controller owner; adopting it needs spec.grants.adopt: true (or delete it, or rename the child)`,
      );
    }
    if (controller.uid !== owner.uid) {
      throw new Refused(
        `${kind.kind} ${at} exists and is controlled by ${controller.kind} ${controller.name}; it is never taken over (rename the child, or delete the other owner)`,
      );
    }
  }
}

/** An admission review of `object` (its kind, namespace and name read from it). */
export function review(
  operation: Operation,
  object?: KubeObject,
  oldObject?: KubeObject,
  options: { dryRun?: boolean; username?: string } = {},
): WitReview {
  const source = object ?? oldObject ?? {};
  const meta = metadataOf(source);
  return {
    uid: "00000000-0000-0000-0000-000000000000",
    operation,
    kind: kindOf(source) ?? { group: "", version: "", kind: "" },
    namespace: meta.namespace,
    name: meta.name,
    object: object === undefined ? undefined : JSON.stringify(object),
    oldObject: oldObject === undefined ? undefined : JSON.stringify(oldObject),
    userInfo: { username: options.username ?? "tester", uid: "", groups: ["system:authenticated"] },
    dryRun: options.dryRun ?? false,
  };
}

/** Run `validate` through the component's code path (throws `Denied`). */
export function validate<T>(reconciler: Reconciler<T>, raw: WitReview, cluster = new FakeCluster()): string[] {
  return run.validate(reconciler as Reconciler<unknown>, cluster, raw);
}

/** Run `mutate` through the component's code path (throws `Denied`). */
export function mutate<T>(reconciler: Reconciler<T>, raw: WitReview, cluster = new FakeCluster()): KubeObject | undefined {
  const text = run.mutate(reconciler as Reconciler<unknown>, cluster, raw);
  return text === undefined ? undefined : (JSON.parse(text) as KubeObject);
}

const CONVERSION_REFUSED = "conversion answer refused";

/**
 * Run `convert` through the component's code path, and check the answer as
 * the host does before the API server sees it: one object per object, in
 * order, at `desiredApiVersion`, with the same kind, name, namespace and uid.
 * @throws {ConversionError} the reconciler's refusal.
 * @throws {Refused} the host would refuse the answer (its message).
 */
export function convert<T>(reconciler: Reconciler<T>, objects: KubeObject[], desiredApiVersion: string): KubeObject[] {
  const answer = run.convert(
    reconciler as Reconciler<unknown>,
    objects.map((o) => JSON.stringify(o)),
    desiredApiVersion,
  );
  if (answer.length !== objects.length) {
    throw new Refused(
      `convert answered ${answer.length} objects for ${objects.length}: it must answer each, in order`,
      CONVERSION_REFUSED,
    );
  }
  const at = (o: unknown, path: string[]) =>
    path.reduce<unknown>((v, k) => (typeof v === "object" && v !== null ? (v as KubeObject)[k] : undefined), o);
  const shown = (v: unknown) => (v === undefined ? "nothing" : JSON.stringify(v));
  return answer.map((text, i) => {
    const object = JSON.parse(text) as KubeObject;
    if (object.apiVersion !== desiredApiVersion) {
      throw new Refused(
        `convert's object ${i} has apiVersion ${shown(object.apiVersion)}, not the desired ${desiredApiVersion}`,
        CONVERSION_REFUSED,
      );
    }
    for (const path of [["kind"], ["metadata", "name"], ["metadata", "namespace"], ["metadata", "uid"]]) {
      const before = at(objects[i], path);
      const after = at(object, path);
      if (JSON.stringify(before) !== JSON.stringify(after)) {
        throw new Refused(
          `convert changed ${path.join(".")} of object ${i} (from ${shown(before)} to ${shown(after)}), which conversion may not change`,
          CONVERSION_REFUSED,
        );
      }
    }
    return object;
  });
}
