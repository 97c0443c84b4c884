//! [`PgStore::audit_schedule`]: the audit of every shard of a schedule's
//! chain (`audit.rs`), and of each seam between two of them.
//!
//! A schedule's shards follow each other at rollouts: the sealed shard
//! handed out sequences `0..N`, its successor starts again at 0. Laid end
//! to end, a tenant's picks have one global order, and the gap across a
//! seam is `(N - p) + q` for its last pick `p` before the seal and its
//! first `q` after (the seam bound the rollout stored, in reservations:
//! `SeamBound::reservations_across_seam`). For each seam the audit reads
//! what the evidence shows (both sides must reach the seam without a hole)
//! and judges it against that bound. A tenant that joins at a seam is
//! bounded from the seam (`q + 1`); if it had been in an earlier shard of
//! the chain and left, the audit adds its real wait since that last pick,
//! which the bound does not count.

use statek_policy::{PolicySeam, SchedulerShardId, TenantId};

use crate::audit::AuditReport;
use crate::{PgStore, StoreError};

/// Chains are short (one shard per rollout); this only keeps a corrupt
/// chain from making the walk loop.
const MAX_CHAIN: usize = 10_000;

/// One tenant of the successor at one seam.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeamTenantAudit {
    /// The tenant.
    pub tenant: TenantId,
    /// The seam bound the rollout stored, in reservations.
    pub bound: u64,
    /// The gap across the seam the evidence shows (`None`: not seen, a
    /// side has a hole at the seam, or the tenant had no pick before it in
    /// the sealed shard's evidence).
    pub observed: Option<u64>,
    /// Whether it joins at this seam (not in the sealed shard's policy).
    pub joining: bool,
    /// For a joining tenant that was in an earlier shard of the chain: the
    /// reservations from its last pick there to its first pick after this
    /// seal, counting that one (its real wait; the bound counts from the
    /// seam only).
    pub waited_since_last_pick: Option<u64>,
}

/// One seam of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeamAudit {
    /// The sealed shard.
    pub sealed: SchedulerShardId,
    /// Its successor.
    pub successor: SchedulerShardId,
    /// `N`: the sealed shard's cursor at the seal.
    pub sealed_at_sequence: u64,
    /// One per tenant of the successor.
    pub tenants: Vec<SeamTenantAudit>,
}

impl SeamAudit {
    /// The tenants whose observed gap is above their seam bound.
    pub fn over_bound(&self) -> impl Iterator<Item = &SeamTenantAudit> {
        self.tenants
            .iter()
            .filter(|t| t.observed.is_some_and(|gap| gap > t.bound))
    }
}

/// The audit of a schedule ([`PgStore::audit_schedule`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleAudit {
    /// Each shard of the chain, first to live, over all its sequences.
    pub shards: Vec<AuditReport>,
    /// Each seam, in chain order.
    pub seams: Vec<SeamAudit>,
}

impl ScheduleAudit {
    /// Whether every shard passed and no seam gap exceeded its bound.
    pub fn passed(&self) -> bool {
        self.shards.iter().all(AuditReport::passed)
            && self.seams.iter().all(|s| s.over_bound().next().is_none())
    }
}

