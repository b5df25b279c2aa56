"""Kubernetes label selectors (``app=web,tier!=db``, ``env in (a,b)``, ``!legacy``),
for :class:`operon_sdk.testing.FakeCluster`: the host's syntax, checked the same way."""

from __future__ import annotations

import re
from dataclasses import dataclass

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s+\(([^)]*)\)$")
_CMP = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*({_VALUE})$")
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")


class SelectorError(ValueError):
    """A malformed selector."""


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "exists":
            return value is not None
        if self.op == "!exists":
            return value is None
        if self.op in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values  # != and notin


def _split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    parts.append(current)
    return [p.strip() for p in parts]


@dataclass(frozen=True)
class Selector:
    """A parsed selector; the empty selector matches everything."""

    requirements: tuple[_Requirement, ...] = ()

    @staticmethod
    def parse(text: str | None) -> Selector:
        """Parse ``text``. Raises :class:`SelectorError` when it is malformed."""
        if not text or not text.strip():
            return Selector()
        requirements = []
        for part in _split(text):
            if m := _SET.match(part):
                values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
                requirements.append(_Requirement(m.group(1), m.group(2), values))
            elif m := _CMP.match(part):
                op = "=" if m.group(2) in ("=", "==") else "!="
                requirements.append(_Requirement(m.group(1), op, (m.group(3),)))
            elif m := _EXISTS.match(part):
                requirements.append(_Requirement(m.group(2), "!exists" if m.group(1) else "exists", ()))
            else:
                raise SelectorError(f"invalid label selector {text!r}: cannot read {part!r}")
        return Selector(tuple(requirements))

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfy every requirement."""
        return all(r.matches(labels) for r in self.requirements)
