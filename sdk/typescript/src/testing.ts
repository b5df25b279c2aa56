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
 * @module
 */

import type { Operation } from "./admission.js";
import { HostError, type Host, type Level } from "./context.js";
import { type Gvk, isKind, kindOf, kindToString, sameKind } from "./kinds.js";
import type { Event } from "./outcome.js";
import type { Reconciler } from "./reconciler.js";
import { type KubeObject, metadataOf } from "./request.js";
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
 * @throws {Refused} the host would refuse the outcome ({@link checkOutcome}).
 */
export function reconcile<T>(reconciler: Reconciler<T>, req: TestRequest, cluster = new FakeCluster()): Reconciled {
  cluster.namespace ??= metadataOf(req.object).namespace;
  const manifest = run.manifest(reconciler as Reconciler<unknown>);
  const raw = toRaw(req, manifest.owns ?? []);
  const out = run.reconcile(reconciler, cluster, raw);
  checkOutcome(
    manifest.name,
    manifest.owns ?? [],
    req.object,
    req.children,
    cluster.objects,
    out.desired.map((o) => JSON.parse(o) as KubeObject),
    out.events.map((e) => e.reason),
  );
  return new Reconciled(
    out.desired.map((o) => JSON.parse(o) as KubeObject),
    out.status === undefined ? undefined : (JSON.parse(out.status) as KubeObject),
    out.events,
    out.requeueAfterMs,
    out.finalized,
  );
}

/** The host would refuse this outcome before writing anything: `message` names the object and the rule. */
export class Refused extends Error {
  constructor(readonly reason: string) {
    super(`outcome refused, nothing written: ${reason} (the host checks this before writing)`);
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
 * own; `cluster` the other objects a child could be written over.
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
): void {
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
