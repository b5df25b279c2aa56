"""Unit tests: the reconciler as a pure function, through the same code path
the component runs (operon_sdk.testing), with no wasm and no cluster."""

from pathlib import Path

import pytest

from app import GreetingReconciler
from operon_sdk import Terminal
from operon_sdk.testing import check_fixtures, reconcile, request


def greeting(message: str) -> dict:
    return {
        "apiVersion": "demo.operon.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": {"name": "hello", "namespace": "default", "generation": 2},
        "spec": {"message": message},
    }


def test_the_message_should_be_published_in_a_configmap():
    outcome = reconcile(GreetingReconciler(), request(greeting("hi")))
    assert outcome.find("ConfigMap", "hello-greeting")["data"] == {"message": "hi"}
    assert outcome.status == {"observedGeneration": 2, "published": False}


def test_an_empty_message_should_be_a_terminal_failure():
    with pytest.raises(Terminal, match="spec.message must not be empty"):
        reconcile(GreetingReconciler(), request(greeting("")))


def test_the_fixtures_should_pass_natively():
    assert check_fixtures(GreetingReconciler(), Path(__file__).parent.parent / "fixtures") > 0
