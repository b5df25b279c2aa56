"""Conversion between the WebApp's versions: ``v1alpha1`` keeps the container's
fields at the top of ``spec`` (``image``, ``port``, ``env``), ``v1`` under
``spec.container``. Everything else (metadata, status, the other spec
fields) is carried over as it is, so a round trip loses nothing."""

from __future__ import annotations

from operon_sdk import ConversionError

V1ALPHA1 = "example.operon.dev/v1alpha1"
"""What the reconciler reconciles."""
V1 = "example.operon.dev/v1"
CONTAINER_FIELDS = ("image", "port", "env")
"""The fields ``v1`` keeps under ``spec.container``."""
VERSIONS = f"WebApp has versions {V1ALPHA1} and {V1}"


def convert(objects: list[dict], desired: str) -> list[dict]:
    """Every object converted to ``desired``.

    Raises:
        ConversionError: a desired version or an object that is not one of
            the two versions of WebApp (the API server shows the message).
    """
    if desired not in (V1ALPHA1, V1):
        raise ConversionError(f"cannot convert to {desired}: {VERSIONS}")
    converted = []
    for obj in objects:
        api_version, kind = _text(obj.get("apiVersion")), _text(obj.get("kind"))
        if kind != "WebApp" or api_version not in (V1ALPHA1, V1):
            raise ConversionError(f"cannot convert {api_version} {kind}: {VERSIONS}")
        if api_version != desired:
            obj = dict(obj)
            spec = obj.get("spec")
            if isinstance(spec, dict):
                obj["spec"] = nest(spec) if desired == V1 else flatten(spec)
            obj["apiVersion"] = desired
        converted.append(obj)
    return converted


def nest(spec: dict) -> dict:
    """``v1alpha1`` → ``v1``: the container's fields move under ``spec.container``
    (no ``container`` when there is none of them)."""
    container = {f: spec[f] for f in CONTAINER_FIELDS if f in spec}
    rest = {k: v for k, v in spec.items() if k not in CONTAINER_FIELDS}
    return {**rest, "container": container} if container else rest


def flatten(spec: dict) -> dict:
    """``v1`` → ``v1alpha1``: ``spec.container``'s fields move up into ``spec``."""
    rest = {k: v for k, v in spec.items() if k != "container"}
    container = spec.get("container")
    return {**rest, **container} if isinstance(container, dict) else rest


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
