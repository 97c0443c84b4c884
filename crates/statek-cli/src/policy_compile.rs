//! `statek policy compile`'s report: per tenant its weight, share,
//! starvation bound, window discrepancy and, for a cost-mode policy, its
//! cost bound; the fairness unit; the cycle.

use std::fmt;

use serde::Serialize;
use statek_policy::{
    CostBound, CostFairness, CycleOptimality, FairnessUnit, WeightedFairnessPolicy,
    WindowDiscrepancy,
};

use crate::out::Report;

/// One tenant of a compiled policy, as reported.
#[derive(Debug, Serialize, PartialEq)]
pub struct TenantRow {
    /// Tenant id.
    pub id: String,
    /// Weight.
    pub weight: u32,
    /// Entitled share of slots, weight / L, in percent.
    pub share_percent: f64,
    /// Starvation bound in reservations, measured on the cycle.
    pub bound: u32,
    /// ceil(L / weight), the best any schedule could promise alone.
    pub ideal: u32,
    /// Window discrepancy Δ in slots: in any run of consecutive slots the
    /// tenant is picked within Δ of weight / L of them, either way.
    pub discrepancy: f64,
    /// Δ · L, exact (an integer).
    pub discrepancy_scaled: u64,
    /// In cost mode: the tenant's cost bound B (docs/guarantees.md, "Cost
    /// mode: the bound").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_bound: Option<CostBoundRow>,
}

/// One tenant's cost bound `B = q·Δ + D·C_max + b_cap`, in cost units.
#[derive(Debug, Serialize, PartialEq)]
pub struct CostBoundRow {
    /// `q·Δ + b_cap`: the part that does not grow with `D`.
    pub fixed: f64,
    /// `C_max`: what each unit of `D` adds.
    pub per_concurrency: u64,
    /// `B` at the given `--concurrency`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_concurrency: Option<f64>,
    /// `B · L` at the given `--concurrency`, exact (an integer; `B` in
    /// `at_concurrency` is rounded to an `f64`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaled_at_concurrency: Option<u128>,
}

/// A compiled policy, as reported by `policy compile`.
#[derive(Debug, Serialize)]
pub struct Compiled {
    /// The file.
    pub file: String,
    /// Shard id.
    pub shard: String,
    /// Algorithm name.
    pub algorithm: String,
    /// What the weights share: `slots`, or `cost` with its parameters.
    pub fairness: Fairness,
    /// L, in slots.
    pub cycle_length: u32,
    /// Policy digest, hex.
    pub digest: String,
    /// What is proven about the cycle's largest bound / ideal:
    /// `ideal`, `proven-optimal` or `unproven`
    /// (`statek_policy::CycleOptimality::label`).
    pub optimality: &'static str,
    /// Why not proven, for `unproven`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimality_reason: Option<String>,
    /// Per tenant.
    pub tenants: Vec<TenantRow>,
    /// The cycle (tenant per slot), with `--show-cycle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle: Option<Vec<String>>,
    /// `--concurrency`: D of the cost bounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// What the parameters risk at that D (cost mode): sentences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// What a policy's weights share, as `policy compile` reports it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Fairness {
    /// `slots` or `cost`.
    pub unit: &'static str,
    /// In cost mode: q, C_max, the default cost and b_cap, in cost units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantum: Option<u64>,
    /// C_max: the most one attempt is charged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<u64>,
    /// Charged for an attempt that reports no cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_cost: Option<u64>,
    /// b_cap: the largest positive balance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance_cap: Option<u64>,
}

impl Fairness {
    pub(crate) fn of(unit: FairnessUnit) -> Self {
        let cost = unit.cost();
        Self {
            unit: unit.name(),
            quantum: cost.map(CostFairness::quantum),
            max_cost: cost.map(CostFairness::max_cost),
            default_cost: cost.map(CostFairness::default_cost),
            balance_cap: cost.map(CostFairness::balance_cap),
        }
    }
}

impl fmt::Display for Fairness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (
            self.quantum,
            self.max_cost,
            self.default_cost,
            self.balance_cap,
        ) {
            (Some(q), Some(c), Some(d), Some(b)) => write!(
                f,
                "{} (quantum {q}, max_cost {c}, default_cost {d}, balance_cap {b})",
                self.unit
            ),
            _ => f.write_str(self.unit),
        }
    }
}

