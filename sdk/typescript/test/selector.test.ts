// The selector gives every shared case (contract/selectors/cases.json) the
// host's verdict: what each selector matches, and what it refuses.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Selector, SelectorError } from "../src/selector.js";

interface Cases {
  selectors: { selector: string; matches: Record<string, string>[]; misses: Record<string, string>[] }[];
  refused: { selector: string; why: string }[];
}

const cases: Cases = JSON.parse(readFileSync(join(import.meta.dirname, "../../../contract/selectors/cases.json"), "utf8"));

test("the shared selector cases are there", () => {
  assert.ok(cases.selectors.length >= 20 && cases.refused.length >= 20);
});

for (const c of cases.selectors) {
  test(`the selector ${JSON.stringify(c.selector)} matches as the shared case says`, () => {
    const selector = Selector.parse(c.selector);
    for (const labels of c.matches) assert.ok(selector.matches(labels), `should match ${JSON.stringify(labels)}`);
    for (const labels of c.misses) assert.ok(!selector.matches(labels), `should miss ${JSON.stringify(labels)}`);
  });
}

for (const c of cases.refused) {
  test(`the selector ${JSON.stringify(c.selector)} is refused (${c.why})`, () => {
    assert.throws(() => Selector.parse(c.selector), SelectorError);
  });
}
