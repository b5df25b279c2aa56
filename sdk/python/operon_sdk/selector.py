"""Kubernetes label selectors (``app=web,tier!=db``, ``env in (a,b)``, ``!legacy``),
for :class:`operon_sdk.testing.FakeCluster`: the host's syntax, read as Kubernetes
reads it and held to the host's verdicts by the shared cases in
``contract/selectors/cases.json``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeGuard

_SPACE = " \t\r\n"
_SYMBOLS = "!=(),<>"
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class SelectorError(ValueError):
    """A malformed selector."""


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # =, !=, in, notin, exists, !exists
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


def _tokens(text: str) -> list[str]:
    """Words and the symbols ``! != = == ( ) ,``; ``<`` and ``>`` are refused."""
    tokens, at = [], 0
    while at < len(text):
        ch = text[at]
        if ch in _SPACE:
            at += 1
        elif ch in "<>":
            raise ValueError(f"the {ch} operator is not supported (use in, notin, = or !=)")
        elif text.startswith(("!=", "=="), at):
            tokens.append(text[at : at + 2])
            at += 2
        elif ch in _SYMBOLS:
            tokens.append(ch)
            at += 1
        else:
            end = at
            while end < len(text) and text[end] not in _SPACE + _SYMBOLS:
                end += 1
            tokens.append(text[at:end])
            at = end
    return tokens


def _is_word(token: str | None) -> TypeGuard[str]:
    return token is not None and token[0] not in _SYMBOLS


def _check_key(key: str) -> str:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not all(_DNS_LABEL.fullmatch(p) for p in prefix.split("."))):
        raise ValueError(f"invalid label key {key!r}: the prefix must be a lowercase DNS subdomain")
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"invalid label key {key!r}: the name must be 1-63 characters of [A-Za-z0-9-_.], "
            "starting and ending with a letter or digit"
        )
    return key


def _check_value(value: str) -> str:
    if value and not _NAME.fullmatch(value):
        raise ValueError(
            f"invalid label value {value!r}: at most 63 characters of [A-Za-z0-9-_.], "
            "starting and ending with a letter or digit"
        )
    return value


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def next(self) -> str | None:
        token = self.peek()
        self.at += 1
        return token

    def selector(self) -> list[_Requirement]:
        requirements: list[_Requirement] = []
        if self.peek() is None:
            return requirements
        while True:
            requirements.append(self.requirement())
            token = self.next()
            if token is None:
                return requirements
            if token != ",":
                raise ValueError(f"expected ',' or the end after a requirement, found {token!r}")
            if not (_is_word(self.peek()) or self.peek() == "!"):
                raise ValueError("expected a requirement after ','")

    def requirement(self) -> _Requirement:
        if self.peek() == "!":
            self.at += 1
            return _Requirement(self.key(), "!exists", ())
        key = self.key()
        token = self.peek()
        if token is None or token == ",":
            return _Requirement(key, "exists", ())
        self.at += 1
        if token in ("=", "=="):
            return _Requirement(key, "=", (self.value(),))
        if token == "!=":
            return _Requirement(key, "!=", (self.value(),))
        if token in ("in", "notin"):
            return _Requirement(key, token, self.set())
        raise ValueError(f"expected an operator (=, ==, !=, in, notin) after {key!r}, found {token!r}")

    def key(self) -> str:
        token = self.next()
        if not _is_word(token):
            raise ValueError(f"expected a label key, found {token or 'the end'!r}")
        return _check_key(token)

    def value(self) -> str:
        token = self.peek()
        if token is None or token == ",":
            return ""
        if not _is_word(token):
            raise ValueError(f"expected a label value, found {token!r}")
        self.at += 1
        return _check_value(token)

    def set(self) -> tuple[str, ...]:
        """``(a,b)``; an empty place in the list is the empty value."""
        if self.next() != "(":
            raise ValueError("expected '(' after in or notin")
        values: list[str] = []
        current: str | None = None
        while True:
            token = self.next()
            if _is_word(token) and current is None:
                current = _check_value(token)
            elif token == ",":
                values.append(current or "")
                current = None
            elif token == ")":
                values.append(current or "")
                return tuple(values)
            elif token is None:
                raise ValueError("unclosed parenthesis")
            else:
                raise ValueError(f"expected a value, ',' or ')' in a set, found {token!r}")


@dataclass(frozen=True)
class Selector:
    """A parsed selector; the empty selector matches everything."""

    requirements: tuple[_Requirement, ...] = ()

    @staticmethod
    def parse(text: str | None) -> Selector:
        """Parse ``text``. Raises :class:`SelectorError` when it is malformed."""
        try:
            return Selector(tuple(_Parser(text or "").selector()))
        except ValueError as error:
            raise SelectorError(f"invalid label selector {text!r}: {error}") from None

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` satisfy every requirement."""
        return all(r.matches(labels) for r in self.requirements)
