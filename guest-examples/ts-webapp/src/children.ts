/** The children a WebApp wants: Deployment, Service and, when `spec.ingress` is set, Ingress. */

import { type KubeObject, kinds, newObject } from "@operon/sdk";
import type { WebAppSpec } from "./webapp.js";

const CONTAINER = "web";
const PORT_NAME = "http";

/** The labels of every child and of the pods. */
export function labels(name: string): Record<string, string> {
  return { "app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "operon" };
}

/** The pod selector: only the name label (a Deployment's selector is immutable). */
function selector(name: string): Record<string, string> {
  return { "app.kubernetes.io/name": name };
}

/** `spec.replicas` pods of one container running `spec.image` on `spec.port` (named `http`). */
export function deployment(name: string, spec: WebAppSpec): KubeObject {
  const container: KubeObject = {
    name: CONTAINER,
    image: spec.image,
    ports: [{ name: PORT_NAME, containerPort: spec.port }],
  };
  if (spec.env.length) container.env = spec.env.map(({ name, value }) => ({ name, value }));
  return newObject(kinds.Deployment, name, { labels: labels(name) }, {
    spec: {
      replicas: spec.replicas,
      selector: { matchLabels: selector(name) },
      template: { metadata: { labels: labels(name) }, spec: { containers: [container] } },
    },
  });
}

/** ClusterIP, `spec.port` to the pods' `http` port. */
export function service(name: string, spec: WebAppSpec): KubeObject {
  return newObject(kinds.Service, name, { labels: labels(name) }, {
    spec: {
      type: "ClusterIP",
      selector: selector(name),
      ports: [{ name: PORT_NAME, port: spec.port, targetPort: PORT_NAME }],
    },
  });
}

/** When `spec.ingress` is set: `host` and `path` (prefix, `/` by default) to the Service. */
export function ingress(name: string, spec: WebAppSpec): KubeObject | undefined {
  const wanted = spec.ingress;
  if (!wanted) return undefined;
  const path = {
    path: wanted.path ?? "/",
    pathType: "Prefix",
    backend: { service: { name, port: { name: PORT_NAME } } },
  };
  const ingressSpec: KubeObject = { rules: [{ host: wanted.host, http: { paths: [path] } }] };
  if (wanted.className !== undefined) ingressSpec.ingressClassName = wanted.className;
  return newObject(kinds.Ingress, name, { labels: labels(name) }, { spec: ingressSpec });
}
