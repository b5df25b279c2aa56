"""The children a WebApp wants: Deployment, Service and, when ``spec.ingress``
is set, Ingress. All named after the WebApp."""

from __future__ import annotations

from operon_sdk import DEPLOYMENT, INGRESS, SERVICE, new_object

from .types import WebAppSpec

CONTAINER = "web"
PORT_NAME = "http"


def labels(name: str) -> dict[str, str]:
    """The labels of every child and of the pods."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "operon"}


def selector(name: str) -> dict[str, str]:
    """The pod selector: only the name label (a Deployment's selector is immutable)."""
    return {"app.kubernetes.io/name": name}


def deployment(name: str, spec: WebAppSpec) -> dict:
    """``spec.replicas`` pods of one container running ``spec.image`` on ``spec.port`` (named ``http``)."""
    container: dict = {
        "name": CONTAINER,
        "image": spec.image,
        "ports": [{"name": PORT_NAME, "containerPort": spec.port}],
    }
    if spec.env:
        container["env"] = [{"name": var.name, "value": var.value} for var in spec.env]
    return new_object(
        DEPLOYMENT,
        name,
        labels=labels(name),
        spec={
            "replicas": spec.replicas,
            "selector": {"matchLabels": selector(name)},
            "template": {"metadata": {"labels": labels(name)}, "spec": {"containers": [container]}},
        },
    )


def service(name: str, spec: WebAppSpec) -> dict:
    """ClusterIP, ``spec.port`` to the pods' ``http`` port."""
    return new_object(
        SERVICE,
        name,
        labels=labels(name),
        spec={
            "type": "ClusterIP",
            "selector": selector(name),
            "ports": [{"name": PORT_NAME, "port": spec.port, "targetPort": PORT_NAME}],
        },
    )


def ingress(name: str, spec: WebAppSpec) -> dict | None:
    """When ``spec.ingress`` is set: ``host`` and ``path`` (prefix, ``/`` by default) to the Service."""
    wanted = spec.ingress
    if wanted is None:
        return None
    path = {
        "path": wanted.path if wanted.path is not None else "/",
        "pathType": "Prefix",
        "backend": {"service": {"name": name, "port": {"name": PORT_NAME}}},
    }
    ingress_spec: dict = {"rules": [{"host": wanted.host, "http": {"paths": [path]}}]}
    if wanted.class_name is not None:
        ingress_spec["ingressClassName"] = wanted.class_name
    return new_object(INGRESS, name, labels=labels(name), spec=ingress_spec)
