/**
 * The records of the WIT contract (`operon:reconciler@0.2.0`) as they cross
 * the component boundary in JavaScript (componentize-js' representation):
 * records are objects with camelCase fields, `option<T>` is `T | undefined`,
 * variants are `{ tag, val }`, enums are their kebab-case names, `u64` is a
 * `bigint`, and a `result` is the return value (ok) or a thrown `{ tag:
 * "err", val }`-shaped error payload (err).
 *
 * Reconcilers never need these: they are the input and output of
 * {@link "./run"} and of the adapter in `component.ts`.
 *
 * @module
 */

/** One Kubernetes object as JSON text. */
export type ObjectJson = string;

/** `record gvk`. */
export interface WitGvk {
  group: string;
  version: string;
  kind: string;
}

/** `record object-ref`. */
export interface WitObjectRef {
  kind: WitGvk;
  namespace?: string;
  name: string;
}

/** `variant mapping`. */
export type WitMapping =
  | { tag: "label"; val: string }
  | { tag: "annotation"; val: string }
  | { tag: "all-in-namespace" }
  | { tag: "reference"; val: string }
  | { tag: "selector"; val: string };

/** `record watch`. */
export interface WitWatch {
  kind: WitGvk;
  mapping: WitMapping;
}

/** `enum update-strategy`. */
export type WitUpdateStrategy = "in-place" | "recreate" | "on-delete";

/** `record owned-update`. */
export interface WitOwnedUpdate {
  kind: WitGvk;
  strategy: WitUpdateStrategy;
}

/** `record reconciler-manifest`. */
export interface WitManifest {
  name: string;
  for: WitGvk;
  owns: WitGvk[];
  watches: WitWatch[];
  reads: WitGvk[];
  updates: WitOwnedUpdate[];
  finalizer?: string;
}

/** `enum readiness-status`. */
export type WitReadinessStatus = "current" | "in-progress" | "failed" | "terminating" | "unknown";

/** `record readiness`. */
export interface WitReadiness {
  status: WitReadinessStatus;
  message: string;
}

/** `record child`. */
export interface WitChild {
  object: ObjectJson;
  readiness: WitReadiness;
}

/** `record children`. */
export interface WitChildren {
  kind: WitGvk;
  objects: WitChild[];
}

/** `record request`. */
export interface WitRequest {
  object: ObjectJson;
  children: WitChildren[];
  related: ObjectJson[];
  finalizing: boolean;
  attempt: number;
  now: string;
}

/** `record parent-metadata`. */
export interface WitParentMetadata {
  labels: [string, string][];
  annotations: [string, string][];
}

/** `record event`. */
export interface WitEvent {
  warning: boolean;
  reason: string;
  message: string;
}

/** `record outcome`. `requeueAfterMs` is a `u64`: a bigint. */
export interface WitOutcome {
  desired: ObjectJson[];
  status?: ObjectJson;
  events: WitEvent[];
  requeueAfterMs?: bigint;
  requeueAt?: string;
  finalized: boolean;
  needsFinalizer: boolean;
  parentMetadata?: WitParentMetadata;
}

/** `record failure-detail`. */
export interface WitFailureDetail {
  message: string;
  status?: ObjectJson;
}

/** `variant failure`. */
export type WitFailure = { tag: "transient"; val: WitFailureDetail } | { tag: "terminal"; val: WitFailureDetail };

/** `enum level` of the host interface. */
export type WitLevel = "trace" | "debug" | "info" | "warn" | "error";

/** `enum operation` of the admission interface. */
export type WitOperation = "create" | "update" | "delete" | "connect";

/** `record user-info`. */
export interface WitUserInfo {
  username: string;
  uid: string;
  groups: string[];
}

/** `record review`. */
export interface WitReview {
  uid: string;
  operation: WitOperation;
  kind: WitGvk;
  subResource?: string;
  namespace?: string;
  name: string;
  object?: ObjectJson;
  oldObject?: ObjectJson;
  userInfo: WitUserInfo;
  dryRun: boolean;
}

/** `record denial`. */
export interface WitDenial {
  message: string;
  code?: number;
}

/** The `host` interface the component imports. */
export interface WitHost {
  log(level: WitLevel, message: string, fields: [string, string][]): void;
  /** Throws the error string on `err`. */
  get(ref: WitObjectRef): ObjectJson | undefined;
  /** Throws the error string on `err`. */
  list(kind: WitGvk, namespace: string | undefined, labelSelector: string | undefined): ObjectJson[];
}

/** `record http-request` of the egress interface. `list<u8>` is a `Uint8Array`. */
export interface WitHttpRequest {
  method: string;
  url: string;
  headers: [string, string][];
  body?: Uint8Array;
  credential?: string;
  timeoutMs?: number;
}

/** `record http-response` of the egress interface. */
export interface WitHttpResponse {
  status: number;
  headers: [string, string][];
  body: Uint8Array;
}

/** `variant http-error` of the egress interface: why no answer came. */
export type WitHttpError = {
  tag: "denied" | "invalid" | "timeout" | "unreachable" | "too-large" | "budget" | "not-recorded";
  val: string;
};

/** The `egress` interface the component imports (contract 0.2). */
export interface WitEgress {
  /** Throws a {@link WitHttpError} on `err` (as an error whose `payload` it is). */
  fetch(request: WitHttpRequest): WitHttpResponse;
}

/** The `guest` interface the component exports. */
export interface WitGuest {
  manifest(): WitManifest;
  /** Throws a {@link WitFailure} on `err`. */
  reconcile(request: WitRequest): WitOutcome;
}

/** The `admission` interface the component exports (worlds `reconciler-with-admission[-and-conversion]`). */
export interface WitAdmission {
  /** Throws a {@link WitDenial} on `err`. */
  validate(review: WitReview): string[];
  /** Throws a {@link WitDenial} on `err`. */
  mutate(review: WitReview): ObjectJson | undefined;
}

/**
 * The `conversion` interface the component exports (worlds
 * `reconciler-with-conversion`, `reconciler-with-admission-and-conversion`).
 */
export interface WitConversion {
  /** Throws the error string on `err`. */
  convert(objects: ObjectJson[], desiredApiVersion: string): ObjectJson[];
}
