/**
 * Admission control: {@link Review} in, warnings or {@link Denied} out.
 *
 * A reconciler that defines `validate` and/or `mutate`, and whose
 * `operon.toml` says `world = "reconciler-with-admission"` (or
 * `"reconciler-with-admission-and-conversion"`), also serves as
 * the validating and mutating admission webhook of its parent kind.
 * @module
 */

import type { Gvk } from "./kinds.js";
import type { KubeObject } from "./request.js";

/** What the request does to the object. */
export type Operation = "create" | "update" | "delete" | "connect";

/** Who is asking, as the API server authenticated them. */
export interface UserInfo {
  username: string;
  uid: string;
  groups: string[];
}

/**
 * One admission request. `object` is undefined for `delete`; `oldObject` is
 * set for `update` and `delete`.
 */
export interface Review {
  uid: string;
  operation: Operation;
  kind: Gvk;
  subResource?: string;
  namespace?: string;
  name: string;
  object?: KubeObject;
  oldObject?: KubeObject;
  userInfo: UserInfo;
  dryRun: boolean;
}

/**
 * Throw from `validate` or `mutate` to refuse the request. The message is
 * shown by kubectl, prefixed by the plugin's name; `code` is the HTTP status
 * (undefined means 403 Forbidden).
 */
export class Denied extends Error {
  override readonly name = "Denied";

  constructor(
    message: string,
    readonly code?: number,
  ) {
    super(message);
  }
}
