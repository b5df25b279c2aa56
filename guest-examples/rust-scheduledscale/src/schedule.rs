//! The daily schedule: which entry is in force at a time, and when the next
//! one begins. Pure functions of the schedule and the time.

use operon_sdk::Failure;
use operon_sdk::jiff::{Timestamp, ToSpan, civil::Time, tz::TimeZone};
use serde::Deserialize;

use crate::ScheduledScaleSpec;

/// One entry: from `at` (a time of day, UTC) on, `replicas`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Entry {
    /// `HH:MM` or `HH:MM:SS`.
    pub at: String,
    /// Pods from then on.
    pub replicas: i32,
}

impl Default for Entry {
    fn default() -> Entry {
        Entry { at: String::new(), replicas: 1 }
    }
}

/// Where the schedule stands at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// The entry in force.
    pub active: Entry,
    /// When it began.
    pub active_since: Timestamp,
    /// When the next entry begins.
    pub next_change: Timestamp,
}

/// `HH:MM` or `HH:MM:SS`, 00:00 to 23:59:59.
fn time_of_day(at: &str) -> Option<Time> {
    let parts: Vec<&str> = at.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2 || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let number = |i: usize| parts.get(i).map_or(Some(0), |p| p.parse::<i8>().ok());
    Time::new(number(0)?, number(1)?, number(2)?, 0).ok()
}

/// Checks what the CRD schema also checks.
///
/// # Errors
///
/// Terminal: an invalid spec stays invalid until it changes.
pub fn validate(spec: &ScheduledScaleSpec) -> Result<(), Failure> {
    if spec.image.trim().is_empty() {
        return Err(Failure::terminal("spec.image must not be empty"));
    }
    if spec.schedule.is_empty() {
        return Err(Failure::terminal("spec.schedule must have at least one entry"));
    }
    let mut seen = Vec::new();
    for (i, entry) in spec.schedule.iter().enumerate() {
        let Some(time) = time_of_day(&entry.at) else {
            return Err(Failure::terminal(format!(
                "spec.schedule[{i}].at \"{}\" is not a time of day such as 08:00 or 08:00:30",
                entry.at
            )));
        };
        if entry.replicas < 0 {
            return Err(Failure::terminal(format!(
                "spec.schedule[{i}].replicas must be 0 or more, not {}",
                entry.replicas
            )));
        }
        if seen.contains(&time) {
            return Err(Failure::terminal(format!("spec.schedule[{i}].at {} is listed twice", entry.at)));
        }
        seen.push(time);
    }
    Ok(())
}

/// The entry in force at `now` and the next change.
///
/// # Errors
///
/// Terminal, for a schedule [`validate`] refuses.
pub fn turn(schedule: &[Entry], now: Timestamp) -> Result<Turn, Failure> {
    let mut entries: Vec<(Time, &Entry)> = schedule
        .iter()
        .map(|e| time_of_day(&e.at).map(|t| (t, e)))
        .collect::<Option<_>>()
        .ok_or_else(|| Failure::terminal("the schedule has an invalid time"))?;
    entries.sort_by_key(|(t, _)| *t);
    let today = now.to_zoned(TimeZone::UTC).date();
    let at = |day: operon_sdk::jiff::civil::Date, time: Time| -> Result<Timestamp, Failure> {
        day.to_datetime(time).to_zoned(TimeZone::UTC).map(|z| z.timestamp()).map_err(Failure::terminal)
    };
    let yesterday = today.checked_sub(1.day()).map_err(Failure::terminal)?;
    let tomorrow = today.checked_add(1.day()).map_err(Failure::terminal)?;
    let (first, last) = (entries[0], entries[entries.len() - 1]);
    let mut active = (at(yesterday, last.0)?, last.1);
    let mut next = at(tomorrow, first.0)?;
    for (time, entry) in &entries {
        let when = at(today, *time)?;
        if when <= now {
            active = (when, entry);
        } else {
            next = when;
            break;
        }
    }
    Ok(Turn { active: active.1.clone(), active_since: active.0, next_change: next })
}

/// A time as the status writes it: RFC 3339 in UTC, to the second.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &[(&str, i32)]) -> Vec<Entry> {
        list.iter().map(|(at, replicas)| Entry { at: (*at).to_owned(), replicas: *replicas }).collect()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn the_entry_in_force_should_be_the_last_one_that_began() {
        let schedule = entries(&[("20:00", 1), ("08:00", 3)]);
        let morning = turn(&schedule, at("2026-11-26T09:15:00Z")).unwrap();
        assert_eq!((morning.active.replicas, rfc3339(morning.active_since)), (3, "2026-11-26T08:00:00Z".into()));
        assert_eq!(rfc3339(morning.next_change), "2026-11-26T20:00:00Z");
        let night = turn(&schedule, at("2026-11-26T03:00:00Z")).unwrap();
        assert_eq!((night.active.replicas, rfc3339(night.active_since)), (1, "2026-11-25T20:00:00Z".into()));
        assert_eq!(rfc3339(night.next_change), "2026-11-26T08:00:00Z");
        let late = turn(&schedule, at("2026-11-26T23:59:59Z")).unwrap();
        assert_eq!(rfc3339(late.next_change), "2026-11-27T08:00:00Z");
        let exactly = turn(&schedule, at("2026-11-26T08:00:00Z")).unwrap();
        assert_eq!(exactly.active.replicas, 3, "an entry is in force from its time on");
    }

    #[test]
    fn one_entry_should_hold_all_day() {
        let t = turn(&entries(&[("12:00:30", 2)]), at("2026-11-26T12:00:29Z")).unwrap();
        assert_eq!(rfc3339(t.active_since), "2026-11-25T12:00:30Z");
        assert_eq!(rfc3339(t.next_change), "2026-11-26T12:00:30Z");
    }

    #[test]
    fn times_should_be_hh_mm_with_optional_seconds() {
        for good in ["00:00", "23:59", "08:00:30"] {
            assert!(time_of_day(good).is_some(), "{good}");
        }
        for bad in ["8:00", "24:00", "12:60", "12", "12:00:00:00", "ab:cd", ""] {
            assert!(time_of_day(bad).is_none(), "{bad}");
        }
    }
}
