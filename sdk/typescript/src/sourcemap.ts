/**
 * Stack traces that point at the sources, not the bundle.
 *
 * A component runs one bundle (`component.js`, esbuild's output), so a
 * stack says `reconcile@component.js:825:13`. `operon build` appends
 * esbuild's source map to the bundle as `globalThis.__operonSourceMap`
 * (the `sources` and `mappings` only: no source text), and the adapter maps
 * every `component.js:LINE:COLUMN` of a stack it reports back to
 * `src/index.ts:LINE:COLUMN`. Frames of the engine's own glue (anything
 * that is not the bundle) and of the SDK's adapter are left out: the author
 * sees their code.
 *
 * @module
 */

/** What `operon build` embeds: esbuild's source map, without the sources' text. */
export interface SourceMap {
  /** The bundled files, relative to the project (`src/index.ts`). */
  sources: string[];
  /** The mappings, as source maps v3 write them (base64 VLQ). */
  mappings: string;
}

/** One mapped position: generated column → source, line and column (0-based). */
type Segment = [column: number, source: number, line: number, sourceColumn: number];

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** The segments of every generated line, decoded once per map. */
const decoded = new WeakMap<SourceMap, Segment[][]>();

function decode(map: SourceMap): Segment[][] {
  const cached = decoded.get(map);
  if (cached) return cached;
  const lines: Segment[][] = [];
  let source = 0;
  let line = 0;
  let sourceColumn = 0;
  for (const text of map.mappings.split(";")) {
    const segments: Segment[] = [];
    let column = 0;
    for (const group of text.split(",")) {
      if (!group) continue;
      const fields: number[] = [];
      let value = 0;
      let shift = 0;
      for (const char of group) {
        const digit = BASE64.indexOf(char);
        if (digit < 0) return remember(map, []);
        value += (digit & 31) << shift;
        if (digit & 32) {
          shift += 5;
        } else {
          fields.push(value & 1 ? -(value >>> 1) : value >>> 1);
          value = 0;
          shift = 0;
        }
      }
      column += fields[0] ?? 0;
      if (fields.length >= 4) {
        source += fields[1]!;
        line += fields[2]!;
        sourceColumn += fields[3]!;
        segments.push([column, source, line, sourceColumn]);
      }
    }
    lines.push(segments);
  }
  return remember(map, lines);
}

function remember(map: SourceMap, lines: Segment[][]): Segment[][] {
  decoded.set(map, lines);
  return lines;
}

/**
 * The source position of a 1-based `line` and `column` of the bundle, as
 * `file:line:column` (1-based), or `undefined` when the map has none.
 */
export function original(map: SourceMap, line: number, column: number): string | undefined {
  const segments = decode(map)[line - 1];
  if (!segments?.length) return undefined;
  let found: Segment | undefined;
  for (const segment of segments) {
    if (segment[0] > column - 1) break;
    found = segment;
  }
  found ??= segments[0]!;
  const source = map.sources[found[1]];
  return source === undefined ? undefined : `${source}:${found[2] + 1}:${found[3] + 1}`;
}

/** Whether a source is the SDK's own (its adapter and helpers), not the author's. */
function isSdk(source: string): boolean {
  return /(^|\/)(operon-sdk|sdk\/typescript|@operon\/sdk)\//.test(source);
}

/**
 * `stack` (SpiderMonkey's `name@file:line:column` frames, one a line) with
 * every frame of `bundle` mapped to its source; frames outside the bundle
 * (the engine's glue) and inside the SDK are left out. Without a map the
 * stack is returned as it is.
 */
export function mapStack(stack: string, map: SourceMap | undefined, bundle = "component.js"): string {
  if (!map) return stack;
  const frame = new RegExp(`^(.*@)?(?:.*/)?${bundle.replace(/\./g, "\\.")}:(\\d+):(\\d+)$`);
  const kept: string[] = [];
  for (const line of stack.split("\n")) {
    if (!line.trim()) continue;
    const match = frame.exec(line.trim());
    if (!match) continue;
    const position = original(map, Number(match[2]), Number(match[3]));
    if (position === undefined || isSdk(position)) continue;
    kept.push(`${match[1] ?? ""}${position}`);
  }
  return kept.join("\n");
}

/** The map `operon build` embedded in this bundle, if any. */
export function embedded(): SourceMap | undefined {
  const map = (globalThis as { __operonSourceMap?: unknown }).__operonSourceMap;
  if (typeof map !== "object" || map === null) return undefined;
  const { sources, mappings } = map as Partial<SourceMap>;
  return Array.isArray(sources) && typeof mappings === "string" ? { sources, mappings } : undefined;
}
