//! The integration tests of statek-policy in one test binary: one link of the
//! whole stack instead of one per file (each file is a module here;
//! `cargo test -p statek-policy --test it MODULE::` runs one).
//! Tests that install a global metrics recorder keep binaries of their
//! Every file of the folder is a module of this binary.

mod analysis;
mod canonical;
mod cost_bound;
mod discrepancy;
mod golden_cycles;
mod min_gap;
mod min_gap_v2_oracle;
mod policy;
mod policy_file;
mod properties;
mod seam;
