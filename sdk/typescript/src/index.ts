/**
 * Write Operon reconcilers in TypeScript.
 *
 * A reconciler is a pure function, compiled to a WebAssembly component by
 * componentize-js: the host hands it one object (the *parent*) with its
 * children and related objects, and it answers with the children that should
 * exist, the parent's status, events and when to run again. The host does all
 * the I/O.
 *
 * The contract:
 * - **Level-based.** The host may call `reconcile` any number of times for the
 *   same object. Derive the answer from the request alone; keep no state
 *   between calls (an instance may be fresh for every call).
 * - **Whole truth.** The {@link Outcome} lists *every* child that should
 *   exist; existing children it leaves out are deleted.
 * - **Deterministic.** Same request, same outcome: no clock readings (the
 *   time is `request.now`), no randomness, so an unchanged cluster causes no
 *   writes.
 * - **Failures.** Throw {@link Transient} to be retried with backoff,
 *   {@link Terminal} to wait until the object changes; either may carry the
 *   parent's status to write meanwhile.
 * - **Calls out go through the host.** `ctx.http({...})` (contract 0.2's
 *   `egress`) sends what the Reconciler's grants allow, with credentials the
 *   host adds; tests answer them from recorded exchanges, offline.
 *
 * ```ts
 * import { type Context, type Reconciler, type Request, Outcome, Terminal, gvk, kinds, newObject, s } from "@operon/sdk";
 *
 * const Greeting = s.object({ spec: s.object({ message: s.string() }) });
 * type Greeting = s.Infer<typeof Greeting>;
 *
 * export default class GreetingReconciler implements Reconciler<Greeting> {
 *   readonly parent = Greeting;
 *   manifest() {
 *     return { name: "greeter", for: gvk("demo.operon.dev", "v1alpha1", "Greeting"), owns: [kinds.ConfigMap] };
 *   }
 *   reconcile(request: Request<Greeting>, ctx: Context) {
 *     const { message } = request.object.spec;
 *     if (!message) throw new Terminal("spec.message must not be empty");
 *     const name = `${request.name}-greeting`;
 *     return new Outcome()
 *       .apply(newObject(kinds.ConfigMap, name, {}, { data: { message } }))
 *       .setStatus({ observedGeneration: request.generation, published: request.hasChild(kinds.ConfigMap, name) });
 *   }
 * }
 * ```
 *
 * Test it natively with `@operon/sdk/testing` (the same code path the
 * component runs); build it with `operon build`.
 * @module
 */

export { Denied, type Operation, type Review, type UserInfo } from "./admission.js";
export { Context, HostError, type GetOptions, type Host, type Level, type ListOptions } from "./context.js";
export { ConversionError } from "./conversion.js";
export {
  type HttpErrorKind,
  type HttpOptions,
  type HttpRequest,
  type RawHttpResponse,
  HTTP_ERROR_KINDS,
  HttpError,
  HttpResponse,
  describeCall,
} from "./egress.js";
export { Failure, type FailureOptions, Terminal, Transient } from "./failure.js";
export {
  type Gvk,
  apiVersion,
  fromApiVersion,
  gvk,
  isKind,
  kindOf,
  kindToString,
  kinds,
  sameKind,
} from "./kinds.js";
export type { Manifest, Mapping, OwnedUpdate, UpdateStrategy, Watch } from "./manifest.js";
export { type Condition, type ObjectMeta, findCondition, newObject, transitionTime } from "./objects.js";
export { type Event, Outcome, type ParentMetadata, isRfc3339, parseRfc3339 } from "./outcome.js";
export { type Reconciler, hasAdmission, hasConversion } from "./reconciler.js";
export {
  type Child,
  type KubeObject,
  type Metadata,
  type Readiness,
  type ReadinessStatus,
  Request,
  describe,
  metadataOf,
  parseObject,
} from "./request.js";
export * as s from "./schema.js";
export { SchemaError } from "./schema.js";
