"""The runner gives every shared rule case (contract/rules/cases) the host's
verdict, message for message: a case this runner passes and the host refuses
would be a defect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operon_sdk import Gvk, Manifest, Outcome, Reconciler
from operon_sdk.testing import FakeCluster, Refused, reconcile, request

CASES = sorted((Path(__file__).parents[3] / "contract" / "rules" / "cases").glob("*.json"))


class Case(Reconciler[dict]):
    """Answers with one case's outcome, under its manifest."""

    def __init__(self, case: dict) -> None:
        self.case = case

    def manifest(self) -> Manifest:
        owns = [Gvk(k.get("group", ""), k["version"], k["kind"]) for k in self.case["manifest"]["owns"]]
        return Manifest(self.case["manifest"]["name"], Gvk("rules.operon.dev", "v1", "Case"), owns=owns)

    def reconcile(self, req, ctx) -> Outcome:
        out = Outcome()
        for obj in self.case["outcome"]["desired"]:
            out.apply(obj)
        for e in self.case["outcome"].get("events") or []:
            out.event(e["reason"], e["message"])
        return out


def test_the_shared_cases_are_there():
    assert len(CASES) >= 10, CASES


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_the_runner_should_give_the_shared_rule_case_the_hosts_verdict(path: Path):
    case = json.loads(path.read_text())
    if pad := case.get("pad"):
        case["outcome"]["desired"][pad["desired"]]["data"]["pad"] = "x" * pad["bytes"]
    req = case["request"]
    cluster = FakeCluster([*(req.get("cluster") or []), *(req.get("related") or [])])
    try:
        reconcile(Case(case), request(req["object"], req.get("children") or []), cluster)
        refused = None
    except Refused as refusal:
        refused = refusal.message
    assert refused == case.get("refused")
