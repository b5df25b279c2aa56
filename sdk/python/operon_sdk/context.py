"""Reads from the host's cache and logging during one call: :class:`Context`."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Protocol

from .failure import Transient
from .kinds import Gvk
from .request import parse_object


class Level(Enum):
    """Log severity."""

    TRACE = "trace"
    DEBUG = "debug"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"


class HostError(Exception):
    """The host refused a read (the kind is not declared or granted, a bad selector)."""


class Host(Protocol):
    """The host's read-only imports, objects as JSON text.

    Inside a component the SDK implements it with the WIT imports; natively,
    :class:`operon_sdk.testing.FakeCluster` does, so the same code runs in
    both. Reconcilers never see it: they talk to :class:`Context`.
    """

    def log(self, level: Level, message: str, fields: list[tuple[str, str]]) -> None:
        """Write a log line through the host's logger."""

    def get(self, kind: Gvk, namespace: str | None, name: str) -> str | None:
        """One object, None if it does not exist. Raises :class:`HostError`."""

    def list(self, kind: Gvk, namespace: str | None, label_selector: str | None) -> list[str]:
        """The objects of ``kind`` in ``namespace`` matching the selector. Raises :class:`HostError`."""


class Context:
    """What a reconciler may do besides computing: read objects from the host's
    cache (kinds in ``manifest.reads``, the parent's and the owned kinds) and log.

    Reads never reach the API server and never block on the network; the
    cache may lag slightly, and the host reconciles again when it catches up.
    """

    def __init__(self, host: Host) -> None:
        self._host = host

    def get(self, kind: Gvk, name: str, namespace: str | None = None, as_type: Any = None) -> Any | None:
        """The object of ``kind`` called ``name`` in ``namespace`` (default: the
        parent's), as a dict or read as ``as_type``; None if it does not exist.

        Raises:
            Transient: the host refused the read (declare the kind in
                ``manifest.reads``, or grant it; the backoff retries meanwhile).
            Terminal: the object does not fit ``as_type``.
        """
        try:
            text = self._host.get(kind, namespace, name)
        except HostError as error:
            raise Transient(f"cannot get {kind} {name}: {error}") from None
        return None if text is None else parse_object(as_type, json.loads(text))

    def list(
        self, kind: Gvk, label_selector: str = "", namespace: str | None = None, as_type: Any = None
    ) -> list[Any]:
        """The objects of ``kind`` in ``namespace`` (default: the parent's) whose
        labels match ``label_selector`` (``app=web,tier!=db``, ``env in (a,b)``,
        ``!legacy``; empty: all).

        Raises:
            Transient: the host refused the list (kind not declared or
                granted, malformed selector).
            Terminal: an object does not fit ``as_type``.
        """
        try:
            texts = self._host.list(kind, namespace, label_selector or None)
        except HostError as error:
            raise Transient(f"cannot list {kind}: {error}") from None
        return [parse_object(as_type, json.loads(t)) for t in texts]

    def log(self, level: Level, message: str, **fields: Any) -> None:
        """Writes a log line through the host's logger (tagged with the controller
        and the parent), with structured ``fields``."""
        self._host.log(level, str(message), [(k, str(v)) for k, v in fields.items()])

    def debug(self, message: str, **fields: Any) -> None:
        """Logs at debug level."""
        self.log(Level.DEBUG, message, **fields)

    def info(self, message: str, **fields: Any) -> None:
        """Logs at info level."""
        self.log(Level.INFO, message, **fields)

    def warn(self, message: str, **fields: Any) -> None:
        """Logs at warn level."""
        self.log(Level.WARN, message, **fields)

    def error(self, message: str, **fields: Any) -> None:
        """Logs at error level."""
        self.log(Level.ERROR, message, **fields)
