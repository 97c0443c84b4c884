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
//!
//! A policy in cost mode ([`FairnessUnit::Cost`]) has one more key after
//! the tenants, its four parameters in this order (a slot-mode policy has
//! none, so its bytes are those of every policy before cost mode):
//!
//! ```text
//! {"algorithm":"swrr-v1","tenants":[...],"cost":{"quantum":1,"max_cost":40,"default_cost":40,"balance_cap":80}}
//! ```

use alloc::string::ToString;
use alloc::vec::Vec;

use crate::algorithm::PolicyAlgorithm;
use crate::error::PolicyError;
use crate::fairness_unit::{CostFairness, FairnessUnit};
use crate::id::TenantId;
use crate::weight::TenantFairnessWeight;

const OPEN_ALGORITHM: &str = "{\"algorithm\":\"";
const OPEN_TENANTS: &str = "\",\"tenants\":[";
const OPEN_TENANT: &str = "{\"id\":\"";
const OPEN_WEIGHT: &str = "\",\"weight\":";
const CLOSE_TENANT: &str = "}";
const CLOSE_TENANTS: &str = "]}";
const CLOSE_TENANTS_OPEN_COST: &str = "],\"cost\":{\"quantum\":";
const OPEN_MAX_COST: &str = ",\"max_cost\":";
const OPEN_DEFAULT_COST: &str = ",\"default_cost\":";
const OPEN_BALANCE_CAP: &str = ",\"balance_cap\":";
const CLOSE_COST: &str = "}}";

/// Algorithm names longer than this are reported as non-canonical rather
/// than echoed back in [`PolicyError::UnknownAlgorithm`].
const MAX_ALGORITHM_NAME_LENGTH: usize = 64;

/// Encodes `tenants` (sorted by id, unique), `algorithm` and the fairness
/// `unit` canonically.
pub(crate) fn encode(
    algorithm: PolicyAlgorithm,
    tenants: &[TenantFairnessWeight],
    unit: FairnessUnit,
) -> Vec<u8> {
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
        push_decimal(&mut out, u64::from(tenant.weight()));
        out.extend_from_slice(CLOSE_TENANT.as_bytes());
    }
    match unit {
        FairnessUnit::Slots => out.extend_from_slice(CLOSE_TENANTS.as_bytes()),
        FairnessUnit::Cost(cost) => {
            out.extend_from_slice(CLOSE_TENANTS_OPEN_COST.as_bytes());
            push_decimal(&mut out, cost.quantum());
            out.extend_from_slice(OPEN_MAX_COST.as_bytes());
            push_decimal(&mut out, cost.max_cost());
            out.extend_from_slice(OPEN_DEFAULT_COST.as_bytes());
            push_decimal(&mut out, cost.default_cost());
            out.extend_from_slice(OPEN_BALANCE_CAP.as_bytes());
            push_decimal(&mut out, cost.balance_cap());
            out.extend_from_slice(CLOSE_COST.as_bytes());
        }
    }
    out
}

/// Appends `value` in decimal without leading zeros.
fn push_decimal(out: &mut Vec<u8>, value: u64) {
    let mut digits = [0_u8; 20];
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
    pub(crate) unit: FairnessUnit,
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
    // `]` is next: `]}` ends a slot-mode policy, `],"cost":{` opens the
    // cost parameters.
    let unit = if reader.bytes.get(reader.position + 1) == Some(&b',') {
        reader.literal(CLOSE_TENANTS_OPEN_COST)?;
        let quantum = reader.cost_parameter()?;
        reader.literal(OPEN_MAX_COST)?;
        let max_cost = reader.cost_parameter()?;
        reader.literal(OPEN_DEFAULT_COST)?;
        let default_cost = reader.cost_parameter()?;
        reader.literal(OPEN_BALANCE_CAP)?;
        let balance_cap = reader.cost_parameter()?;
        reader.literal(CLOSE_COST)?;
        FairnessUnit::Cost(CostFairness::new(
            quantum,
            max_cost,
            default_cost,
            balance_cap,
        )?)
    } else {
        reader.literal(CLOSE_TENANTS)?;
        FairnessUnit::Slots
    };
    if reader.position != bytes.len() {
        return Err(PolicyError::NonCanonicalPolicyBytes {
            offset: reader.position,
            expected: "end of input",
        });
    }
    Ok(Decoded {
        algorithm,
        tenants,
        unit,
    })
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

    /// A cost parameter: a decimal integer that fits in `u64`; its range is
    /// checked by [`CostFairness::new`].
    fn cost_parameter(&mut self) -> Result<u64, PolicyError> {
        self.decimal(Decimal {
            leading_zero: "a cost parameter without leading zeros",
            missing: "a decimal cost parameter",
            too_large: "a cost parameter in 0..=2^40",
        })
    }

    /// A weight: a decimal integer that fits in `u32`; its range is checked
    /// by the caller.
    fn weight(&mut self) -> Result<u32, PolicyError> {
        let start = self.position;
        const TOO_LARGE: &str = "a weight in 1..=1024";
        let value = self.decimal(Decimal {
            leading_zero: "a weight without leading zeros",
            missing: "a decimal weight",
            too_large: TOO_LARGE,
        })?;
        u32::try_from(value).map_err(|_| PolicyError::NonCanonicalPolicyBytes {
            offset: start,
            expected: TOO_LARGE,
        })
    }

    /// A decimal integer without sign, fraction, exponent or leading zeros
    /// that fits in `u64`; `what` names what a deviation expected.
    fn decimal(&mut self, what: Decimal) -> Result<u64, PolicyError> {
        let start = self.position;
        let mut value: u64 = match self.peek() {
            Some(b'0') => {
                self.position += 1;
                if matches!(self.peek(), Some(b'0'..=b'9')) {
                    return Err(PolicyError::NonCanonicalPolicyBytes {
                        offset: start,
                        expected: what.leading_zero,
                    });
                }
                return Ok(0);
            }
            Some(digit @ b'1'..=b'9') => u64::from(digit - b'0'),
            _ => return Err(self.non_canonical(what.missing)),
        };
        self.position += 1;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(digit - b'0')))
                .ok_or(PolicyError::NonCanonicalPolicyBytes {
                    offset: start,
                    expected: what.too_large,
                })?;
            self.position += 1;
        }
        Ok(value)
    }
}

