/**
 * One call of `reconcile`: {@link Request}, with the parent typed.
 * @module
 */

import { Terminal } from "./failure.js";
import { type Gvk, fromApiVersion, isKind, sameKind } from "./kinds.js";
import { type Schema, SchemaError } from "./schema.js";

/** A Kubernetes object as parsed JSON. */
export type KubeObject = { [key: string]: unknown };

/**
 * How far a child is from what its spec asks, as kstatus defines it, computed
 * by the host: `current` (reconciled: a Deployment's replicas all updated and
 * available, a Job complete), `in-progress` (still on its way), `failed` (will
 * not get there without a change), `terminating` (being deleted), `unknown`
 * (the host cannot tell).
 */
export type ReadinessStatus = "current" | "in-progress" | "failed" | "terminating" | "unknown";

/** One child's readiness: the verdict and why, for people (`Available: 1/3`). */
export interface Readiness {
  status: ReadinessStatus;
  message: string;
}

/** An existing child with its readiness. */
export interface Child {
  object: KubeObject;
  readiness: Readiness;
}

/** The parent's `metadata`, as far as reconcilers commonly need it. Missing fields are empty. */
export interface Metadata {
  name: string;
  namespace?: string;
  uid: string;
  generation?: number;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
  finalizers: string[];
}

function text(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

function strings(value: unknown): Record<string, string> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return {};
  return Object.fromEntries(Object.entries(value).filter((e): e is [string, string] => typeof e[1] === "string"));
}

/** An object's metadata, read leniently (anything of the wrong type reads as empty). */
export function metadataOf(object: unknown): Metadata {
  const raw = (object as { metadata?: unknown } | null)?.metadata;
  const meta = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
  const generation = meta.generation;
  const finalizers = meta.finalizers;
  return {
    name: text(meta.name) ?? "",
    namespace: text(meta.namespace),
    uid: text(meta.uid) ?? "",
    generation: typeof generation === "number" && Number.isInteger(generation) ? generation : undefined,
    resourceVersion: text(meta.resourceVersion),
    creationTimestamp: text(meta.creationTimestamp),
    deletionTimestamp: text(meta.deletionTimestamp),
    labels: strings(meta.labels),
    annotations: strings(meta.annotations),
    finalizers: Array.isArray(finalizers) ? finalizers.filter((f): f is string => typeof f === "string") : [],
  };
}

/** `Kind namespace/name` (or `Kind name`) for messages. */
export function describe(object: unknown): string {
  const meta = metadataOf(object);
  const kind = text((object as { kind?: unknown } | null)?.kind) ?? "";
  return meta.namespace !== undefined ? `${kind} ${meta.namespace}/${meta.name}` : `${kind} ${meta.name}`;
}

/**
 * `object` read by `schema` (as it is without one): what a reconciler's
 * `parent` schema does before `reconcile`, for a reconciler that reads its
 * parent itself (to answer an invalid one with a status, say).
 * @throws {Terminal} `Kind ns/name is invalid: <why>` when it does not fit.
 */
export function parseObject<T>(object: KubeObject, schema?: Schema<T>): T {
  if (!schema) return object as T;
  try {
    return schema.parse(object);
  } catch (error) {
    if (error instanceof SchemaError) throw new Terminal(`${describe(object)} is invalid: ${error.message}`);
    throw error;
  }
}

/**
 * One call of `reconcile`: the parent (typed as the reconciler's `parent`
 * schema reads it), its existing children and related objects as the host's
 * cache has them.
 */
export class Request<T = KubeObject> {
  /** The parent's metadata. */
  readonly metadata: Metadata;

  constructor(
    /** The parent, as the reconciler's schema read it, including its current `status`. */
    readonly object: T,
    /** The parent as parsed JSON, always. */
    readonly raw: KubeObject,
    private readonly childGroups: [Gvk, Child[]][] = [],
    private readonly relatedObjects: KubeObject[] = [],
    /**
     * The parent still carries the finalizer and is being deleted or no longer
     * matches the Reconciler's selector: clean up, then finish.
     */
    readonly finalizing = false,
    /** How many times in a row this parent failed before this call. */
    readonly attempt = 0,
    /**
     * The host's clock when the reconcile began, RFC 3339 in UTC with
     * milliseconds (`2026-11-26T04:05:06.789Z`): one value for the whole call,
     * so time-dependent answers are deterministic (fixtures and tests fix it).
     * Use it rather than `Date.now()`.
     */
    readonly now = "1970-01-01T00:00:00.000Z",
  ) {
    this.metadata = metadataOf(raw);
  }

  /** {@link now} as a `Date`. */
  get nowDate(): Date {
    return new Date(this.now);
  }

  /** The parent's name. */
  get name(): string {
    return this.metadata.name;
  }

  /** The parent's namespace (undefined for a cluster-scoped parent). */
  get namespace(): string | undefined {
    return this.metadata.namespace;
  }

  /** The parent's `metadata.generation` (0 if it has none). */
  get generation(): number {
    return this.metadata.generation ?? 0;
  }

  /** The parent's `metadata.uid`. */
  get uid(): string {
    return this.metadata.uid;
  }

  /** The parent's kind. */
  get kind(): Gvk {
    return fromApiVersion(text(this.raw.apiVersion) ?? "", text(this.raw.kind) ?? "");
  }

  /**
   * The existing children of `kind` (sorted by namespace, then name), read by
   * `schema`. Empty when none exist or the kind is not owned.
   * @throws {Terminal} a child does not fit the schema.
   */
  children<C = KubeObject>(kind: Gvk, schema?: Schema<C>): C[] {
    return this.group(kind).map((c) => parseObject(c.object, schema));
  }

  private group(kind: Gvk): Child[] {
    return this.childGroups.find(([k]) => sameKind(k, kind))?.[1] ?? [];
  }

  private find(kind: Gvk, name: string): Child | undefined {
    return this.group(kind).find((c) => metadataOf(c.object).name === name);
  }

  /**
   * The existing child of `kind` called `name`, or undefined.
   * @throws {Terminal} that child does not fit the schema.
   */
  child<C = KubeObject>(kind: Gvk, name: string, schema?: Schema<C>): C | undefined {
    const found = this.find(kind, name);
    return found === undefined ? undefined : parseObject(found.object, schema);
  }

  /** Whether a child of `kind` called `name` exists. */
  hasChild(kind: Gvk, name: string): boolean {
    return this.find(kind, name) !== undefined;
  }

  /** The readiness of the existing child of `kind` called `name`, or undefined when it does not exist. */
  readiness(kind: Gvk, name: string): Readiness | undefined {
    return this.find(kind, name)?.readiness;
  }

  /** The existing children with their readiness: of `kind`, or of every owned kind (in `manifest.owns` order). */
  childrenWithReadiness(kind?: Gvk): Child[] {
    return kind === undefined ? this.childGroups.flatMap(([, children]) => children) : [...this.group(kind)];
  }

  /** Whether every existing child is `current` (true when there are none). */
  allChildrenCurrent(): boolean {
    return this.childGroups.every(([, children]) => children.every((c) => c.readiness.status === "current"));
  }

  /**
   * The related objects (of watched kinds) of `kind`.
   * @throws {Terminal} one of them does not fit the schema.
   */
  related<C = KubeObject>(kind: Gvk, schema?: Schema<C>): C[] {
    return this.relatedObjects.filter((o) => isKind(o, kind)).map((o) => parseObject(o, schema));
  }

  /** Every related object, in the host's order. */
  get allRelated(): KubeObject[] {
    return [...this.relatedObjects];
  }
}
