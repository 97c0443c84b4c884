//! Whole-number options with a range. [`count`] is the value parser of
//! the demo's sizes (a value out of range is a usage error, exit 2);
//! [`within`] checks the operator commands' `--limit` and `--batch`, which
//! clap parses as signed integers (`allow_negative_numbers`), so `--limit
//! -1` is answered with the option's range, as invalid input (exit 3, like
//! every range check of a command), instead of clap's "unexpected
//! argument".

use crate::exit::InvalidInput;

/// `value` of option `option` as a `u32` in `min..=max`, or invalid input
/// naming the option and its range.
pub(crate) fn within(option: &str, value: i64, min: u32, max: u32) -> Result<u32, InvalidInput> {
    u32::try_from(value)
        .ok()
        .filter(|n| (min..=max).contains(n))
        .ok_or_else(|| InvalidInput(format!("{option} {value} is not in {min}..={max}")))
}

/// A count in `MIN..=MAX`, or an error naming that range for any other
/// text: a negative number, one too large for any integer type, a word
/// (clap's own ranged parser names the range only for numbers that fit an
/// `i64`).
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
    use super::{count, within};

    #[test]
    fn within_names_the_option_and_its_range() {
        assert_eq!(within("--limit", 50, 1, 10_000).map_err(|e| e.0), Ok(50));
        assert_eq!(
            within("--limit", 10_000, 1, 10_000).map_err(|e| e.0),
            Ok(10_000)
        );
        for (value, text) in [
            (-1, "--limit -1 is not in 1..=10000"),
            (0, "--limit 0 is not in 1..=10000"),
            (10_001, "--limit 10001 is not in 1..=10000"),
            (i64::MAX, "--limit 9223372036854775807 is not in 1..=10000"),
        ] {
            assert_eq!(
                within("--limit", value, 1, 10_000).map_err(|e| e.0),
                Err(text.to_owned())
            );
        }
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
