/**
 * The component's exports: the only module that imports the interfaces
 * componentize-js provides (`operon:reconciler/host@0.2.0`,
 * `operon:reconciler/egress@0.2.0`), so everything else runs natively.
 *
 * `operon build` writes the entry module componentize-js starts from:
 *
 * ```ts
 * import reconciler from "../../src/index.ts";
 * import { admissionExports, conversionExports, guestExports } from "@operon/sdk/component";
 * export const guest = guestExports(reconciler);
 * export const admission = admissionExports(reconciler);   // worlds with admission only
 * export const conversion = conversionExports(reconciler); // worlds with conversion only
 * ```
 * @module
 */

/// <reference path="./host.d.ts" />
import * as egress from "operon:reconciler/egress@0.2.0";
import * as wit from "operon:reconciler/host@0.2.0";
import { Denied } from "./admission.js";
import { HostError, type Host } from "./context.js";
import { ConversionError } from "./conversion.js";
import { HttpError, type HttpErrorKind } from "./egress.js";
import { Failure } from "./failure.js";
import type { Mapping } from "./manifest.js";
import { type Reconciler, hasAdmission, hasConversion } from "./reconciler.js";
import * as run from "./run.js";
import { embedded, mapStack } from "./sourcemap.js";
import type {
  WitAdmission,
  WitConversion,
  WitDenial,
  WitFailure,
  WitGuest,
  WitHttpError,
  WitMapping,
  WitReview,
} from "./wit.js";

const HTTP_ERRORS: Record<WitHttpError["tag"], HttpErrorKind> = {
  denied: "denied",
  invalid: "invalid",
  timeout: "timeout",
  unreachable: "unreachable",
  "too-large": "tooLarge",
  budget: "budget",
  "not-recorded": "notRecorded",
};

/** {@link Host} over the component's `host` and `egress` imports. */
const host: Host = {
  log: (level, message, fields) => wit.log(level, message, fields),
  get(kind, namespace, name) {
    try {
      return wit.get({ kind: { ...kind }, namespace, name });
    } catch (error) {
      throw new HostError(payload(error));
    }
  },
  list(kind, namespace, labelSelector) {
    try {
      return wit.list({ ...kind }, namespace, labelSelector);
    } catch (error) {
      throw new HostError(payload(error));
    }
  },
  fetch(request) {
    let answer: { status: number; headers: [string, string][]; body: Uint8Array };
    try {
      answer = egress.fetch({
        method: request.method,
        url: request.url,
        headers: request.headers.map(([n, v]) => [n, v]),
        body: request.body,
        credential: request.credential,
        timeoutMs: request.timeoutMs,
      });
    } catch (error) {
      const value = (error as { payload?: unknown })?.payload ?? error;
      const tag = (value as { tag?: unknown })?.tag;
      if (typeof tag === "string" && tag in HTTP_ERRORS) {
        throw new HttpError(HTTP_ERRORS[tag as WitHttpError["tag"]], String((value as WitHttpError).val));
      }
      throw new HttpError("invalid", payload(error));
    }
    return { status: answer.status, headers: answer.headers, body: new Uint8Array(answer.body) };
  },
};

/** componentize-js throws an imported function's `err` as an Error whose `payload` is the value. */
function payload(error: unknown): string {
  const value = (error as { payload?: unknown })?.payload ?? error;
  return value instanceof Error ? value.message : String(value);
}

function mapping(m: Mapping): WitMapping {
  if ("label" in m) return { tag: "label", val: m.label };
  if ("annotation" in m) return { tag: "annotation", val: m.annotation };
  if ("reference" in m) return { tag: "reference", val: m.reference };
  if ("selector" in m) return { tag: "selector", val: m.selector };
  return { tag: "all-in-namespace" };
}

/**
 * A reconciler from a module's default export: an object implementing
 * {@link Reconciler}, or a class whose instances do.
 */
export function reconcilerOf(exported: unknown): Reconciler<unknown> {
  const candidate =
    typeof exported === "function" ? new (exported as new () => Reconciler<unknown>)() : (exported as Reconciler<unknown>);
  if (typeof candidate?.manifest !== "function" || typeof candidate?.reconcile !== "function") {
    throw new TypeError(
      "the reconciler module's default export must be a Reconciler (an object or class with manifest() and reconcile())",
    );
  }
  run.manifest(candidate); // fails the build, not the first call
  return candidate;
}