/// Compiles a policy into its report; `concurrency` is D of a cost-mode
/// policy's cost bounds (ignored in slot mode, where there are none).
pub fn compile(
    file: &str,
    policy: &WeightedFairnessPolicy,
    show_cycle: bool,
    concurrency: Option<u32>,
) -> Compiled {
    let l = policy.cycle_length();
    // One pass over the cycle: a cost bound carries its tenant's Δ.
    let measured: Vec<(WindowDiscrepancy, Option<CostBound>)> = match policy.cost_bounds() {
        Some(bounds) => bounds.map(|b| (b.discrepancy().clone(), Some(b))).collect(),
        None => policy.window_discrepancies().map(|d| (d, None)).collect(),
    };
    let concurrency = concurrency.filter(|_| policy.fairness().cost().is_some());
    let tenants = policy
        .tenants()
        .iter()
        .zip(measured)
        .map(|(t, (d, cost))| TenantRow {
            id: t.tenant().to_string(),
            weight: t.weight(),
            share_percent: 100.0 * f64::from(t.weight()) / f64::from(l),
            bound: policy
                .starvation_bound(t.tenant())
                .map(|b| b.maximum_reservations_until_selection())
                .unwrap_or(0),
            ideal: l.div_ceil(t.weight()),
            discrepancy: d.slots(),
            discrepancy_scaled: d.scaled(),
            cost_bound: cost.map(|bound| CostBoundRow {
                fixed: bound.fixed(),
                per_concurrency: bound.cost().max_cost(),
                at_concurrency: concurrency.map(|d| bound.slack(d)),
                scaled_at_concurrency: concurrency.map(|d| bound.slack_scaled(d)),
            }),
        })
        .collect();
    Compiled {
        file: file.to_owned(),
        shard: policy.shard_id().to_string(),
        algorithm: policy.algorithm().to_string(),
        fairness: Fairness::of(policy.fairness()),
        cycle_length: l,
        digest: policy.digest().to_string(),
        optimality: policy.cycle_optimality().label(),
        optimality_reason: match policy.cycle_optimality() {
            CycleOptimality::Unproven(reason) => Some(reason.to_string()),
            _ => None,
        },
        tenants,
        cycle: show_cycle.then(|| policy.cycle().iter().map(ToString::to_string).collect()),
        concurrency,
        warnings: cost_warnings(policy, concurrency),
    }
}

/// Cost mode at `D` = `concurrency`: a cap below `(D − 1)·q` lets a
/// tenant whose runs cost at most `q` owe (docs/guarantees.md, "Cheap
/// runs keep their slot share").
fn cost_warnings(policy: &WeightedFairnessPolicy, concurrency: Option<u32>) -> Vec<String> {
    let (Some(cost), Some(d)) = (policy.fairness().cost().copied(), concurrency) else {
        return Vec::new();
    };
    let needed = u128::from(d - 1) * u128::from(cost.quantum());
    if u128::from(cost.balance_cap()) >= needed {
        return Vec::new();
    }
    vec![format!(
        "balance_cap {} is below (D − 1)·quantum = {needed}: with {d} attempts of a tenant \
         uncharged at once, a tenant whose runs cost at most the quantum can owe, and its slots \
         become debt slots; raise balance_cap to at least {needed} (docs/guarantees.md, \
         \"Cheap runs keep their slot share\")",
        cost.balance_cap()
    )]
}

