//! The times the operator writes into statuses and reads back on every poll (R40, R42): RFC 3339
//! in UTC to the second (`2026-12-07T03:30:08Z`), as Kubernetes writes them. This exact shape is
//! read and written here directly, a few dozen instructions where jiff's general parser and
//! printer take thousands; any other text goes to jiff, so what is accepted and what it means
//! are jiff's.

use k8s_openapi::jiff::Timestamp;

/// `t` as Kubernetes writes times: RFC 3339, whole seconds, UTC.
pub fn rfc3339(t: Timestamp) -> String {
    let second = t.as_second();
    let (days, of_day) = (second.div_euclid(86_400), second.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        return Timestamp::from_second(second).unwrap_or(t).to_string();
    }
    let mut out = [0u8; 20];
    let fields = [
        (0, year, 4),
        (5, i64::from(month), 2),
        (8, i64::from(day), 2),
        (11, of_day / 3600, 2),
        (14, of_day / 60 % 60, 2),
        (17, of_day % 60, 2),
    ];
    for (at, mut value, width) in fields {
        for slot in out[at..at + width].iter_mut().rev() {
            *slot = b'0' + u8::try_from(value % 10).unwrap_or(0);
            value /= 10;
        }
    }
    for (at, sign) in [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'Z'),
    ] {
        out[at] = sign;
    }
    // Digits and separators only: ASCII.
    std::str::from_utf8(&out).map_or_else(|_| t.to_string(), str::to_owned)
}

/// A time as [`rfc3339`] writes it, or any other RFC 3339 text jiff reads.
pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    quick(text.as_bytes()).or_else(|| text.parse().ok())
}

/// `YYYY-MM-DDTHH:MM:SSZ` with every field in range; `None` for anything else.
fn quick(b: &[u8]) -> Option<Timestamp> {
    let [
        y0,
        y1,
        y2,
        y3,
        b'-',
        m0,
        m1,
        b'-',
        d0,
        d1,
        b'T',
        h0,
        h1,
        b':',
        n0,
        n1,
        b':',
        s0,
        s1,
        b'Z',
    ] = *b
    else {
        return None;
    };
    let year = pair(y0, y1)? * 100 + pair(y2, y3)?;
    let (month, day) = (pair(m0, m1)?, pair(d0, d1)?);
    let (hour, minute, second) = (pair(h0, h1)?, pair(n0, n1)?, pair(s0, s1)?);
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let seconds = days * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Timestamp::from_second(seconds).ok()
}

/// Two ASCII digits as their number.
fn pair(tens: u8, ones: u8) -> Option<u32> {
    (tens.is_ascii_digit() && ones.is_ascii_digit())
        .then(|| u32::from(tens - b'0') * 10 + u32::from(ones - b'0'))
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a date in the proleptic Gregorian calendar (the civil-days
/// algorithm: years counted from March, in eras of 400 years).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a count of days since 1970-01-01 ([`days_from_civil`] backwards).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jiff_text(second: i64) -> String {
        Timestamp::from_second(second).unwrap().to_string()
    }

    // R40: the times written are the text jiff writes, to the second, over every era a
    // status can hold (and beyond, where jiff writes them).
    #[test]
    fn written_as_jiff_writes_them() {
        let mut second = Timestamp::MIN.as_second() + 1;
        let step = 86_400 * 97 + 3_607;
        while second < Timestamp::MAX.as_second() - step {
            assert_eq!(
                rfc3339(Timestamp::from_second(second).unwrap()),
                jiff_text(second)
            );
            second += step;
        }
        for second in [
            0,
            -1,
            951_782_400,
            1_709_164_800,
            4_107_542_399,
            253_402_207_200,
        ] {
            assert_eq!(
                rfc3339(Timestamp::from_second(second).unwrap()),
                jiff_text(second)
            );
        }
        let fraction = Timestamp::new(1_800_000_000, 750_000_000).unwrap();
        assert_eq!(rfc3339(fraction), "2027-01-15T08:00:00Z");
    }

    // R40: what is written reads back as the same second; every day of 0000..=9999 whose
    // text jiff reads, read the same.
    #[test]
    fn read_as_jiff_reads_them() {
        let mut second = -62_167_219_200; // 0000-01-01
        while second < Timestamp::MAX.as_second() {
            let t = Timestamp::from_second(second).unwrap();
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
            assert_eq!(quick(jiff_text(second).as_bytes()), Some(t));
            second += 86_400 * 13 + 3_599;
        }
    }

    // What the quick path refuses is jiff's to answer: the same answer either way.
    #[test]
    fn other_texts_are_jiffs() {
        for text in [
            "2026-02-29T00:00:00Z",
            "2024-02-29T23:59:59Z",
            "2100-02-29T00:00:00Z",
            "2000-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-12-00T00:00:00Z",
            "2026-12-07T24:00:00Z",
            "2026-12-07T23:60:00Z",
            "2026-12-07T23:59:60Z",
            "2026-12-07T03:30:08.5Z",
            "2026-12-07T03:30:08+01:00",
            "2026-12-07t03:30:08z",
            "2026-12-07 03:30:08Z",
            "+2026-12-07T03:30:08Z",
            "2026-1a-07T03:30:08Z",
            "",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(text), text.parse().ok(), "{text}");
            if let Some(quick) = quick(text.as_bytes()) {
                assert_eq!(Some(quick), text.parse().ok(), "{text}");
            }
        }
    }
}
