//! Shard succession (migration V8): a rollout seals the live shard of a
//! schedule at its cursor and registers its successor in one transaction;
//! readers follow the chain and check the stored seam bounds.

use crate::RolloutError;
use std::collections::BTreeMap;
use std::time::SystemTime;

use statek_policy::{
    PolicySeam, ScheduleId, SchedulerShardId, SeamBound, TenantId, WeightedFairnessPolicy,
};
use tokio_postgres::types::Type;

use crate::chain::live_shard_of_chain;
use crate::shard::{decode_digest, StoredShard, SET_SYNCHRONOUS_COMMIT};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Why a shard took no reservation: its seal, and its predecessor's.
const ACCEPTING: &str = "
    SELECT s.sealed_at_sequence, s.successor_id, s.predecessor_id,
           p.sealed_at_sequence AS predecessor_sealed_at, p.successor_id AS predecessor_successor
    FROM statek.scheduler_shards AS s
    LEFT JOIN statek.scheduler_shards AS p ON p.shard_id = s.predecessor_id
    WHERE s.shard_id = $1";

/// The rollout's lock: the live shard's row (the columns of
/// `shard.rs`'s `SELECT_SHARD`), `FOR UPDATE`, so every reservation of it
/// waits until the seal has committed (and then finds the shard sealed).
const LOCK_SHARD: &str = "
    SELECT policy_bytes, policy_digest, cycle_length, cycle_digest, next_sequence, registered_at,
           schedule_id, predecessor_id, sealed_at_sequence, successor_id, sealed_at
    FROM statek.scheduler_shards
    WHERE shard_id = $1
    FOR UPDATE";

pub(crate) const SHARD_EXISTS: &str = "SELECT 1 FROM statek.scheduler_shards WHERE shard_id = $1";

/// The seal, at the locked cursor (the V8 trigger refuses any other
/// sequence and sets `sealed_at`), with the seam bounds as a JSON array in
/// the successor's tenant order.
const SEAL: &str = "
    UPDATE statek.scheduler_shards
    SET sealed_at_sequence = next_sequence,
        successor_id = $2,
        seam_bounds = (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                       'tenant', x.tenant,
                       'last_pick_before_seal', x.last_pick,
                       'first_pick_after_seal', x.first_pick,
                       'reservations_across_seam', x.gap) ORDER BY x.n), '[]'::jsonb)
            FROM unnest($3::text[], $4::int8[], $5::int8[], $6::int8[])
                 WITH ORDINALITY AS x(tenant, last_pick, first_pick, gap, n))
    WHERE shard_id = $1 AND sealed_at_sequence IS NULL AND next_sequence = $7
    RETURNING sealed_at_sequence, sealed_at";

/// The successor, in the predecessor's schedule (the V8 insert trigger
/// checks that the predecessor is sealed naming it).
const INSERT_SUCCESSOR: &str = "
    INSERT INTO statek.scheduler_shards
        (shard_id, policy_bytes, policy_digest, cycle_length, cycle_digest, schedule_id,
         predecessor_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    RETURNING registered_at";

/// The stored seam bounds of sealed shard `$1`, in their stored order.
const SEAM_BOUNDS: &str = "
    SELECT x.tenant, x.last_pick_before_seal, x.first_pick_after_seal, x.reservations_across_seam
    FROM statek.scheduler_shards AS s,
         ROWS FROM (jsonb_to_recordset(s.seam_bounds)
                    AS (tenant text, last_pick_before_seal bigint, first_pick_after_seal bigint,
                        reservations_across_seam bigint))
         WITH ORDINALITY AS x(tenant, last_pick_before_seal, first_pick_after_seal,
                              reservations_across_seam, n)
    WHERE s.shard_id = $1
    ORDER BY x.n";

/// What [`PgStore::rollout`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    schedule: ScheduleId,
    predecessor: SchedulerShardId,
    successor: SchedulerShardId,
    sealed_at_sequence: u64,
    sealed_at: SystemTime,
    seam: Vec<SeamBound>,
    leaving: Vec<TenantId>,
    replayed: bool,
}

