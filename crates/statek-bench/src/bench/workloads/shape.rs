//! The workloads of section `workloads`: their policies (the queue
//! section's 8 × 1, the demo's noisy-neighbour file, a generated sparse
//! policy of 1,024 tenants), what each queue holds when a side starts, the
//! arrivals during the window and the handler's work. Pure: no I/O.

use std::time::Duration;

use anyhow::Result;
use statek_policy::policy_file::PolicyFile;
use statek_policy::{SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy};

/// The demo's policy (L = 104): `noisy` of weight 20, ten tenants of
/// weight 8, one dormant tenant of weight 4.
const NOISY_NEIGHBOUR: &str = include_str!("../../../../../deploy/policies/noisy-neighbour.toml");

/// Tenants of the sparse policy.
pub const SPARSE_TENANTS: usize = 1_024;
/// Of them, the ones with a backlog.
pub const SPARSE_BACKLOGGED: usize = 8;
/// Runs per backlogged tenant in the throughput workloads (the queue
/// section's figure: more than any side executes in a window).
pub const RUNS_PER_TENANT: u64 = 12_500;
/// `noisy`'s backlog in the noisy-neighbour workload.
pub const NOISY_BACKLOG: u64 = 20_000;
/// Each weight-8 tenant of noisy-neighbour receives one run this often.
pub const ARRIVAL_EVERY: Duration = Duration::from_millis(20);
/// Executing runs per side of the no-op workloads.
pub const EXECUTING_RUNS: usize = 16;
/// Executing runs per side of `long-runs`.
pub const LONG_EXECUTING_RUNS: usize = 64;
/// What a `long-runs` handler does: sleep.
pub const LONG_RUN: Duration = Duration::from_millis(20);

/// A workload of the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// 8 tenants of weight 1, 12,500 runs each.
    AllBacklogged,
    /// The demo's policy; `noisy` backlogged, weight-8 tenants fed.
    NoisyNeighbour,
    /// 1,024 tenants of weights 1-4, 8 of them backlogged.
    Sparse,
    /// As all-backlogged, every handler sleeps 20 ms, 64 executing runs.
    LongRuns,
}

impl Workload {
    /// Every throughput workload, in the order they run.
    pub const ALL: [Self; 4] = [
        Self::AllBacklogged,
        Self::NoisyNeighbour,
        Self::Sparse,
        Self::LongRuns,
    ];

    /// Its `--workload` value.
    pub fn pick(self) -> WorkloadPick {
        match self {
            Self::AllBacklogged => WorkloadPick::AllBacklogged,
            Self::NoisyNeighbour => WorkloadPick::NoisyNeighbour,
            Self::Sparse => WorkloadPick::Sparse,
            Self::LongRuns => WorkloadPick::LongRuns,
        }
    }

