//! Canonical bytes: the one byte string that stands for a policy's
//! algorithm, tenants and weights, and its strict decoder.
//!
//! The form is UTF-8 JSON with a fixed key order, no whitespace and tenants
//! sorted by id:
//!
//! ```text
//! {"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}
//! ```
//!
//! Ids and algorithm names never need JSON escapes (their grammar has no `"`,
//! `\` or control bytes), and weights are plain decimal integers without
//! leading zeros. The shard id is not part of the bytes.

use alloc::string::ToString;
use alloc::vec::Vec;

use crate::algorithm::PolicyAlgorithm;
use crate::error::PolicyError;
use crate::id::TenantId;
use crate::weight::TenantFairnessWeight;

const OPEN_ALGORITHM: &str = "{\"algorithm\":\"";
const OPEN_TENANTS: &str = "\",\"tenants\":[";
const OPEN_TENANT: &str = "{\"id\":\"";
const OPEN_WEIGHT: &str = "\",\"weight\":";
const CLOSE_TENANT: &str = "}";
const CLOSE_TENANTS: &str = "]}";

/// Algorithm names longer than this are reported as non-canonical rather
/// than echoed back in [`PolicyError::UnknownAlgorithm`].
const MAX_ALGORITHM_NAME_LENGTH: usize = 64;

/// Encodes `tenants` (sorted by id, unique) and `algorithm` canonically.
pub(crate) fn encode(algorithm: PolicyAlgorithm, tenants: &[TenantFairnessWeight]) -> Vec<u8> {
    // Framing plus, per tenant, a comma, its id and at most four digits.
    let capacity = OPEN_ALGORITHM.len()
        + algorithm.name().len()
        + OPEN_TENANTS.len()
        + CLOSE_TENANTS.len()
        + tenants
            .iter()
            .map(|t| 1 + OPEN_TENANT.len() + t.tenant().as_str().len() + OPEN_WEIGHT.len() + 4 + 1)
            .sum::<usize>();
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(OPEN_ALGORITHM.as_bytes());
    out.extend_from_slice(algorithm.name().as_bytes());
    out.extend_from_slice(OPEN_TENANTS.as_bytes());
    for (index, tenant) in tenants.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(OPEN_TENANT.as_bytes());
        out.extend_from_slice(tenant.tenant().as_str().as_bytes());
        out.extend_from_slice(OPEN_WEIGHT.as_bytes());
        push_decimal(&mut out, tenant.weight());
        out.extend_from_slice(CLOSE_TENANT.as_bytes());
    }
    out.extend_from_slice(CLOSE_TENANTS.as_bytes());
    out
}