/// What a decimal's deviations expected, in [`PolicyError::NonCanonicalPolicyBytes`].
struct Decimal {
    leading_zero: &'static str,
    missing: &'static str,
    too_large: &'static str,
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
            (u64::from(u32::MAX), "4294967295"),
            (1 << 40, "1099511627776"),
            (u64::MAX, "18446744073709551615"),
        ] {
            let mut out = vec![];
            push_decimal(&mut out, value);
            assert_eq!(out, text.as_bytes());
        }
    }

    fn cost(q: u64, c: u64, d: u64, b: u64) -> FairnessUnit {
        FairnessUnit::Cost(CostFairness::new(q, c, d, b).unwrap())
    }

    #[test]
    fn cost_parameters_round_trip_and_nothing_else_decodes() {
        let tenants = vec![TenantFairnessWeight::new(TenantId::try_from("a").unwrap(), 2).unwrap()];
        let unit = cost(3, 1 << 40, 0, 17);
        let bytes = encode(PolicyAlgorithm::SwrrV1, &tenants, unit);
        assert_eq!(
            bytes,
            br#"{"algorithm":"swrr-v1","tenants":[{"id":"a","weight":2}],"cost":{"quantum":3,"max_cost":1099511627776,"default_cost":0,"balance_cap":17}}"#
        );
        let decoded = decode(&bytes).unwrap();
        assert_eq!((decoded.unit, decoded.tenants), (unit, tenants.clone()));
        let slots = encode(PolicyAlgorithm::SwrrV1, &tenants, FairnessUnit::Slots);
        assert_eq!(
            slots,
            br#"{"algorithm":"swrr-v1","tenants":[{"id":"a","weight":2}]}"#
        );
        assert_eq!(decode(&slots).unwrap().unit, FairnessUnit::Slots);
        let offset = |text: &str| match decode(text.as_bytes()) {
            Err(PolicyError::NonCanonicalPolicyBytes { offset, .. }) => Some(offset),
            _ => None,
        };
        let head = r#"{"algorithm":"swrr-v1","tenants":[{"id":"a","weight":2}]"#;
        // Another key order, a leading zero, a space, an unknown key,
        // trailing bytes: each refused where it deviates.
        let order = format!(
            r#"{head},"cost":{{"max_cost":1,"quantum":1,"default_cost":0,"balance_cap":0}}}}"#
        );
        assert_eq!(offset(&order), Some(head.len() + 10));
        let zero = format!(
            r#"{head},"cost":{{"quantum":01,"max_cost":1,"default_cost":0,"balance_cap":0}}}}"#
        );
        assert_eq!(offset(&zero), Some(head.len() + 19));
        let space = format!(
            r#"{head}, "cost":{{"quantum":1,"max_cost":1,"default_cost":0,"balance_cap":0}}}}"#
        );
        assert_eq!(offset(&space), Some(head.len() + 1));
        let extra = format!(
            r#"{head},"cost":{{"quantum":1,"max_cost":1,"default_cost":0,"balance_cap":0,"x":1}}}}"#
        );
        assert_eq!(offset(&extra), Some(head.len() + 66));
        let trailing = format!(
            r#"{head},"cost":{{"quantum":1,"max_cost":1,"default_cost":0,"balance_cap":0}}}} "#
        );
        assert_eq!(offset(&trailing), Some(head.len() + 68));
        let huge = format!(
            r#"{head},"cost":{{"quantum":99999999999999999999,"max_cost":1,"default_cost":0,"balance_cap":0}}}}"#
        );
        assert_eq!(offset(&huge), Some(head.len() + 19));
        // Well-formed but out of range: the parameter's own error.
        let range = format!(
            r#"{head},"cost":{{"quantum":0,"max_cost":1,"default_cost":0,"balance_cap":0}}}}"#
        );
        assert!(matches!(
            decode(range.as_bytes()),
            Err(PolicyError::CostParameterOutOfRange {
                parameter: "quantum",
                value: 0,
                ..
            })
        ));
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
