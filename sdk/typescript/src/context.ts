/**
 * Reads from the host's cache, outbound HTTP and logging during one call: {@link Context}.
 * @module
 */

import {
  HttpError,
  type HttpOptions,
  type HttpRequest,
  HttpResponse,
  type RawHttpResponse,
  buildRequest,
  describeCall,
} from "./egress.js";
import { Transient } from "./failure.js";
import { type Gvk, kindToString } from "./kinds.js";
import { type KubeObject, parseObject } from "./request.js";
import type { Schema } from "./schema.js";

/** Log severity. */
export type Level = "trace" | "debug" | "info" | "warn" | "error";

/** The host refused a read (the kind is not declared or granted, a bad selector). */
export class HostError extends Error {
  override readonly name = "HostError";
}

/**
 * The host's imports, objects as JSON text. Inside a component the
 * SDK implements it with the WIT imports; natively `FakeCluster` (in
 * `@operon/sdk/testing`) does, so the same code runs in both.
 */
export interface Host {
  log(level: Level, message: string, fields: [string, string][]): void;
  /** One object, undefined if it does not exist. Throws {@link HostError}. */
  get(kind: Gvk, namespace: string | undefined, name: string): string | undefined;
  /** The objects of `kind` in `namespace` matching the selector. Throws {@link HostError}. */
  list(kind: Gvk, namespace: string | undefined, labelSelector: string | undefined): string[];
  /** One HTTP call through the host (`egress`). Throws {@link HttpError}. */
  fetch(request: HttpRequest): RawHttpResponse;
}

/** The message of the `denied` answer to a call outside `reconcile`. */
export const OUTSIDE_RECONCILE = "only reconcile may call out (admission and conversion may not)";

/** Options of {@link Context.get}. */
export interface GetOptions<T> {
  /** Default: the parent's namespace. */
  namespace?: string;
  schema?: Schema<T>;
}

/** Options of {@link Context.list}. */
export interface ListOptions<T> {
  /** `app=web,tier!=db`, `env in (a,b)`, `!legacy`; default: all. */
  selector?: string;
  /** Default: the parent's namespace. */
  namespace?: string;
  schema?: Schema<T>;
}

/**
 * What a reconciler may do besides computing: read objects from the host's
 * cache (kinds in `manifest.reads`, the parent's and the owned kinds), call
 * out over HTTP through the host ({@link Context.http}, in `reconcile` only)
 * and log.
 *
 * Reads never reach the API server and never block on the network; the
 * cache may lag slightly, and the host reconciles again when it catches up.
 */
export class Context {
  constructor(
    private readonly host: Host,
    private readonly calls = true,
  ) {}

  /**
   * The object of `kind` called `name`, undefined if it does not exist.
   * @throws {Transient} the host refused the read (declare the kind in `manifest.reads`, or grant it).
   * @throws {Terminal} the object does not fit the schema.
   */
  get<T = KubeObject>(kind: Gvk, name: string, options: GetOptions<T> = {}): T | undefined {
    let text: string | undefined;
    try {
      text = this.host.get(kind, options.namespace, name);
    } catch (error) {
      throw new Transient(`cannot get ${kindToString(kind)} ${name}: ${message(error)}`);
    }
    return text === undefined ? undefined : parseObject(JSON.parse(text) as KubeObject, options.schema);
  }

  /**
   * The objects of `kind` whose labels match `options.selector`.
   * @throws {Transient} the host refused the list (kind not declared or granted, malformed selector).
   * @throws {Terminal} an object does not fit the schema.
   */
  list<T = KubeObject>(kind: Gvk, options: ListOptions<T> = {}): T[] {
    let texts: string[];
    try {
      texts = this.host.list(kind, options.namespace, options.selector || undefined);
    } catch (error) {
      throw new Transient(`cannot list ${kindToString(kind)}: ${message(error)}`);
    }
    return texts.map((t) => parseObject(JSON.parse(t) as KubeObject, options.schema));
  }

  /**
   * One HTTP request, made by the host (contract 0.2's `egress`), synchronous
   * like the reads.
   *
   * Only what the Reconciler's `spec.grants.egress` allows is sent, and only
   * from `reconcile`; `credential` names one of its `spec.credentials`, which
   * the host adds (the value never reaches the reconciler). Keep calls
   * idempotent: a reconcile may run again at any time (PUT a record rather
   * than POST another one; look before creating), and clean up when
   * `request.finalizing`.
   *
   * ```ts
   * const zone = ctx.http({ method: "GET", url: `https://dns.example/api/zones/${name}`, credential: "pdns" });
   * if (zone.status === 404) ctx.http({ method: "POST", url: "https://dns.example/api/zones", json: { name }, credential: "pdns" });
   * ```
   * @returns the answer, whatever its status code (check `ok` or `status`).
   * @throws {HttpError} no answer (`kind` says why: `denied`, `invalid`,
   *   `timeout`, `unreachable`, `tooLarge`, `budget`, `notRecorded`). Not
   *   caught, the reconcile fails as {@link Transient}.
   * @throws {TypeError} options of the wrong type, or both `body` and `json`.
   */
  http(options: HttpOptions): HttpResponse {
    const request = buildRequest(options);
    const call = describeCall(request);
    if (!this.calls) throw new HttpError("denied", OUTSIDE_RECONCILE, call);
    let answer: RawHttpResponse;
    try {
      answer = this.host.fetch(request);
    } catch (error) {
      if (error instanceof HttpError) error.call ??= call;
      throw error;
    }
    return new HttpResponse(answer.status, answer.headers, answer.body);
  }

  /** Writes a log line through the host's logger (tagged with the controller and the parent). */
  log(level: Level, text: string, fields: Record<string, unknown> = {}): void {
    this.host.log(level, text, Object.entries(fields).map(([k, v]) => [k, String(v)]));
  }

  debug(text: string, fields?: Record<string, unknown>): void {
    this.log("debug", text, fields);
  }

  info(text: string, fields?: Record<string, unknown>): void {
    this.log("info", text, fields);
  }

  warn(text: string, fields?: Record<string, unknown>): void {
    this.log("warn", text, fields);
  }

  error(text: string, fields?: Record<string, unknown>): void {
    this.log("error", text, fields);
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
