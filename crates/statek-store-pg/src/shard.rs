//! Binding a policy to a shard, and reading the binding back fail-closed:
//! `register` stores the policy's canonical bytes, digest and cycle digest
//! (migration V6) and attaches the slot map that the claim functions check
//! (migration V11); a load checks every stored value against the others
//! and answers `CorruptData` on a mismatch, never a guess.

use crate::RolloutError;
use std::time::SystemTime;

use statek_core::Registration;
use statek_policy::{
    CycleDigest, PolicyDigest, ScheduleId, SchedulerShardId, WeightedFairnessPolicy,
};
use tokio_postgres::types::Type;
use tokio_postgres::Row;

use crate::chain::live_shard_of_schedule;
use crate::pooling::check_session_settings;
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Inserts the shard row (with the digest of the compiled cycle, V6) unless
/// the shard exists; returns the time it was registered when this call
/// inserted it. `$6` is the schedule (NULL: the one named like the shard,
/// set by the V8 insert trigger). `ON CONFLICT` without a target: a
/// second first shard of a schedule (`scheduler_shards_one_chain_per_schedule`,
/// V8) inserts nothing either, and the caller then finds no row of its
/// shard.
const INSERT_SHARD: &str = "
    INSERT INTO statek.scheduler_shards
        (shard_id, policy_bytes, policy_digest, cycle_length, cycle_digest, schedule_id)
    VALUES ($1, $2, $3, $4, $5, $6)
    ON CONFLICT DO NOTHING
    RETURNING registered_at";

/// Attaches the shard's slot map (the tenant index of each slot) through
/// the SECURITY DEFINER `statek.attach_slot_map` (migration V11), which
/// checks it against the stored cycle digest; once per shard, a repeat
/// does nothing. Claims of the shard's slots are checked against it.
const ATTACH_SLOT_MAP: &str = "SELECT statek.attach_slot_map($1, $2::smallint[])";

/// Attaches `policy`'s slot map to its shard in the transaction of `db`.
pub(crate) async fn attach_slot_map(
    db: &Db<'_>,
    policy: &WeightedFairnessPolicy,
) -> Result<(), StoreError> {
    let map: Vec<i16> = policy
        .cycle_tenant_indexes()
        .iter()
        .map(|&index| i16::try_from(index))
        .collect::<Result<_, _>>()
        .map_err(|_| StoreError::InvalidArgument("a tenant index exceeds i16".into()))?;
    db.execute(
        ATTACH_SLOT_MAP,
        &[
            (&policy.shard_id().as_str(), Type::TEXT),
            (&map, Type::INT2_ARRAY),
        ],
    )
    .await?;
    Ok(())
}

/// The store's `synchronous_commit` for this transaction only (it holds
/// behind PgBouncer in transaction mode, where session settings do not).
pub(crate) const SET_SYNCHRONOUS_COMMIT: &str = "SELECT set_config('synchronous_commit', $1, true)";

const SELECT_CURSOR: &str = "
    SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = $1";

/// Operator figures for one shard: cursor, recent rate, retained evidence.
/// A row holds `sequence_count` reservations (1, or `k` for the range row
/// of a batch, migration V5).
const SHARD_STATUS: &str = "
    SELECT now() AS observed_at,
           (SELECT coalesce(sum(sequence_count), 0)::bigint FROM statek.scheduler_reservations
             WHERE shard_id = $1 AND reserved_at >= now() - interval '60 seconds') AS last_minute,
           (SELECT coalesce(sum(sequence_count), 0)::bigint FROM statek.scheduler_reservations
             WHERE shard_id = $1) AS retained,
           (SELECT count(*) FROM statek.scheduler_reservations WHERE shard_id = $1) AS retained_rows,
           (SELECT min(reserved_at) FROM statek.scheduler_reservations WHERE shard_id = $1) AS oldest,
           (SELECT count(*) FROM statek.scheduler_reservations
             WHERE shard_id = $1 AND reserved_at < now() - make_interval(secs => $2)) AS past_retention";

