"""Admission control: :class:`Review` in, warnings or :class:`Denied` out.

A reconciler that defines ``validate`` and/or ``mutate`` and whose
``operon.toml`` says ``world = "reconciler-with-admission"`` also serves as
the validating and mutating admission webhook of its parent kind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .kinds import Gvk


class Operation(Enum):
    """What the request does to the object."""

    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    CONNECT = "connect"


@dataclass
class UserInfo:
    """Who is asking, as the API server authenticated them."""

    username: str = ""
    uid: str = ""
    groups: list[str] = field(default_factory=list)


@dataclass
class Review:
    """One admission request (the fields of an AdmissionReview a guest needs).

    ``object`` and ``old_object`` are parsed JSON (dicts), None when absent:
    ``object`` is None for ``delete``, ``old_object`` is set for ``update``
    and ``delete``.
    """

    operation: Operation
    kind: Gvk
    name: str = ""
    namespace: str | None = None
    object: dict | None = None
    old_object: dict | None = None
    uid: str = ""
    sub_resource: str | None = None
    user_info: UserInfo = field(default_factory=UserInfo)
    dry_run: bool = False


@dataclass
class RawReview:
    """The WIT ``review`` record: objects as JSON text."""

    uid: str
    operation: Operation
    kind: Gvk
    sub_resource: str | None
    namespace: str | None
    name: str
    object: str | None
    old_object: str | None
    user_info: UserInfo
    dry_run: bool

    def parse(self) -> Review:
        """The review with its objects parsed."""

        def load(text: str | None) -> Any:
            return None if text is None else json.loads(text)

        return Review(
            uid=self.uid,
            operation=self.operation,
            kind=self.kind,
            sub_resource=self.sub_resource,
            namespace=self.namespace,
            name=self.name,
            object=load(self.object),
            old_object=load(self.old_object),
            user_info=self.user_info,
            dry_run=self.dry_run,
        )


class Denied(Exception):
    """Raise from ``validate`` or ``mutate`` to refuse the request.

    ``message`` is shown to the user by kubectl, prefixed by the plugin's
    name; ``code`` is the HTTP status (None means 403 Forbidden).
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Denied) and (other.message, other.code) == (self.message, self.code)

    def __hash__(self) -> int:
        return hash((self.message, self.code))

    def __repr__(self) -> str:
        return f"Denied({self.message!r}, code={self.code!r})"
