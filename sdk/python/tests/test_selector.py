"""The selector gives every shared case (contract/selectors/cases.json) the
host's verdict: what each selector matches, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operon_sdk.selector import Selector, SelectorError

CASES = json.loads((Path(__file__).parents[3] / "contract" / "selectors" / "cases.json").read_text())


def test_the_shared_cases_are_there():
    assert len(CASES["selectors"]) >= 20 and len(CASES["refused"]) >= 20


@pytest.mark.parametrize("case", CASES["selectors"], ids=lambda c: repr(c["selector"]))
def test_the_selector_should_match_as_the_shared_case_says(case: dict):
    selector = Selector.parse(case["selector"])
    for labels in case["matches"]:
        assert selector.matches(labels), labels
    for labels in case["misses"]:
        assert not selector.matches(labels), labels


@pytest.mark.parametrize("case", CASES["refused"], ids=lambda c: repr(c["selector"]))
def test_the_selector_should_refuse_the_shared_case(case: dict):
    with pytest.raises(SelectorError):
        Selector.parse(case["selector"])
