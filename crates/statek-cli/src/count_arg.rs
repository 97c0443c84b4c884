//! Number and duration options. [`count`] is the value parser of the
//! demo's sizes (a value out of range is a usage error, exit 2);
//! [`ranged`] parses the operator commands' `--limit` and `--batch`, whose
//! range [`Ranged::get`] checks in the command, so a value out of range
//! (`-1`, `0`, `99999999999999999999`) is invalid input naming the range
//! (exit 3, like every range check of a command) and only a value that is
//! not a whole number is a usage error (exit 2); [`duration`] parses
//! `--retain`, and says what is wrong with a negative one instead of
//! clap's "unexpected argument '-2'".

use std::time::Duration;

use crate::exit::InvalidInput;

/// A whole number given for an option with the range `min..=max`,
/// checked when the command runs ([`get`](Self::get)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ranged {
    /// The text as given (trimmed), for the error.
    text: String,
    /// The value, when it is in the range.
    value: Option<u32>,
    min: u32,
    max: u32,
}

impl Ranged {
    /// The value, or invalid input naming `option` and its range.
    pub(crate) fn get(&self, option: &str) -> Result<u32, InvalidInput> {
        self.value.ok_or_else(|| {
            InvalidInput(format!(
                "{option} {} is not in {}..={}",
                self.text, self.min, self.max
            ))
        })
    }
}

/// Parses a whole number (an optional sign, then digits, of any length)
/// for an option with the range `MIN..=MAX`; any other text is an error.
pub(crate) fn ranged<const MIN: u32, const MAX: u32>(text: &str) -> Result<Ranged, String> {
    let number = text.trim();
    let digits = number.strip_prefix(['-', '+']).unwrap_or(number);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text} is not a whole number in {MIN}..={MAX}"));
    }
    Ok(Ranged {
        text: number.to_owned(),
        value: number
            .parse::<u32>()
            .ok()
            .filter(|n| (MIN..=MAX).contains(n)),
        min: MIN,
        max: MAX,
    })
}

/// Parses a duration such as `24h`, `7d` or `90min` (humantime's format);
/// a negative one is refused with what a retention is.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.starts_with('-') {
        return Err(format!(
            "{trimmed} is negative: give how long to keep, such as 24h or 30d"
        ));
    }
    humantime::parse_duration(trimmed)
        .map_err(|e| format!("{trimmed} is not a duration such as 24h or 30d: {e}"))
}

/// Parses a time: `now`, RFC 3339 with any offset
/// (`2026-12-04T10:00:00Z`, `2026-12-04T11:00:00+01:00`; `time`'s parser),
/// a UTC time without an offset (`2026-12-04 10:00:00`; humantime's), or a
/// duration ago (`1h`). Years 2000 to 9999 only: PostgreSQL's timestamps
/// and statek's rows live there, and a time outside is a typo. `now` and
/// every duration ago count from one instant, the process's first reading
/// (so `--from 1h --to 1h` is an empty span, not a microsecond).
pub(crate) fn time_arg(text: &str) -> Result<std::time::SystemTime, String> {
    use std::time::{Duration, SystemTime};
    static NOW: std::sync::OnceLock<SystemTime> = std::sync::OnceLock::new();
    let now = *NOW.get_or_init(SystemTime::now);
    // 2000-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
    const EARLIEST: Duration = Duration::from_secs(946_684_800);
    const LATEST: Duration = Duration::from_secs(253_402_300_799);
    let trimmed = text.trim();
    let at = if trimmed == "now" {
        Some(now)
    } else if let Ok(at) =
        time::OffsetDateTime::parse(trimmed, &time::format_description::well_known::Rfc3339)
    {
        Some(SystemTime::from(at))
    } else if let Ok(at) = humantime::parse_rfc3339_weak(trimmed) {
        Some(at)
    } else {
        let ago = humantime::parse_duration(trimmed).map_err(|_| {
            format!(
                "{trimmed} is not a time: give RFC 3339 (2026-12-04T10:00:00Z), a duration ago (1h) or now"
            )
        })?;
        now.checked_sub(ago)
    };
    at.filter(|at| {
        at.duration_since(SystemTime::UNIX_EPOCH)
            .is_ok_and(|since| (EARLIEST..=LATEST).contains(&since))
    })
    .ok_or_else(|| format!("{trimmed} is not a time between the years 2000 and 9999"))
}

