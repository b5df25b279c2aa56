"""``spec`` of a DnsRecord, checked: what the CRD schema checks too (for
objects that did not go through it: fixtures, an API server without the
schema), and the names and record contents PowerDNS wants.

The same rules and words as ``rust-dnsrecord/src/spec.rs``.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

TYPES = ("A", "AAAA", "CNAME", "TXT")
"""The record types this example manages."""

DEFAULT_TTL = 300
"""``spec.ttl`` when it is left out."""

MAX_TTL = 2_147_483_647
"""The largest TTL (RFC 2181: 2^31 - 1)."""


class InvalidSpec(ValueError):
    """The spec is invalid; the message says how (the first problem found)."""


@dataclass(frozen=True)
class Record:
    """A DnsRecord's spec, checked and completed."""

    server: str
    """The PowerDNS API's base URL, without a trailing ``/``."""
    zone: str
    """The zone, absolute (``example.org.``)."""
    fqdn: str
    """The record's name, absolute (``www.example.org.``)."""
    rtype: str
    """``A``, ``AAAA``, ``CNAME`` or ``TXT``."""
    ttl: int
    """Seconds."""
    contents: tuple[str, ...]
    """The records' contents as PowerDNS writes them (``192.0.2.1``,
    ``target.example.org.``, ``"some text"``), in the spec's order."""

    def describe(self) -> str:
        """``www.example.org. A 192.0.2.1, 192.0.2.2 (ttl 300)``."""
        return f"{self.fqdn} {self.rtype} {', '.join(self.contents)} (ttl {self.ttl})"

    def keys(self) -> list[str]:
        """The records' :func:`key` values, sorted: what is compared with PowerDNS's."""
        return sorted(key(self.rtype, c) for c in self.contents)


def parse(spec: Any) -> Record:
    """The checked spec.

    Raises:
        InvalidSpec: the first problem found.
    """
    if not isinstance(spec, dict):
        raise InvalidSpec("spec must be an object")

    def text(field: str) -> str:
        value = spec.get(field)
        if value is None or value == "":
            raise InvalidSpec(f"spec.{field} must be set")
        if not isinstance(value, str):
            raise InvalidSpec(f"spec.{field} must be a string")
        return value

    server = text("server")
    if not is_base_url(server):
        raise InvalidSpec(
            f'spec.server must be the PowerDNS API\'s base URL, such as http://127.0.0.1:8081, not "{server}"'
        )
    server = server.rstrip("/")

    zone = absolute(text("zone"))
    if not is_dns_name(zone, wildcard=False):
        raise InvalidSpec(f'spec.zone "{zone}" is not a DNS name such as example.org. (lowercase)')

    name = text("name")
    if name == "@":
        fqdn = zone
    elif name.endswith("."):
        fqdn = name
    else:
        fqdn = f"{name}.{zone}"
    if not is_dns_name(fqdn, wildcard=True):
        raise InvalidSpec(
            f'spec.name "{name}" is not a DNS name: www (in the zone), www.example.org. (absolute) '
            "or @ (the zone itself)"
        )
    if fqdn != zone and not fqdn.endswith("." + zone):
        raise InvalidSpec(f"spec.name {fqdn} is not in zone {zone}")

    rtype = text("type")
    if rtype not in TYPES:
        raise InvalidSpec(f'spec.type must be one of {", ".join(TYPES)}, not "{rtype}"')

    ttl = spec.get("ttl")
    if ttl is None:
        ttl = DEFAULT_TTL
    elif isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_TTL:
        raise InvalidSpec(f"spec.ttl must be a whole number from 1 to {MAX_TTL}, not {_json(ttl)}")

    records = spec.get("records")
    if records is None or records == []:
        raise InvalidSpec("spec.records must hold at least one record")
    if not isinstance(records, list):
        raise InvalidSpec("spec.records must be a list of strings")
    if rtype == "CNAME" and len(records) != 1:
        raise InvalidSpec(f"spec.records must hold exactly one record for a CNAME, not {len(records)}")
    contents: list[str] = []
    keys: list[str] = []
    for i, record in enumerate(records):
        if not isinstance(record, str):
            raise InvalidSpec(f"spec.records[{i}] must be a string")
        written, problem = content(rtype, record)
        if problem is not None:
            raise InvalidSpec(f'spec.records[{i}] "{record}" {problem}')
        k = key(rtype, written)
        if k in keys:
            raise InvalidSpec(f'spec.records[{i}] "{record}" is listed twice')
        keys.append(k)
        contents.append(written)
    return Record(server, zone, fqdn, rtype, ttl, tuple(contents))