const SELECT_OLDEST: &str = "
    SELECT min(reserved_at) AS oldest FROM statek.scheduler_reservations WHERE shard_id = $1";

const SELECT_SHARD: &str = "
    SELECT policy_bytes, policy_digest, cycle_length, cycle_digest, next_sequence, registered_at,
           schedule_id, predecessor_id, sealed_at_sequence, successor_id, sealed_at
    FROM statek.scheduler_shards
    WHERE shard_id = $1";

/// What the registration transaction found: its own insert, or the row
/// already there.
enum Bound {
    Inserted(SystemTime),
    Existing(Row),
}

/// A shard as stored: its policy (decoded and verified), its cursor, its
/// schedule and its place in the schedule's chain (migration V8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredShard {
    policy: WeightedFairnessPolicy,
    cycle_digest: Option<CycleDigest>,
    next_sequence: u64,
    registered_at: SystemTime,
    schedule: ScheduleId,
    predecessor: Option<SchedulerShardId>,
    seal: Option<ShardSeal>,
}

/// The seal of a shard: where its sequences end and which shard goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSeal {
    pub(crate) sealed_at_sequence: u64,
    pub(crate) successor: SchedulerShardId,
    pub(crate) sealed_at: SystemTime,
}

impl ShardSeal {
    /// `N`: the cursor when the shard was sealed. The shard's sequences are
    /// `0..N` (its last is `N - 1`); it never hands out another.
    pub fn sealed_at_sequence(&self) -> u64 {
        self.sealed_at_sequence
    }

    /// The shard that goes on from the seal, from its own sequence 0.
    pub fn successor(&self) -> &SchedulerShardId {
        &self.successor
    }

    /// Database time of the sealing transaction.
    pub fn sealed_at(&self) -> SystemTime {
        self.sealed_at
    }
}

impl StoredShard {
    /// The policy bound to the shard, decoded from its canonical bytes.
    pub fn policy(&self) -> &WeightedFairnessPolicy {
        &self.policy
    }

    /// The digest of the cycle compiled by the replica that registered the
    /// shard, as stored; `None` only for shards registered before the
    /// column existed (migration V6).
    ///
    /// The store reads it fail-closed (32 bytes or `NULL`) but does not
    /// compare it: the policy returned by [`policy`](Self::policy) was
    /// compiled by this process, and comparing the two is the caller's check
    /// that this replica compiles the same cycle
    /// (`DurableFairScheduler::register` refuses on a mismatch).
    pub fn cycle_digest(&self) -> Option<CycleDigest> {
        self.cycle_digest
    }