impl Rollout {
    /// The schedule both shards belong to.
    pub fn schedule(&self) -> &ScheduleId {
        &self.schedule
    }

    /// The sealed shard.
    pub fn predecessor(&self) -> &SchedulerShardId {
        &self.predecessor
    }

    /// The new live shard of the schedule.
    pub fn successor(&self) -> &SchedulerShardId {
        &self.successor
    }

    /// `N`: the predecessor's cursor at the seal (its last sequence is
    /// `N - 1`); the successor starts at its own sequence 0.
    pub fn sealed_at_sequence(&self) -> u64 {
        self.sealed_at_sequence
    }

    /// Database time of the seal.
    pub fn sealed_at(&self) -> SystemTime {
        self.sealed_at
    }

    /// The exact seam bound of every tenant of the successor for this seal
    /// (in reservations), as stored with the seal.
    pub fn seam(&self) -> &[SeamBound] {
        &self.seam
    }

    /// Tenants of the predecessor that the successor does not schedule.
    pub fn leaving(&self) -> &[TenantId] {
        &self.leaving
    }

    /// True when the shard was already sealed to this successor with these
    /// policies (a retry after a lost acknowledgement): nothing was written.
    pub fn replayed(&self) -> bool {
        self.replayed
    }
}

/// A seal as read back by [`PgStore::load_seam`]: both shards and the
/// stored seam bounds, checked against a recomputation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSeam {
    predecessor: StoredShard,
    successor: StoredShard,
    sealed_at_sequence: u64,
    seam: Vec<SeamBound>,
}

impl ShardSeam {
    /// The sealed shard.
    pub fn predecessor(&self) -> &StoredShard {
        &self.predecessor
    }

    /// Its successor.
    pub fn successor(&self) -> &StoredShard {
        &self.successor
    }

    /// `N`, the predecessor's cursor at the seal.
    pub fn sealed_at_sequence(&self) -> u64 {
        self.sealed_at_sequence
    }

    /// The seam bound of every tenant of the successor, in reservations.
    pub fn seam(&self) -> &[SeamBound] {
        &self.seam
    }
}

/// Why `shard` took no reservation when it took none and the id was
/// unknown: sealed, or a successor whose predecessor is not sealed naming
/// it. `None`: it accepts reservations (the cause is elsewhere).
pub(crate) async fn refusal(
    db: &Db<'_>,
    shard: &SchedulerShardId,
) -> Result<Option<StoreError>, StoreError> {
    let Some(row) = db
        .query_opt(ACCEPTING, &[(&shard.as_str(), Type::TEXT)])
        .await?
    else {
        return Ok(Some(StoreError::Rollout(RolloutError::UnknownShard {
            shard: shard.clone(),
        })));
    };
    let sealed_at: Option<i64> = row.try_get("sealed_at_sequence")?;
    let successor: Option<String> = row.try_get("successor_id")?;
    if let (Some(at), Some(successor)) = (sealed_at, successor) {
        return Ok(Some(StoreError::Rollout(RolloutError::ShardSealed {
            shard: shard.clone(),
            sealed_at_sequence: u64::try_from(at).unwrap_or(0),
            successor: SchedulerShardId::try_from(successor.as_str())
                .map_err(|e| StoreError::corrupt("shard chain", format!("successor: {e}")))?,
        })));
    }
    let predecessor: Option<String> = row.try_get("predecessor_id")?;
    if let Some(predecessor) = predecessor {
        let predecessor_sealed: Option<i64> = row.try_get("predecessor_sealed_at")?;
        let names: Option<String> = row.try_get("predecessor_successor")?;
        if predecessor_sealed.is_none() || names.as_deref() != Some(shard.as_str()) {
            return Ok(Some(StoreError::Rollout(
                RolloutError::PredecessorNotSealed {
                    shard: shard.clone(),
                    predecessor: SchedulerShardId::try_from(predecessor.as_str()).map_err(|e| {
                        StoreError::corrupt("shard chain", format!("predecessor: {e}"))
                    })?,
                },
            )));
        }
    }
    Ok(None)
}