impl PgStore {
    /// Audits every shard of the chain `shard` belongs to, first to live,
    /// each over all its sequences ([`audit_shard`](Self::audit_shard)),
    /// and each seam between two of them (see the module documentation
    /// of `audit_chain`).
    ///
    /// # Errors
    /// As [`audit_shard`](Self::audit_shard) and
    /// [`load_seam`](Self::load_seam); [`StoreError::CorruptData`] for a
    /// chain longer than 10,000 shards.
    pub async fn audit_schedule(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<ScheduleAudit, StoreError> {
        self.audit_schedule_with(shard, crate::AuditOptions::new())
            .await
    }

    /// [`audit_schedule`](Self::audit_schedule) with `options` for each
    /// shard's audit ([`PgStore::audit_shard_with`]).
    ///
    /// # Errors
    /// As [`audit_schedule`](Self::audit_schedule).
    pub async fn audit_schedule_with(
        &self,
        shard: &SchedulerShardId,
        options: crate::AuditOptions,
    ) -> Result<ScheduleAudit, StoreError> {
        let mut first = self.load_shard(shard).await?;
        let mut first_id = shard.clone();
        for _ in 0..MAX_CHAIN {
            let Some(predecessor) = first.predecessor().cloned() else {
                break;
            };
            first = self.load_shard(&predecessor).await?;
            first_id = predecessor;
        }
        let mut chain = vec![(first_id, first)];
        while let Some(seal) = chain.last().and_then(|(_, s)| s.seal().cloned()) {
            if chain.len() >= MAX_CHAIN {
                return Err(StoreError::corrupt(
                    "shard chain",
                    format!("longer than {MAX_CHAIN} shards"),
                ));
            }
            let next = self.load_shard(seal.successor()).await?;
            chain.push((seal.successor().clone(), next));
        }
        let mut shards = Vec::with_capacity(chain.len());
        for (id, stored) in &chain {
            let end = stored
                .seal()
                .map_or(stored.next_sequence(), |seal| seal.sealed_at_sequence());
            shards.push(if end == 0 {
                self.audit_shard_with(id, 0..1, options).await?
            } else {
                self.audit_shard_with(id, 0..end, options).await?
            });
        }
        // Each tenant's last pick seen so far, as a global position (the
        // shards laid end to end).
        let mut last_pick: std::collections::HashMap<TenantId, u64> =
            std::collections::HashMap::new();
        let mut offset = 0_u64;
        let mut seams = Vec::new();
        for (k, report) in shards.iter().enumerate() {
            if k > 0 {
                let before = &shards[k - 1];
                let seam = self.load_seam(&before.shard).await?;
                let n = seam.sealed_at_sequence();
                let tenants = seam
                    .seam()
                    .iter()
                    .map(|bound| {
                        let tenant = bound.tenant().clone();
                        let after = report
                            .tenants
                            .iter()
                            .find(|t| t.tenant == tenant)
                            .and_then(|t| t.first_slot)
                            .filter(|_| report.covers_start());
                        let last_before = before
                            .tenants
                            .iter()
                            .find(|t| t.tenant == tenant)
                            .and_then(|t| t.last_slot)
                            .filter(|_| before.covers_end());
                        let observed = if bound.joining() {
                            after.map(|q| q + 1)
                        } else {
                            after.zip(last_before).map(|(q, p)| (n - p) + q)
                        };
                        let waited_since_last_pick = if bound.joining() {
                            after.and_then(|q| last_pick.get(&tenant).map(|last| offset + q - last))
                        } else {
                            None
                        };
                        SeamTenantAudit {
                            tenant,
                            bound: bound.reservations_across_seam(),
                            observed,
                            joining: bound.joining(),
                            waited_since_last_pick,
                        }
                    })
                    .collect();
                seams.push(SeamAudit {
                    sealed: before.shard.clone(),
                    successor: report.shard.clone(),
                    sealed_at_sequence: n,
                    tenants,
                });
            }
            for tenant in &report.tenants {
                if let Some(last) = tenant.last_slot {
                    last_pick.insert(tenant.tenant.clone(), offset + last);
                }
            }
            offset += report.to;
        }
        Ok(ScheduleAudit { shards, seams })
    }
}

/// A tenant that joins at a seal but was scheduled by an earlier shard of
/// the chain ([`PgStore::rejoining_tenants`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejoiningTenant {
    /// The tenant.
    pub tenant: TenantId,
    /// The latest earlier shard whose cycle picked it before its seal.
    pub last_shard: SchedulerShardId,
    /// Its last pick there (a sequence of that shard).
    pub last_pick: u64,
    /// Reservations from that pick to its first pick after the new seal,
    /// counting that one: what it waits, where its joining bound (`q + 1`)
    /// counts from the seal only.
    pub waited: u64,
}

impl PgStore {
    /// The tenants of `to` that are not in the live shard `from`'s policy
    /// but were in an earlier shard of its chain, for a seal of `from` at
    /// `sealed_at`: where each was last picked and how many reservations
    /// separate that pick from its first pick in `to` (the chain's stored
    /// policies and seals decide it; no evidence is read).
    ///
    /// # Errors
    /// [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard);
    /// [`StoreError::CorruptData`] for a chain longer than 10,000 shards;
    /// connection and server errors.
    pub async fn rejoining_tenants(
        &self,
        from: &SchedulerShardId,
        sealed_at: u64,
        to: &statek_policy::WeightedFairnessPolicy,
    ) -> Result<Vec<RejoiningTenant>, StoreError> {
        let live = self.load_shard(from).await?;
        let joining: Vec<TenantId> = to
            .tenants()
            .iter()
            .map(|w| w.tenant().clone())
            .filter(|t| live.policy().tenant_index(t).is_none())
            .collect();
        let mut found = Vec::new();
        if joining.is_empty() {
            return Ok(found);
        }
        // Reservations from the start of the shard looked at to the seal.
        let mut behind = sealed_at;
        let mut left = joining;
        let mut shard = live;
        for _ in 0..MAX_CHAIN {
            let Some(predecessor) = shard.predecessor().cloned() else {
                break;
            };
            shard = self.load_shard(&predecessor).await?;
            let end = shard.seal().map_or(0, |s| s.sealed_at_sequence());
            // The seam from this shard straight to `to` at its own seal:
            // each tenant's last pick `p` there and first pick `q` in `to`.
            let seam = PolicySeam::new(shard.policy(), to).at(end);
            left.retain(|tenant| {
                let Some((p, q)) = seam.iter().find(|b| b.tenant() == tenant).and_then(|b| {
                    b.last_pick_before_seal()
                        .map(|p| (p, b.first_pick_after_seal()))
                }) else {
                    return true;
                };
                found.push(RejoiningTenant {
                    tenant: tenant.clone(),
                    last_shard: predecessor.clone(),
                    last_pick: p,
                    waited: (end - p) + behind + q,
                });
                false
            });
            if left.is_empty() {
                break;
            }
            behind += end;
        }
        found.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        Ok(found)
    }
}
