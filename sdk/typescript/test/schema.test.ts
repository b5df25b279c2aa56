import assert from "node:assert/strict";
import { test } from "node:test";
import { SchemaError, s } from "../src/index.js";

const Spec = s.object({
  image: s.string(),
  replicas: s.withDefault(s.i32(), 1),
  env: s.withDefault(s.array(s.string()), []),
  ingress: s.optional(s.object({ host: s.string(), className: s.optional(s.string()) })),
  labels: s.withDefault(s.record(s.string()), {}),
});

function fails(value: unknown, message: string) {
  assert.throws(() => Spec.parse(value), (error: unknown) => error instanceof SchemaError && error.message === message);
}

test("missing fields should take defaults or be named", () => {
  assert.deepEqual(Spec.parse({ image: "x" }), { image: "x", replicas: 1, env: [], labels: {} });
  fails({ replicas: 1 }, "missing field `image`");
  fails({ image: "x", ingress: {} }, "missing field `host`");
});

test("types should be checked like serde", () => {
  fails({ image: 3 }, "invalid type: integer `3`, expected a string");
  fails({ image: "x", replicas: "2" }, 'invalid type: string "2", expected i32');
  fails({ image: "x", replicas: 2.5 }, "invalid type: floating point `2.5`, expected i32");
  fails({ image: "x", replicas: true }, "invalid type: boolean `true`, expected i32");
  fails({ image: "x", replicas: 2 ** 31 }, "invalid value: integer `2147483648`, expected i32");
  fails({ image: "x", env: null }, "invalid type: null, expected a sequence");
  fails({ image: "x", labels: [] }, "invalid type: sequence, expected a map");
});

test("null should be undefined only where optional", () => {
  assert.equal(Spec.parse({ image: "x", ingress: null }).ingress, undefined);
  assert.deepEqual(Spec.parse({ image: "x", ingress: { host: "h", className: "c" } }).ingress, { host: "h", className: "c" });
});

test("defaults should not be shared between parses", () => {
  const a = Spec.parse({ image: "x" });
  a.env.push("A");
  assert.deepEqual(Spec.parse({ image: "x" }).env, []);
});

test("unknown keys should be dropped", () => {
  assert.deepEqual(Spec.parse({ image: "x", extra: 1 }), { image: "x", replicas: 1, env: [], labels: {} });
});

test("a schema should state itself as the OpenAPI a CRD holds", () => {
  assert.deepEqual(Spec.openapi(), {
    type: "object",
    properties: {
      image: { type: "string" },
      replicas: { type: "integer", format: "int32", default: 1 },
      env: { type: "array", items: { type: "string" }, default: [] },
      ingress: {
        type: "object",
        properties: { host: { type: "string" }, className: { type: "string", nullable: true } },
        required: ["host"],
        nullable: true,
      },
      labels: { type: "object", additionalProperties: { type: "string" }, default: {} },
    },
    required: ["image"],
  });
});

test("crd should write the kind's CustomResourceDefinition from its schemas", () => {
  const Status = s.object({ ready: s.optional(s.boolean()) });
  const crd = s.crd({ group: "shop.example.com", version: "v1", kind: "WebApp", spec: Spec, status: Status });
  assert.equal((crd.metadata as { name: string }).name, "webapps.shop.example.com");
  const spec = crd.spec as { names: { kind: string; plural: string }; scope: string; versions: Array<Record<string, any>> };
  assert.deepEqual([spec.names.kind, spec.names.plural, spec.scope], ["WebApp", "webapps", "Namespaced"]);
  const version = spec.versions[0];
  assert.deepEqual([version.name, version.served, version.storage], ["v1", true, true]);
  assert.deepEqual(version.subresources, { status: {} });
  assert.deepEqual(version.schema.openAPIV3Schema.properties.spec, Spec.openapi());
  assert.deepEqual(version.schema.openAPIV3Schema.properties.status, Status.openapi());
});