/// The open gap of each tenant at `shard`'s sequence 0, from the seam
/// bounds stored with its predecessor's seal (`reservations_across_seam -
/// first_pick_after_seal`); empty for the first shard of a schedule. What
/// [`PolicySeam::at_carrying`] takes, so that a tenant `shard` never picked
/// is counted from its last pick before `shard`, not from `shard`'s start.
pub(crate) async fn open_gaps_into(
    db: &Db<'_>,
    shard: &StoredShard,
) -> Result<BTreeMap<String, u64>, StoreError> {
    let Some(predecessor) = shard.predecessor() else {
        return Ok(BTreeMap::new());
    };
    let rows = db
        .query(SEAM_BOUNDS, &[(&predecessor.as_str(), Type::TEXT)])
        .await?;
    rows.iter()
        .map(|row| {
            let tenant: Option<String> = row.try_get("tenant")?;
            let first: Option<i64> = row.try_get("first_pick_after_seal")?;
            let gap: Option<i64> = row.try_get("reservations_across_seam")?;
            match (tenant, first, gap) {
                (Some(tenant), Some(first), Some(gap)) if gap > first && first >= 0 => {
                    Ok((tenant, u64::try_from(gap - first).unwrap_or(1)))
                }
                _ => Err(StoreError::corrupt(
                    "seam bounds",
                    format!("shard {predecessor}: a stored seam bound does not decode"),
                )),
            }
        })
        .collect()
}

/// The seam bounds as the four arrays [`SEAL`] takes.
fn seam_columns(seam: &[SeamBound]) -> Result<SeamColumns, StoreError> {
    let mut columns = SeamColumns::default();
    for bound in seam {
        let as_i64 = |value: u64| {
            i64::try_from(value)
                .map_err(|_| StoreError::InvalidArgument(format!("seam value {value} exceeds i64")))
        };
        columns.tenants.push(bound.tenant().as_str().to_string());
        columns
            .last_picks
            .push(bound.last_pick_before_seal().map(as_i64).transpose()?);
        columns
            .first_picks
            .push(as_i64(bound.first_pick_after_seal())?);
        columns.gaps.push(as_i64(bound.reservations_across_seam())?);
    }
    Ok(columns)
}

#[derive(Default)]
struct SeamColumns {
    tenants: Vec<String>,
    last_picks: Vec<Option<i64>>,
    first_picks: Vec<i64>,
    gaps: Vec<i64>,
}

/// What the rollout transaction decided.
enum Sealed {
    Now {
        sealed_at_sequence: u64,
        sealed_at: SystemTime,
        schedule: ScheduleId,
        seam: Vec<SeamBound>,
    },
    Already(Box<StoredShard>),
}