    /// The name used in tables and targets.
    pub fn name(self) -> &'static str {
        match self {
            Self::AllBacklogged => "all-backlogged",
            Self::NoisyNeighbour => "noisy-neighbour",
            Self::Sparse => "sparse",
            Self::LongRuns => "long-runs",
        }
    }

    /// The workload's policy.
    pub fn policy(self) -> Result<WeightedFairnessPolicy> {
        match self {
            Self::AllBacklogged | Self::LongRuns => uniform_policy("bench-workload-uniform-v1", 8),
            Self::NoisyNeighbour => noisy_neighbour_policy(),
            Self::Sparse => sparse_policy(),
        }
    }

    /// Runs in the queue when a side starts: `(tenant, runs)`, interleaved
    /// across tenants by the loader.
    pub fn backlog(self, policy: &WeightedFairnessPolicy) -> Vec<(String, u64)> {
        match self {
            Self::AllBacklogged | Self::LongRuns => policy
                .tenants()
                .iter()
                .map(|t| (t.tenant().to_string(), RUNS_PER_TENANT))
                .collect(),
            Self::NoisyNeighbour => vec![("noisy".to_owned(), NOISY_BACKLOG)],
            Self::Sparse => sparse_backlogged()
                .into_iter()
                .map(|i| (sparse_tenant(i), RUNS_PER_TENANT))
                .collect(),
        }
    }

    /// Tenants that receive one run every [`ARRIVAL_EVERY`] while a side
    /// runs (their service lag is reported).
    pub fn fed_tenants(self, policy: &WeightedFairnessPolicy) -> Vec<String> {
        match self {
            Self::NoisyNeighbour => policy
                .tenants()
                .iter()
                .filter(|t| t.weight() == 8)
                .map(|t| t.tenant().to_string())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Executing runs per side.
    pub fn executing_runs(self) -> usize {
        match self {
            Self::LongRuns => LONG_EXECUTING_RUNS,
            _ => EXECUTING_RUNS,
        }
    }

    /// How long each handler works.
    pub fn handler(self) -> Duration {
        match self {
            Self::LongRuns => LONG_RUN,
            _ => Duration::ZERO,
        }
    }
}

/// `tenants` tenants `tenant-00`.. of weight 1.
pub fn uniform_policy(shard: &str, tenants: usize) -> Result<WeightedFairnessPolicy> {
    let tenants = (0..tenants)
        .map(|i| {
            Ok(TenantFairnessWeight::new(
                TenantId::try_from(format!("tenant-{i:02}").as_str())?,
                1,
            )?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from(shard)?,
        tenants,
    )?)
}

/// deploy/policies/noisy-neighbour.toml.
pub fn noisy_neighbour_policy() -> Result<WeightedFairnessPolicy> {
    Ok(PolicyFile::parse("deploy/policies/noisy-neighbour.toml", NOISY_NEIGHBOUR)?.into_policy())
}

/// The id of sparse tenant `i`.
pub fn sparse_tenant(i: usize) -> String {
    format!("sparse-{i:04}")
}

/// The weight of sparse tenant `i`: 1, 2, 3, 4, 1, 2, … (so L = 256 ×
/// (1 + 2 + 3 + 4) = 2,560).
pub fn sparse_weight(i: usize) -> u32 {
    1 + (i % 4) as u32
}

/// The backlogged sparse tenants: spread over the id space, one of each
/// weight per four (`k × 128 + k`, weights 1, 2, 3, 4, 1, 2, 3, 4).
pub fn sparse_backlogged() -> Vec<usize> {
    (0..SPARSE_BACKLOGGED)
        .map(|k| k * (SPARSE_TENANTS / SPARSE_BACKLOGGED) + k)
        .collect()
}

/// 1,024 tenants `sparse-0000`.. of weights [`sparse_weight`].
pub fn sparse_policy() -> Result<WeightedFairnessPolicy> {
    let tenants = (0..SPARSE_TENANTS)
        .map(|i| {
            Ok(TenantFairnessWeight::new(
                TenantId::try_from(sparse_tenant(i).as_str())?,
                sparse_weight(i),
            )?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("bench-workload-sparse-v1")?,
        tenants,
    )?)
}

/// One workload of section `workloads` (`--workload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadPick {
    /// 8 tenants of weight 1, every one backlogged.
    AllBacklogged,
    /// The demo's policy: one noisy tenant backlogged, the others fed.
    NoisyNeighbour,
    /// 1,024 tenants, 8 of them backlogged.
    Sparse,
    /// As all-backlogged, every handler sleeps 20 ms.
    LongRuns,
    /// One Worker's slot rate on the sparse policy.
    SlotRate,
}

impl WorkloadPick {
    /// Every workload and the slot rate (the default).
    pub const ALL: [Self; 5] = [
        Self::AllBacklogged,
        Self::NoisyNeighbour,
        Self::Sparse,
        Self::LongRuns,
        Self::SlotRate,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_policy_is_deterministic() {
        let p = sparse_policy().unwrap();
        assert_eq!(p.tenants().len(), 1_024);
        assert_eq!(p.cycle_length(), 2_560);
        assert_eq!(p.digest(), sparse_policy().unwrap().digest());
        assert_eq!(
            sparse_backlogged(),
            vec![0, 129, 258, 387, 516, 645, 774, 903]
        );
        let weights: Vec<u32> = sparse_backlogged().into_iter().map(sparse_weight).collect();
        assert_eq!(weights, vec![1, 2, 3, 4, 1, 2, 3, 4]);
        assert_eq!(sparse_tenant(903), "sparse-0903");
    }

    #[test]
    fn noisy_neighbour_is_the_demo_policy() {
        let p = noisy_neighbour_policy().unwrap();
        assert_eq!(p.cycle_length(), 104);
        let fed = Workload::NoisyNeighbour.fed_tenants(&p);
        assert_eq!(fed.len(), 10);
        assert_eq!(fed[0], "tenant-01");
        assert_eq!(
            Workload::NoisyNeighbour.backlog(&p),
            vec![("noisy".to_owned(), 20_000)]
        );
    }

    #[test]
    fn backlogs_and_sides() {
        let check = |w: Workload, tenants: usize, runs: u64, executing: usize, ms: u64| {
            let p = w.policy().unwrap();
            let backlog = w.backlog(&p);
            assert_eq!(backlog.len(), tenants, "{}", w.name());
            assert_eq!(
                backlog.iter().map(|b| b.1).sum::<u64>(),
                runs,
                "{}",
                w.name()
            );
            assert_eq!(w.executing_runs(), executing, "{}", w.name());
            assert_eq!(w.handler(), Duration::from_millis(ms), "{}", w.name());
        };
        check(Workload::AllBacklogged, 8, 100_000, 16, 0);
        check(Workload::NoisyNeighbour, 1, 20_000, 16, 0);
        check(Workload::Sparse, 8, 100_000, 16, 0);
        check(Workload::LongRuns, 8, 100_000, 64, 20);
    }
}
