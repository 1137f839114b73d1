//! R42: quiet hours in their own time zone, both daylight-saving days right,
//! from the zone data in the binary.

use k8s_openapi::jiff::Timestamp;

use crate::crd::QuietHours;
use crate::variant::quiet::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn spec(days: &[&str], from: &str, to: &str, zone: &str) -> QuietHours {
    QuietHours {
        days: days.iter().map(|d| d.to_string()).collect(),
        from: from.into(),
        to: to.into(),
        time_zone: zone.into(),
    }
}

fn quiet(days: &[&str], from: &str, to: &str, zone: &str) -> Quiet {
    Quiet::of(&spec(days, from, to, zone)).unwrap_or_else(|e| panic!("{e}"))
}

fn end_of(q: &Quiet, now: &str) -> Option<Timestamp> {
    q.end_of(at(now))
}

fn next_start(q: &Quiet, now: &str) -> Option<Timestamp> {
    q.next_start(at(now))
}

fn some(text: &str) -> Option<Timestamp> {
    Some(at(text))
}

// R42: the spring-forward night in Europe/Berlin (2026-03-29, 02:00 CET ->
// 03:00 CEST) is an hour shorter; it still ends at 07:00 local, now 05:00Z.
#[test]
fn a_berlin_night_into_summer_time_ends_at_seven_local() {
    let q = quiet(&[], "22:00", "07:00", "Europe/Berlin");
    // The night before, in winter time: 22:00 CET is 21:00Z, 07:00 CET is 06:00Z.
    assert_eq!(
        end_of(&q, "2026-03-27T21:00:00Z"),
        some("2026-03-28T06:00:00Z")
    );
    assert_eq!(end_of(&q, "2026-03-28T06:00:00Z"), None);
    assert_eq!(end_of(&q, "2026-03-28T12:00:00Z"), None);
    assert_eq!(end_of(&q, "2026-03-28T20:59:59Z"), None);
    assert_eq!(
        next_start(&q, "2026-03-28T12:00:00Z"),
        some("2026-03-28T21:00:00Z")
    );
    // The short night: 21:00Z to 05:00Z, 8 hours, across the jump at 01:00Z.
    for inside in [
        "2026-03-28T21:00:00Z",
        "2026-03-29T00:59:59Z",
        "2026-03-29T01:00:00Z",
        "2026-03-29T04:59:59Z",
    ] {
        assert_eq!(end_of(&q, inside), some("2026-03-29T05:00:00Z"), "{inside}");
    }
    assert_eq!(end_of(&q, "2026-03-29T05:00:00Z"), None);
    // Inside, the next start is the next evening's: 22:00 CEST is 20:00Z.
    assert_eq!(
        next_start(&q, "2026-03-29T02:00:00Z"),
        some("2026-03-29T20:00:00Z")
    );
    assert_eq!(
        next_start(&q, "2026-03-28T21:00:00Z"),
        some("2026-03-29T20:00:00Z")
    );
    assert_eq!(
        end_of(&q, "2026-03-29T20:00:00Z"),
        some("2026-03-30T05:00:00Z")
    );
    assert_eq!(q.local(at("2026-03-29T05:00:00Z")), "07:00 Europe/Berlin");
}

// R42: the fall-back night in Europe/Berlin (2026-10-25, 03:00 CEST ->
// 02:00 CET) is an hour longer and ends at 07:00 local, now 06:00Z.
#[test]
fn a_berlin_night_into_winter_time_ends_at_seven_local() {
    let q = quiet(&[], "22:00", "07:00", "Europe/Berlin");
    assert_eq!(end_of(&q, "2026-10-24T05:00:00Z"), None);
    assert_eq!(
        next_start(&q, "2026-10-24T05:00:00Z"),
        some("2026-10-24T20:00:00Z")
    );
    assert_eq!(end_of(&q, "2026-10-24T19:59:59Z"), None);
    // 20:00Z to 06:00Z, 10 hours; 02:30 local happens twice (00:30Z and 01:30Z).
    for inside in [
        "2026-10-24T20:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-25T05:59:59Z",
    ] {
        assert_eq!(end_of(&q, inside), some("2026-10-25T06:00:00Z"), "{inside}");
    }
    assert_eq!(end_of(&q, "2026-10-25T06:00:00Z"), None);
    assert_eq!(
        next_start(&q, "2026-10-25T06:00:00Z"),
        some("2026-10-25T21:00:00Z")
    );
    assert_eq!(q.local(at("2026-10-25T06:00:00Z")), "07:00 Europe/Berlin");
    assert_eq!(q.local(at("2026-10-25T21:00:00Z")), "22:00 Europe/Berlin");
}

