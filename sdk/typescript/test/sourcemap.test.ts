import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { buildSync } from "esbuild";
import { mapStack, original, type SourceMap } from "../src/sourcemap.js";

/** A project with an author's module that calls the SDK, bundled as `operon build` bundles it. */
function bundle(): { code: string; map: SourceMap } {
  const dir = mkdtempSync(join(tmpdir(), "operon-sourcemap-"));
  mkdirSync(join(dir, "src"));
  mkdirSync(join(dir, "operon-sdk", "src"), { recursive: true });
  writeFileSync(join(dir, "operon-sdk", "src", "adapter.ts"), "export function call(f: () => void) {\n  f();\n}\n");
  writeFileSync(
    join(dir, "src", "index.ts"),
    'import { call } from "../operon-sdk/src/adapter.ts";\n\nexport function explode(): never {\n  throw new Error("boom");\n}\n\ncall(explode);\n',
  );
  const out = buildSync({
    entryPoints: [join(dir, "src", "index.ts")],
    bundle: true,
    format: "esm",
    sourcemap: "external",
    write: false,
    outfile: join(dir, "component.js"),
  });
  const code = out.outputFiles.find((f) => f.path.endsWith(".js"))!.text;
  const map = JSON.parse(out.outputFiles.find((f) => f.path.endsWith(".map"))!.text) as SourceMap;
  return { code, map: { sources: map.sources, mappings: map.mappings } };
}

/** The 1-based line and column of `needle` in `code`. */
function position(code: string, needle: string): [number, number] {
  const lines = code.split("\n");
  const line = lines.findIndex((l) => l.includes(needle));
  return [line + 1, lines[line]!.indexOf(needle) + 1];
}

test("a position of the bundle should map back to the author's source", () => {
  const { code, map } = bundle();
  const [line, column] = position(code, 'throw new Error("boom")');
  assert.equal(original(map, line, column), "src/index.ts:4:3");
});

test("a stack should name the author's sources and leave out the SDK and the engine's glue", () => {
  const { code, map } = bundle();
  const [throwLine, throwColumn] = position(code, 'throw new Error("boom")');
  const [callLine, callColumn] = position(code, "f();");
  const stack = [
    `explode@component.js:${throwLine}:${throwColumn}`,
    `call@component.js:${callLine}:${callColumn}`,
    "reconcile@initializer.js:12:7",
    "",
  ].join("\n");
  assert.equal(mapStack(stack, map), "explode@src/index.ts:4:3");
  assert.equal(mapStack(stack, undefined), stack, "without a map the stack is left as it is");
});
