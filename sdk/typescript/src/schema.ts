/**
 * Typed objects: small schemas that read JSON with serde's rules, so a
 * reconciler reads the same objects the same way in every language.
 *
 * TypeScript's types vanish at run time, and objects cross the component
 * boundary as JSON, so a parent typed as `WebApp` must be checked to be one.
 * A schema checks and fills defaults, and gives the type:
 *
 * ```ts
 * const Spec = s.object({
 *   image: s.string(),
 *   replicas: s.withDefault(s.i32(), 1),
 *   ingress: s.optional(s.object({ host: s.string() })),
 * });
 * type Spec = s.Infer<typeof Spec>;   // { image: string; replicas: number; ingress?: { host: string } }
 * Spec.parse({ replicas: 2 });        // throws SchemaError("missing field `image`")
 * ```
 *
 * The rules (serde's, as in the Rust SDK):
 * - a missing key takes the default of {@link withDefault}, is `undefined`
 *   for {@link optional}, and is an error otherwise (``missing field `image` ``);
 * - `null` is accepted only by {@link optional} (as `undefined`);
 * - unknown keys are ignored (and dropped);
 * - integers are checked for range; a boolean is not a number. (JSON `2.0`
 *   reads as the integer 2 in JavaScript, where Rust would refuse it.)
 *
 * **The schema is the CRD's too.** Every schema states itself as OpenAPI
 * (`Spec.openapi()`), and {@link crd} writes a CustomResourceDefinition
 * from a kind's schemas: `operon build` runs the project's `crd.ts`, which
 * prints it, into `crd.yaml`, so the TypeScript and the CRD cannot drift.
 *
 * @module
 */

/** JSON that does not fit a schema, with serde's wording. */
export class SchemaError extends Error {
  override readonly name = "SchemaError";
}

/** Reads an unknown JSON value as `T`, or throws {@link SchemaError}. */
export interface Schema<T> {
  parse(value: unknown): T;
  /** What it expects, for messages (`a string`, `i32`). */
  readonly expecting: string;
  /** Present on {@link optional} and {@link withDefault}: the value of a missing key. */
  readonly missing?: () => T;
  /** The OpenAPI v3 schema of what it reads, as a CRD states it (`JSONSchemaProps`). */
  openapi(): OpenApi;
}

/** An OpenAPI v3 schema, as a CRD's `openAPIV3Schema` holds it. */
export type OpenApi = { [key: string]: unknown };

/** The type a schema reads. */
export type Infer<S> = S extends Schema<infer T> ? T : never;

function describe(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean") return `boolean \`${value}\``;
  if (typeof value === "number") return Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${value}\``;
  if (typeof value === "string") return `string ${JSON.stringify(value)}`;
  if (Array.isArray(value)) return "sequence";
  return "map";
}

function mismatch(value: unknown, expected: string): SchemaError {
  return new SchemaError(`invalid type: ${describe(value)}, expected ${expected}`);
}

/** A JSON string. */
export function string(): Schema<string> {
  return {
    expecting: "a string",
    openapi: () => ({ type: "string" }),
    parse(value) {
      if (typeof value !== "string") throw mismatch(value, "a string");
      return value;
    },
  };
}

/** A JSON boolean. */
export function boolean(): Schema<boolean> {
  return {
    expecting: "a boolean",
    openapi: () => ({ type: "boolean" }),
    parse(value) {
      if (typeof value !== "boolean") throw mismatch(value, "a boolean");
      return value;
    },
  };
}

function integer(name: string, low: number, high: number): Schema<number> {
  return {
    expecting: name,
    openapi: () => ({ type: "integer", format: name === "i32" ? "int32" : "int64" }),
    parse(value) {
      if (typeof value !== "number" || !Number.isInteger(value)) throw mismatch(value, name);
      if (value < low || value > high) throw new SchemaError(`invalid value: integer \`${value}\`, expected ${name}`);
      return value;
    },
  };
}

/** A 32-bit integer, as Kubernetes' `int32` fields (`replicas`, `port`). */
export function i32(): Schema<number> {
  return integer("i32", -(2 ** 31), 2 ** 31 - 1);
}

/** A 64-bit integer (as far as JavaScript numbers are exact). */
export function i64(): Schema<number> {
  return integer("i64", Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
}

/** A JSON number. */
export function f64(): Schema<number> {
  return {
    expecting: "f64",
    openapi: () => ({ type: "number", format: "double" }),
    parse(value) {
      if (typeof value !== "number") throw mismatch(value, "f64");
      return value;
    },
  };
}

/** Any JSON value, unchecked. */
export function any<T = unknown>(): Schema<T> {
  return {
    expecting: "any value",
    openapi: () => ({ "x-kubernetes-preserve-unknown-fields": true }),
    parse: (value) => value as T,
  };
}

/** A JSON array of `item`. */
export function array<T>(item: Schema<T>): Schema<T[]> {
  return {
    expecting: "a sequence",
    openapi: () => ({ type: "array", items: item.openapi() }),
    parse(value) {
      if (!Array.isArray(value)) throw mismatch(value, "a sequence");
      return value.map((v) => item.parse(v));
    },
  };
}

/** A JSON object used as a map from string keys to `item`. */
export function record<T>(item: Schema<T>): Schema<Record<string, T>> {
  return {
    expecting: "a map",
    openapi: () => ({ type: "object", additionalProperties: item.openapi() }),
    parse(value) {
      if (typeof value !== "object" || value === null || Array.isArray(value)) throw mismatch(value, "a map");
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, item.parse(v)]));
    },
  };
}