// Only the demo (feature `demo`) has options parsed by it.
#[cfg_attr(not(feature = "demo"), allow(dead_code))]
pub(crate) fn count<const MIN: u32, const MAX: u32>(text: &str) -> Result<u32, String> {
    let number = text.trim();
    let digits = number.strip_prefix(['-', '+']).unwrap_or(number);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text} is not a whole number in {MIN}..={MAX}"));
    }
    number
        .parse::<u32>()
        .ok()
        .filter(|n| (MIN..=MAX).contains(n))
        .ok_or_else(|| format!("{text} is not in {MIN}..={MAX}"))
}

#[cfg(test)]
mod tests {
    use super::{count, duration, ranged, time_arg};

    #[test]
    fn times_are_rfc_3339_with_any_offset_or_a_duration_ago_within_years_2000_to_9999() {
        use std::time::{Duration, SystemTime};
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(time_arg("2026-12-04T10:00:00Z"), Ok(at(1_796_378_400)));
        assert_eq!(time_arg("2026-12-04T11:00:00+01:00"), Ok(at(1_796_378_400)));
        assert_eq!(time_arg("2026-12-04 10:00:00"), Ok(at(1_796_378_400)));
        // One instant for every relative time of the process.
        assert_eq!(time_arg("1h"), time_arg(" 1h "));
        assert_eq!(time_arg("now"), time_arg("0s"));
        let hour_ago = time_arg("1h").unwrap();
        let now = SystemTime::now();
        assert!(
            hour_ago < now && now.duration_since(hour_ago).unwrap() < Duration::from_secs(3700)
        );
        for bad in [
            "1000000000y",
            "100000y",
            "1999-12-31T23:59:59Z",
            "yesterday",
            "",
        ] {
            assert!(time_arg(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_ranged_number_names_the_option_and_its_range() {
        let get = |text: &str| {
            ranged::<1, 10_000>(text)
                .expect("a whole number")
                .get("--limit")
                .map_err(|e| e.0)
        };
        assert_eq!(get("50"), Ok(50));
        assert_eq!(get("10000"), Ok(10_000));
        for (text, message) in [
            ("-1", "--limit -1 is not in 1..=10000"),
            ("0", "--limit 0 is not in 1..=10000"),
            ("10001", "--limit 10001 is not in 1..=10000"),
            ("4294967296", "--limit 4294967296 is not in 1..=10000"),
            (
                "99999999999999999999",
                "--limit 99999999999999999999 is not in 1..=10000",
            ),
            (
                "-99999999999999999999",
                "--limit -99999999999999999999 is not in 1..=10000",
            ),
        ] {
            assert_eq!(get(text), Err(message.to_owned()));
        }
        assert_eq!(
            ranged::<1, 10_000>("two"),
            Err("two is not a whole number in 1..=10000".to_owned())
        );
    }

    #[test]
    fn a_negative_duration_says_what_to_give() {
        assert_eq!(duration("24h"), Ok(std::time::Duration::from_secs(86_400)));
        assert_eq!(
            duration("-24h"),
            Err("-24h is negative: give how long to keep, such as 24h or 30d".to_owned())
        );
        assert_eq!(
            duration("soon"),
            Err("soon is not a duration such as 24h or 30d: expected number at 0".to_owned())
        );
    }

    #[test]
    fn a_count_out_of_its_range_names_the_range() {
        assert_eq!(count::<1, 32>("4"), Ok(4));
        assert_eq!(count::<0, 10>("0"), Ok(0));
        assert_eq!(count::<1, 32>("0"), Err("0 is not in 1..=32".to_owned()));
        assert_eq!(count::<1, 32>("-5"), Err("-5 is not in 1..=32".to_owned()));
        assert_eq!(
            count::<1, 32>("99999999999999999999"),
            Err("99999999999999999999 is not in 1..=32".to_owned())
        );
        assert_eq!(
            count::<1, 32>("four"),
            Err("four is not a whole number in 1..=32".to_owned())
        );
    }
}
