// The runner gives every shared rule case (contract/rules/cases) the host's
// verdict, message for message: a case this runner passes and the host
// refuses would be a defect.

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { type Gvk, type KubeObject, Outcome, type Reconciler, gvk } from "../src/index.js";
import { FakeCluster, Refused, reconcile, request } from "../src/testing.js";

const dir = join(import.meta.dirname, "../../../contract/rules/cases");
const cases = readdirSync(dir).filter((f) => f.endsWith(".json"));

interface Case {
  manifest: { name: string; owns: Gvk[] };
  request: { object: KubeObject; children?: KubeObject[]; related?: KubeObject[]; cluster?: KubeObject[] };
  outcome: { desired: KubeObject[]; events?: { reason: string; message: string }[] };
  pad?: { desired: number; bytes: number };
  refused?: string;
}

class Answer implements Reconciler<unknown> {
  constructor(readonly c: Case) {}
  manifest() {
    const owns = this.c.manifest.owns.map((k) => gvk(k.group ?? "", k.version, k.kind));
    return { name: this.c.manifest.name, for: gvk("rules.operon.dev", "v1", "Case"), owns };
  }
  reconcile() {
    const out = new Outcome();
    for (const object of this.c.outcome.desired) out.apply(object);
    for (const e of this.c.outcome.events ?? []) out.event(e.reason, e.message);
    return out;
  }
}

test("the shared cases are there", () => assert.ok(cases.length >= 10, String(cases)));

for (const file of cases) {
  test(`the runner should give the shared rule case ${file} the host's verdict`, () => {
    const c = JSON.parse(readFileSync(join(dir, file), "utf8")) as Case;
    if (c.pad) (c.outcome.desired[c.pad.desired].data as Record<string, string>).pad = "x".repeat(c.pad.bytes);
    const cluster = new FakeCluster([...(c.request.cluster ?? []), ...(c.request.related ?? [])]);
    let refused: string | undefined;
    try {
      reconcile(new Answer(c), request(c.request.object, { children: c.request.children ?? [] }), cluster);
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      refused = error.reason;
    }
    assert.equal(refused, c.refused);
  });
}
