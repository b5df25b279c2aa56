"""The PowerDNS HTTP API, as this reconciler uses it: one rrset read (``GET
.../zones/{zone}?rrset_name=...&rrset_type=...``), replaced or deleted with a
``PATCH`` of the zone — every call through the host (``ctx.http``),
authenticated by the Reconciler's credential :data:`CREDENTIAL`, whose value
the guest never sees.

Every way a call can fail becomes a :class:`Problem`: whether retrying can
help, the ``Ready`` condition's reason, and a message that says what to do.
The same rules and words as ``rust-dnsrecord/src/pdns.rs``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from operon_sdk import Context, HttpError, HttpResponse

from . import spec
from .spec import Record

CREDENTIAL = "pdns"
"""The credential the calls name: a Reconciler's ``spec.credentials`` entry
that sends the API key as ``X-API-Key``."""

ZONES = "/api/v1/servers/localhost/zones/"
"""The path of the zones under a server's base URL."""

TIMEOUT_MS = 5_000
"""The deadline of each call, in milliseconds."""


@dataclass
class Problem(Exception):
    """Why the reconcile cannot go on: the failure and the ``Ready`` condition."""

    terminal: bool
    """Retrying cannot help until the DnsRecord (or the Reconciler) changes."""
    reason: str
    """The ``Ready`` condition's reason: ``InvalidSpec``, ``ZoneNotFound``,
    ``EgressDenied``, ``RecordRejected``, ``ServerUnavailable``,
    ``Unauthorized``, ``ServerError`` or ``EgressFailed``."""
    message: str
    """What happened and what to do, for people."""


def terminal(reason: str, message: str) -> Problem:
    return Problem(True, reason, message)


def transient(reason: str, message: str) -> Problem:
    return Problem(False, reason, message)


@dataclass(frozen=True)
class RRset:
    """An rrset as PowerDNS holds it."""

    ttl: int
    contents: tuple[str, ...]
    disabled: bool
    """Whether a record is disabled (this reconciler never disables one)."""

    def matches(self, record: Record) -> bool:
        """Whether this is what ``record`` asks for: the same TTL and the same
        records (compared by :func:`spec.key`), none disabled."""
        keys = sorted(spec.key(record.rtype, c) for c in self.contents)
        return self.ttl == record.ttl and not self.disabled and keys == record.keys()

    def describe(self) -> str:
        """``192.0.2.1, 192.0.2.2 (ttl 300)``."""
        return f"{', '.join(self.contents)} (ttl {self.ttl})"


@dataclass(frozen=True)
class Target:
    """Which rrset: on which server, in which zone."""

    server: str
    zone: str
    fqdn: str
    rtype: str

    @staticmethod
    def of(record: Record) -> Target:
        return Target(record.server, record.zone, record.fqdn, record.rtype)

    def zone_url(self) -> str:
        """``{server}/api/v1/servers/localhost/zones/{zone}``."""
        return f"{self.server}{ZONES}{self.zone}"


def _encode(value: Any) -> bytes:
    # Compact, keys in the order written, UTF-8: the bytes the Rust example
    # sends (the fixtures' recorded calls compare bodies exactly).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def replace_body(record: Record) -> bytes:
    """The ``PATCH`` body that makes the rrset ``record`` asks for."""
    records = [{"content": c, "disabled": False} for c in record.contents]
    change = {"name": record.fqdn, "type": record.rtype, "ttl": record.ttl, "changetype": "REPLACE", "records": records}
    return _encode({"rrsets": [change]})


def delete_body(target: Target) -> bytes:
    """The ``PATCH`` body that deletes an rrset."""
    return _encode({"rrsets": [{"name": target.fqdn, "type": target.rtype, "changetype": "DELETE"}]})


def read(ctx: Context, target: Target) -> RRset | None:
    """The rrset ``target`` names, ``None`` when the zone has none.

    Raises:
        Problem: ``ZoneNotFound`` (terminal) for a 404, else as :func:`_call`
            and :func:`refused`.
    """
    url = f"{target.zone_url()}?rrset_name={target.fqdn}&rrset_type={target.rtype}"
    answer = _call(ctx, target.server, "GET", url)
    if answer.status == 404:
        raise _zone_not_found(target)
    if answer.status != 200:
        raise refused(target.server, answer)
    try:
        zone = json.loads(answer.body)
    except ValueError:
        raise transient(
            "ServerError", f"PowerDNS at {target.server} answered 200 with a body that is not a zone"
        ) from None
    rrsets = zone.get("rrsets") if isinstance(zone, dict) else None
    # Older servers ignore `rrset_name`: the rrset is picked out here.
    for rrset in rrsets if isinstance(rrsets, list) else []:
        if not isinstance(rrset, dict):
            continue
        name, rtype = rrset.get("name"), rrset.get("type")
        if isinstance(name, str) and spec.ascii_lower(name) == spec.ascii_lower(target.fqdn) and rtype == target.rtype:
            records = rrset.get("records")
            records = [r if isinstance(r, dict) else {} for r in records] if isinstance(records, list) else []
            ttl = rrset.get("ttl")
            return RRset(
                ttl=ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0 else 0,
                contents=tuple(c if isinstance(c := r.get("content"), str) else "" for r in records),
                disabled=any(r.get("disabled") is True for r in records),
            )
    return None