/// Appends `value` in decimal without leading zeros.
fn push_decimal(out: &mut Vec<u8>, value: u32) {
    let mut digits = [0_u8; 10];
    let mut start = digits.len();
    let mut rest = value;
    loop {
        start -= 1;
        if let Some(digit) = digits.get_mut(start) {
            // `rest % 10` is below 10, so the cast is exact.
            *digit = b'0' + (rest % 10) as u8;
        }
        rest /= 10;
        if rest == 0 || start == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

/// What a strict decode yields: the parts a policy is built from.
pub(crate) struct Decoded {
    pub(crate) algorithm: PolicyAlgorithm,
    pub(crate) tenants: Vec<TenantFairnessWeight>,
}

/// Decodes canonical bytes, rejecting any deviation from the canonical form.
///
/// Limits (tenant count, cycle length) are left to the policy builder; the
/// caller re-encodes and compares as a final check.
pub(crate) fn decode(bytes: &[u8]) -> Result<Decoded, PolicyError> {
    let mut reader = Reader { bytes, position: 0 };
    reader.literal(OPEN_ALGORITHM)?;
    let algorithm = reader.algorithm()?;
    reader.literal(OPEN_TENANTS)?;
    let mut tenants: Vec<TenantFairnessWeight> = Vec::new();
    if reader.peek() == Some(b']') {
        return Err(PolicyError::NoTenants);
    }
    loop {
        reader.literal(OPEN_TENANT)?;
        let id_offset = reader.position;
        let tenant = TenantId::from_bytes(reader.string_body("a tenant id without escapes")?)?;
        if let Some(previous) = tenants.last() {
            if previous.tenant() == &tenant {
                return Err(PolicyError::DuplicateTenant { tenant });
            }
            if previous.tenant() > &tenant {
                return Err(PolicyError::NonCanonicalPolicyBytes {
                    offset: id_offset,
                    expected: "tenants sorted by id",
                });
            }
        }
        reader.literal(OPEN_WEIGHT)?;
        let weight = reader.weight()?;
        tenants.push(TenantFairnessWeight::new(tenant, weight)?);
        reader.literal(CLOSE_TENANT)?;
        match reader.peek() {
            Some(b',') => reader.position += 1,
            Some(b']') => break,
            _ => {
                return Err(PolicyError::NonCanonicalPolicyBytes {
                    offset: reader.position,
                    expected: "`,` or `]`",
                })
            }
        }
    }
    reader.literal(CLOSE_TENANTS)?;
    if reader.position != bytes.len() {
        return Err(PolicyError::NonCanonicalPolicyBytes {
            offset: reader.position,
            expected: "end of input",
        });
    }
    Ok(Decoded { algorithm, tenants })
}

/// The first offset at which `actual` differs from `canonical`, if any.
pub(crate) fn first_difference(canonical: &[u8], actual: &[u8]) -> Option<usize> {
    canonical
        .iter()
        .zip(actual)
        .position(|(a, b)| a != b)
        .or_else(|| (canonical.len() != actual.len()).then(|| canonical.len().min(actual.len())))
}

/// A cursor over the input; `position` is the offset of the next byte.
struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.position).copied()
    }

    fn non_canonical(&self, expected: &'static str) -> PolicyError {
        PolicyError::NonCanonicalPolicyBytes {
            offset: self.position,
            expected,
        }
    }

    /// Consumes exactly `text`, or reports the offset of the first byte that
    /// differs.
    fn literal(&mut self, text: &'static str) -> Result<(), PolicyError> {
        for &expected in text.as_bytes() {
            if self.peek() != Some(expected) {
                return Err(self.non_canonical(text));
            }
            self.position += 1;
        }
        Ok(())
    }

    /// Consumes the rest of a JSON string after its opening quote, up to but
    /// excluding the closing quote, and returns those bytes. Escapes and
    /// control bytes are never canonical; other bytes are left to the
    /// caller's grammar.
    fn string_body(&mut self, expected: &'static str) -> Result<&'a [u8], PolicyError> {
        let start = self.position;
        loop {
            match self.peek() {
                Some(b'"') => break,
                Some(byte) if byte == b'\\' || byte < 0x20 => {
                    return Err(self.non_canonical(expected))
                }
                Some(_) => self.position += 1,
                None => return Err(self.non_canonical("`\"`")),
            }
        }
        Ok(self.bytes.get(start..self.position).unwrap_or_default())
    }

    fn algorithm(&mut self) -> Result<PolicyAlgorithm, PolicyError> {
        const EXPECTED: &str = "a known algorithm name";
        let start = self.position;
        let name = self.string_body(EXPECTED)?;
        if let Some(algorithm) = PolicyAlgorithm::ALL
            .iter()
            .copied()
            .find(|algorithm| algorithm.name().as_bytes() == name)
        {
            return Ok(algorithm);
        }
        match core::str::from_utf8(name) {
            Ok(name) if name.len() <= MAX_ALGORITHM_NAME_LENGTH => {
                Err(PolicyError::UnknownAlgorithm {
                    name: name.to_string(),
                })
            }
            _ => Err(PolicyError::NonCanonicalPolicyBytes {
                offset: start,
                expected: EXPECTED,
            }),
        }
    }

    /// A decimal integer without sign, fraction, exponent or leading zeros
    /// that fits in `u32`; its range is checked by the caller.
    fn weight(&mut self) -> Result<u32, PolicyError> {
        let start = self.position;
        let mut value: u32 = match self.peek() {
            Some(b'0') => {
                self.position += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(PolicyError::NonCanonicalPolicyBytes {
                        offset: start,
                        expected: "a weight without leading zeros",
                    });
                }
                return Ok(0);
            }
            Some(digit @ b'1'..=b'9') => u32::from(digit - b'0'),
            _ => return Err(self.non_canonical("a decimal weight")),
        };
        self.position += 1;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u32::from(digit - b'0')))
                .ok_or(PolicyError::NonCanonicalPolicyBytes {
                    offset: start,
                    expected: "a weight in 1..=1024",
                })?;
            self.position += 1;
        }
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;

    #[test]
    fn decimal() {
        for (value, text) in [
            (0, "0"),
            (1, "1"),
            (9, "9"),
            (10, "10"),
            (1024, "1024"),
            (u32::MAX, "4294967295"),
        ] {
            let mut out = vec![];
            push_decimal(&mut out, value);
            assert_eq!(out, text.as_bytes());
        }
    }

    #[test]
    fn differences() {
        assert_eq!(first_difference(b"abc", b"abc"), None);
        assert_eq!(first_difference(b"abc", b"abd"), Some(2));
        assert_eq!(first_difference(b"abc", b"ab"), Some(2));
        assert_eq!(first_difference(b"ab", b"abc"), Some(2));
        assert_eq!(first_difference(b"", b"x"), Some(0));
    }
}