/// The text form of `policy compile`.
impl Report for Compiled {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let c = self;
        let width = c
            .tenants
            .iter()
            .map(|t| t.id.len())
            .max()
            .unwrap_or(6)
            .max(6);
        writeln!(w, "policy       {}", c.file)?;
        writeln!(w, "shard        {}", c.shard)?;
        writeln!(w, "algorithm    {}", c.algorithm)?;
        writeln!(w, "fairness     {}", c.fairness)?;
        writeln!(
            w,
            "cycle length {}",
            crate::out::count(u64::from(c.cycle_length), "slot", "slots")
        )?;
        writeln!(w, "digest       {}", c.digest)?;
        match &c.optimality_reason {
            Some(reason) => writeln!(w, "optimality   {} ({reason})", c.optimality)?,
            None => writeln!(w, "optimality   {}", c.optimality)?,
        }
        writeln!(w, "tenants      {}", c.tenants.len())?;
        writeln!(w)?;
        writeln!(
            w,
            "{:<width$}  {:>6}  {:>7}  {:>5}  {:>5}  {:>11}",
            "tenant", "weight", "share", "bound", "ideal", "discrepancy"
        )?;
        for t in &c.tenants {
            write!(
                w,
                "{:<width$}  {:>6}  {:>6.2}%  {:>5}  {:>5}  {:>11.3}",
                t.id, t.weight, t.share_percent, t.bound, t.ideal, t.discrepancy
            )?;
            match &t.cost_bound {
                Some(CostBoundRow {
                    at_concurrency: Some(b),
                    ..
                }) => writeln!(w, "  cost bound {b:.3}")?,
                Some(b) => writeln!(w, "  cost bound {:.3} + D×{}", b.fixed, b.per_concurrency)?,
                None => writeln!(w)?,
            }
        }
        for warning in &c.warnings {
            writeln!(w, "warning: {warning}")?;
        }
        writeln!(w)?;
        writeln!(
            w,
            "share = weight / L of all slots (scheduling opportunities, not CPU time or runs)"
        )?;
        writeln!(
        w,
        "bound = most consecutive reservations until the tenant is selected, measured on the cycle; ideal = ceil(L / weight)"
    )?;
        writeln!(
            w,
            "discrepancy = in any run of consecutive slots, the tenant is picked within this many slots of weight / L of them, either way (exact on the cycle)"
        )?;
        if c.tenants.iter().any(|t| t.cost_bound.is_some()) {
            writeln!(
                w,
                "cost bound = B = q·Δ + D·C_max + b_cap, in cost units: over a window W the cost served to the tenant stays within B of q·|W|·weight/L (above: always; below: while none of its credit is cut by b_cap); D = {} (docs/guarantees.md, \"Cost mode: the bound\")",
                c.concurrency.map_or_else(
                    || "the most attempts of the tenant claimed and not yet charged (its --max-running cap plus its expired, not yet rescued attempts; give --concurrency)".to_owned(),
                    |d| d.to_string()
                )
            )?;
        }
        writeln!(
            w,
            "optimality = ideal: every bound is its ideal; proven-optimal: no cycle of these weights has a smaller largest bound / ideal (min-gap-v2's exhaustive search, L <= 16); unproven: not searched, or the search could not decide"
        )?;
        if let Some(cycle) = &c.cycle {
            writeln!(w)?;
            writeln!(w, "cycle (slot: tenant)")?;
            for (slot, tenant) in cycle.iter().enumerate() {
                writeln!(w, "{slot:>5}: {tenant}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use statek_policy::policy_file::PolicyFile;

    use super::*;

    fn policy(shard: &str, weights: &[(&str, u32)]) -> WeightedFairnessPolicy {
        let text = format!(
            "shard = \"{shard}\"\n{}",
            weights
                .iter()
                .map(|(t, w)| format!("[[tenants]]\nid = \"{t}\"\nweight = {w}\n"))
                .collect::<String>()
        );
        PolicyFile::parse("t.toml", &text).unwrap().into_policy()
    }

    #[test]
    fn compile_reports_measured_bounds() {
        let c = compile(
            "t.toml",
            &policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]),
            true,
            None,
        );
        assert_eq!(
            c.tenants,
            vec![
                TenantRow {
                    id: "tenant-a".into(),
                    weight: 3,
                    share_percent: 75.0,
                    bound: 2,
                    ideal: 2,
                    discrepancy: 0.75,
                    discrepancy_scaled: 3,
                    cost_bound: None,
                },
                TenantRow {
                    id: "tenant-b".into(),
                    weight: 1,
                    share_percent: 25.0,
                    bound: 4,
                    ideal: 4,
                    discrepancy: 0.75,
                    discrepancy_scaled: 3,
                    cost_bound: None,
                },
            ]
        );
        assert_eq!(
            c.cycle.unwrap(),
            ["tenant-a", "tenant-a", "tenant-b", "tenant-a"]
        );
    }
}
