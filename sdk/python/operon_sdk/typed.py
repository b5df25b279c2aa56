"""Typed objects: JSON to dataclasses and back, with serde's rules.

Kubernetes objects cross the component boundary as JSON. A reconciler reads
them as plain dicts or, declared as dataclasses, typed:

>>> from dataclasses import dataclass, field
>>> @dataclass
... class Spec:
...     image: str
...     replicas: I32 = 1
...     class_name: str | None = None
>>> from_json(Spec, {"image": "nginx", "className": "fast"})
Spec(image='nginx', replicas=1, class_name='fast')
>>> from_json(Spec, {"replicas": 2})
Traceback (most recent call last):
...
operon_sdk.typed.TypeMismatch: missing field `image`
>>> to_json(Spec("nginx"))
{'image': 'nginx', 'replicas': 1}

The rules are the Rust SDK's (serde), so a reconciler reads the same objects
the same way in every language:

- JSON keys are the field names in camelCase (``class_name`` → ``className``;
  a trailing ``_`` is dropped: ``type_`` → ``type``), or
  ``field(metadata={"json": "name"})``.
- A missing key takes the field's default; a field without a default is an
  error (``missing field `image```), unless its type allows None.
- ``null`` is only accepted where the type allows None.
- Unknown keys are ignored.
- ``int`` is a 64-bit integer; :data:`I32` a 32-bit one (as Kubernetes'
  ``int32`` fields); a bool is not an integer; a float is not an integer.
- :func:`to_json` writes camelCase keys and leaves out fields that are None
  (as Kubernetes' own types do).

The types are the CRD's too: :func:`openapi` states a type as the OpenAPI v3
schema a CRD holds, and :func:`crd` writes a kind's CustomResourceDefinition
from its spec and status dataclasses (``operon build`` runs a project's
``crd.py`` into ``crd.yaml``), so the dataclasses and the CRD cannot drift.

>>> openapi(Spec)["required"], openapi(Spec)["properties"]["replicas"]
(['image'], {'type': 'integer', 'format': 'int32', 'default': 1})
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Annotated, Any, TypeVar, Union

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class IntRange:
    """Bounds of an integer type (``Annotated[int, IntRange(...)]``)."""

    low: int
    high: int
    name: str


I32 = Annotated[int, IntRange(-(2**31), 2**31 - 1, "i32")]
"""A 32-bit integer, as Kubernetes' ``int32`` fields (``replicas``, ``port``)."""
I64 = Annotated[int, IntRange(-(2**63), 2**63 - 1, "i64")]
"""A 64-bit integer (the default for ``int``)."""
_I64 = IntRange(-(2**63), 2**63 - 1, "i64")


class TypeMismatch(ValueError):
    """JSON that does not fit the declared type (serde's wording)."""


def json_key(field: dataclasses.Field) -> str:
    """The JSON key of a dataclass field."""
    if "json" in field.metadata:
        return field.metadata["json"]
    name = field.name.rstrip("_")
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _unexpected(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    return type(value).__name__


def _mismatch(value: Any, expected: str) -> TypeMismatch:
    return TypeMismatch(f"invalid type: {_unexpected(value)}, expected {expected}")


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _allows_none(tp: Any) -> bool:
    if tp is Any or tp is None or tp is type(None):
        return True
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _allows_none(typing.get_args(tp)[0])
    if origin in (Union, types.UnionType):
        return any(_allows_none(arg) for arg in typing.get_args(tp))
    return False


def from_json(tp: type[T] | Any, value: Any) -> T:
    """Read the JSON value ``value`` (as :func:`json.loads` gives it) as ``tp``.

    ``tp`` is a dataclass, ``str``, ``int``, :data:`I32`, ``float``,
    ``bool``, ``list[X]``, ``dict[str, X]``, ``X | None``, ``dict`` or
    ``Any``.

    Raises:
        TypeMismatch: with serde's message (``missing field `image```,
            ``invalid type: string "x", expected i32``).
    """
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return value
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        bounds = next((e for e in extras if isinstance(e, IntRange)), None)
        return _int(value, bounds) if bounds and base is int else from_json(base, value)
    if origin in (Union, types.UnionType):
        options = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        if value is None and len(options) < len(typing.get_args(tp)):
            return None  # type: ignore[return-value]
        if len(options) == 1:
            return from_json(options[0], value)
        errors = []
        for option in options:
            try:
                return from_json(option, value)
            except TypeMismatch as error:
                errors.append(str(error))
        raise TypeMismatch("data did not match any variant: " + "; ".join(errors))
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, value)
    if tp is str:
        if not isinstance(value, str):
            raise _mismatch(value, "a string")
        return value  # type: ignore[return-value]
    if tp is bool:
        if not isinstance(value, bool):
            raise _mismatch(value, "a boolean")
        return value  # type: ignore[return-value]
    if tp is int:
        return _int(value, _I64)  # type: ignore[return-value]
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _mismatch(value, "f64")
        return float(value)  # type: ignore[return-value]
    if tp is list or origin is list:
        if not isinstance(value, list):
            raise _mismatch(value, "a sequence")
        (item,) = typing.get_args(tp) or (Any,)
        return [from_json(item, v) for v in value]  # type: ignore[return-value]
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise _mismatch(value, "a map")
        _, item = typing.get_args(tp) or (str, Any)
        return {k: from_json(item, v) for k, v in value.items()}  # type: ignore[return-value]
    raise TypeError(f"operon_sdk.typed cannot read {tp!r}; use a dataclass, a builtin type or dict")


