"""Reads from the host's cache, outbound HTTP and logging during one call: :class:`Context`."""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Protocol

from .egress import HttpError, HttpRequest, HttpResponse, build_request, describe
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
    """The host's imports, objects as JSON text.

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

    def fetch(self, request: HttpRequest) -> HttpResponse:
        """One HTTP call through the host (``egress``). Raises :class:`~operon_sdk.HttpError`."""


OUTSIDE_RECONCILE = "only reconcile may call out (admission and conversion may not)"
"""The message of the ``denied`` answer to a call outside ``reconcile``."""


class Context:
    """What a reconciler may do besides computing: read objects from the host's
    cache (kinds in ``manifest.reads``, the parent's and the owned kinds),
    call out over HTTP through the host (:meth:`http`, in ``reconcile``
    only) and log.

    Reads never reach the API server and never block on the network; the
    cache may lag slightly, and the host reconciles again when it catches up.
    """

    def __init__(self, host: Host, calls: bool = True) -> None:
        self._host = host
        self._calls = calls

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

    def http(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
        body: bytes | str | None = None,
        json: Any = None,
        credential: str | None = None,
        timeout_ms: int | None = None,
    ) -> HttpResponse:
        """One HTTP request, made by the host (contract 0.2's ``egress``).

        ``method`` is ``GET``, ``HEAD``, ``POST``, ``PUT``, ``PATCH`` or
        ``DELETE``; ``url`` absolute (``https://``, or ``http://`` when the
        grant says so). ``body`` is bytes or text (sent as UTF-8); ``json``
        instead sends the value as compact JSON with ``content-type:
        application/json`` (unless ``headers`` set one). ``credential`` names
        one of the Reconciler's ``spec.credentials``: the host adds it (a
        bearer token, basic auth or a header) for the hosts it is for; its
        value never reaches the reconciler. ``timeout_ms`` shortens the call's
        deadline (default 10 s, never past the reconcile's).

        Only what the Reconciler's ``spec.grants.egress`` allows is sent, and
        only from ``reconcile``. Keep calls idempotent: a reconcile may run
        again at any time (PUT a record rather than POST another one; look
        before creating), and clean up when ``request.finalizing``.

        Returns:
            The answer, whatever its status code (check ``.ok`` or ``.status``).

        Raises:
            HttpError: no answer (``kind`` says why: ``denied``, ``invalid``,
                ``timeout``, ``unreachable``, ``tooLarge``, ``budget``,
                ``notRecorded``). Not caught, the reconcile fails as
                :class:`~operon_sdk.Transient`.
            TypeError, ValueError: arguments of the wrong type, or both
                ``body`` and ``json``.
        """
        request = build_request(method, url, headers, body, json, credential, timeout_ms)
        call = describe(request)
        if not self._calls:
            raise HttpError("denied", OUTSIDE_RECONCILE, call)
        try:
            return self._host.fetch(request)
        except HttpError as error:
            if error.call is None:
                error.call = call
            raise

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
