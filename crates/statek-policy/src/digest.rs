//! [`PolicyDigest`]: the SHA-256 fingerprint of a policy's canonical bytes.

use core::fmt;
use core::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::error::PolicyError;

/// The domain-separation prefix hashed before the canonical bytes:
/// `statek.policy.v1` followed by one NUL byte.
pub const POLICY_DIGEST_DOMAIN: &[u8] = b"statek.policy.v1\0";

/// The SHA-256 digest of [`POLICY_DIGEST_DOMAIN`] followed by a policy's
/// canonical bytes.
///
/// Two policies have the same digest exactly when they have the same
/// algorithm, tenants and weights; the shard id is not part of it. Displayed
/// and parsed as 64 lowercase hex digits.
///
/// ```
/// use statek_policy::PolicyDigest;
/// let text = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
/// let digest: PolicyDigest = text.parse()?;
/// assert_eq!(digest.as_bytes()[1], 0x11);
/// assert_eq!(digest.to_string(), text);
/// assert_eq!(PolicyDigest::try_from(&digest.as_bytes()[..])?, digest);
/// # Ok::<(), statek_policy::PolicyError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyDigest([u8; 32]);

impl PolicyDigest {
    /// The length of a digest in bytes.
    pub const LENGTH: usize = 32;

    /// Hashes canonical bytes (the caller guarantees they are canonical).
    pub(crate) fn of_canonical_bytes(canonical: &[u8]) -> Self {
        let hash = Sha256::new()
            .chain_update(POLICY_DIGEST_DOMAIN)
            .chain_update(canonical)
            .finalize();
        Self(hash.into())
    }

    /// Wraps 32 raw digest bytes, for example read back from a database.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 raw digest bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl TryFrom<&[u8]> for PolicyDigest {
    type Error = PolicyError;

    /// Copies a 32-byte slice.
    ///
    /// # Errors
    ///
    /// [`PolicyError::InvalidDigestLength`] if the slice is not 32 bytes long.
    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        <[u8; 32]>::try_from(bytes)
            .map(Self)
            .map_err(|_| PolicyError::InvalidDigestLength {
                actual: bytes.len(),
            })
    }
}

impl AsRef<[u8]> for PolicyDigest {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for PolicyDigest {
    /// 64 lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::hex::write_hex(f, &self.0)
    }
}

impl fmt::Debug for PolicyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PolicyDigest({self})")
    }
}

impl FromStr for PolicyDigest {
    type Err = PolicyError;

    /// Parses exactly 64 lowercase hex digits.
    ///
    /// # Errors
    ///
    /// [`PolicyError::InvalidDigestHexLength`] if `s` is not 64 bytes long,
    /// [`PolicyError::InvalidDigestHex`] at the first byte that is not one of
    /// `0-9a-f`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::hex::parse_hex(s).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    const ZERO_HEX: &str = "0000000000000000000000000000000000000000000000000000000000000000";
    /// `printf 'statek.policy.v1\0' | sha256sum`
    const EMPTY_DIGEST: &str = "6e47606b47773423ca82c060e0b20d6a1577ab2cfe5790a86f99f60c8537667d";
    const MIXED_HEX: &str = "00ff10a9fedcba98765432100123456789abcdef0f1e2d3c4b5a69788796a5b4";

    fn check(text: &str, expected: Result<&str, PolicyError>) {
        let parsed = text.parse::<PolicyDigest>();
        match expected {
            Ok(display) => assert_eq!(parsed.map(|d| d.to_string()), Ok(display.to_string())),
            Err(error) => assert_eq!(parsed, Err(error), "{text:?}"),
        }
    }

    #[test]
    fn hex() {
        check(ZERO_HEX, Ok(ZERO_HEX));
        check(MIXED_HEX, Ok(MIXED_HEX));
        check("", Err(PolicyError::InvalidDigestHexLength { actual: 0 }));
        check(
            &MIXED_HEX[..63],
            Err(PolicyError::InvalidDigestHexLength { actual: 63 }),
        );
        check(
            &[MIXED_HEX, "0"].concat(),
            Err(PolicyError::InvalidDigestHexLength { actual: 65 }),
        );
        check(
            &MIXED_HEX.to_uppercase(),
            Err(PolicyError::InvalidDigestHex {
                index: 2,
                byte: b'F',
            }),
        );
        check(
            &["g", &ZERO_HEX[1..]].concat(),
            Err(PolicyError::InvalidDigestHex {
                index: 0,
                byte: b'g',
            }),
        );
        check(
            &[&ZERO_HEX[..63], "x"].concat(),
            Err(PolicyError::InvalidDigestHex {
                index: 63,
                byte: b'x',
            }),
        );
        check(
            &[&ZERO_HEX[..10], " ", &ZERO_HEX[11..]].concat(),
            Err(PolicyError::InvalidDigestHex {
                index: 10,
                byte: b' ',
            }),
        );
    }

    #[test]
    fn bytes() {
        let digest: PolicyDigest = MIXED_HEX.parse().unwrap();
        assert_eq!(digest.as_bytes()[..4], [0x00, 0xff, 0x10, 0xa9]);
        assert_eq!(PolicyDigest::from_bytes(*digest.as_bytes()), digest);
        assert_eq!(PolicyDigest::try_from(digest.as_ref()), Ok(digest));
        assert_eq!(
            PolicyDigest::try_from(&digest.as_bytes()[..31]),
            Err(PolicyError::InvalidDigestLength { actual: 31 })
        );
        assert_eq!(
            PolicyDigest::try_from(&[0_u8; 33][..]),
            Err(PolicyError::InvalidDigestLength { actual: 33 })
        );
        assert_eq!(
            alloc::format!("{digest:?}"),
            alloc::format!("PolicyDigest({MIXED_HEX})")
        );
    }

    #[test]
    fn domain_then_bytes() {
        // The digest of empty bytes, computed outside this crate.
        assert_eq!(
            PolicyDigest::of_canonical_bytes(b"").to_string(),
            EMPTY_DIGEST
        );
    }
}
