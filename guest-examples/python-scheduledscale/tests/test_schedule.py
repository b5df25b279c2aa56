"""The schedule logic alone (``scheduledscale.schedule``): pure functions of
the schedule and the time, as rust-scheduledscale's ``schedule.rs`` tests."""

from __future__ import annotations

from datetime import datetime, time

import pytest

from operon_sdk import Terminal, parse_time
from scheduledscale import Entry, ScheduledScaleSpec
from scheduledscale.schedule import rfc3339, time_of_day, turn, validate


def entries(*pairs: tuple[str, int]) -> list[Entry]:
    return [Entry(at, replicas) for at, replicas in pairs]


def at(text: str) -> datetime:
    return parse_time(text)


DAY_AND_NIGHT = entries(("20:00", 1), ("08:00", 3))  # in any order


def test_the_entry_in_force_should_be_the_last_one_that_began():
    morning = turn(DAY_AND_NIGHT, at("2026-11-26T09:15:00Z"))
    assert (morning.active.replicas, morning.active.at) == (3, "08:00")
    assert rfc3339(morning.active_since) == "2026-11-26T08:00:00Z"
    assert rfc3339(morning.next_change) == "2026-11-26T20:00:00Z"


def test_before_the_first_entry_of_the_day_yesterdays_last_should_be_in_force():
    night = turn(DAY_AND_NIGHT, at("2026-11-26T03:00:00.250Z"))
    assert (night.active.replicas, night.active.at) == (1, "20:00")
    assert rfc3339(night.active_since) == "2026-11-25T20:00:00Z"
    assert rfc3339(night.next_change) == "2026-11-26T08:00:00Z"
    # The next change exactly, to the millisecond: what requeue_at asks for.
    assert night.next_change == at("2026-11-26T08:00:00Z")


def test_an_entry_should_be_in_force_from_its_time_on():
    exactly = turn(DAY_AND_NIGHT, at("2026-11-26T08:00:00Z"))
    assert exactly.active.replicas == 3
    assert rfc3339(exactly.active_since) == "2026-11-26T08:00:00Z"
    assert rfc3339(exactly.next_change) == "2026-11-26T20:00:00Z"
    just_before = turn(DAY_AND_NIGHT, at("2026-11-26T07:59:59.999Z"))
    assert just_before.active.replicas == 1
    assert just_before.next_change == at("2026-11-26T08:00:00Z")


def test_after_the_days_last_entry_the_next_change_should_be_tomorrows_first():
    late = turn(DAY_AND_NIGHT, at("2026-11-26T23:59:59Z"))
    assert (late.active.replicas, rfc3339(late.active_since)) == (1, "2026-11-26T20:00:00Z")
    assert rfc3339(late.next_change) == "2026-11-27T08:00:00Z"
    # Across a month's and a year's end too.
    new_year = turn(DAY_AND_NIGHT, at("2026-12-31T21:00:00Z"))
    assert rfc3339(new_year.next_change) == "2027-01-01T08:00:00Z"
    first = turn(DAY_AND_NIGHT, at("2027-01-01T00:00:00Z"))
    assert rfc3339(first.active_since) == "2026-12-31T20:00:00Z"


def test_one_entry_should_hold_all_day():
    before = turn(entries(("12:00:30", 2)), at("2026-11-26T12:00:29Z"))
    assert rfc3339(before.active_since) == "2026-11-25T12:00:30Z"
    assert rfc3339(before.next_change) == "2026-11-26T12:00:30Z"
    after = turn(entries(("12:00:30", 2)), at("2026-11-26T12:00:31Z"))
    assert rfc3339(after.active_since) == "2026-11-26T12:00:30Z"
    assert rfc3339(after.next_change) == "2026-11-27T12:00:30Z"


def test_the_time_should_be_read_in_utc():
    # 01:00+02:00 is 23:00 UTC the day before: after the 20:00 entry.
    t = turn(DAY_AND_NIGHT, at("2026-11-27T01:00:00+02:00"))
    assert rfc3339(t.active_since) == "2026-11-26T20:00:00Z"
    assert rfc3339(t.next_change) == "2026-11-27T08:00:00Z"


def test_times_should_be_hh_mm_with_optional_seconds():
    assert time_of_day("00:00") == time(0, 0)
    assert time_of_day("23:59") == time(23, 59)
    assert time_of_day("08:00:30") == time(8, 0, 30)
    for bad in ["8:00", "24:00", "12:60", "12:00:60", "12", "12:00:00:00", "ab:cd", "", "1２:00", " 8:00", "+8:00"]:
        assert time_of_day(bad) is None, bad


def test_status_times_should_be_rfc3339_to_the_second():
    assert rfc3339(at("2026-11-26T08:00:00.999Z")) == "2026-11-26T08:00:00Z"
    assert rfc3339(at("2026-11-26T09:00:00+01:00")) == "2026-11-26T08:00:00Z"


def test_a_valid_spec_should_pass():
    validate(ScheduledScaleSpec("nginx:1.27", entries(("08:00", 0), ("20:00:30", 5))))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ScheduledScaleSpec("", entries(("08:00", 1))), "spec.image must not be empty"),
        (ScheduledScaleSpec(" \t", entries(("08:00", 1))), "spec.image must not be empty"),
        (ScheduledScaleSpec("nginx:1.27", []), "spec.schedule must have at least one entry"),
        (
            ScheduledScaleSpec("nginx:1.27", entries(("08:00", 1), ("8:00", 3))),
            'spec.schedule[1].at "8:00" is not a time of day such as 08:00 or 08:00:30',
        ),
        (
            ScheduledScaleSpec("nginx:1.27", [Entry()]),
            'spec.schedule[0].at "" is not a time of day such as 08:00 or 08:00:30',
        ),
        (
            ScheduledScaleSpec("nginx:1.27", entries(("08:00", -1))),
            "spec.schedule[0].replicas must be 0 or more, not -1",
        ),
        (
            ScheduledScaleSpec("nginx:1.27", entries(("08:00", 3), ("20:00", 1), ("08:00", 5))),
            "spec.schedule[2].at 08:00 is listed twice",
        ),
        (
            ScheduledScaleSpec("nginx:1.27", entries(("08:00", 3), ("08:00:00", 5))),
            "spec.schedule[1].at 08:00:00 is listed twice",
        ),
        (
            # The first problem, in the order of the entries.
            ScheduledScaleSpec("nginx:1.27", entries(("08:00", -1), ("25:00", 1))),
            "spec.schedule[0].replicas must be 0 or more, not -1",
        ),
    ],
)
def test_an_invalid_spec_should_be_terminal(spec, message):
    with pytest.raises(Terminal) as failure:
        validate(spec)
    assert failure.value.message == message


def test_the_image_should_be_trimmed_as_rust_trims():
    # U+001F is not Unicode White_Space: Rust's trim keeps it, so it is an image.
    validate(ScheduledScaleSpec("\x1f", entries(("08:00", 1))))
    with pytest.raises(Terminal):
        validate(ScheduledScaleSpec("\u3000\u2028", entries(("08:00", 1))))
