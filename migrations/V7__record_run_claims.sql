-- Why: the batch path of issue 12 needs the database to show which slot
-- ran which run (V5 stores a batch as one range row). A claim for a batch
-- of slots records each claim (every attempt, never overwritten) in
-- `statek.run_claims`: shard and sequence of the slot that claimed it,
-- run, attempt, lease token, claimed_at, and finished_at set once by
-- complete or fail.

-- Every claim of a run, one row per attempt. `shard_id`/`sequence` name
-- the slot that claimed it (NULL for claims made without a slot,
-- `PgStore::claim_run`). A slot claims at most one run, ever: UNIQUE
-- (shard_id, sequence). The primary key (run_id, attempt) means a later
-- attempt adds a row and never overwrites an earlier one. `shard_id` is
-- deliberately not a foreign key: its check would take a KEY SHARE lock
-- on the shard row, which conflicts with the cursor lock (FOR UPDATE) of
-- every reservation, so claims and reservations would wait for each
-- other. It has the grammar of a shard id instead.
CREATE TABLE statek.run_claims (
    run_id       uuid        NOT NULL REFERENCES statek.runs (run_id),
    attempt      integer     NOT NULL CHECK (attempt >= 1),
    tenant_id    text        NOT NULL,
    shard_id     text
        CHECK (octet_length(shard_id) BETWEEN 1 AND 128
               AND shard_id ~ '^[A-Za-z0-9._:-]+$'
               AND shard_id NOT IN ('.', '..')),
    sequence     bigint      CHECK (sequence >= 0),
    lease_token  uuid        NOT NULL,
    claimed_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    PRIMARY KEY (run_id, attempt),
    CONSTRAINT run_claims_slot_complete CHECK ((shard_id IS NULL) = (sequence IS NULL)),
    CONSTRAINT run_claims_shard_sequence_key UNIQUE (shard_id, sequence)
);

-- Complete and fail find the claim by (run_id, lease_token): the primary
-- key's run_id prefix, a handful of rows per run.

-- A claim row is evidence: the only change ever allowed is setting
-- finished_at once. No deletes, no TRUNCATE.
CREATE FUNCTION statek.refuse_run_claim_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'statek: claim % of run % is evidence and cannot be deleted',
            OLD.attempt, OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    IF OLD.finished_at IS NOT NULL
       OR NEW.finished_at IS NULL
       OR (NEW.run_id, NEW.attempt, NEW.tenant_id, NEW.shard_id, NEW.sequence,
           NEW.lease_token, NEW.claimed_at)
          IS DISTINCT FROM
          (OLD.run_id, OLD.attempt, OLD.tenant_id, OLD.shard_id, OLD.sequence,
           OLD.lease_token, OLD.claimed_at) THEN
        RAISE EXCEPTION 'statek: claim % of run % is immutable but for finished_at, set once',
            OLD.attempt, OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER run_claims_immutable
    BEFORE UPDATE OR DELETE ON statek.run_claims
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_run_claim_change();

CREATE TRIGGER run_claims_no_truncate
    BEFORE TRUNCATE ON statek.run_claims
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();