// R42: America/New_York on its 2026 dates, 2026-03-08 (02:00 EST -> 03:00
// EDT at 07:00Z) and 2026-11-01 (02:00 EDT -> 01:00 EST at 06:00Z).
#[test]
fn new_york_nights_on_both_daylight_saving_dates() {
    let q = quiet(&[], "22:00", "07:00", "America/New_York");
    // Into summer time: 22:00 EST is 03:00Z, 07:00 EDT is 11:00Z (8 hours).
    assert_eq!(end_of(&q, "2026-03-08T02:59:59Z"), None);
    assert_eq!(
        end_of(&q, "2026-03-08T03:00:00Z"),
        some("2026-03-08T11:00:00Z")
    );
    assert_eq!(
        end_of(&q, "2026-03-08T07:30:00Z"),
        some("2026-03-08T11:00:00Z")
    );
    assert_eq!(end_of(&q, "2026-03-08T11:00:00Z"), None);
    assert_eq!(
        next_start(&q, "2026-03-08T11:00:00Z"),
        some("2026-03-09T02:00:00Z")
    );
    // Into winter time: 22:00 EDT is 02:00Z, 07:00 EST is 12:00Z (10 hours).
    assert_eq!(
        next_start(&q, "2026-10-31T16:00:00Z"),
        some("2026-11-01T02:00:00Z")
    );
    assert_eq!(
        end_of(&q, "2026-11-01T05:30:00Z"),
        some("2026-11-01T12:00:00Z")
    );
    assert_eq!(
        end_of(&q, "2026-11-01T06:30:00Z"),
        some("2026-11-01T12:00:00Z")
    );
    assert_eq!(
        end_of(&q, "2026-11-01T11:59:59Z"),
        some("2026-11-01T12:00:00Z")
    );
    assert_eq!(end_of(&q, "2026-11-01T12:00:00Z"), None);
    assert_eq!(
        next_start(&q, "2026-11-01T12:00:00Z"),
        some("2026-11-02T03:00:00Z")
    );
    assert_eq!(
        q.local(at("2026-11-01T12:00:00Z")),
        "07:00 America/New_York"
    );
}

// R42: a period that starts on a listed day runs to its end in the next day,
// listed or not, and nothing starts on a day that is not listed.
#[test]
fn a_friday_night_runs_into_saturday_and_saturday_starts_none() {
    // 2026-06-05 is a Friday; Berlin is at +02:00.
    let q = quiet(&["Fri"], "23:00", "01:00", "Europe/Berlin");
    assert_eq!(end_of(&q, "2026-06-05T20:59:59Z"), None);
    assert_eq!(
        end_of(&q, "2026-06-05T21:00:00Z"),
        some("2026-06-05T23:00:00Z")
    );
    // Saturday 00:30 local, still Friday's period.
    assert_eq!(
        end_of(&q, "2026-06-05T22:30:00Z"),
        some("2026-06-05T23:00:00Z")
    );
    assert_eq!(end_of(&q, "2026-06-05T23:00:00Z"), None);
    // Saturday 23:30 and Thursday 23:30 local: not listed.
    assert_eq!(end_of(&q, "2026-06-06T21:30:00Z"), None);
    assert_eq!(end_of(&q, "2026-06-04T21:30:00Z"), None);
    assert_eq!(
        next_start(&q, "2026-06-05T23:00:00Z"),
        some("2026-06-12T21:00:00Z")
    );
    assert_eq!(
        next_start(&q, "2026-06-01T00:00:00Z"),
        some("2026-06-05T21:00:00Z")
    );
}