def content(rtype: str, record: str) -> tuple[str, str | None]:
    """A record's content as PowerDNS wants it, and what is wrong with it
    (``None`` when nothing): addresses as written, a CNAME's target absolute,
    a TXT's text quoted (with ``"`` and ``\\`` escaped)."""
    if rtype == "A":
        return record, None if _ipv4(record) is not None else "is not an IPv4 address"
    if rtype == "AAAA":
        return record, None if _ipv6(record) is not None else "is not an IPv6 address"
    if rtype == "CNAME":
        target = absolute(record)
        return target, None if is_dns_name(target, wildcard=False) else "is not a DNS name (lowercase)"
    if not record or len(record) > 255 or any(not 0x20 <= ord(c) < 0x7F for c in record):
        return record, "is not 1 to 255 printable ASCII characters"
    return '"' + record.replace("\\", "\\\\").replace('"', '\\"') + '"', None


def key(rtype: str, content: str) -> str:
    """What a content is compared by, so that the spelling PowerDNS answers
    with (``2001:db8::1`` for ``2001:DB8:0::1``, names in lowercase) is not a
    difference: addresses by value, names without case, text exactly."""
    if rtype == "A":
        address = _ipv4(content)
        return content if address is None else str(address)
    if rtype == "AAAA":
        address6 = _ipv6(content)
        return content if address6 is None else address6.packed.hex()
    if rtype == "CNAME":
        return ascii_lower(content)
    return content


def absolute(name: str) -> str:
    """``name`` with its trailing dot."""
    return name if name.endswith(".") else name + "."


def is_dns_name(name: str, wildcard: bool) -> bool:
    """Whether ``name`` (absolute) is a DNS name in lowercase: labels of 1 to
    63 letters, digits, ``-`` (not first or last) and ``_``, at most 253
    characters; ``*`` as the first label when ``wildcard``."""
    if not name.endswith("."):
        return False
    name = name[:-1]
    if not name or len(name) > 253:
        return False
    for i, label in enumerate(name.split(".")):
        if wildcard and i == 0 and label == "*":
            continue
        if not label or len(label) > 63 or label.startswith("-") or label.endswith("-"):
            return False
        if not all(c in _LABEL for c in label):
            return False
    return True


def is_base_url(url: str) -> bool:
    """Whether ``url`` is ``http://`` or ``https://``, a host and an optional
    port and path, with no user, query or fragment."""
    for scheme in ("http://", "https://"):
        if url.startswith(scheme):
            rest = url[len(scheme) :]
            break
    else:
        return False
    if any(c in rest for c in "?#@ "):
        return False
    return _authority(rest.split("/", 1)[0]) is not None


def endpoint(url: str) -> tuple[str, str, int, str]:
    """The scheme, host and port a base URL reaches (the port defaulted from
    the scheme), and its path (without a trailing ``/``): what an egress
    grant names."""
    if url.startswith("https://"):
        scheme, rest = "https", url[len("https://") :]
    else:
        scheme, rest = "http", url.removeprefix("http://")
    authority, _, path = rest.partition("/")
    host, port = _authority(authority) or ("", None)
    if port is None:
        port = 443 if scheme == "https" else 80
    return scheme, host, port, "/" + path.rstrip("/") if path else ""


_LABEL = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
_HOST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:")


def _authority(authority: str) -> tuple[str, int | None] | None:
    """``host[:port]`` or ``[v6]:port``: the host and the port, if valid."""
    port: str | None
    if authority.startswith("["):
        host, bracket, after = authority[1:].partition("]")
        if not bracket or _ipv6(host) is None:
            return None
        if after == "":
            port = None
        elif after.startswith(":"):
            port = after[1:]
        else:
            return None
    else:
        host, colon, rest = authority.partition(":")
        port = rest if colon else None
    if not host or not all(c in _HOST for c in host):
        return None
    if port is None:
        return ascii_lower(host), None
    if not port or len(port) > 5 or not all(c in "0123456789" for c in port) or not 0 < int(port) <= 65535:
        return None
    return ascii_lower(host), int(port)


def _ipv4(text: str) -> ipaddress.IPv4Address | None:
    if not all(c in "0123456789." for c in text):
        return None
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        return None


def _ipv6(text: str) -> ipaddress.IPv6Address | None:
    # The standard library also takes a scope (`fe80::1%eth0`), which is no
    # address of a record.
    if not all(c in "0123456789abcdefABCDEF:." for c in text):
        return None
    try:
        return ipaddress.IPv6Address(text)
    except ValueError:
        return None


def ascii_lower(text: str) -> str:
    """``text`` with ASCII letters in lowercase (and nothing else changed)."""
    return "".join(c.lower() if "A" <= c <= "Z" else c for c in text)


def _json(value: Any) -> str:
    """``value`` as compact JSON, as the Rust example shows a value."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
