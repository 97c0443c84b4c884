//! The PostgreSQL major versions xtask provisions.

use std::fmt;

/// A supported PostgreSQL major version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum PgMajor {
    /// PostgreSQL 16.
    #[value(name = "16")]
    V16,
    /// PostgreSQL 17.
    #[value(name = "17")]
    V17,
}

impl PgMajor {
    /// Every supported version, newest first.
    pub const ALL: [Self; 2] = [Self::V17, Self::V16];

    /// The version number, e.g. 17.
    pub fn number(self) -> u16 {
        match self {
            Self::V16 => 16,
            Self::V17 => 17,
        }
    }
}

impl fmt::Display for PgMajor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}
