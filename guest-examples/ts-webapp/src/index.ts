/**
 * Example Operon reconciler in TypeScript: a `WebApp`
 * (`example.operon.dev/v1alpha1`) yields a Deployment, a ClusterIP Service
 * and, when `spec.ingress` is set, an Ingress.
 *
 * The same reconciler as `guest-examples/rust-webapp` (whose `src/lib.rs`
 * documents the rules); `guest-examples/webapp/fixtures` pins both.
 * Its `Ready` condition reads each child's readiness as the host rates it;
 * an invalid spec is a terminal failure that still writes `Ready` False
 * (`InvalidSpec`). Admission: `validate` refuses a blank image and
 * out-of-range replicas or port; `mutate` defaults `spec.port` to 8080.
 * Conversion: `convert` moves WebApps between v1alpha1 and v1.
 */

import {
  type Context,
  Denied,
  type KubeObject,
  type Manifest,
  Outcome,
  type Reconciler,
  type Request,
  type Review,
  Terminal,
  kinds,
  parseObject,
} from "@operon/sdk";
import * as children from "./children.js";
import { convert } from "./conversion.js";
import { invalidStatus, isReady, status } from "./status.js";
import {
  Deployment,
  WEBAPP,
  WebApp,
  type WebAppSpec,
  WebAppStatus,
  imageOf,
  replicasOf,
  validate as validateSpec,
} from "./webapp.js";

/** The finalizer the host keeps on every WebApp (each outcome says it is needed). */
export const FINALIZER = "example.operon.dev/cleanup";
/** The most replicas admission lets a WebApp ask for. */
export const MAX_REPLICAS = 50;
const DEFAULT_PORT = 8080;

/**
 * The WebApp reconciler. It reads its parent itself (no `parent` schema), so
 * that an invalid WebApp is answered with a status too.
 */
export class WebAppReconciler implements Reconciler {
  manifest(): Manifest {
    return { name: "webapp", for: WEBAPP, owns: [kinds.Deployment, kinds.Service, kinds.Ingress], finalizer: FINALIZER };
  }

  reconcile(request: Request, _ctx: Context): Outcome {
    const name = request.name;
    if (request.finalizing) {
      // Nothing outside the cluster to clean up; the children go with the WebApp.
      return new Outcome()
        .event("Cleanup", `webapp ${name} deleted; its children are deleted with it`)
        .finish()
        .needsFinalizer(false);
    }
    const existing = request.child(kinds.Deployment, name, Deployment);
    let webapp: WebApp;
    try {
      webapp = parseObject(request.raw, WebApp);
      validateSpec(webapp.spec);
    } catch (error) {
      if (!(error instanceof Terminal)) throw error;
      throw error.withStatus(invalidStatus(request, error.message, previousStatus(request.raw), existing));
    }
    const spec = webapp.spec;
    const hadIngress = request.hasChild(kinds.Ingress, name);
    const previous = webapp.status;
    const next = status(request, spec, previous, existing);

    const outcome = new Outcome()
      .needsFinalizer()
      .apply(children.deployment(name, spec))
      .apply(children.service(name, spec));
    const ingress = children.ingress(name, spec);
    if (ingress) outcome.apply(ingress);
    for (const [reason, message] of events(name, spec, existing, hadIngress, previous, next)) {
      outcome.event(reason, message);
    }
    return outcome.setStatus(next);
  }

  /** Between `example.operon.dev/v1alpha1` and `example.operon.dev/v1` (see `conversion.ts`). */
  convert(objects: KubeObject[], desiredApiVersion: string): KubeObject[] {
    return convert(objects, desiredApiVersion);
  }

  /** Refuses what the reconciler would fail on, before it is stored. */
  validate(review: Review, _ctx: Context): string[] {
    if (review.operation === "delete" || review.operation === "connect") return [];
    const spec = specOf(review.object);
    const image = spec.image;
    if (typeof image !== "string" || !image.trim()) throw new Denied("spec.image must not be empty");
    // A null field counts as absent.
    if (spec.replicas != null && !intIn(spec.replicas, 0, MAX_REPLICAS)) {
      throw new Denied(`spec.replicas must be between 0 and ${MAX_REPLICAS}, not ${JSON.stringify(spec.replicas)}`);
    }
    if (spec.port != null && !intIn(spec.port, 1, 65535)) {
      throw new Denied(`spec.port must be between 1 and 65535, not ${JSON.stringify(spec.port)}`);
    }
    return [];
  }

  /** Defaults `spec.port` to 8080 on create and update. */
  mutate(review: Review, _ctx: Context): KubeObject | undefined {
    if ((review.operation !== "create" && review.operation !== "update") || !review.object) return undefined;
    const object = review.object;
    if (object.spec === undefined || object.spec === null) object.spec = {};
    const spec = object.spec;
    if (typeof spec !== "object" || Array.isArray(spec)) return undefined;
    const fields = spec as KubeObject;
    if (fields.port !== undefined && fields.port !== null) return undefined;
    fields.port = DEFAULT_PORT;
    return object;
  }
}

/** The status an invalid WebApp has, if it reads as one. */
function previousStatus(raw: KubeObject): WebAppStatus | undefined {
  try {
    return raw.status === undefined ? undefined : WebAppStatus.parse(raw.status);
  } catch {
    return undefined;
  }
}

function specOf(object: KubeObject | undefined): KubeObject {
  const spec = object?.spec;
  return typeof spec === "object" && spec !== null && !Array.isArray(spec) ? (spec as KubeObject) : {};
}

function intIn(value: unknown, low: number, high: number): boolean {
  return typeof value === "number" && Number.isInteger(value) && value >= low && value <= high;
}

/** The events of one reconcile: what the outcome is about to change. */
export function events(
  name: string,
  spec: WebAppSpec,
  existing: Deployment | undefined,
  hadIngress: boolean,
  previous: WebAppStatus | undefined,
  next: WebAppStatus,
): [string, string][] {
  const out: [string, string][] = [];
  if (!existing) {
    out.push(["Created", `creating deployment and service ${name} (${spec.replicas} x ${spec.image})`]);
  } else {
    const replicas = replicasOf(existing);
    if (replicas !== spec.replicas) {
      out.push(["Scaled", `scaling deployment ${name} from ${replicas} to ${spec.replicas} replicas`]);
    }
    const image = imageOf(existing) ?? "";
    if (image !== spec.image) out.push(["Updated", `updating deployment ${name} from image ${image} to ${spec.image}`]);
  }
  if (spec.ingress && !hadIngress) {
    out.push(["IngressCreated", `exposing service ${name} at ${spec.ingress.host}${spec.ingress.path ?? "/"}`]);
  } else if (!spec.ingress && hadIngress) {
    out.push(["IngressRemoved", `deleting ingress ${name}: spec.ingress was removed`]);
  }
  if (isReady(next) && !isReady(previous)) out.push(["Available", `all ${spec.replicas} replicas of ${name} are ready`]);
  return out;
}

export default WebAppReconciler;