    /// The next sequence the shard will hand out (= reservations so far).
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }

    /// The slot the next reservation will get: `next_sequence mod L`.
    pub fn next_slot(&self) -> u32 {
        slot_of(self.next_sequence, self.policy.cycle_length())
    }

    /// Database time the shard was bound.
    pub fn registered_at(&self) -> SystemTime {
        self.registered_at
    }

    /// The schedule the shard belongs to (the one named like the shard
    /// unless it was registered into another).
    pub fn schedule(&self) -> &ScheduleId {
        &self.schedule
    }

    /// The shard this one succeeds, if it was registered by a rollout.
    pub fn predecessor(&self) -> Option<&SchedulerShardId> {
        self.predecessor.as_ref()
    }

    /// The seal, once the shard is sealed (`None` while it is live).
    pub fn seal(&self) -> Option<&ShardSeal> {
        self.seal.as_ref()
    }

    /// Decodes a shard row, checking every stored fact against the others.
    pub(crate) fn from_row(shard: &SchedulerShardId, row: &Row) -> Result<Self, StoreError> {
        let bytes: Vec<u8> = row.try_get("policy_bytes")?;
        let digest: Vec<u8> = row.try_get("policy_digest")?;
        let cycle_length: i32 = row.try_get("cycle_length")?;
        let cycle_digest: Option<Vec<u8>> = row.try_get("cycle_digest")?;
        let next_sequence: i64 = row.try_get("next_sequence")?;
        let registered_at: SystemTime = row.try_get("registered_at")?;
        let policy = WeightedFairnessPolicy::decode(shard.clone(), &bytes).map_err(|e| {
            StoreError::corrupt("shard policy", format!("shard {shard}: stored bytes: {e}"))
        })?;
        let stored_digest = decode_digest(&digest, "shard policy")?;
        if policy.digest() != stored_digest {
            return Err(StoreError::corrupt(
                "shard policy",
                format!(
                    "shard {shard}: stored digest {stored_digest} is not the digest {} of the stored bytes",
                    policy.digest()
                ),
            ));
        }
        if i64::from(policy.cycle_length()) != i64::from(cycle_length) {
            return Err(StoreError::corrupt(
                "shard policy",
                format!(
                    "shard {shard}: stored cycle length {cycle_length} but the policy's is {}",
                    policy.cycle_length()
                ),
            ));
        }
        let cycle_digest = cycle_digest
            .map(|bytes| {
                CycleDigest::try_from(bytes.as_slice()).map_err(|e| {
                    StoreError::corrupt(
                        "shard cycle digest",
                        format!("shard {shard}: stored cycle digest: {e}"),
                    )
                })
            })
            .transpose()?;
        let next_sequence = u64::try_from(next_sequence).map_err(|_| {
            StoreError::corrupt(
                "shard cursor",
                format!("shard {shard}: negative cursor {next_sequence}"),
            )
        })?;
        let schedule: String = row.try_get("schedule_id")?;
        let schedule = ScheduleId::try_from(schedule.as_str()).map_err(|e| {
            StoreError::corrupt("shard schedule", format!("shard {shard}: schedule: {e}"))
        })?;
        let predecessor = row
            .try_get::<_, Option<String>>("predecessor_id")?
            .map(|p| shard_id_column(shard, "predecessor", &p))
            .transpose()?;
        let seal = match (
            row.try_get::<_, Option<i64>>("sealed_at_sequence")?,
            row.try_get::<_, Option<String>>("successor_id")?,
            row.try_get::<_, Option<SystemTime>>("sealed_at")?,
        ) {
            (None, None, None) => None,
            (Some(at), Some(successor), Some(sealed_at)) => {
                let at = u64::try_from(at)
                    .ok()
                    .filter(|at| *at == next_sequence)
                    .ok_or_else(|| {
                        StoreError::corrupt(
                            "shard seal",
                            format!(
                                "shard {shard}: sealed at {at} but its cursor is {next_sequence}"
                            ),
                        )
                    })?;
                Some(ShardSeal {
                    sealed_at_sequence: at,
                    successor: shard_id_column(shard, "successor", &successor)?,
                    sealed_at,
                })
            }
            _ => {
                return Err(StoreError::corrupt(
                    "shard seal",
                    format!("shard {shard}: seal columns set in part"),
                ))
            }
        };
        Ok(Self {
            policy,
            cycle_digest,
            next_sequence,
            registered_at,
            schedule,
            predecessor,
            seal,
        })
    }
}

/// A stored shard id column of `shard`'s row, fail-closed.
fn shard_id_column(
    shard: &SchedulerShardId,
    what: &str,
    value: &str,
) -> Result<SchedulerShardId, StoreError> {
    SchedulerShardId::try_from(value)
        .map_err(|e| StoreError::corrupt("shard chain", format!("shard {shard}: {what}: {e}")))
}

/// The slot of `sequence`: statek-policy's one definition
/// ([`statek_policy::slot_of`]), which stored slots are checked against.
pub(crate) fn slot_of(sequence: u64, cycle_length: u32) -> u32 {
    statek_policy::slot_of(sequence, cycle_length)
}

pub(crate) fn decode_digest(bytes: &[u8], what: &'static str) -> Result<PolicyDigest, StoreError> {
    PolicyDigest::try_from(bytes)
        .map_err(|e| StoreError::corrupt(what, format!("stored digest: {e}")))
}