// R42: office hours Monday to Friday are not quiet on a Saturday.
#[test]
fn weekday_hours_are_not_quiet_on_a_saturday() {
    let q = quiet(
        &["Mon", "Tue", "Wed", "Thu", "Fri"],
        "09:00",
        "17:00",
        "Europe/Berlin",
    );
    // Saturday 2026-06-06 at 12:00 local.
    assert_eq!(end_of(&q, "2026-06-06T10:00:00Z"), None);
    assert_eq!(
        next_start(&q, "2026-06-06T10:00:00Z"),
        some("2026-06-08T07:00:00Z")
    );
    // Friday at 12:00 local is.
    assert_eq!(
        end_of(&q, "2026-06-05T10:00:00Z"),
        some("2026-06-05T15:00:00Z")
    );
    // Repeated days are harmless.
    let twice = quiet(&["Sat", "Sat"], "09:00", "17:00", "Europe/Berlin");
    assert_eq!(
        end_of(&twice, "2026-06-06T10:00:00Z"),
        some("2026-06-06T15:00:00Z")
    );
}

// R42: a `from` in the spring-forward gap (02:30 does not exist on
// 2026-03-29 in Europe/Berlin) moves forward by the gap, to 03:30 CEST (01:30Z), as the
// module documents; the day before it is 02:30 CET (01:30Z too).
#[test]
fn a_from_in_the_gap_starts_an_hour_later() {
    let q = quiet(&[], "02:30", "06:00", "Europe/Berlin");
    assert_eq!(
        end_of(&q, "2026-03-28T01:30:00Z"),
        some("2026-03-28T05:00:00Z")
    );
    assert_eq!(
        next_start(&q, "2026-03-28T12:00:00Z"),
        some("2026-03-29T01:30:00Z")
    );
    assert_eq!(end_of(&q, "2026-03-29T01:15:00Z"), None);
    assert_eq!(
        end_of(&q, "2026-03-29T01:30:00Z"),
        some("2026-03-29T04:00:00Z")
    );
    assert_eq!(q.local(at("2026-03-29T01:30:00Z")), "03:30 Europe/Berlin");
}

// R42: both ends moved by the gap so that the period would end before it
// starts (02:30-03:00 on 2026-03-29 is 03:30 to 03:00): no quiet hours that day.
#[test]
fn a_period_emptied_by_the_gap_is_skipped() {
    let q = quiet(&[], "02:30", "03:00", "Europe/Berlin");
    assert_eq!(
        end_of(&q, "2026-03-28T01:45:00Z"),
        some("2026-03-28T02:00:00Z")
    );
    assert_eq!(end_of(&q, "2026-03-29T01:00:00Z"), None);
    assert_eq!(end_of(&q, "2026-03-29T01:45:00Z"), None);
    assert_eq!(
        next_start(&q, "2026-03-28T12:00:00Z"),
        some("2026-03-30T00:30:00Z")
    );
}

// R42: a `to` in the fall-back fold ends at the first of the two 02:30s.
#[test]
fn a_to_in_the_fold_ends_at_its_first_time() {
    let q = quiet(&[], "22:00", "02:30", "Europe/Berlin");
    assert_eq!(
        end_of(&q, "2026-10-25T00:00:00Z"),
        some("2026-10-25T00:30:00Z")
    );
    assert_eq!(end_of(&q, "2026-10-25T00:30:00Z"), None);
    assert_eq!(end_of(&q, "2026-10-25T01:15:00Z"), None);
}

