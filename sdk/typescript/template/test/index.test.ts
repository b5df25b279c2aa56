// Unit tests: the reconciler as a pure function, through the same code path
// the component runs (@operon/sdk/testing), with no wasm and no cluster.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Terminal } from "@operon/sdk";
import { reconcile, request } from "@operon/sdk/testing";
import GreetingReconciler from "../src/index.js";

const greeting = (message: string) => ({
  apiVersion: "demo.operon.dev/v1alpha1",
  kind: "Greeting",
  metadata: { name: "hello", namespace: "default", generation: 2 },
  spec: { message },
});

test("the message should be published in a configmap", () => {
  const outcome = reconcile(new GreetingReconciler(), request(greeting("hi")));
  assert.deepEqual(outcome.find("ConfigMap", "hello-greeting")?.data, { message: "hi" });
  assert.deepEqual(outcome.status, { observedGeneration: 2, published: false });
});

test("an empty message should be a terminal failure", () => {
  assert.throws(() => reconcile(new GreetingReconciler(), request(greeting(""))), Terminal);
});
