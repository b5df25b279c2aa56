/**
 * Run reconcilers natively, with no wasm and no cluster (for `node --test`).
 *
 * {@link reconcile} goes through `run.reconcile`, the function the component's
 * export calls, with a {@link FakeCluster} standing in for the host's cache:
 * what passes here passes in the component.
 *
 * ```ts
 * const out = reconcile(new GreetingReconciler(), request(greeting("hi")));
 * assert.deepEqual(out.find("ConfigMap", "hello-greeting")?.data, { message: "hi" });
 * ```
 * @module
 */

import type { Operation } from "./admission.js";
import { HostError, type Host, type Level } from "./context.js";
import { type Gvk, isKind, kindOf, kindToString, sameKind } from "./kinds.js";
import type { Event } from "./outcome.js";
import type { Reconciler } from "./reconciler.js";
import { type KubeObject, metadataOf } from "./request.js";
import * as run from "./run.js";
import { Selector, SelectorError } from "./selector.js";
import type { WitReview } from "./wit.js";

/** A line logged through `ctx.log`. */
export interface LogLine {
  level: Level;
  message: string;
  fields: [string, string][];
}

/**
 * An in-memory stand-in for the host's cache: the objects `ctx.get` and
 * `ctx.list` see. A read without a namespace means the parent's namespace
 * (as in the host) when it goes through {@link reconcile}. Cluster-scoped
 * objects (no namespace) match any namespace. Unlike the host, the fake lets
 * every kind be read: check `manifest.reads` yourself.
 */
export class FakeCluster implements Host {
  readonly logs: LogLine[] = [];

  constructor(
    readonly objects: KubeObject[] = [],
    public namespace?: string,
  ) {}

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

/** A request as a test writes it: the parent and a flat list of children. */
export interface TestRequest {
  object: KubeObject;
  children: KubeObject[];
  related: KubeObject[];
  finalizing: boolean;
  attempt: number;
}

/** A request for `parent` with its existing children (any order, any owned kind). */
export function request(
  parent: KubeObject,
  options: { children?: KubeObject[]; related?: KubeObject[]; finalizing?: boolean; attempt?: number } = {},
): TestRequest {
  return {
    object: parent,
    children: options.children ?? [],
    related: options.related ?? [],
    finalizing: options.finalizing ?? false,
    attempt: options.attempt ?? 0,
  };
}

/**
 * The WIT request: children grouped by the owned kinds, sorted by namespace
 * then name, as the host does.
 * @throws {Error} a child lacks apiVersion/kind or is of a kind not owned.
 */
export function toRaw(req: TestRequest, owns: Gvk[]): run.RawRequest {
  const groups: [Gvk, string[]][] = owns.map((kind) => [kind, []]);
  const order = (o: KubeObject) => {
    const m = metadataOf(o);
    return [m.namespace ?? "", m.name] as const;
  };
  const sorted = [...req.children].sort((a, b) => {
    const [an, aname] = order(a);
    const [bn, bname] = order(b);
    return an < bn ? -1 : an > bn ? 1 : aname < bname ? -1 : aname > bname ? 1 : 0;
  });
  sorted.forEach((child, i) => {
    const kind = kindOf(child);
    if (!kind) throw new Error(`children[${i}] lacks apiVersion or kind`);
    const group = groups.find(([k]) => sameKind(k, kind));
    if (!group) throw new Error(`children[${i}] is a ${kindToString(kind)}, which the reconciler does not own`);
    group[1].push(JSON.stringify(child));
  });
  return {
    object: JSON.stringify(req.object),
    children: groups,
    related: req.related.map((o) => JSON.stringify(o)),
    finalizing: req.finalizing,
    attempt: req.attempt,
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

/**
 * Run `reconciler` on `req` through the component's code path.
 * @throws {Transient} {Terminal} as the component would answer.
 */
export function reconcile<T>(reconciler: Reconciler<T>, req: TestRequest, cluster = new FakeCluster()): Reconciled {
  cluster.namespace ??= metadataOf(req.object).namespace;
  const raw = toRaw(req, run.manifest(reconciler as Reconciler<unknown>).owns ?? []);
  const out = run.reconcile(reconciler, cluster, raw);
  return new Reconciled(
    out.desired.map((o) => JSON.parse(o) as KubeObject),
    out.status === undefined ? undefined : (JSON.parse(out.status) as KubeObject),
    out.events,
    out.requeueAfterMs,
    out.finalized,
  );
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
