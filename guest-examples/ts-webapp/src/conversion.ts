/**
 * Conversion between the WebApp's versions. v1 groups the container's fields
 * under `spec.container`:
 *
 * - v1alpha1 `spec: {image, port, env, replicas, ingress}`
 * - v1       `spec: {container: {image, port, env}, replicas, ingress}`
 *
 * Everything else (metadata, status, other spec keys) is kept as it is.
 */

import { ConversionError, type KubeObject } from "@operon/sdk";

export const V1ALPHA1 = "example.operon.dev/v1alpha1";
export const V1 = "example.operon.dev/v1";
const VERSIONS = `WebApp has versions ${V1ALPHA1} and ${V1}`;
/** The v1alpha1 spec fields v1 keeps under `spec.container`. */
const CONTAINER_FIELDS = ["image", "port", "env"];

function isObject(value: unknown): value is KubeObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** v1alpha1 to v1: the container's fields present move into `spec.container` (none present, no `container`). */
function toV1(spec: KubeObject): KubeObject {
  const out: KubeObject = {};
  const container: KubeObject = {};
  for (const [key, value] of Object.entries(spec)) {
    if (CONTAINER_FIELDS.includes(key)) container[key] = value;
    else out[key] = value;
  }
  if (Object.keys(container).length > 0) out.container = container;
  return out;
}

/** v1 to v1alpha1: the keys of `spec.container` move up into `spec`, and `container` goes. */
function toV1alpha1(spec: KubeObject): KubeObject {
  const { container, ...rest } = spec;
  return isObject(container) ? { ...rest, ...container } : rest;
}

/**
 * Every object at `desired`, in order; one already there is returned as it is.
 * @throws {ConversionError} `desired` or an object is not a WebApp version: the whole request is refused.
 */
export function convert(objects: KubeObject[], desired: string): KubeObject[] {
  if (desired !== V1ALPHA1 && desired !== V1) throw new ConversionError(`cannot convert to ${desired}: ${VERSIONS}`);
  return objects.map((object) => {
    const from = object.apiVersion;
    if ((from !== V1ALPHA1 && from !== V1) || object.kind !== "WebApp") {
      throw new ConversionError(`cannot convert ${String(from ?? "")} ${String(object.kind ?? "")}: ${VERSIONS}`);
    }
    if (from === desired) return object;
    const converted: KubeObject = { ...object, apiVersion: desired };
    if (isObject(object.spec)) converted.spec = desired === V1 ? toV1(object.spec) : toV1alpha1(object.spec);
    return converted;
  });
}
