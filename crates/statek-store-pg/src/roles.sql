-- statek role profile: owner (migrations), runtime (register, reserve,
-- run queue), retention (prune). Applied by PgStore::apply_role_profile
-- with {owner}, {runtime} and {retention} replaced by quoted role names.
-- Idempotent; re-apply after every migration.

ALTER SCHEMA statek OWNER TO {owner};
ALTER TABLE statek.scheduler_shards OWNER TO {owner};
ALTER TABLE statek.scheduler_reservations OWNER TO {owner};
ALTER TABLE statek.runs OWNER TO {owner};
ALTER TABLE statek.run_claims OWNER TO {owner};
ALTER TABLE statek.refinery_schema_history OWNER TO {owner};
ALTER FUNCTION statek.refuse_shard_policy_change() OWNER TO {owner};
ALTER FUNCTION statek.refuse_reservation_update() OWNER TO {owner};
ALTER FUNCTION statek.notify_run_available() OWNER TO {owner};
ALTER FUNCTION statek.server_timeline() OWNER TO {owner};
ALTER FUNCTION statek.reserve(uuid, text, bytea, integer, text) OWNER TO {owner};
ALTER FUNCTION statek.reserve_batch(uuid, text, bytea, bigint, uuid[], integer, text) OWNER TO {owner};
ALTER FUNCTION statek.check_new_shard() OWNER TO {owner};
ALTER FUNCTION statek.refuse_truncate() OWNER TO {owner};
ALTER FUNCTION statek.refuse_young_reservation_delete() OWNER TO {owner};
ALTER FUNCTION statek.refuse_shard_cycle_digest_change() OWNER TO {owner};
ALTER FUNCTION statek.require_cycle_digest() OWNER TO {owner};
ALTER FUNCTION statek.refuse_run_claim_change() OWNER TO {owner};
ALTER FUNCTION statek.check_new_shard_succession() OWNER TO {owner};
ALTER FUNCTION statek.refuse_reservation_on_sealed_shard() OWNER TO {owner};
ALTER TABLE statek.tenant_limits OWNER TO {owner};
ALTER FUNCTION statek.claim_allowance(text[], bigint[]) OWNER TO {owner};
ALTER FUNCTION statek.notify_runs_inserted() OWNER TO {owner};
ALTER FUNCTION statek.run_claim_deletable(uuid, text, bigint, timestamptz) OWNER TO {owner};
ALTER FUNCTION statek.refuse_kept_run_claim_delete() OWNER TO {owner};
ALTER TABLE statek.shard_halts OWNER TO {owner};
ALTER TABLE statek.shard_resumes OWNER TO {owner};
ALTER VIEW statek.reissued_ranges OWNER TO {owner};
ALTER FUNCTION statek.stamp_shard_halt() OWNER TO {owner};
ALTER FUNCTION statek.stamp_shard_resume() OWNER TO {owner};
ALTER FUNCTION statek.refuse_halt_change() OWNER TO {owner};
ALTER FUNCTION statek.check_new_shard_halt() OWNER TO {owner};
ALTER FUNCTION statek.insert_shard_halt(text, text, boolean, integer, integer, integer, jsonb, text)
    OWNER TO {owner};
ALTER FUNCTION statek.record_reservation_loss(text, boolean, integer, integer, jsonb, text, text)
    OWNER TO {owner};
ALTER FUNCTION statek.halt_unverified(text, integer) OWNER TO {owner};
ALTER FUNCTION statek.resume_shard(text, text) OWNER TO {owner};
ALTER TABLE statek.shard_slot_maps OWNER TO {owner};
ALTER FUNCTION statek.refuse_slot_map_change() OWNER TO {owner};
ALTER FUNCTION statek.attach_slot_map(text, smallint[]) OWNER TO {owner};
ALTER FUNCTION statek.check_claimed_slots(text, bigint[], text[]) OWNER TO {owner};
ALTER FUNCTION statek.claim_slots(bigint[], text[], uuid[], float8, text, bigint) OWNER TO {owner};
ALTER TABLE statek.cost_claims_open OWNER TO {owner};
ALTER FUNCTION statek.claim_cost_slots(bigint[], text[], uuid[], float8, text, bigint)
    OWNER TO {owner};
