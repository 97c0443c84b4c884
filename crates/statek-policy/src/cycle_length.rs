//! The largest cycle length, in a module of its own below the compiler
//! (`cycle.rs`), every algorithm and the policy-file reader, which all
//! check against it (migration V1's CHECK on `cycle_length` keeps the same
//! number; a tidy test in xtask compares them).

/// The largest cycle length `L` (sum of weights), in slots.
pub const MAX_CYCLE_LENGTH: u32 = 4096;
