//! [`EchoedValue`]: how a value a user gave is quoted inside an error
//! message, so that a huge value never becomes a huge error line.

use core::fmt;

/// The most characters of a value an error message repeats.
pub const MAX_ECHOED_CHARS: usize = 64;

/// Displays a user-given value for an error message: quoted like `{:?}`,
/// and, when longer than [`MAX_ECHOED_CHARS`] characters, only its first
/// 64 characters followed by `…(N bytes)` with the value's full length.
///
/// ```
/// use statek_policy::EchoedValue;
/// assert_eq!(EchoedValue("swrr-v2").to_string(), "\"swrr-v2\"");
/// let long = "x".repeat(100_000);
/// assert_eq!(
///     EchoedValue(&long).to_string(),
///     format!("\"{}\"…(100000 bytes)", "x".repeat(64))
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct EchoedValue<'a>(pub &'a str);

impl fmt::Display for EchoedValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(MAX_ECHOED_CHARS) {
            None => write!(f, "{:?}", self.0),
            Some((end, _)) => write!(f, "{:?}…({} bytes)", &self.0[..end], self.0.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    fn check(value: &str, shown: &str) {
        assert_eq!(EchoedValue(value).to_string(), shown);
    }

    #[test]
    fn short_values_whole_long_ones_cut() {
        check("", "\"\"");
        check("a\"b", "\"a\\\"b\"");
        check(&"y".repeat(64), &alloc::format!("\"{}\"", "y".repeat(64)));
        check(
            &"y".repeat(65),
            &alloc::format!("\"{}\"…(65 bytes)", "y".repeat(64)),
        );
        // Cut on a character boundary; the length counts bytes.
        check(
            &"é".repeat(70),
            &alloc::format!("\"{}\"…(140 bytes)", "é".repeat(64)),
        );
    }
}
