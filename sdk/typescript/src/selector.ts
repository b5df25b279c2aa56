/**
 * Kubernetes label selectors (`app=web,tier!=db`, `env in (a,b)`, `!legacy`)
 * for `FakeCluster`: the host's syntax, checked the same way.
 * @module
 */

const KEY = String.raw`[A-Za-z0-9][-A-Za-z0-9_./]*`;
const VALUE = String.raw`(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?`;
const SET = new RegExp(String.raw`^(${KEY})\s+(in|notin)\s+\(([^)]*)\)$`);
const CMP = new RegExp(String.raw`^(${KEY})\s*(==|=|!=)\s*(${VALUE})$`);
const EXISTS = new RegExp(String.raw`^(!?)\s*(${KEY})$`);

/** A malformed selector. */
export class SelectorError extends Error {
  override readonly name = "SelectorError";
}

type Requirement = { key: string; op: "=" | "!=" | "in" | "notin" | "exists" | "!exists"; values: string[] };

function split(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let current = "";
  for (const ch of text) {
    if (ch === "," && depth === 0) {
      parts.push(current.trim());
      current = "";
      continue;
    }
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    current += ch;
  }
  parts.push(current.trim());
  return parts;
}

/** A parsed selector; the empty selector matches everything. */
export class Selector {
  private constructor(private readonly requirements: Requirement[]) {}

  /** Parse `text`. Throws {@link SelectorError} when it is malformed. */
  static parse(text: string | undefined): Selector {
    if (!text || !text.trim()) return new Selector([]);
    return new Selector(
      split(text).map((part): Requirement => {
        let m = SET.exec(part);
        if (m) {
          const values = m[3].split(",").map((v) => v.trim()).filter(Boolean);
          return { key: m[1], op: m[2] as "in" | "notin", values };
        }
        m = CMP.exec(part);
        if (m) return { key: m[1], op: m[2] === "!=" ? "!=" : "=", values: [m[3]] };
        m = EXISTS.exec(part);
        if (m) return { key: m[2], op: m[1] ? "!exists" : "exists", values: [] };
        throw new SelectorError(`invalid label selector ${JSON.stringify(text)}: cannot read ${JSON.stringify(part)}`);
      }),
    );
  }

  /** Whether `labels` satisfy every requirement. */
  matches(labels: Record<string, string>): boolean {
    return this.requirements.every(({ key, op, values }) => {
      const value = Object.prototype.hasOwnProperty.call(labels, key) ? labels[key] : undefined;
      switch (op) {
        case "exists":
          return value !== undefined;
        case "!exists":
          return value === undefined;
        case "=":
        case "in":
          return value !== undefined && values.includes(value);
        default:
          return value === undefined || !values.includes(value);
      }
    });
  }
}