ALTER TYPE statek.slot_claim_answer OWNER TO {owner};
ALTER FUNCTION statek.cycle_picks_through(integer[], integer, bigint) OWNER TO {owner};
ALTER TABLE statek.shard_costs OWNER TO {owner};
ALTER FUNCTION statek.record_shard_costs() OWNER TO {owner};
ALTER FUNCTION statek.refuse_shard_costs_change() OWNER TO {owner};
ALTER TABLE statek.cost_credits OWNER TO {owner};
ALTER TABLE statek.cost_credit_progress OWNER TO {owner};
ALTER TABLE statek.cost_charges OWNER TO {owner};
ALTER FUNCTION statek.add_cost_charge(text, text, bigint) OWNER TO {owner};
ALTER FUNCTION statek.charge_cost_attempt() OWNER TO {owner};
ALTER FUNCTION statek.claim_run(text, uuid, float8) OWNER TO {owner};
ALTER FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[]) OWNER TO {owner};
ALTER FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[], bigint[])
    OWNER TO {owner};
ALTER FUNCTION statek.run_attempt_finished_at(timestamptz, integer, text, integer, timestamptz)
    OWNER TO {owner};
ALTER VIEW statek.run_attempts OWNER TO {owner};
ALTER FUNCTION statek.guard_run_completion() OWNER TO {owner};
ALTER FUNCTION statek.tenant_claims_since(text, timestamptz) OWNER TO {owner};
ALTER FUNCTION statek.refuse_kept_run_delete() OWNER TO {owner};
ALTER FUNCTION statek.mark_rate_counted_claims() OWNER TO {owner};
ALTER FUNCTION statek.heartbeat_run(uuid, uuid, float8) OWNER TO {owner};
ALTER FUNCTION statek.cancel_run(uuid) OWNER TO {owner};
ALTER FUNCTION statek.rescue_expired_run(uuid, uuid) OWNER TO {owner};
ALTER FUNCTION statek.retry_run(uuid, integer) OWNER TO {owner};
ALTER TABLE statek.slot_outcomes OWNER TO {owner};
ALTER FUNCTION statek.refuse_slot_outcome_change() OWNER TO {owner};
ALTER FUNCTION statek.refuse_kept_slot_outcome_delete() OWNER TO {owner};
ALTER FUNCTION statek.check_new_slot_outcome() OWNER TO {owner};
ALTER FUNCTION statek.record_slot_outcomes(text, bigint[], text[], integer[], integer[]) OWNER TO {owner};

-- Nobody else sees anything unless granted below.
REVOKE ALL ON SCHEMA statek FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA statek FROM PUBLIC, {runtime}, {retention};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA statek FROM PUBLIC, {runtime}, {retention};
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA statek FROM PUBLIC, {runtime}, {retention};
GRANT USAGE ON SCHEMA statek TO {runtime}, {retention};

-- Runtime: register (insert a shard; a trigger checks the new row),
-- reserve (only through the SECURITY DEFINER functions, which write a row
-- only at the locked cursor with the shard's slot and digest and move the
-- cursor by exactly the rows written), run queue (insert, and update of
-- the columns heartbeat, cancel, lease rescue and retry set). Claims and
-- finishes, the only writers of the claim history, go through the
-- SECURITY DEFINER functions of migration V11, which check each slot
-- against the reservation ranges and the shard's slot map: the runtime
-- role cannot write claim history itself, nor change a run's tenant,
-- payload, attempt, claim time or priority.
-- No INSERT of reservation rows, no UPDATE of shards, no DELETE anywhere.
-- Register (INSERT) but never seal: a seal (UPDATE of the seal columns,
-- `statek rollout`) needs the owner, so a runtime credential cannot change
-- which policy schedules a fleet (migration V8).
GRANT SELECT, INSERT ON statek.scheduler_shards TO {runtime};
GRANT SELECT ON statek.scheduler_reservations TO {runtime};
GRANT EXECUTE ON FUNCTION statek.server_timeline() TO {runtime};
GRANT EXECUTE ON FUNCTION statek.reserve(uuid, text, bytea, integer, text) TO {runtime};
GRANT EXECUTE ON FUNCTION statek.reserve_batch(uuid, text, bytea, bigint, uuid[], integer, text)
    TO {runtime};
-- Runs (migration V13): the runtime role inserts only what an enqueue
-- sets (a new run is available, attempt 0, unclaimed) and updates none:
-- claim, finish, heartbeat, cancel, rescue and retry are the functions
-- below.
GRANT SELECT ON statek.runs TO {runtime};
GRANT INSERT (run_id, tenant_id, payload, max_attempts, available_at, idempotency_key, priority)
    ON statek.runs TO {runtime};
