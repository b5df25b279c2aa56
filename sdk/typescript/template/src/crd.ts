/**
 * Prints the Greeting CRD, its `spec` and `status` stated by the schemas
 * the reconciler reads them with (src/index.ts): `operon build` runs this
 * and writes crd.yaml, so the types and the CRD cannot drift. Change the
 * schemas, not crd.yaml.
 */

import { s } from "@operon/sdk";
import { GreetingSpec, GreetingStatus } from "./index.js";

const crd = s.crd({
  group: "demo.operon.dev",
  version: "v1alpha1",
  kind: "Greeting",
  plural: "greetings",
  spec: GreetingSpec,
  status: GreetingStatus,
});
console.log(JSON.stringify(crd));
