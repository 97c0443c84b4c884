//! [`PolicyAlgorithm`]: how a policy's weights become a cycle.

use alloc::string::ToString;
use core::fmt;
use core::str::FromStr;

use crate::error::PolicyError;

/// The algorithm that compiles a policy's weights into its cycle.
///
/// The name is part of the canonical bytes, so a policy's digest changes if
/// its algorithm does. New algorithms get new names; an existing algorithm's
/// output never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[non_exhaustive]
pub enum PolicyAlgorithm {
    /// `swrr-v1`: smooth weighted round robin.
    ///
    /// Every tenant has a score starting at 0. For each of the `L` steps
    /// (`L` = sum of weights), every tenant's weight is added to its score,
    /// the tenant with the highest score is picked (on a tie, the tenant whose
    /// id sorts first), and `L` is subtracted from the picked tenant's score.
    #[default]
    SwrrV1,
}

impl PolicyAlgorithm {
    /// Every algorithm this crate knows, oldest first.
    pub const ALL: &'static [PolicyAlgorithm] = &[PolicyAlgorithm::SwrrV1];

    /// The algorithm's stable name, as written in canonical bytes and policy
    /// files (`"swrr-v1"`).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            PolicyAlgorithm::SwrrV1 => "swrr-v1",
        }
    }
}

impl fmt::Display for PolicyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PolicyAlgorithm {
    type Err = PolicyError;

    /// Parses an algorithm by its exact, case-sensitive name.
    ///
    /// # Errors
    ///
    /// [`PolicyError::UnknownAlgorithm`] for any other text.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyAlgorithm::ALL
            .iter()
            .copied()
            .find(|algorithm| algorithm.name() == s)
            .ok_or_else(|| PolicyError::UnknownAlgorithm {
                name: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    fn check(input: &str, expected: Option<PolicyAlgorithm>) {
        let parsed = input.parse::<PolicyAlgorithm>();
        match expected {
            Some(algorithm) => {
                assert_eq!(parsed, Ok(algorithm));
                assert_eq!(algorithm.to_string(), input);
            }
            None => assert_eq!(
                parsed,
                Err(PolicyError::UnknownAlgorithm {
                    name: input.to_string()
                })
            ),
        }
    }

    #[test]
    fn names() {
        check("swrr-v1", Some(PolicyAlgorithm::SwrrV1));
        check("SWRR-V1", None);
        check("swrr-v1 ", None);
        check("swrr", None);
        check("swrr-v2", None);
        check("", None);
        assert_eq!(PolicyAlgorithm::default(), PolicyAlgorithm::SwrrV1);
        assert_eq!(PolicyAlgorithm::SwrrV1.name(), "swrr-v1");
    }
}