impl PgStore {
    /// Binds `policy` to its shard, or confirms that the shard already holds
    /// byte-identical canonical policy bytes.
    ///
    /// Nothing is ever overwritten: any difference (tenants, weights,
    /// algorithm) is [`RolloutError::PolicyConflict`](crate::RolloutError::PolicyConflict) and the stored row stays
    /// as it was. Roll a changed policy out under a new shard id.
    ///
    /// Under [`crate::StoreConfig::transaction_pooling`] the same
    /// transaction first checks that the server's `lock_timeout` and
    /// `statement_timeout` (set for the role or database) equal the
    /// configured ones.
    ///
    /// Runs the durability check first ([`PgStore::ensure_durable`]) and
    /// commits with the store's `synchronous_commit`.
    ///
    /// A new shard becomes the first shard of the schedule named like it;
    /// an existing one is confirmed whatever its schedule. See
    /// [`register_in`](Self::register_in) to name the schedule.
    ///
    /// # Errors
    /// [`DurabilityError::Refused`](crate::DurabilityError::Refused) when the server can lose
    /// acknowledged reservations and the store's policy refuses it (nothing
    /// is written); [`RolloutError::PolicyConflict`](crate::RolloutError::PolicyConflict);
    /// [`RolloutError::ScheduleHasLiveShard`](crate::RolloutError::ScheduleHasLiveShard) when the schedule named like
    /// the shard already has a chain (a shard of it was registered under
    /// that name: roll out instead);
    /// [`StoreError::CorruptData`] if the stored row fails its checks;
    /// [`MigrationError::Behind`](crate::MigrationError::Behind) for a
    /// cost-mode policy on a database before migration V19 (nothing is
    /// written);
    /// [`ConnectionError::SessionSettingMismatch`](crate::ConnectionError::SessionSettingMismatch) under transaction pooling;
    /// connection and server errors.
    pub async fn register(
        &self,
        policy: &WeightedFairnessPolicy,
    ) -> Result<Registration, StoreError> {
        self.register_in(policy, None).await
    }

