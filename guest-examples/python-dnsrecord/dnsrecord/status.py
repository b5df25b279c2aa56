"""The DnsRecord's status: where its rrset is published, and the ``Ready``
condition (as ``rust-dnsrecord/src/status.rs``).

.. code-block:: yaml

    status:
      observedGeneration: 2
      server: http://127.0.0.1:8081    # the rrset this DnsRecord last wrote:
      zone: example.org.               #   deleted with the DnsRecord, or when
      fqdn: www.example.org.           #   the spec moves the record elsewhere
      type: A
      conditions:
      - {type: Ready, status: "True", reason: Synced, message: ..., observedGeneration: 2, lastTransitionTime: ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operon_sdk import Request

from .pdns import Target

READY = "Ready"
"""The type of the one condition."""


@dataclass(frozen=True)
class Previous:
    """What the current status says, read leniently (a status written by hand
    or by an older version is not an error)."""

    published: Target | None = None
    """The rrset the DnsRecord last wrote, when the status names one."""
    ready: tuple[str, str] | None = None
    """The ``Ready`` condition's status and ``lastTransitionTime``."""

    @staticmethod
    def read(status: Any) -> Previous:
        if not isinstance(status, dict):
            return Previous()

        def text(field: str) -> str | None:
            value = status.get(field)
            return value if isinstance(value, str) and value else None

        server, zone, fqdn, rtype = text("server"), text("zone"), text("fqdn"), text("type")
        published = Target(server, zone, fqdn, rtype) if server and zone and fqdn and rtype else None
        conditions = status.get("conditions")
        ready = None
        for condition in conditions if isinstance(conditions, list) else []:
            if isinstance(condition, dict) and condition.get("type") == READY:
                value, since = condition.get("status"), condition.get("lastTransitionTime")
                if isinstance(value, str) and isinstance(since, str):
                    ready = (value, since)
                break
        return Previous(published, ready)


def status(
    request: Request[Any], previous: Previous, published: Target | None, ready: bool, reason: str, message: str
) -> dict:
    """A status naming ``published`` with a ``Ready`` condition. Its
    ``lastTransitionTime`` is kept while the condition's status stays the
    same, else it is the request's ``now`` (so the outcome is a function of
    the request)."""
    value = "True" if ready else "False"
    if previous.ready is not None and previous.ready[0] == value:
        since = previous.ready[1]
    else:
        since = request.now
    generation = request.generation
    out: dict[str, Any] = {"observedGeneration": generation}
    if published is not None:
        out.update(server=published.server, zone=published.zone, fqdn=published.fqdn, type=published.rtype)
    out["conditions"] = [
        {
            "type": READY,
            "status": value,
            "observedGeneration": generation,
            "lastTransitionTime": since,
            "reason": reason,
            "message": message,
        }
    ]
    return out
