"""The daily schedule: which entry is in force at a time, and when the next
one begins. Pure functions of the schedule and the time (``datetime`` only;
nothing here reads a clock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from operon_sdk import Terminal

from .types import Entry, ScheduledScaleSpec

_DIGITS = frozenset("0123456789")

# Rust's `char::is_whitespace` (Unicode White_Space), which `str::trim` strips
# in the Rust example; `str.strip()` alone would also strip U+001C..U+001F.
_WHITESPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)


@dataclass(frozen=True)
class Turn:
    """Where the schedule stands at a time."""

    active: Entry
    """The entry in force."""
    active_since: datetime
    """When it began."""
    next_change: datetime
    """When the next entry begins."""


def time_of_day(at: str) -> time | None:
    """``HH:MM`` or ``HH:MM:SS``, 00:00 to 23:59:59; None for anything else.

    >>> time_of_day("08:00:30")
    datetime.time(8, 0, 30)
    >>> time_of_day("8:00") is None
    True
    """
    parts = at.split(":")
    if not 2 <= len(parts) <= 3 or any(len(p) != 2 or not set(p) <= _DIGITS for p in parts):
        return None
    hour, minute, second = (int(p) for p in [*parts, "00"][:3])
    if hour > 23 or minute > 59 or second > 59:
        return None
    return time(hour, minute, second)


def validate(spec: ScheduledScaleSpec) -> None:
    """Checks what the CRD schema also checks.

    Raises:
        Terminal: an invalid spec stays invalid until it changes.
    """
    if not spec.image.strip(_WHITESPACE):
        raise Terminal("spec.image must not be empty")
    if not spec.schedule:
        raise Terminal("spec.schedule must have at least one entry")
    seen: list[time] = []
    for i, entry in enumerate(spec.schedule):
        when = time_of_day(entry.at)
        if when is None:
            raise Terminal(f'spec.schedule[{i}].at "{entry.at}" is not a time of day such as 08:00 or 08:00:30')
        if entry.replicas < 0:
            raise Terminal(f"spec.schedule[{i}].replicas must be 0 or more, not {entry.replicas}")
        if when in seen:
            raise Terminal(f"spec.schedule[{i}].at {entry.at} is listed twice")
        seen.append(when)


def _at(day: date, when: time) -> datetime:
    return datetime.combine(day, when, tzinfo=timezone.utc)


def turn(schedule: list[Entry], now: datetime) -> Turn:
    """The entry in force at ``now`` (an aware ``datetime``) and the next change.

    The entry in force is the one whose time came last before (or exactly at)
    ``now``, yesterday's last one before the day's first; the next change is
    the following entry's time, tomorrow's first one after the day's last.

    Raises:
        Terminal: for a schedule :func:`validate` refuses.
    """
    entries: list[tuple[time, Entry]] = []
    for entry in schedule:
        when = time_of_day(entry.at)
        if when is None:
            raise Terminal("the schedule has an invalid time")
        entries.append((when, entry))
    if not entries:
        raise Terminal("spec.schedule must have at least one entry")
    entries.sort(key=lambda pair: pair[0])
    today = now.astimezone(timezone.utc).date()
    try:
        yesterday, tomorrow = today - timedelta(days=1), today + timedelta(days=1)
    except OverflowError as error:
        raise Terminal(f"{now.isoformat()} is too close to the end of the calendar: {error}") from None
    (first_time, _), (last_time, last) = entries[0], entries[-1]
    active, active_since = last, _at(yesterday, last_time)
    next_change = _at(tomorrow, first_time)
    for when, entry in entries:
        begins = _at(today, when)
        if begins <= now:
            active, active_since = entry, begins
        else:
            next_change = begins
            break
    return Turn(active=active, active_since=active_since, next_change=next_change)


def rfc3339(t: datetime) -> str:
    """A time as the status writes it: RFC 3339 in UTC, to the second.

    >>> rfc3339(datetime(2026, 11, 26, 8, 0, 0, 250000, tzinfo=timezone.utc))
    '2026-11-26T08:00:00Z'
    """
    u = t.astimezone(timezone.utc)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"
