"""operon_sdk.typed reads JSON with serde's rules, so every language agrees."""

from __future__ import annotations

import dataclasses
import typing

from dataclasses import dataclass, field

import pytest

import operon_sdk
from operon_sdk import I32, Condition, TypeMismatch, from_json, to_json


@dataclass
class Ingress:
    host: str
    class_name: str | None = None


@dataclass
class Spec:
    image: str
    replicas: I32 = 1
    env: list[str] = field(default_factory=list)
    ingress: Ingress | None = None
    labels: dict[str, str] = field(default_factory=dict)


def test_missing_fields_should_take_defaults_or_be_named():
    assert from_json(Spec, {"image": "x"}) == Spec("x")
    with pytest.raises(TypeMismatch, match="^missing field `image`$"):
        from_json(Spec, {"replicas": 1})
    with pytest.raises(TypeMismatch, match="^missing field `host`$"):
        from_json(Spec, {"image": "x", "ingress": {}})


def test_keys_should_be_camel_case_and_unknown_keys_ignored():
    spec = from_json(Spec, {"image": "x", "ingress": {"host": "h", "className": "c"}, "extra": 1})
    assert spec.ingress == Ingress("h", "c")


def test_types_should_be_checked_like_serde():
    cases = [
        ({"image": 3}, "invalid type: integer `3`, expected a string"),
        ({"image": "x", "replicas": "2"}, 'invalid type: string "2", expected i32'),
        ({"image": "x", "replicas": 2.0}, "invalid type: floating point `2.0`, expected i32"),
        ({"image": "x", "replicas": True}, "invalid type: boolean `true`, expected i32"),
        ({"image": "x", "replicas": 2**31}, "invalid value: integer `2147483648`, expected i32"),
        ({"image": "x", "env": None}, "invalid type: null, expected a sequence"),
        ({"image": "x", "labels": []}, "invalid type: sequence, expected a map"),
    ]
    for value, message in cases:
        with pytest.raises(TypeMismatch) as error:
            from_json(Spec, value)
        assert str(error.value) == message


def test_null_should_be_none_only_where_allowed():
    assert from_json(Spec, {"image": "x", "ingress": None}).ingress is None


def test_to_json_should_write_camel_case_and_leave_out_none():
    condition = Condition("Ready", "True", "2026-11-20T10:00:00Z", "Available", "ok")
    assert to_json(condition) == {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": "2026-11-20T10:00:00Z",
        "reason": "Available",
        "message": "ok",
    }
    assert to_json([Ingress("h", "c")]) == [{"host": "h", "className": "c"}]


def test_round_trip_should_keep_values():
    value = {"image": "x", "replicas": 3, "env": ["A"], "ingress": {"host": "h"}, "labels": {"a": "b"}}
    assert to_json(from_json(Spec, value)) == value


@dataclasses.dataclass
class OpenApiIngress:
    host: str
    class_name: str | None = None


@dataclasses.dataclass
class OpenApiSpec:
    image: str
    replicas: operon_sdk.I32 = 1
    env: list[str] = dataclasses.field(default_factory=list)
    ingress: OpenApiIngress | None = None
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    extra: typing.Any = None
    ratio: float = 0.5
    on: bool = False


@dataclasses.dataclass
class OpenApiStatus:
    ready: bool | None = None


def test_a_dataclass_should_state_itself_as_the_openapi_a_crd_holds():
    assert operon_sdk.openapi(OpenApiSpec) == {
        "type": "object",
        "properties": {
            "image": {"type": "string"},
            "replicas": {"type": "integer", "format": "int32", "default": 1},
            "env": {"type": "array", "items": {"type": "string"}, "default": []},
            "ingress": {
                "type": "object",
                "properties": {"host": {"type": "string"}, "className": {"type": "string", "nullable": True}},
                "required": ["host"],
                "nullable": True,
            },
            "labels": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
            "extra": {"x-kubernetes-preserve-unknown-fields": True},
            "ratio": {"type": "number", "format": "double", "default": 0.5},
            "on": {"type": "boolean", "default": False},
        },
        "required": ["image"],
    }

    made = operon_sdk.crd(group="shop.example.com", version="v1", kind="WebApp", spec=OpenApiSpec, status=OpenApiStatus)
    assert made["metadata"]["name"] == "webapps.shop.example.com"
    version = made["spec"]["versions"][0]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["schema"]["openAPIV3Schema"]["properties"] == {"spec": operon_sdk.openapi(OpenApiSpec), "status": operon_sdk.openapi(OpenApiStatus)}
    assert made["spec"]["names"]["plural"] == "webapps" and made["spec"]["scope"] == "Namespaced"
