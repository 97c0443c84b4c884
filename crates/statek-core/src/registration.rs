//! [`Registration`]: how binding a policy to its shard ended.

use std::time::SystemTime;

/// How registering a policy for its shard ended (statek-store-pg:
/// `PgStore::register`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Registration {
    /// This call bound the policy to the shard.
    Registered {
        /// Database time of the binding.
        registered_at: SystemTime,
    },
    /// The shard was already bound to byte-identical canonical policy bytes.
    Idempotent {
        /// Database time of the original binding.
        registered_at: SystemTime,
    },
}

impl Registration {
    /// Database time the shard was bound.
    pub fn registered_at(&self) -> SystemTime {
        match self {
            Registration::Registered { registered_at }
            | Registration::Idempotent { registered_at } => *registered_at,
        }
    }
}
