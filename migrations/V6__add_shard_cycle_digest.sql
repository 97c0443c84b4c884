-- Why: replicas compile a shard's cycle independently, and the policy digest
-- covers the policy, not the cycle: a changed algorithm or a different build
-- could give two replicas different slot -> tenant maps without anyone
-- noticing. This migration stores the digest of the compiled cycle
-- (statek_policy::WeightedFairnessPolicy::cycle_digest, SHA-256 over
-- 'statek.cycle.v1\0' || algorithm name || '\0' || L || tenant indexes) with
-- every shard registered from now on; each replica compares its own
-- compilation with it before it ticks and refuses on a mismatch.
--
-- NULL only for shards registered before this migration (nothing to compare
-- against). Once set it never changes: its own trigger below refuses any
-- change, whoever asks, next to (not replacing) V1's policy trigger.

ALTER TABLE statek.scheduler_shards
    ADD COLUMN cycle_digest bytea CHECK (octet_length(cycle_digest) = 32);

CREATE FUNCTION statek.refuse_shard_cycle_digest_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.cycle_digest IS NOT NULL
       AND NEW.cycle_digest IS DISTINCT FROM OLD.cycle_digest THEN
        RAISE EXCEPTION 'statek: the cycle digest of shard % is immutable', OLD.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER scheduler_shards_cycle_digest_immutable
    BEFORE UPDATE ON statek.scheduler_shards
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_shard_cycle_digest_change();

-- A shard registered from here on carries its cycle digest: without it the
-- replicas' check that they all compile the same cycle would be off for
-- that shard forever (it cannot be added later: the row is immutable).
CREATE FUNCTION statek.require_cycle_digest() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.cycle_digest IS NULL THEN
        RAISE EXCEPTION 'statek: shard % must be registered with the digest of its compiled cycle',
            NEW.shard_id USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER scheduler_shards_cycle_digest_required
    BEFORE INSERT ON statek.scheduler_shards
    FOR EACH ROW EXECUTE FUNCTION statek.require_cycle_digest();
