"""Shared test data: a Greeting reconciler like the scaffold's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from operon_sdk import CONFIG_MAP, Gvk, Manifest, Outcome, Reconciler, Terminal, new_object

GREETING = Gvk("demo.operon.dev", "v1alpha1", "Greeting")


@dataclass
class GreetingSpec:
    message: str


@dataclass
class Greeting:
    spec: GreetingSpec


class Greeter(Reconciler[Greeting]):
    def manifest(self) -> Manifest:
        return Manifest("greeter", GREETING, owns=[CONFIG_MAP])

    def reconcile(self, request, ctx) -> Outcome:
        if not request.object.spec.message:
            raise Terminal("spec.message must not be empty")
        name = f"{request.name}-greeting"
        return (
            Outcome()
            .apply(new_object(CONFIG_MAP, name, data={"message": request.object.spec.message}))
            .set_status({"observedGeneration": request.generation, "published": request.has_child(CONFIG_MAP, name)})
        )


def greeting(message: str = "hi", generation: int = 1) -> dict:
    return {
        "apiVersion": "demo.operon.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "hello", "namespace": "default", "generation": generation},
        "spec": {"message": message},
    }


@pytest.fixture
def greeter() -> Greeter:
    return Greeter()
