"""Each child's readiness (:class:`Readiness`) and the time (:func:`parse_time`,
:func:`format_time`), as contract 0.2 hands them in.

The host rates every child with kstatus's rules before the call (one
implementation, ``operon readiness`` prints it): a reconciler reads the
verdict and never recomputes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum


class ReadinessStatus(Enum):
    """kstatus's verdict on one object."""

    CURRENT = "current"
    """The object is what its spec asks (a Deployment rolled out and available)."""
    IN_PROGRESS = "in-progress"
    """Still on its way (rolling out, scheduling, not yet observed)."""
    FAILED = "failed"
    """Will not get there without a change (a rollout past its deadline, a failed Job)."""
    TERMINATING = "terminating"
    """Being deleted."""
    UNKNOWN = "unknown"
    """The host cannot tell (a field it needs is malformed)."""


@dataclass(frozen=True)
class Readiness:
    """One child's readiness: the verdict and why (``Available: 1/3``).

    >>> Readiness(ReadinessStatus.IN_PROGRESS, "Available: 1/2").is_current
    False
    """

    status: ReadinessStatus
    message: str = ""

    @property
    def is_current(self) -> bool:
        """``status`` is :attr:`ReadinessStatus.CURRENT`."""
        return self.status is ReadinessStatus.CURRENT

    @staticmethod
    def current(message: str = "") -> Readiness:
        """A current readiness (for tests)."""
        return Readiness(ReadinessStatus.CURRENT, message)


# `operon readiness` prints kstatus's spelling.
_KSTATUS = {
    "Current": ReadinessStatus.CURRENT,
    "InProgress": ReadinessStatus.IN_PROGRESS,
    "Failed": ReadinessStatus.FAILED,
    "Terminating": ReadinessStatus.TERMINATING,
    "Unknown": ReadinessStatus.UNKNOWN,
}


def from_kstatus(verdict: dict) -> Readiness:
    """A verdict as ``operon readiness`` prints it: ``{"status": "InProgress", "message": ...}``.

    Raises:
        ValueError: not such a verdict.
    """
    status = _KSTATUS.get(verdict.get("status")) if isinstance(verdict, dict) else None
    if status is None or not isinstance(verdict.get("message"), str):
        raise ValueError(f"not a readiness verdict: {verdict!r}")
    return Readiness(status, verdict["message"])


EPOCH = "1970-01-01T00:00:00.000Z"
"""``request.now`` of a test or fixture that does not set it."""

# RFC 3339's date-time: a date, `T`, a time with optional fraction and an offset.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def parse_time(text: str) -> datetime:
    """An RFC 3339 time (``2026-11-26T04:05:06.789Z``) as an aware ``datetime``
    (precision: microseconds).

    >>> parse_time("2026-01-01T10:00:00+01:00").isoformat()
    '2026-01-01T10:00:00+01:00'

    Raises:
        ValueError: ``text`` is not an RFC 3339 time with an offset.
    """
    if not isinstance(text, str) or not _RFC3339.fullmatch(text):
        raise ValueError(f"{text!r} is not an RFC 3339 time such as 2026-01-01T00:00:00Z")
    return datetime.fromisoformat(text.upper().replace(" ", "T"))


def format_time(time: datetime) -> str:
    """``time`` as the host spells a time: RFC 3339 in UTC with milliseconds
    (``2026-11-26T04:05:06.789Z``).

    >>> format_time(parse_time("2026-01-01T10:00:00.123456+01:00"))
    '2026-01-01T09:00:00.123Z'

    Raises:
        ValueError: a naive ``datetime`` (no time zone: which time is it?).
    """
    if time.tzinfo is None or time.utcoffset() is None:
        raise ValueError(f"{time!r} has no time zone: use an aware datetime (e.g. tzinfo=timezone.utc)")
    utc = time.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