    /// [`register`](Self::register) into the schedule `schedule` (`None`:
    /// the shard's own schedule when it is new, whichever it has when it
    /// exists; a policy file's optional `schedule` key).
    ///
    /// A schedule is one chain of shards (migration V8): the first shard is
    /// registered, every later one is the successor a rollout
    /// ([`PgStore::rollout`]) registers. So registering a new shard into a
    /// schedule that already has one is refused: at most one shard of a
    /// schedule accepts reservations at any moment.
    ///
    /// # Errors
    /// As [`register`](Self::register), and
    /// [`RolloutError::ScheduleConflict`](crate::RolloutError::ScheduleConflict) when the shard exists in another
    /// schedule than `schedule` (nothing is written: registering the same
    /// bytes into another schedule is a conflict, not idempotent);
    /// [`RolloutError::ScheduleHasLiveShard`](crate::RolloutError::ScheduleHasLiveShard) when `schedule` already has a
    /// chain (its live shard is named: change the policy with a rollout).
    pub async fn register_in(
        &self,
        policy: &WeightedFairnessPolicy,
        schedule: Option<&ScheduleId>,
    ) -> Result<Registration, StoreError> {
        if policy.fairness().cost().is_some() {
            self.require_cost_ledger().await?;
        }
        let shard = policy.shard_id();
        let schedule_name = schedule.map(ScheduleId::as_str);
        let cycle_length = i32::try_from(policy.cycle_length())
            .map_err(|_| StoreError::InvalidArgument("cycle length exceeds i32".into()))?;
        let digest = policy.digest();
        let bytes = policy.canonical_bytes();
        let digest_bytes = &digest.as_bytes()[..];
        let cycle_digest = policy.cycle_digest();
        let cycle_digest_bytes = &cycle_digest.as_bytes()[..];
        let checks_settings = self.config().uses_transaction_pooling();
        let settings = self.config().session_settings();
        let level = self.config().synchronous_commit_level().as_str();
        self.ensure_durable().await?;
        let found = self
            .in_transaction(
                self.config().effective_response_timeout(),
                async |db: &Db<'_>| {
                    if checks_settings {
                        check_session_settings(db, &settings).await?;
                    }
                    db.execute(SET_SYNCHRONOUS_COMMIT, &[(&level, Type::TEXT)])
                        .await?;
                    let inserted = db
                        .query_opt(
                            INSERT_SHARD,
                            &[
                                (&shard.as_str(), Type::TEXT),
                                (&bytes, Type::BYTEA),
                                (&digest_bytes, Type::BYTEA),
                                (&cycle_length, Type::INT4),
                                (&cycle_digest_bytes, Type::BYTEA),
                                (&schedule_name, Type::TEXT),
                            ],
                        )
                        .await?;
                    if let Some(row) = inserted {
                        attach_slot_map(db, policy).await?;
                        return Ok(Bound::Inserted(row.try_get("registered_at")?));
                    }
                    // The shard exists (possibly inserted by a concurrent
                    // caller that has committed by now: ON CONFLICT waited
                    // for it), or its schedule already has a first shard.
                    match db
                        .query_opt(SELECT_SHARD, &[(&shard.as_str(), Type::TEXT)])
                        .await?
                    {
                        Some(row) => Ok(Bound::Existing(row)),
                        None => {
                            let schedule = schedule
                                .cloned()
                                .unwrap_or_else(|| ScheduleId::of_shard(shard));
                            let live = live_shard_of_schedule(db, &schedule).await?;
                            Err(StoreError::Rollout(RolloutError::ScheduleHasLiveShard {
                                schedule,
                                live,
                            }))
                        }
                    }
                },
            )
            .await?;
        let row = match found {
            Bound::Inserted(registered_at) => {
                tracing::info!(shard = %shard, digest = %digest, "registered shard policy");
                return Ok(Registration::Registered { registered_at });
            }
            Bound::Existing(row) => row,
        };
        let bytes: Vec<u8> = row.try_get("policy_bytes")?;
        if bytes != policy.canonical_bytes() {
            let stored_digest: Vec<u8> = row.try_get("policy_digest")?;
            return Err(StoreError::Rollout(RolloutError::PolicyConflict {
                shard: shard.clone(),
                stored: decode_digest(&stored_digest, "shard policy")?,
                offered: digest,
            }));
        }
        let stored = StoredShard::from_row(shard, &row)?;
        if let Some(offered) = schedule {
            if offered != stored.schedule() {
                return Err(StoreError::Rollout(RolloutError::ScheduleConflict {
                    shard: shard.clone(),
                    stored: stored.schedule().clone(),
                    offered: offered.clone(),
                }));
            }
        }
        // A shard registered before migration V11 gets its slot map now
        // (one registered before V6 has no cycle digest to check one
        // against: its slots cannot be claimed, see the migration). A
        // replica that compiled another cycle attaches nothing: its caller
        // compares cycle digests next and refuses (`CycleMismatch`).
        if stored.cycle_digest() == Some(policy.cycle_digest()) {
            self.with_durable_write(async |db: &Db<'_>| attach_slot_map(db, policy).await)
                .await?;
        }
        Ok(Registration::Idempotent {
            registered_at: stored.registered_at,
        })
    }

