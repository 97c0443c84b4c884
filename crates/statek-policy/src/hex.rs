//! Lowercase hex for the 32-byte digests ([`PolicyDigest`](crate::PolicyDigest),
//! [`CycleDigest`](crate::CycleDigest)).

use core::fmt;

use crate::error::PolicyError;

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

/// Writes 32 bytes as 64 lowercase hex digits.
pub(crate) fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8; 32]) -> fmt::Result {
    let mut text = [0_u8; 64];
    for (pair, &byte) in text.chunks_exact_mut(2).zip(bytes) {
        for (digit, nibble) in pair.iter_mut().zip([byte >> 4, byte & 0x0f]) {
            *digit = HEX_DIGITS.get(usize::from(nibble)).copied().unwrap_or(b'?');
        }
    }
    f.write_str(core::str::from_utf8(&text).map_err(|_| fmt::Error)?)
}

/// Parses exactly 64 lowercase hex digits.
///
/// # Errors
///
/// [`PolicyError::InvalidDigestHexLength`] if `s` is not 64 bytes long,
/// [`PolicyError::InvalidDigestHex`] at the first byte that is not one of
/// `0-9a-f`.
pub(crate) fn parse_hex(s: &str) -> Result<[u8; 32], PolicyError> {
    let text = s.as_bytes();
    if text.len() != 64 {
        return Err(PolicyError::InvalidDigestHexLength { actual: text.len() });
    }
    let mut bytes = [0_u8; 32];
    for ((index, pair), byte) in (0_usize..)
        .step_by(2)
        .zip(text.chunks_exact(2))
        .zip(&mut bytes)
    {
        let mut value = 0_u8;
        for (offset, &digit) in pair.iter().enumerate() {
            let nibble = hex_value(digit).ok_or(PolicyError::InvalidDigestHex {
                index: index + offset,
                byte: digit,
            })?;
            value = (value << 4) | nibble;
        }
        *byte = value;
    }
    Ok(bytes)
}