impl PgStore {
    /// Rolls the policy of a schedule out from `from` (the live shard) to
    /// `to` (a new shard id), in one transaction: lock `from`'s cursor row
    /// (its reservations wait), seal it at its cursor `N`, compute and
    /// store every tenant's exact seam bound for that `N`
    /// ([`PolicySeam::at_carrying`]: a tenant `from` never picked is counted
    /// from its last pick before `from`), and register `to` as its successor, from
    /// sequence 0, in `from`'s schedule. Replicas that meet the seal follow
    /// the chain (`RolloutError::ShardSealed` names the successor).
    ///
    /// `schedule`: the schedule the caller expects (a policy file's
    /// `schedule` key), or `None` for whichever `from` belongs to.
    ///
    /// Needs the owner role (UPDATE of the seal columns, migration V8);
    /// the runtime role gets [`StoreError::PermissionDenied`]. Retrying
    /// after a lost acknowledgement is safe: a shard already sealed to `to`
    /// with these policies answers [`Rollout::replayed`].
    ///
    /// # Errors
    /// - [`MigrationError::Behind`](crate::MigrationError::Behind): `to` is
    ///   a cost-mode policy and the database is before migration V19
    ///   (nothing is written).
    /// - [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard): `from` is not registered.
    /// - [`RolloutError::PolicyConflict`](crate::RolloutError::PolicyConflict): `from` (or an existing `to` of a
    ///   replayed rollout) is bound to other bytes.
    /// - [`RolloutError::ScheduleConflict`](crate::RolloutError::ScheduleConflict): `from` is in another schedule
    ///   than `schedule` (a different chain).
    /// - [`RolloutError::NotLiveShard`](crate::RolloutError::NotLiveShard): `from` is already sealed (to another
    ///   successor); the error names the live shard to roll out from.
    /// - [`RolloutError::SuccessorExists`](crate::RolloutError::SuccessorExists): `to` is already registered.
    /// - [`StoreError::InvalidArgument`]: `to` has `from`'s shard id.
    /// - [`DurabilityError::Refused`](crate::DurabilityError::Refused), [`StoreError::PermissionDenied`],
    ///   [`StoreError::CorruptData`], connection and server errors.
    pub async fn rollout(
        &self,
        from: &WeightedFairnessPolicy,
        to: &WeightedFairnessPolicy,
        schedule: Option<&ScheduleId>,
    ) -> Result<Rollout, StoreError> {
        if to.fairness().cost().is_some() {
            self.require_cost_ledger().await?;
        }
        if from.shard_id() == to.shard_id() {
            return Err(StoreError::InvalidArgument(format!(
                "a rollout needs a new shard id: {} is both the sealed shard and its successor",
                to.shard_id()
            )));
        }
        let to_length = i32::try_from(to.cycle_length())
            .map_err(|_| StoreError::InvalidArgument("cycle length exceeds i32".into()))?;
        let level = self.config().synchronous_commit_level().as_str();
        self.ensure_durable().await?;
        let sealed = self
            .in_transaction(
                self.config().effective_response_timeout(),
                async |db: &Db<'_>| {
                    db.execute(SET_SYNCHRONOUS_COMMIT, &[(&level, Type::TEXT)])
                        .await?;
                    let locked = db
                        .query_opt(LOCK_SHARD, &[(&from.shard_id().as_str(), Type::TEXT)])
                        .await?
                        .ok_or_else(|| {
                            StoreError::Rollout(RolloutError::UnknownShard {
                                shard: from.shard_id().clone(),
                            })
                        })?;
                    check_bytes(&locked, from)?;
                    let stored = StoredShard::from_row(from.shard_id(), &locked)?;
                    if let Some(offered) = schedule {
                        if offered != stored.schedule() {
                            return Err(StoreError::Rollout(RolloutError::ScheduleConflict {
                                shard: from.shard_id().clone(),
                                stored: stored.schedule().clone(),
                                offered: offered.clone(),
                            }));
                        }
                    }
                    if let Some(seal) = stored.seal() {
                        if seal.successor() == to.shard_id() {
                            return Ok(Sealed::Already(Box::new(stored)));
                        }
                        let live = live_shard_of_chain(db, from.shard_id()).await?;
                        return Err(StoreError::Rollout(RolloutError::NotLiveShard {
                            shard: from.shard_id().clone(),
                            schedule: stored.schedule().clone(),
                            sealed_at_sequence: seal.sealed_at_sequence(),
                            live,
                        }));
                    }
                    if db
                        .query_opt(SHARD_EXISTS, &[(&to.shard_id().as_str(), Type::TEXT)])
                        .await?
                        .is_some()
                    {
                        return Err(StoreError::Rollout(RolloutError::SuccessorExists {
                            shard: to.shard_id().clone(),
                        }));
                    }
                    let n = stored.next_sequence();
                    let open = open_gaps_into(db, &stored).await?;
                    let seam =
                        PolicySeam::new(from, to).at_carrying(n, |t| open.get(t.as_str()).copied());
                    let columns = seam_columns(&seam)?;
                    let expected = i64::try_from(n)
                        .map_err(|_| StoreError::corrupt("shard cursor", "cursor exceeds i64"))?;
                    let row = db
                        .query_opt(
                            SEAL,
                            &[
                                (&from.shard_id().as_str(), Type::TEXT),
                                (&to.shard_id().as_str(), Type::TEXT),
                                (&columns.tenants, Type::TEXT_ARRAY),
                                (&columns.last_picks, Type::INT8_ARRAY),
                                (&columns.first_picks, Type::INT8_ARRAY),
                                (&columns.gaps, Type::INT8_ARRAY),
                                (&expected, Type::INT8),
                            ],
                        )
                        .await?
                        .ok_or_else(|| {
                            StoreError::corrupt(
                                "shard cursor",
                                format!("shard {}: the locked cursor moved", from.shard_id()),
                            )
                        })?;
                    let sealed_at: SystemTime = row.try_get("sealed_at")?;
                    let bytes = to.canonical_bytes();
                    let digest = to.digest();
                    let cycle_digest = to.cycle_digest();
                    db.query_one(
                        INSERT_SUCCESSOR,
                        &[
                            (&to.shard_id().as_str(), Type::TEXT),
                            (&bytes, Type::BYTEA),
                            (&&digest.as_bytes()[..], Type::BYTEA),
                            (&to_length, Type::INT4),
                            (&&cycle_digest.as_bytes()[..], Type::BYTEA),
                            (&stored.schedule().as_str(), Type::TEXT),
                            (&from.shard_id().as_str(), Type::TEXT),
                        ],
                    )
                    .await?;
                    crate::shard::attach_slot_map(db, to).await?;
                    Ok(Sealed::Now {
                        sealed_at_sequence: n,
                        sealed_at,
                        schedule: stored.schedule().clone(),
                        seam,
                    })
                },
            )
            .await?;
        let leaving = PolicySeam::new(from, to).leaving();
        match sealed {
            Sealed::Now {
                sealed_at_sequence,
                sealed_at,
                schedule,
                seam,
            } => {
                tracing::info!(
                    schedule = %schedule, predecessor = %from.shard_id(),
                    successor = %to.shard_id(), sealed_at_sequence,
                    "rolled out: sealed the shard and registered its successor"
                );
                Ok(Rollout {
                    schedule,
                    predecessor: from.shard_id().clone(),
                    successor: to.shard_id().clone(),
                    sealed_at_sequence,
                    sealed_at,
                    seam,
                    leaving,
                    replayed: false,
                })
            }
            Sealed::Already(stored) => {
                let seam = self.load_seam(from.shard_id()).await?;
                if seam.successor().policy().canonical_bytes() != to.canonical_bytes() {
                    return Err(StoreError::Rollout(RolloutError::PolicyConflict {
                        shard: to.shard_id().clone(),
                        stored: seam.successor().policy().digest(),
                        offered: to.digest(),
                    }));
                }
                let sealed_at = stored
                    .seal()
                    .map_or(SystemTime::UNIX_EPOCH, |s| s.sealed_at());
                Ok(Rollout {
                    schedule: stored.schedule().clone(),
                    predecessor: from.shard_id().clone(),
                    successor: to.shard_id().clone(),
                    sealed_at_sequence: seam.sealed_at_sequence(),
                    sealed_at,
                    seam: seam.seam,
                    leaving,
                    replayed: true,
                })
            }
        }
    }

    /// The live shard of the chain through `shard`: `shard` itself while it
    /// is not sealed, else the last successor.
    ///
    /// # Errors
    /// [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard); [`StoreError::CorruptData`] for a
    /// successor that is not registered; connection and server errors.
    pub async fn live_shard(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<SchedulerShardId, StoreError> {
        self.with_response_timeout(async |db: &Db<'_>| live_shard_of_chain(db, shard).await)
            .await
    }

    /// Reads the seal of `sealed` with both shards, fail-closed: the stored
    /// seam bounds must equal the ones recomputed here from the two stored
    /// policies, the seal sequence and the open gaps of the seam into the
    /// sealed shard ([`PolicySeam::at_carrying`]).
    ///
    /// # Errors
    /// [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard); [`StoreError::InvalidArgument`] when
    /// `sealed` is not sealed; [`StoreError::CorruptData`] when the stored
    /// seam bounds, the chain or a shard fail their checks; connection and
    /// server errors.
    pub async fn load_seam(&self, sealed: &SchedulerShardId) -> Result<ShardSeam, StoreError> {
        let predecessor = self.load_shard(sealed).await?;
        let seal = predecessor
            .seal()
            .cloned()
            .ok_or_else(|| StoreError::InvalidArgument(format!("shard {sealed} is not sealed")))?;
        let successor = self.load_shard(seal.successor()).await?;
        if successor.predecessor() != Some(sealed) {
            return Err(StoreError::corrupt(
                "shard chain",
                format!(
                    "shard {sealed} names successor {} whose predecessor is {:?}",
                    seal.successor(),
                    successor.predecessor().map(SchedulerShardId::as_str)
                ),
            ));
        }
        let (rows, open) = self
            .with_response_timeout(async |db: &Db<'_>| {
                let rows = db
                    .query(SEAM_BOUNDS, &[(&sealed.as_str(), Type::TEXT)])
                    .await?;
                Ok((rows, open_gaps_into(db, &predecessor).await?))
            })
            .await?;
        let seam = PolicySeam::new(predecessor.policy(), successor.policy())
            .at_carrying(seal.sealed_at_sequence(), |t| open.get(t.as_str()).copied());
        let matches = rows.len() == seam.len()
            && rows.iter().zip(&seam).all(|(row, bound)| {
                let as_u64 = |name: &str| {
                    row.try_get::<_, Option<i64>>(name)
                        .ok()
                        .flatten()
                        .and_then(|v| u64::try_from(v).ok())
                };
                row.try_get::<_, Option<String>>("tenant")
                    .ok()
                    .flatten()
                    .as_deref()
                    == Some(bound.tenant().as_str())
                    && as_u64("last_pick_before_seal") == bound.last_pick_before_seal()
                    && as_u64("first_pick_after_seal") == Some(bound.first_pick_after_seal())
                    && as_u64("reservations_across_seam") == Some(bound.reservations_across_seam())
            });
        if !matches {
            return Err(StoreError::corrupt(
                "seam bounds",
                format!(
                    "shard {sealed}: the stored seam bounds are not the ones its seal at {} gives",
                    seal.sealed_at_sequence()
                ),
            ));
        }
        Ok(ShardSeam {
            predecessor,
            successor,
            sealed_at_sequence: seal.sealed_at_sequence(),
            seam,
        })
    }
}

/// The locked row's bytes are `policy`'s, else `PolicyConflict`.
fn check_bytes(
    row: &tokio_postgres::Row,
    policy: &WeightedFairnessPolicy,
) -> Result<(), StoreError> {
    let bytes: Vec<u8> = row.try_get("policy_bytes")?;
    if bytes != policy.canonical_bytes() {
        let stored: Vec<u8> = row.try_get("policy_digest")?;
        return Err(StoreError::Rollout(RolloutError::PolicyConflict {
            shard: policy.shard_id().clone(),
            stored: decode_digest(&stored, "shard policy")?,
            offered: policy.digest(),
        }));
    }
    Ok(())
}
