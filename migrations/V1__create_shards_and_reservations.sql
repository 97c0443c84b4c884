-- Why: statek's fairness guarantee rests on one durable, gapless sequence per
-- shard. This migration creates the shard table (the immutable policy binding
-- plus the only mutable column, the cursor `next_sequence`) and the
-- reservation table (one row per reserved sequence, the evidence that the
-- global order was kept). Immutability is enforced by the database itself,
-- whoever connects, not only by the Rust code: see the triggers at the end.
--
-- The schema `statek` is created by `migrate()` before refinery runs, because
-- refinery keeps its history table inside it.

CREATE TABLE statek.scheduler_shards (
    -- Same grammar as statek_policy::SchedulerShardId.
    shard_id        text        PRIMARY KEY
        CHECK (octet_length(shard_id) BETWEEN 1 AND 128
               AND shard_id ~ '^[A-Za-z0-9._:-]+$'
               AND shard_id NOT IN ('.', '..')),
    -- Canonical policy bytes (statek_policy::WeightedFairnessPolicy::canonical_bytes).
    policy_bytes    bytea       NOT NULL CHECK (octet_length(policy_bytes) > 0),
    -- SHA-256 over 'statek.policy.v1\0' || policy_bytes.
    policy_digest   bytea       NOT NULL CHECK (octet_length(policy_digest) = 32),
    -- L, the cycle length (sum of weights).
    cycle_length    integer     NOT NULL CHECK (cycle_length BETWEEN 1 AND 4096),
    -- The next sequence to hand out; the only column that ever changes.
    next_sequence   bigint      NOT NULL DEFAULT 0 CHECK (next_sequence >= 0),
    registered_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE statek.scheduler_reservations (
    -- Client-made UUIDv7; unique across all shards (idempotency key).
    reservation_id  uuid        PRIMARY KEY,
    shard_id        text        NOT NULL REFERENCES statek.scheduler_shards (shard_id),
    sequence        bigint      NOT NULL CHECK (sequence >= 0),
    -- slot = sequence mod cycle_length, checked again on every read.
    slot            integer     NOT NULL CHECK (slot BETWEEN 0 AND 4095),
    policy_digest   bytea       NOT NULL CHECK (octet_length(policy_digest) = 32),
    -- Database clock: all replicas share one time source for retention.
    reserved_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT scheduler_reservations_shard_sequence_key UNIQUE (shard_id, sequence)
);

-- Oldest-first retention: prune walks this index from the left.
CREATE INDEX scheduler_reservations_retention_idx
    ON statek.scheduler_reservations (reserved_at, reservation_id);

-- Policy columns never change after insert; shard rows are never deleted.
CREATE FUNCTION statek.refuse_shard_policy_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'statek: shard % is bound forever and cannot be deleted', OLD.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    IF NEW.shard_id IS DISTINCT FROM OLD.shard_id
       OR NEW.policy_bytes IS DISTINCT FROM OLD.policy_bytes
       OR NEW.policy_digest IS DISTINCT FROM OLD.policy_digest
       OR NEW.cycle_length IS DISTINCT FROM OLD.cycle_length
       OR NEW.registered_at IS DISTINCT FROM OLD.registered_at THEN
        RAISE EXCEPTION 'statek: the policy of shard % is immutable', OLD.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    -- The only allowed update: the cursor moves forwards.
    IF NEW.next_sequence <= OLD.next_sequence THEN
        RAISE EXCEPTION 'statek: the cursor of shard % only moves forwards', OLD.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER scheduler_shards_immutable
    BEFORE UPDATE OR DELETE ON statek.scheduler_shards
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_shard_policy_change();

-- Reservation rows are evidence: never updated (pruning deletes whole rows).
CREATE FUNCTION statek.refuse_reservation_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'statek: reservation % is immutable', OLD.reservation_id
        USING ERRCODE = 'SK001';
END;
$$;

CREATE TRIGGER scheduler_reservations_immutable
    BEFORE UPDATE ON statek.scheduler_reservations
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_reservation_update();