GRANT EXECUTE ON FUNCTION statek.heartbeat_run(uuid, uuid, float8) TO {runtime};
GRANT EXECUTE ON FUNCTION statek.cancel_run(uuid) TO {runtime};
GRANT EXECUTE ON FUNCTION statek.rescue_expired_run(uuid, uuid) TO {runtime};
GRANT EXECUTE ON FUNCTION statek.retry_run(uuid, integer) TO {runtime};
GRANT SELECT ON statek.run_claims, statek.run_attempts, statek.shard_slot_maps TO {runtime};
GRANT EXECUTE ON FUNCTION statek.attach_slot_map(text, smallint[]) TO {runtime};
GRANT EXECUTE ON FUNCTION statek.claim_slots(bigint[], text[], uuid[], float8, text, bigint)
    TO {runtime};
-- Cost mode (V19): claims of a cost shard's slots; the ledger is read by
-- `statek status`, `PgStore::cost_balances` and `statek audit` (the
-- credit progress and its cut credits, V20), written only by statek's
-- functions.
GRANT EXECUTE ON FUNCTION statek.claim_cost_slots(bigint[], text[], uuid[], float8, text, bigint)
    TO {runtime};
GRANT SELECT ON statek.shard_costs, statek.cost_credits, statek.cost_charges,
    statek.cost_credit_progress TO {runtime};
GRANT EXECUTE ON FUNCTION statek.claim_run(text, uuid, float8) TO {runtime};
GRANT EXECUTE ON FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[])
    TO {runtime};
GRANT EXECUTE ON FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[], bigint[])
    TO {runtime};
-- An attempt's finish time as the evidence records it (V12): run history.
GRANT EXECUTE ON FUNCTION
    statek.run_attempt_finished_at(timestamptz, integer, text, integer, timestamptz)
    TO {runtime};
GRANT USAGE ON ALL SEQUENCES IN SCHEMA statek TO {runtime};
-- Tenant limits: the runtime role reads them; claims lock their rows only
-- through the SECURITY DEFINER `claim_allowance`. Only the owner changes
-- them (`statek limits set|clear`).
GRANT SELECT ON statek.tenant_limits TO {runtime};
-- Halts (migration V10): the runtime role reads them and records what it
-- found lost only through the SECURITY DEFINER `record_reservation_loss`;
-- it cannot write either table, and only the owner resumes
-- (`statek.resume_shard`, `statek shard resume`).
GRANT SELECT ON statek.shard_halts, statek.shard_resumes, statek.reissued_ranges
    TO {runtime}, {retention};
GRANT EXECUTE ON FUNCTION
    statek.record_reservation_loss(text, boolean, integer, integer, jsonb, text, text)
    TO {runtime};
GRANT EXECUTE ON FUNCTION statek.claim_allowance(text[], bigint[]) TO {runtime};
-- The rate limit's count (V13), for the Worker's probe of claimable work.
GRANT EXECUTE ON FUNCTION statek.tenant_claims_since(text, timestamptz) TO {runtime};
-- Slot outcome records (V14): read by both roles, written only through
-- the SECURITY DEFINER `record_slot_outcomes`; a record is deleted only
-- by its reservation range's delete (a cascade run as the table owner).
GRANT SELECT ON statek.slot_outcomes TO {runtime}, {retention};
GRANT EXECUTE ON FUNCTION statek.record_slot_outcomes(text, bigint[], text[], integer[], integer[])
    TO {runtime};

-- Retention: find and delete old reservation rows. The column UPDATE grant
-- exists only because FOR UPDATE row locks require one; the immutability
-- trigger refuses every actual update.
GRANT SELECT, DELETE ON statek.scheduler_reservations TO {retention};
GRANT UPDATE (reserved_at) ON statek.scheduler_reservations TO {retention};
-- Retention of finished runs: delete old finished runs and their claim
-- history; a trigger lets only claims that `run_claim_deletable` agrees
-- to go. UPDATE (finished_at) only for the FOR UPDATE row locks.
GRANT SELECT, DELETE ON statek.runs TO {retention};
GRANT UPDATE (finished_at) ON statek.runs TO {retention};
GRANT SELECT, DELETE ON statek.run_claims TO {retention};
GRANT EXECUTE ON FUNCTION statek.run_claim_deletable(uuid, text, bigint, timestamptz)
    TO {retention};