def replace(ctx: Context, record: Record) -> None:
    """Makes the rrset ``record`` asks for (replacing what was there).

    Raises:
        Problem: ``ZoneNotFound`` for a 404 and ``RecordRejected`` for a 422
            (both terminal), else as :func:`_call` and :func:`refused`.
    """
    target = Target.of(record)
    answer = _call(ctx, record.server, "PATCH", target.zone_url(), replace_body(record))
    if answer.ok:
        return
    if answer.status == 404:
        raise _zone_not_found(target)
    if answer.status == 422:
        raise terminal(
            "RecordRejected", f"PowerDNS at {record.server} refused {record.describe()}: {_detail(answer)}"
        )
    raise refused(record.server, answer)


def delete(ctx: Context, target: Target) -> bool:
    """Deletes the rrset ``target`` names: ``True`` when PowerDNS did (or had
    none), ``False`` when its zone does not exist (nothing to delete).

    Raises:
        Problem: as :func:`_call` and :func:`refused`.
    """
    answer = _call(ctx, target.server, "PATCH", target.zone_url(), delete_body(target))
    if answer.ok:
        return True
    if answer.status == 404:
        return False
    raise refused(target.server, answer)


def _call(ctx: Context, server: str, method: str, url: str, body: bytes | None = None) -> HttpResponse:
    """One call through the host, with the credential and the deadline.

    Raises:
        Problem: when no answer came (:func:`no_answer`).
    """
    headers = {"content-type": "application/json"} if body is not None else None
    try:
        return ctx.http(method, url, headers=headers, body=body, credential=CREDENTIAL, timeout_ms=TIMEOUT_MS)
    except HttpError as error:
        raise no_answer(server, error) from None


def no_answer(server: str, error: HttpError) -> Problem:
    """The problem of a call that got no answer: ``EgressDenied`` (terminal:
    the Reconciler must grant the call; the message says which grant),
    ``InvalidSpec`` (terminal: the host found the URL malformed),
    ``ServerUnavailable`` (unreachable or timed out: transient) or
    ``EgressFailed`` (the answer was too large, the reconcile's calls are
    spent: transient)."""
    kind, message = error.kind, error.message
    if kind == "denied":
        scheme, host, port, path = spec.endpoint(server)
        return terminal(
            "EgressDenied",
            f"the host denied the call to PowerDNS at {server} ({message}): the Reconciler must grant "
            f"egress to {scheme}://{host}:{port} for GET and PATCH under {path}{ZONES}, and credential "
            f"{CREDENTIAL} for host {host}",
        )
    if kind == "invalid":
        return terminal("InvalidSpec", f"the host refused the call to PowerDNS at {server} as invalid: {message}")
    if kind in ("unreachable", "timeout"):
        return transient("ServerUnavailable", f"PowerDNS at {server} is unavailable ({kind}: {message})")
    return transient("EgressFailed", f"the call to PowerDNS at {server} failed ({kind}: {message})")


def refused(server: str, answer: HttpResponse) -> Problem:
    """The problem of an answer this reconciler did not want: ``Unauthorized``
    for 401 and 403 (the API key is wrong: transient, as the Secret may be
    fixed without the DnsRecord changing), else ``ServerError`` (transient)."""
    if answer.status in (401, 403):
        return transient(
            "Unauthorized",
            f"PowerDNS at {server} refused the credential {CREDENTIAL} ({answer.status}): check the API key "
            f"in the Secret that the Reconciler's credential {CREDENTIAL} names",
        )
    detail = _detail(answer)
    answered = f"PowerDNS at {server} answered {answer.status}"
    return transient("ServerError", f"{answered}: {detail}" if detail else answered)


def _zone_not_found(target: Target) -> Problem:
    return terminal("ZoneNotFound", f"zone {target.zone} does not exist on PowerDNS at {target.server}")


def _detail(answer: HttpResponse) -> str:
    """What PowerDNS said: the ``error`` of its JSON answer, else the first
    200 characters of the body."""
    try:
        body = json.loads(answer.body)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    return answer.body.decode("utf-8", "replace").strip()[:200]