/** The `guest` interface for `exported` (see {@link reconcilerOf}). */
export function guestExports(exported: unknown): WitGuest {
  const reconciler = reconcilerOf(exported);
  return {
    manifest() {
      const m = run.manifest(reconciler);
      return {
        name: m.name,
        for: { ...m.for },
        owns: (m.owns ?? []).map((k) => ({ ...k })),
        watches: (m.watches ?? []).map((w) => ({ kind: { ...w.kind }, mapping: mapping(w.mapping) })),
        reads: (m.reads ?? []).map((k) => ({ ...k })),
        updates: (m.updates ?? []).map((u) => ({ kind: { ...u.kind }, strategy: u.strategy })),
        finalizer: m.finalizer,
      };
    },
    reconcile(request) {
      try {
        const out = run.reconcile(reconciler, host, {
          object: request.object,
          children: request.children.map((c) => [c.kind, c.objects]),
          related: request.related,
          finalizing: request.finalizing,
          attempt: request.attempt,
          now: request.now,
        });
        return {
          desired: out.desired,
          status: out.status,
          events: out.events.map((e) => ({ warning: e.warning, reason: e.reason, message: e.message })),
          requeueAfterMs: out.requeueAfterMs === undefined ? undefined : BigInt(out.requeueAfterMs),
          requeueAt: out.requeueAt,
          finalized: out.finalized,
          needsFinalizer: out.needsFinalizer,
          parentMetadata: out.parentMetadata,
        };
      } catch (error) {
        if (error instanceof Failure) {
          const status = error.status === undefined ? undefined : JSON.stringify(error.status);
          const failure: WitFailure = {
            tag: error.terminal ? "terminal" : "transient",
            val: { message: error.message, status },
          };
          throw failure;
        }
        throw bug("reconcile", error);
      }
    },
  };
}

/**
 * An exception that is not the contract's (a bug): logged with its stack to
 * stderr, which the host writes to its log, then rethrown, which traps the
 * component (the host reports a failed call and retries with backoff).
 */
function bug(call: string, error: unknown): unknown {
  // The stack's frames name the author's sources (the map `operon build` embeds), not the bundle.
  const stack = error instanceof Error && error.stack ? mapStack(error.stack, embedded()) : "";
  const text = error instanceof Error ? (stack ? `${error}\n${stack}` : String(error)) : JSON.stringify(error);
  console.error(`${call} threw ${text}`);
  return error;
}

function denial(call: string, error: unknown): never {
  if (error instanceof Denied) {
    const refused: WitDenial = { message: error.message, code: error.code };
    throw refused;
  }
  throw bug(call, error);
}

/**
 * The `admission` interface for `exported`.
 * @throws {TypeError} the reconciler defines neither `validate` nor `mutate`
 *   (while `operon build` runs: `operon.toml` asks for a world with admission).
 */
export function admissionExports(exported: unknown): WitAdmission {
  const reconciler = reconcilerOf(exported);
  if (!hasAdmission(reconciler)) {
    throw new TypeError(
      "operon.toml asks for a world with admission, but the reconciler defines neither validate nor mutate",
    );
  }
  return {
    validate(review: WitReview) {
      try {
        return run.validate(reconciler, host, review);
      } catch (error) {
        return denial("validate", error);
      }
    },
    mutate(review: WitReview) {
      try {
        return run.mutate(reconciler, host, review);
      } catch (error) {
        return denial("mutate", error);
      }
    },
  };
}

/**
 * The `conversion` interface for `exported`: a {@link ConversionError} is the
 * refusal (its message), any other exception a bug that traps.
 * @throws {TypeError} the reconciler does not define `convert` (while
 *   `operon build` runs: `operon.toml` asks for a world with conversion).
 */
export function conversionExports(exported: unknown): WitConversion {
  const reconciler = reconcilerOf(exported);
  if (!hasConversion(reconciler)) {
    throw new TypeError("operon.toml asks for a world with conversion, but the reconciler does not define convert");
  }
  return {
    convert(objects: string[], desiredApiVersion: string) {
      try {
        return run.convert(reconciler, objects, desiredApiVersion);
      } catch (error) {
        // componentize-js answers a thrown non-Error value as the `err` case.
        if (error instanceof ConversionError) throw error.message;
        throw bug("convert", error);
      }
    },
  };
}