def _int(value: Any, bounds: IntRange) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _mismatch(value, bounds.name)
    if not bounds.low <= value <= bounds.high:
        raise TypeMismatch(f"invalid value: integer `{value}`, expected {bounds.name}")
    return value


def _dataclass(cls: type[T], value: Any) -> T:
    if not isinstance(value, dict):
        raise _mismatch(value, f"struct {cls.__name__}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not field.init:
            continue
        key = json_key(field)
        tp = hints[field.name]
        if key in value:
            kwargs[field.name] = from_json(tp, value[key])
        elif field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
            continue
        elif _allows_none(tp):
            kwargs[field.name] = None
        else:
            raise TypeMismatch(f"missing field `{key}`")
    return cls(**kwargs)


def to_json(value: Any) -> Any:
    """The JSON value of ``value``: dataclasses become dicts with camelCase keys
    (None fields left out), lists and dicts are converted item by item, tuples
    become lists, everything else is kept."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if item is not None:
                out[json_key(field)] = to_json(item)
        return out
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def openapi(tp: Any) -> dict[str, Any]:
    """The OpenAPI v3 schema (a CRD's ``JSONSchemaProps``) of what
    :func:`from_json` reads as ``tp``: a dataclass is an object whose
    required properties are the fields without a default that do not allow
    None, with each default stated; ``X | None`` is nullable; ``int`` is
    ``int64`` and :data:`I32` ``int32``; ``Any`` keeps unknown fields."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        bounds = next((e for e in extras if isinstance(e, IntRange)), None)
        if bounds and base is int:
            return {"type": "integer", "format": "int32" if bounds.name == "i32" else "int64"}
        return openapi(base)
    if origin in (Union, types.UnionType):
        options = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        schema = openapi(options[0]) if len(options) == 1 else {"x-kubernetes-preserve-unknown-fields": True}
        return {**schema, "nullable": True} if len(options) < len(typing.get_args(tp)) else schema
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)  # type: ignore[arg-type]
        properties: dict[str, Any] = {}
        required = []
        for field in dataclasses.fields(tp):  # type: ignore[arg-type]
            if not field.init:
                continue
            key = json_key(field)
            schema = openapi(hints[field.name])
            if field.default is not dataclasses.MISSING:
                if field.default is not None:
                    schema["default"] = to_json(field.default)
            elif field.default_factory is not dataclasses.MISSING:
                schema["default"] = to_json(field.default_factory())
            elif not _allows_none(hints[field.name]):
                required.append(key)
            properties[key] = schema
        return {"type": "object", "properties": properties, **({"required": required} if required else {})}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer", "format": "int64"}
    if tp is float:
        return {"type": "number", "format": "double"}
    if tp is list or origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return {"type": "array", "items": openapi(item)}
    if tp is dict or origin is dict:
        _, item = typing.get_args(tp) or (str, Any)
        return {"type": "object", "additionalProperties": openapi(item)}
    raise TypeError(f"operon_sdk.typed cannot state {tp!r} as OpenAPI; use a dataclass, a builtin type or dict")


def crd(
    *,
    group: str,
    version: str,
    kind: str,
    spec: Any,
    status: Any = None,
    plural: str | None = None,
    scope: str = "Namespaced",
) -> dict[str, Any]:
    """A CustomResourceDefinition (``apiextensions.k8s.io/v1``) for one kind,
    its ``spec`` and ``status`` stated by the types the reconciler reads them
    as (:func:`openapi`), served and stored at ``version``, with the status
    subresource. ``status`` None: any fields, unchecked.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class GreetingSpec:
    ...     message: str
    >>> made = crd(group="demo.example.com", version="v1", kind="Greeting", spec=GreetingSpec)
    >>> made["metadata"], made["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    ({'name': 'greetings.demo.example.com'}, {'type': 'object', 'properties': {'message': {'type': 'string'}}, 'required': ['message']})
    """
    plural = plural or f"{kind.lower()}s"
    status_schema = openapi(status) if status is not None else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": scope,
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {"spec": openapi(spec), "status": status_schema},
                        }
                    },
                }
            ],
        },
    }
