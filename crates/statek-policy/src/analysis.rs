//! Measuring and comparing cycles: the figures of `cargo xtask
//! bounds-report` and the checks behind docs/guarantees.md, as library code
//! so that the report only formats what this module computes.
//!
//! - [`BoundRatio`] and [`SetMeasure`]: a policy's largest ratio of bound to
//!   `ceil(L / w)`, its largest additive excess, whether every tenant is
//!   within one slot of its ideal;
//! - [`optimum`]: the best largest ratio any cycle can have, by exhaustive
//!   search limited in steps;
//! - [`SwrrProperties`]: the proven and the refuted properties of
//!   `swrr-v1`, checked on one cycle;
//! - [`Tally`]: worst and mean of those over a group of sets;
//! - [`partitions`] and [`compositions`]: every weight set, and every id
//!   order of every weight set, of a cycle length.

mod enumerate;
mod set_measure;
mod tally;

pub use crate::optimum::{optimum, Optimum};
pub use crate::ratio::BoundRatio;
pub use crate::swrr_properties::{Lag, SwrrProperties};
pub use enumerate::{compositions, partitions};
pub use set_measure::SetMeasure;
pub use tally::{Tally, WorstSet};
