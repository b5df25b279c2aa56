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

/** The WIT `outcome` record with objects as JSON text (before the u64 becomes a bigint). */
export interface RawOutcome {
  desired: string[];
  status?: string;
  events: Event[];
  requeueAfterMs?: number;
  finalized: boolean;
}

function isObject(value: unknown): value is KubeObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * What a reconcile wants: the children that should exist, the parent's new
 * status, events, when to run again and, while finalizing, whether clean-up
 * is done.
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
  finalized = false;

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
   * deterministic: no clock readings.
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

  /** Clean-up is complete: the host may remove the finalizer (only meaningful when `request.finalizing`). */
  finish(): this {
    this.finalized = true;
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
        finalized: this.finalized,
      };
    } catch (error) {
      throw new Terminal(`cannot serialize the outcome: ${(error as Error).message}`);
    }
  }
}
