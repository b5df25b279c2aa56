/**
 * Outbound HTTP through the host (contract 0.2's `egress`): what
 * {@link Context.http} sends and answers.
 *
 * The host makes the call, not the guest: it allows only what the
 * Reconciler's `spec.grants.egress` lists, adds a credential the guest names
 * (one of `spec.credentials`; its value never enters the guest), and bounds
 * each call (a timeout, a response size, calls per reconcile). Only
 * `reconcile` may call out. See docs/egress.md.
 *
 * A call that gets an answer, whatever its status code (a 404 or a 500 is an
 * answer), returns an {@link HttpResponse}; a call that gets none throws an
 * {@link HttpError}, whose `kind` says why.
 * @module
 */

import type { Context } from "./context.js";

/** Why a call got no answer, as fixtures and metrics name it. */
export type HttpErrorKind = "denied" | "invalid" | "timeout" | "unreachable" | "tooLarge" | "budget" | "notRecorded";

/** Every {@link HttpErrorKind}. */
export const HTTP_ERROR_KINDS: readonly HttpErrorKind[] = [
  "denied",
  "invalid",
  "timeout",
  "unreachable",
  "tooLarge",
  "budget",
  "notRecorded",
];

/**
 * A call that got no answer (the WIT `http-error`). `kind`:
 * - `denied`: not allowed by the Reconciler's grants or the host's rules (an
 *   ungranted host or method, a private address, an unknown credential, a
 *   call outside `reconcile`); nothing was sent.
 * - `invalid`: a malformed request (URL, method, header).
 * - `timeout`: no answer in time (the call's deadline, or the reconcile's).
 * - `unreachable`: no connection, or it broke (name, refused, TLS).
 * - `tooLarge`: the answer is larger than the host takes.
 * - `budget`: this reconcile made as many calls as the host allows.
 * - `notRecorded`: replaying a recording (`operon test`, the SDK's test
 *   helpers), which holds no such call.
 *
 * `message` is the host's, for people; `call` names the call (`GET
 * https://...`) when the SDK made it. A reconcile that lets it escape fails
 * as `Transient` (retried with backoff).
 */
export class HttpError extends Error {
  override readonly name = "HttpError";

  constructor(
    readonly kind: HttpErrorKind,
    message: string,
    public call?: string,
  ) {
    super(message);
  }

  /** `denied: ...`: the kind and the message. */
  override toString(): string {
    return `${this.kind}: ${this.message}`;
  }
}

/** One request as the host gets it (the WIT `http-request`). */
export interface HttpRequest {
  method: string;
  url: string;
  headers: [string, string][];
  body?: Uint8Array;
  credential?: string;
  timeoutMs?: number;
}

/** What {@link Context.http} takes. */
export interface HttpOptions {
  /** `GET`, `HEAD`, `POST`, `PUT`, `PATCH` or `DELETE` (sent in capitals). */
  method: string;
  /** Absolute: `https://`, or `http://` when the grant says so. */
  url: string;
  /** A map or pairs (a name may repeat). */
  headers?: Record<string, string> | [string, string][];
  /** Bytes, or text sent as UTF-8. */
  body?: Uint8Array | string;
  /** Sent as compact JSON (`JSON.stringify`) with `content-type: application/json` unless `headers` set one. */
  json?: unknown;
  /** The name of one of the Reconciler's `spec.credentials`; the host adds its value. */
  credential?: string;
  /** This call's deadline in milliseconds (default 10 000, never past the reconcile's). */
  timeoutMs?: number;
}

/** An answer as the host hands it (the WIT `http-response`). */
export interface RawHttpResponse {
  status: number;
  headers: [string, string][];
  body: Uint8Array;
}

/** An answer, whatever its status code (the WIT `http-response`). */
export class HttpResponse implements RawHttpResponse {
  constructor(
    readonly status: number,
    readonly headers: [string, string][] = [],
    readonly body: Uint8Array = new Uint8Array(0),
  ) {}

  /** Whether the status is 2xx. */
  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  /** The first value of the header `name` (compared without case). */
  header(name: string): string | undefined {
    const wanted = name.toLowerCase();
    return this.headers.find(([n]) => n.toLowerCase() === wanted)?.[1];
  }

  /** The body as UTF-8 text. */
  text(): string {
    return new TextDecoder().decode(this.body);
  }

  /**
   * The body parsed as JSON.
   * @throws {SyntaxError} the body is not JSON.
   */
  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }
}

/**
 * The call in one line, as replay messages name it: `METHOD URL`, with
 * ` (N bytes of body)` and ` with credential "name"` when there are.
 */
export function describeCall(request: HttpRequest): string {
  const body = request.body === undefined ? "" : ` (${request.body.length} bytes of body)`;
  const credential = request.credential === undefined ? "" : ` with credential ${JSON.stringify(request.credential)}`;
  return `${request.method.toUpperCase()} ${request.url}${body}${credential}`;
}

/**
 * The request {@link Context.http} sends, its options checked.
 * @throws {TypeError} an option of the wrong type, both `body` and `json`, or a timeout out of range.
 */
export function buildRequest(options: HttpOptions): HttpRequest {
  const { method, url } = options ?? ({} as HttpOptions);
  if (typeof method !== "string" || method === "") throw new TypeError("http: method must be a non-empty string");
  if (typeof url !== "string") throw new TypeError("http: url must be a string");
  const given = options.headers ?? [];
  const pairs: unknown[] = Array.isArray(given) ? given : Object.entries(given);
  const headers: [string, string][] = pairs.map((pair) => {
    if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string" || typeof pair[1] !== "string") {
      throw new TypeError(`http: headers must be a map or pairs of strings, not ${JSON.stringify(pair)}`);
    }
    return [pair[0], pair[1]];
  });
  let body: Uint8Array | undefined;
  if (options.json !== undefined) {
    if (options.body !== undefined) throw new TypeError("http: give body or json, not both");
    const text = JSON.stringify(options.json);
    if (text === undefined) throw new TypeError("http: json is not a JSON value");
    body = new TextEncoder().encode(text);
    if (!headers.some(([n]) => n.toLowerCase() === "content-type")) headers.push(["content-type", "application/json"]);
  } else if (typeof options.body === "string") {
    body = new TextEncoder().encode(options.body);
  } else if (options.body instanceof Uint8Array) {
    body = new Uint8Array(options.body);
  } else if (options.body !== undefined) {
    throw new TypeError("http: body must be a Uint8Array or a string");
  }
  if (options.credential !== undefined && typeof options.credential !== "string") {
    throw new TypeError("http: credential must be the name of one of spec.credentials");
  }
  const timeoutMs = options.timeoutMs;
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs >= 0 && timeoutMs < 2 ** 32)) {
    throw new TypeError(`http: timeoutMs must be a whole number of milliseconds (0 to 2^32-1), not ${timeoutMs}`);
  }
  return { method: method.toUpperCase(), url, headers, body, credential: options.credential, timeoutMs };
}
