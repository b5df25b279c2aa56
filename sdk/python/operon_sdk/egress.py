"""Outbound HTTP through the host (contract 0.2's ``egress``): what
:meth:`operon_sdk.Context.http` sends and answers.

The host makes the call, not the guest: it allows only what the
Reconciler's ``spec.grants.egress`` lists, adds a credential the guest names
(one of ``spec.credentials``; its value never enters the guest), and bounds
each call (a timeout, a response size, calls per reconcile). Only
``reconcile`` may call out. See docs/egress.md.

A call that gets an answer, whatever its status code (a 404 or a 500 is an
answer), returns an :class:`HttpResponse`; a call that gets none raises
:class:`HttpError`, whose ``kind`` says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

KINDS = ("denied", "invalid", "timeout", "unreachable", "tooLarge", "budget", "notRecorded")
"""The kinds of :class:`HttpError`, as fixtures and metrics name them."""


class HttpError(Exception):
    """A call that got no answer (the WIT ``http-error``).

    ``kind`` is one of :data:`KINDS`:

    - ``denied``: not allowed by the Reconciler's grants or the host's rules
      (an ungranted host or method, a private address, an unknown
      credential, a call outside ``reconcile``); nothing was sent.
    - ``invalid``: a malformed request (URL, method, header).
    - ``timeout``: no answer in time (the call's deadline, or the reconcile's).
    - ``unreachable``: no connection, or it broke (name, refused, TLS).
    - ``tooLarge``: the answer is larger than the host takes.
    - ``budget``: this reconcile made as many calls as the host allows.
    - ``notRecorded``: replaying a recording (``operon test``, the SDK's
      runner), which holds no such call.

    ``message`` is the host's, for people; ``call`` names the call
    (``GET https://...``) when the SDK made it. A reconcile that lets it
    escape fails as :class:`~operon_sdk.Transient` (retried with backoff).

    >>> str(HttpError("denied", "dns.example is not granted"))
    'denied: dns.example is not granted'
    """

    def __init__(self, kind: str, message: str, call: str | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"{kind!r} is not an HttpError kind ({', '.join(KINDS)})")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.call = call

    def __repr__(self) -> str:
        return f"HttpError({self.kind!r}, {self.message!r})"


@dataclass
class HttpRequest:
    """One request as the host gets it (the WIT ``http-request``)."""

    method: str
    url: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None
    credential: str | None = None
    timeout_ms: int | None = None


@dataclass
class HttpResponse:
    """An answer, whatever its status code (the WIT ``http-response``).

    >>> r = HttpResponse(200, [("Content-Type", "application/json")], b'{"a": 1}')
    >>> r.ok, r.header("content-type"), r.json()
    (True, 'application/json', {'a': 1})
    """

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status < 300

    def header(self, name: str, default: str | None = None) -> str | None:
        """The first value of the header ``name`` (compared without case), else ``default``."""
        wanted = name.lower()
        return next((v for n, v in self.headers if n.lower() == wanted), default)

    def text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The body as text (UTF-8 unless told)."""
        return self.body.decode(encoding, errors)

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises:
            ValueError: the body is not JSON.
        """
        return json.loads(self.body)


def describe(request: HttpRequest) -> str:
    """The call in one line, as replay messages name it: ``METHOD URL``, with
    `` (N bytes of body)`` and `` with credential "name"`` when there are.

    >>> describe(HttpRequest("post", "https://a.example/x", body=b"{}", credential="api"))
    'POST https://a.example/x (2 bytes of body) with credential "api"'
    """
    body = "" if request.body is None else f" ({len(request.body)} bytes of body)"
    credential = "" if request.credential is None else f" with credential {json.dumps(request.credential)}"
    return f"{request.method.upper()} {request.url}{body}{credential}"


def encode_json(value: Any) -> bytes:
    """``value`` as a JSON body: compact (no spaces), keys in the dict's order, UTF-8.

    >>> encode_json({"name": "a.", "ttl": 60})
    b'{"name":"a.","ttl":60}'
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def build_request(
    method: str,
    url: str,
    headers: Any = None,
    body: bytes | bytearray | str | None = None,
    json_value: Any = None,
    credential: str | None = None,
    timeout_ms: int | None = None,
) -> HttpRequest:
    """The request :meth:`operon_sdk.Context.http` sends (arguments checked).

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: both ``body`` and ``json``, or a timeout out of range.
    """
    if not isinstance(method, str) or not method:
        raise TypeError(f"http: method must be a non-empty str, not {method!r}")
    if not isinstance(url, str):
        raise TypeError(f"http: url must be a str, not {url!r}")
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    sent: list[tuple[str, str]] = []
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
            raise TypeError(f"http: headers must be a dict or pairs of str, not {pair!r}")
        sent.append((pair[0], pair[1]))
    if json_value is not None:
        if body is not None:
            raise ValueError("http: give body or json, not both")
        data: bytes | None = encode_json(json_value)
        if not any(n.lower() == "content-type" for n, _ in sent):
            sent.append(("content-type", "application/json"))
    elif body is None:
        data = None
    elif isinstance(body, str):
        data = body.encode()
    elif isinstance(body, (bytes, bytearray, memoryview)):
        data = bytes(body)
    else:
        raise TypeError(f"http: body must be bytes or str, not {type(body).__name__}")
    if credential is not None and not isinstance(credential, str):
        raise TypeError(f"http: credential must be the name of one of spec.credentials, not {credential!r}")
    if timeout_ms is not None and (
        isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 <= timeout_ms < 2**32
    ):
        raise ValueError(f"http: timeout_ms must be an int of milliseconds (0 to 2**32-1), not {timeout_ms!r}")
    return HttpRequest(method.upper(), url, sent, data, credential, timeout_ms)


__all__ = ["KINDS", "HttpError", "HttpRequest", "HttpResponse", "describe", "encode_json"]
