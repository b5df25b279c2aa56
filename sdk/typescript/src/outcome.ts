/**
 * What a reconcile wants: {@link Outcome}.
 * @module
 */

import { Terminal } from "./failure.js";
import { type Gvk, apiVersion } from "./kinds.js";
import type { KubeObject } from "./request.js";

/** An event to record on the parent (events.k8s.io/v1). */
export interface Event {
  /** A short UpperCamelCase machine-readable reason, e.g. `Scaled`. */
  reason: string;
  /** Human-readable text. */
  message: string;
  /** `Warning` when true, `Normal` otherwise. */
  warning: boolean;
}

/** Labels and annotations a reconciler keeps on its parent. */
export interface ParentMetadata {
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/**
 * The WIT `outcome` record with objects as JSON text (before the u64 becomes
 * a bigint). `needsFinalizer` is undefined when the reconciler did not say:
 * `run.reconcile` fills in the default.
 */
export interface RawOutcome {
  desired: string[];
  status?: string;
  events: Event[];
  requeueAfterMs?: number;
  requeueAt?: string;
  finalized: boolean;
  needsFinalizer?: boolean;
  parentMetadata?: { labels: [string, string][]; annotations: [string, string][] };
}

/** RFC 3339 with a time zone (`2026-11-26T05:00:00Z`, `2026-11-26T06:00:00.5+01:00`). */
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:[Zz]|([+-])(\d{2}):(\d{2}))$/;

/**
 * The milliseconds since the epoch of an RFC 3339 time, or undefined when the
 * host would not parse it: checked field by field, as `Date.parse` takes
 * February 30th and 24:00. A leap second reads as :59, as the host reads it;
 * digits below the millisecond are dropped.
 */
export function parseRfc3339(text: string): number | undefined {
  const m = RFC3339.exec(text);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [
    number, number, number, number, number, number,
  ];
  const days = new Date(Date.UTC(2000, month, 0)).getUTCDate(); // the month's length in a leap year
  const leapDay = month === 2 && day === 29 && !(year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0));
  if (month < 1 || month > 12 || day < 1 || day > days || leapDay || hour > 23 || minute > 59 || second > 60) {
    return undefined;
  }
  const offsetHours = Number(m[9] ?? 0);
  const offsetMinutes = Number(m[10] ?? 0);
  if (offsetHours > 25 || offsetMinutes > 59) return undefined; // the host allows offsets to ±25:59
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, Math.min(second, 59), Number((m[7] ?? "").padEnd(3, "0").slice(0, 3)));
  const offset = (m[8] === "-" ? -1 : 1) * (offsetHours * 60 + offsetMinutes);
  return date.getTime() - offset * 60_000;
}

/** Whether `text` is an RFC 3339 time the host accepts. */
export function isRfc3339(text: string): boolean {
  return parseRfc3339(text) !== undefined;
}

function stringMap(what: string, value: Record<string, string>): Record<string, string> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`parent ${what} must be an object of strings`);
  }
  for (const [key, text] of Object.entries(value)) {
    if (typeof text !== "string") throw new TypeError(`parent ${what} ${key} must be a string, not ${JSON.stringify(text)}`);
  }
  return { ...value };
}

function isObject(value: unknown): value is KubeObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * What a reconcile wants: the children that should exist, the parent's new
 * status, events, when to run again, whether the parent needs the finalizer,
 * the parent's own labels and annotations and, while finalizing, whether
 * clean-up is done.
 *
 * An outcome is the whole truth for the parent: children that exist but are
 * not applied are deleted, and the status replaces the current one. Build it
 * from the request alone, the same way every time (reconciliation is
 * level-based: the host may call again with the same request at any time).
 *
 * ```ts
 * return new Outcome()
 *   .apply(newObject(kinds.ConfigMap, "web-settings", {}, { data: { mode: "production" } }))
 *   .setStatus({ phase: "Pending" })
 *   .event("Configured", "wrote configmap web-settings")
 *   .requeueAfter(30_000);
 * ```
 */
export class Outcome {
  readonly desired: KubeObject[] = [];
  status: KubeObject | undefined;
  readonly events: Event[] = [];
  requeueAfterMs: number | undefined;
  /** RFC 3339, see {@link requeueAt}. */
  requeueAtTime: string | undefined;
  finalized = false;
  /** See {@link needsFinalizer}; undefined: the default. */
  finalizerNeeded: boolean | undefined;
  /** See {@link setParentMetadata}; undefined: the parent's metadata is left alone. */
  parentMetadata: ParentMetadata | undefined;