/** `T | undefined`: a missing key or `null` reads as undefined. */
export function optional<T>(schema: Schema<T>): Schema<T | undefined> {
  return {
    expecting: schema.expecting,
    missing: () => undefined,
    openapi: () => ({ ...schema.openapi(), nullable: true }),
    parse: (value) => (value === null || value === undefined ? undefined : schema.parse(value)),
  };
}

/** `T`, `fallback()` (or `fallback`) when the key is missing; `null` is an error. */
export function withDefault<T>(schema: Schema<T>, fallback: NoInfer<T> | (() => NoInfer<T>)): Schema<T> {
  const missing = typeof fallback === "function" ? (fallback as () => T) : () => structuredClone(fallback);
  return {
    expecting: schema.expecting,
    missing,
    openapi: () => ({ ...schema.openapi(), default: missing() }),
    parse: (value) => schema.parse(value),
  };
}

type Fields = Record<string, Schema<unknown>>;
type OptionalKeys<F extends Fields> = {
  [K in keyof F]: undefined extends Infer<F[K]> ? K : never;
}[keyof F];

/** The type an {@link object} schema reads: optional fields are optional properties. */
export type ObjectOf<F extends Fields> = { [K in Exclude<keyof F, OptionalKeys<F>>]: Infer<F[K]> } & {
  [K in OptionalKeys<F>]?: Infer<F[K]>;
};

/** A JSON object with these fields (keys as written in JSON). Unknown keys are dropped. */
export function object<F extends Fields>(fields: F, name = "a struct"): Schema<ObjectOf<F>> {
  return {
    expecting: name,
    openapi() {
      const properties = Object.fromEntries(Object.entries(fields).map(([key, schema]) => [key, schema.openapi()]));
      const required = Object.entries(fields)
        .filter(([, schema]) => !schema.missing)
        .map(([key]) => key);
      return required.length ? { type: "object", properties, required } : { type: "object", properties };
    },
    parse(value) {
      if (typeof value !== "object" || value === null || Array.isArray(value)) throw mismatch(value, name);
      const input = value as Record<string, unknown>;
      const out: Record<string, unknown> = {};
      for (const [key, schema] of Object.entries(fields)) {
        if (Object.prototype.hasOwnProperty.call(input, key)) {
          const parsed = schema.parse(input[key]);
          if (parsed !== undefined) out[key] = parsed;
        } else if (schema.missing) {
          const fallback = schema.missing();
          if (fallback !== undefined) out[key] = fallback;
        } else {
          throw new SchemaError(`missing field \`${key}\``);
        }
      }
      return out as ObjectOf<F>;
    },
  };
}

/** What {@link crd} needs to know of a kind besides its schemas. */
export interface CrdOptions {
  /** API group, e.g. `demo.example.com`. */
  group: string;
  /** API version, e.g. `v1alpha1`. */
  version: string;
  /** Kind, e.g. `Greeting`. */
  kind: string;
  /** Resource name (default: the lowercase kind plus `s`). */
  plural?: string;
  /** `Namespaced` (the default) or `Cluster`. */
  scope?: "Namespaced" | "Cluster";
  /** The schema of `spec`. */
  spec: Schema<unknown>;
  /** The schema of `status` (default: any fields, unchecked). */
  status?: Schema<unknown>;
}

/**
 * A CustomResourceDefinition (`apiextensions.k8s.io/v1`) for one kind, its
 * `spec` and `status` stated by the schemas the reconciler reads them with,
 * served and stored at `version`, with the status subresource.
 *
 * ```ts
 * const Spec = s.object({ message: s.string() });
 * console.log(JSON.stringify(s.crd({ group: "demo.example.com", version: "v1", kind: "Greeting", spec: Spec })));
 * ```
 */
export function crd(options: CrdOptions): OpenApi {
  const plural = options.plural ?? `${options.kind.toLowerCase()}s`;
  const status = options.status?.openapi() ?? { type: "object", "x-kubernetes-preserve-unknown-fields": true };
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: `${plural}.${options.group}` },
    spec: {
      group: options.group,
      names: { kind: options.kind, listKind: `${options.kind}List`, plural, singular: options.kind.toLowerCase() },
      scope: options.scope ?? "Namespaced",
      versions: [
        {
          name: options.version,
          served: true,
          storage: true,
          subresources: { status: {} },
          schema: {
            openAPIV3Schema: {
              type: "object",
              required: ["spec"],
              properties: { spec: options.spec.openapi(), status },
            },
          },
        },
      ],
    },
  };
}
