/**
 * The {{name}} reconciler: a Greeting (demo.operon.dev/v1alpha1, see crd.yaml)
 * wants a ConfigMap `<name>-greeting` holding `spec.message`, and reports
 * `status.observedGeneration` and `status.published` (whether that ConfigMap
 * exists). An empty message is a terminal failure: retrying cannot help, so
 * the host waits until the Greeting changes.
 *
 * `npm test` runs the unit tests, `operon build` makes dist/{{name}}.wasm and
 * `operon test` runs fixtures/ through the component.
 */

import {
  type Context,
  type Manifest,
  Outcome,
  type Reconciler,
  type Request,
  Terminal,
  gvk,
  kinds,
  newObject,
  s,
} from "@operon/sdk";

/** What a Greeting asks for: the message to publish. */
export const GreetingSpec = s.object({ message: s.string() });
/** What the reconciler reports. */
export const GreetingStatus = s.object({ observedGeneration: s.optional(s.i64()), published: s.optional(s.boolean()) });
/**
 * The parent, checked when it is read (metadata is on `request.metadata`).
 * These schemas are the CRD's too: `operon build` writes crd.yaml from
 * them (src/crd.ts).
 */
export const Greeting = s.object({ spec: GreetingSpec });
export type Greeting = s.Infer<typeof Greeting>;

export default class GreetingReconciler implements Reconciler<Greeting> {
  readonly parent = Greeting;

  manifest(): Manifest {
    return { name: "{{name}}", for: gvk("demo.operon.dev", "v1alpha1", "Greeting"), owns: [kinds.ConfigMap] };
  }

  reconcile(request: Request<Greeting>, ctx: Context): Outcome {
    const { message } = request.object.spec;
    if (!message) throw new Terminal("spec.message must not be empty");
    const name = `${request.name}-greeting`;
    ctx.debug("publishing greeting", { configmap: name });
    return new Outcome()
      .apply(newObject(kinds.ConfigMap, name, {}, { data: { message } }))
      .setStatus({ observedGeneration: request.generation, published: request.hasChild(kinds.ConfigMap, name) });
  }
}