  /**
   * Wants `object` to exist. The host sets its namespace to the parent's when
   * missing, adds the controller ownerReference and server-side applies it.
   * Its kind must be in `manifest.owns`; `kind` fills `apiVersion` and `kind`
   * when the object lacks them.
   * @throws {Terminal} the object has no apiVersion or kind.
   */
  apply(object: KubeObject, kind?: Gvk): this {
    if (!isObject(object)) throw new Terminal("a desired object must be a JSON object");
    const value = kind ? { apiVersion: apiVersion(kind), kind: kind.kind, ...object } : object;
    for (const key of ["apiVersion", "kind"]) {
      if (typeof value[key] !== "string") {
        const meta = value.metadata as { name?: unknown } | undefined;
        const name = typeof meta?.name === "string" ? meta.name : "<unnamed>";
        throw new Terminal(`desired object ${name} has no ${key}: set it, or pass its kind to apply`);
      }
    }
    this.desired.push(value);
    return this;
  }

  /**
   * Sets the parent's new `status`, replacing the current one; written only
   * when it differs. Without it the status is left untouched. Keep it
   * deterministic: times from `request.now`, never the clock. The host sets
   * `observedGeneration` to the parent's generation unless it is set.
   */
  setStatus(status: object): this {
    if (!isObject(status)) throw new Terminal("the status must be a JSON object");
    this.status = status;
    return this;
  }

  /** Records a `Normal` event on the parent. */
  event(reason: string, message: string): this {
    this.events.push({ reason, message, warning: false });
    return this;
  }

  /** Records a `Warning` event on the parent. */
  warning(reason: string, message: string): this {
    this.events.push({ reason, message, warning: true });
    return this;
  }

  /**
   * Reconcile again after `ms` milliseconds even if nothing changes (e.g. to
   * poll something outside the cluster). The host raises values below its
   * floor (100 ms).
   */
  requeueAfter(ms: number): this {
    if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`requeueAfter needs a finite delay of 0 or more, not ${ms}`);
    this.requeueAfterMs = Math.floor(ms);
    return this;
  }

  /**
   * Reconcile again at `time` even if nothing changes (schedules, expiries,
   * TTLs): a `Date`, or RFC 3339 text (`2026-11-26T05:00:00Z`). The host
   * measures it from `request.now`; a time already past means its floor, and
   * with {@link requeueAfter} too the earlier wins.
   * @throws {RangeError} not a valid time (the host would refuse the outcome).
   */
  requeueAt(time: Date | string): this {
    if (time instanceof Date) {
      if (Number.isNaN(time.getTime())) throw new RangeError("requeueAt needs a valid Date");
      this.requeueAtTime = time.toISOString();
    } else {
      if (typeof time !== "string" || !isRfc3339(time)) {
        throw new RangeError(`requeueAt needs an RFC 3339 time such as 2026-01-01T00:00:00Z, not ${JSON.stringify(time)}`);
      }
      this.requeueAtTime = time;
    }
    return this;
  }

  /** Clean-up is complete: the host may remove the finalizer (only meaningful when `request.finalizing`). */
  finish(): this {
    this.finalized = true;
    return this;
  }

  /**
   * Whether this parent needs clean-up when it is deleted: the host keeps the
   * manifest's finalizer on it while outcomes say so (adding it now) and
   * releases it when one says false. Without this call: true when the manifest
   * declares a finalizer, except in the answer to a finalizing request (false);
   * false without one.
   */
  needsFinalizer(needed = true): this {
    this.finalizerNeeded = needed;
    return this;
  }

  /**
   * The labels and annotations to keep on the parent (a decorator's marks):
   * written with server-side apply under the plugin's field manager, so a key
   * no longer returned is removed and keys others set are left alone. Nothing
   * else of the parent is written. Keys under `operon.dev/`, and labels the
   * Reconciler's selector reads, refuse the outcome. Without this call the
   * parent's metadata is left alone; with empty maps, the keys kept before
   * are removed.
   */
  setParentMetadata(labels: Record<string, string>, annotations: Record<string, string> = {}): this {
    this.parentMetadata = { labels: stringMap("labels", labels), annotations: stringMap("annotations", annotations) };
    return this;
  }

  /** The WIT record, objects as JSON text. */
  toRaw(): RawOutcome {
    try {
      return {
        desired: this.desired.map((o) => JSON.stringify(o)),
        status: this.status === undefined ? undefined : JSON.stringify(this.status),
        events: this.events.map((e) => ({ ...e })),
        requeueAfterMs: this.requeueAfterMs,
        requeueAt: this.requeueAtTime,
        finalized: this.finalized,
        needsFinalizer: this.finalizerNeeded,
        parentMetadata:
          this.parentMetadata === undefined
            ? undefined
            : {
                labels: Object.entries(this.parentMetadata.labels),
                annotations: Object.entries(this.parentMetadata.annotations),
              },
      };
    } catch (error) {
      throw new Terminal(`cannot serialize the outcome: ${(error as Error).message}`);
    }
  }
}