// R42: when the gap moves one night's end (02:30 -> 03:30 CEST, 01:30Z) past
// the next start (03:15 CEST, 01:15Z), the two periods are one run: its end is the second's,
// and the second's start is not a start.
#[test]
fn periods_that_touch_across_the_gap_are_one() {
    let q = quiet(&[], "03:15", "02:30", "Europe/Berlin");
    assert_eq!(
        end_of(&q, "2026-03-29T01:00:00Z"),
        some("2026-03-30T00:30:00Z")
    );
    assert_eq!(
        end_of(&q, "2026-03-29T01:20:00Z"),
        some("2026-03-30T00:30:00Z")
    );
    assert_eq!(
        next_start(&q, "2026-03-29T00:00:00Z"),
        some("2026-03-30T01:15:00Z")
    );
    // An ordinary day: 02:30 to 03:15 local is not quiet.
    assert_eq!(end_of(&q, "2026-06-10T00:45:00Z"), None);
    assert_eq!(
        end_of(&q, "2026-06-10T00:15:00Z"),
        some("2026-06-10T00:30:00Z")
    );
}

// R42: a refusal names the field and quotes the value.
#[test]
fn refusals_name_the_field() {
    let refused = |s: QuietHours| match Quiet::of(&s) {
        Ok(q) => panic!("accepted {s:?}: {q:?}"),
        Err(e) => e,
    };
    assert_eq!(
        refused(spec(&[], "22:00", "07:00", "Mars/Base")),
        "spec.devices.sleep.quietHours.timeZone \"Mars/Base\": not a time zone this build knows"
    );
    for zone in ["", "Etc/Unknown", "Europe/Berlin ", "CET-1CEST"] {
        assert!(
            refused(spec(&[], "22:00", "07:00", zone))
                .starts_with("spec.devices.sleep.quietHours.timeZone "),
            "{zone:?}"
        );
    }
    let long = "A/".repeat(100);
    let e = refused(spec(&[], "22:00", "07:00", &long));
    assert!(e.len() < 150, "{e}");
    assert_eq!(
        refused(spec(&[], "25:00", "07:00", "Europe/Berlin")),
        "spec.devices.sleep.quietHours.from \"25:00\": not a time HH:MM"
    );
    for bad in [
        "7:00", "07:60", "24:00", "07-00", "０7:00", "", "07:00:00", "+1:00",
    ] {
        assert_eq!(
            refused(spec(&[], "22:00", bad, "Europe/Berlin")),
            format!("spec.devices.sleep.quietHours.to {bad:?}: not a time HH:MM")
        );
    }
    assert_eq!(
        refused(spec(&["Mon", "Mo"], "22:00", "07:00", "Europe/Berlin")),
        "spec.devices.sleep.quietHours.days[1] \"Mo\": not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)"
    );
    assert!(refused(spec(&["mon"], "22:00", "07:00", "Europe/Berlin")).contains("days[0]"));
    let equal = refused(spec(&[], "22:00", "22:00", "Europe/Berlin"));
    assert!(
        equal.starts_with("spec.devices.sleep.quietHours.to \"22:00\": from and to are equal"),
        "{equal}"
    );
}

// R42: the zone's canonical name in messages, times as HH:MM.
#[test]
fn local_writes_the_zones_time_and_name() {
    let q = quiet(&[], "00:00", "23:59", "europe/berlin");
    assert_eq!(q.local(at("2026-01-15T06:05:00Z")), "07:05 Europe/Berlin");
    assert_eq!(q.local(at("2026-07-15T06:05:59Z")), "08:05 Europe/Berlin");
    let utc = quiet(&[], "00:00", "06:00", "UTC");
    assert_eq!(utc.local(at("2026-07-15T23:59:00Z")), "23:59 UTC");
    let kathmandu = quiet(&[], "22:00", "06:00", "Asia/Kathmandu");
    assert_eq!(
        kathmandu.local(at("2026-07-15T00:00:00Z")),
        "05:45 Asia/Kathmandu"
    );
    // From the zone data in the binary: a name the host may lack is still known.
    assert!(Quiet::of(&spec(&[], "22:00", "07:00", "Pacific/Chatham")).is_ok());
}
