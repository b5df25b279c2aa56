/**
 * Kubernetes label selectors (`app=web,tier!=db`, `env in (a,b)`, `!legacy`)
 * for `FakeCluster`: the host's syntax, read as Kubernetes reads it and held
 * to the host's verdicts by the shared cases in `contract/selectors/cases.json`.
 * @module
 */

const SPACE = " \t\r\n";
const SYMBOLS = "!=(),<>";
const NAME = /^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const DNS_LABEL = /^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?$/;

/** A malformed selector. */
export class SelectorError extends Error {
  override readonly name = "SelectorError";
}

type Requirement = { key: string; op: "=" | "!=" | "in" | "notin" | "exists" | "!exists"; values: string[] };

/** Words and the symbols `! != = == ( ) ,`; `<` and `>` are refused. */
function tokens(text: string): string[] {
  const out: string[] = [];
  let at = 0;
  while (at < text.length) {
    const ch = text[at];
    if (SPACE.includes(ch)) {
      at++;
    } else if (ch === "<" || ch === ">") {
      throw new Error(`the ${ch} operator is not supported (use in, notin, = or !=)`);
    } else if (text.startsWith("!=", at) || text.startsWith("==", at)) {
      out.push(text.slice(at, at + 2));
      at += 2;
    } else if (SYMBOLS.includes(ch)) {
      out.push(ch);
      at++;
    } else {
      let end = at;
      while (end < text.length && !SPACE.includes(text[end]) && !SYMBOLS.includes(text[end])) end++;
      out.push(text.slice(at, end));
      at = end;
    }
  }
  return out;
}

const isWord = (token: string | undefined): token is string => token !== undefined && !SYMBOLS.includes(token[0]);
const shown = (token: string | undefined) => (token === undefined ? "the end" : JSON.stringify(token));

function checkKey(key: string): string {
  const slash = key.lastIndexOf("/");
  const [prefix, name] = slash < 0 ? [undefined, key] : [key.slice(0, slash), key.slice(slash + 1)];
  if (prefix !== undefined && (prefix.length > 253 || !prefix.split(".").every((l) => DNS_LABEL.test(l)))) {
    throw new Error(`invalid label key ${JSON.stringify(key)}: the prefix must be a lowercase DNS subdomain`);
  }
  if (!NAME.test(name)) {
    throw new Error(
      `invalid label key ${JSON.stringify(key)}: the name must be 1-63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit`,
    );
  }
  return key;
}

function checkValue(value: string): string {
  if (value && !NAME.test(value)) {
    throw new Error(
      `invalid label value ${JSON.stringify(value)}: at most 63 characters of [A-Za-z0-9-_.], starting and ending with a letter or digit`,
    );
  }
  return value;
}

class Parser {
  private at = 0;
  constructor(private readonly tokens: string[]) {}

  private peek(): string | undefined {
    return this.tokens[this.at];
  }

  private next(): string | undefined {
    return this.tokens[this.at++];
  }

  selector(): Requirement[] {
    const requirements: Requirement[] = [];
    if (this.peek() === undefined) return requirements;
    for (;;) {
      requirements.push(this.requirement());
      const token = this.next();
      if (token === undefined) return requirements;
      if (token !== ",") throw new Error(`expected ',' or the end after a requirement, found ${shown(token)}`);
      if (!isWord(this.peek()) && this.peek() !== "!") throw new Error("expected a requirement after ','");
    }
  }

  private requirement(): Requirement {
    if (this.peek() === "!") {
      this.at++;
      return { key: this.key(), op: "!exists", values: [] };
    }
    const key = this.key();
    const token = this.peek();
    if (token === undefined || token === ",") return { key, op: "exists", values: [] };
    this.at++;
    if (token === "=" || token === "==") return { key, op: "=", values: [this.value()] };
    if (token === "!=") return { key, op: "!=", values: [this.value()] };
    if (token === "in" || token === "notin") return { key, op: token, values: this.set() };
    throw new Error(`expected an operator (=, ==, !=, in, notin) after ${JSON.stringify(key)}, found ${shown(token)}`);
  }

  private key(): string {
    const token = this.next();
    if (!isWord(token)) throw new Error(`expected a label key, found ${shown(token)}`);
    return checkKey(token);
  }

  private value(): string {
    const token = this.peek();
    if (token === undefined || token === ",") return "";
    if (!isWord(token)) throw new Error(`expected a label value, found ${shown(token)}`);
    this.at++;
    return checkValue(token);
  }

  /** `(a,b)`; an empty place in the list is the empty value. */
  private set(): string[] {
    if (this.next() !== "(") throw new Error("expected '(' after in or notin");
    const values: string[] = [];
    let current: string | undefined;
    for (;;) {
      const token = this.next();
      if (isWord(token) && current === undefined) {
        current = checkValue(token);
      } else if (token === ",") {
        values.push(current ?? "");
        current = undefined;
      } else if (token === ")") {
        values.push(current ?? "");
        return values;
      } else if (token === undefined) {
        throw new Error("unclosed parenthesis");
      } else {
        throw new Error(`expected a value, ',' or ')' in a set, found ${shown(token)}`);
      }
    }
  }
}

/** A parsed selector; the empty selector matches everything. */
export class Selector {
  private constructor(private readonly requirements: Requirement[]) {}

  /** Parse `text`. Throws {@link SelectorError} when it is malformed. */
  static parse(text: string | undefined): Selector {
    try {
      return new Selector(new Parser(tokens(text ?? "")).selector());
    } catch (error) {
      throw new SelectorError(`invalid label selector ${JSON.stringify(text)}: ${(error as Error).message}`);
    }
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