    /// Reads a shard's policy and cursor, verifying that the stored bytes
    /// decode strictly, hash to the stored digest and have the stored cycle
    /// length.
    ///
    /// # Errors
    /// [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard); [`StoreError::CorruptData`];
    /// connection and server errors.
    pub async fn load_shard(&self, shard: &SchedulerShardId) -> Result<StoredShard, StoreError> {
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_opt(SELECT_SHARD, &[(&shard.as_str(), Type::TEXT)])
                    .await?)
            })
            .await?
            .ok_or_else(|| {
                StoreError::Rollout(RolloutError::UnknownShard {
                    shard: shard.clone(),
                })
            })?;
        StoredShard::from_row(shard, &row)
    }

    /// The shard's cursor: the next sequence it will hand out, which is also
    /// the number of reservations made so far. A light read for monitoring
    /// and for measuring service lag in reservations.
    ///
    /// # Errors
    /// [`RolloutError::UnknownShard`](crate::RolloutError::UnknownShard); [`StoreError::CorruptData`] for a
    /// negative cursor; connection and server errors.
    pub async fn next_sequence(&self, shard: &SchedulerShardId) -> Result<u64, StoreError> {
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_opt(SELECT_CURSOR, &[(&shard.as_str(), Type::TEXT)])
                    .await?)
            })
            .await?
            .ok_or_else(|| {
                StoreError::Rollout(RolloutError::UnknownShard {
                    shard: shard.clone(),
                })
            })?;
        let next: i64 = row.try_get("next_sequence")?;
        u64::try_from(next).map_err(|_| {
            StoreError::corrupt(
                "shard cursor",
                format!("shard {shard}: negative cursor {next}"),
            )
        })
    }

    /// Database time of the shard's oldest retained reservation, if any.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn oldest_reservation(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<Option<SystemTime>, StoreError> {
        self.with_response_timeout(async |db: &Db<'_>| {
            Ok(db
                .query_one(SELECT_OLDEST, &[(&shard.as_str(), Type::TEXT)])
                .await?
                .try_get("oldest")?)
        })
        .await
    }

    /// Operator figures for a shard: its verified policy and cursor, the
    /// reservations of the last 60 s (database clock), the retained
    /// reservations and the rows holding them (a batch is one range row),
    /// the oldest retained reservation, and how many rows are older than
    /// `retain_for`.
    ///
    /// # Errors
    /// As [`PgStore::load_shard`].
    pub async fn shard_status(
        &self,
        shard: &SchedulerShardId,
        retain_for: std::time::Duration,
    ) -> Result<ShardStatus, StoreError> {
        let stored = self.load_shard(shard).await?;
        let retain_secs = retain_for.as_secs_f64();
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_one(
                        SHARD_STATUS,
                        &[(&shard.as_str(), Type::TEXT), (&retain_secs, Type::FLOAT8)],
                    )
                    .await?)
            })
            .await?;
        let count = |name: &str| -> Result<u64, StoreError> {
            Ok(u64::try_from(row.try_get::<_, i64>(name)?).unwrap_or(0))
        };
        Ok(ShardStatus {
            observed_at: row.try_get("observed_at")?,
            last_minute: count("last_minute")?,
            retained: count("retained")?,
            retained_rows: count("retained_rows")?,
            oldest: row.try_get("oldest")?,
            past_retention: count("past_retention")?,
            stored,
        })
    }
}

/// What [`PgStore::shard_status`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStatus {
    /// The verified shard (policy, cursor, registration time).
    pub stored: StoredShard,
    /// Database time of the reading.
    pub observed_at: SystemTime,
    /// Reservations in the 60 s before `observed_at`.
    pub last_minute: u64,
    /// Reservations retained (sequences; a batch's range row counts `k`).
    pub retained: u64,
    /// Reservation rows retained (a batch is one range row).
    pub retained_rows: u64,
    /// The oldest retained reservation's time, if any.
    pub oldest: Option<SystemTime>,
    /// Rows older than the given retention (due for pruning).
    pub past_retention: u64,
}

impl PgStore {
    /// A cost-mode shard needs migration V19 (its policy bytes, its
    /// ledger): on an older database, [`MigrationError::Behind`](crate::MigrationError::Behind) before
    /// anything is written.
    pub(crate) async fn require_cost_ledger(&self) -> Result<(), StoreError> {
        self.with_response_timeout(async |db: &crate::statement::Db<'_>| {
            Ok(db
                .batch_execute("SELECT 1 FROM statek.shard_costs LIMIT 0")
                .await?)
        })
        .await
        .map_err(|e| e.schema_behind(19, "a shard that shares cost"))
    }
}
