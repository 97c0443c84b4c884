-- Why: two things the batch path of issue 12 needs.
--
-- 1. A batch reservation is one row. Until now `statek.reserve_batch`
--    wrote k rows (V4/V5), so a slot cost a row whether or not its tenant
--    had anything to run. A slot's evidence is derivable from its batch
--    (`slot = sequence mod L`), so a batch is now stored as ONE immutable
--    range row: the head row it always had (reservation_id = batch_id =
--    the batch id, `sequence` = the first sequence, `slot` = its slot,
--    the digest, `reserved_at`) plus the new column `sequence_count` = k.
--    Single reservations stay one row each, `sequence_count` = 1.
--
--    Why columns on the existing table rather than a table of its own:
--    every guarantee the table already carries then holds for ranges with
--    no second copy of it. The primary key is one id space for single and
--    batch ids, so `ON CONFLICT (reservation_id)` (committed and in-flight
--    rows) keeps a batch from being inserted twice and a single id from
--    naming a batch; UNIQUE (shard_id, sequence) holds the first sequence;
--    the V1 trigger refuses updates, the V5 trigger refuses TRUNCATE, the
--    role profile already grants the runtime role no INSERT (only the
--    SECURITY DEFINER functions write); retention prunes by the existing
--    (reserved_at, reservation_id) index, a range as one row, oldest first,
--    in batches; failover verification finds a batch by its id at its
--    first sequence as before. What no constraint can say (a range must
--    not overlap the next row nor leave a hole before it) the functions
--    keep by writing only at the locked cursor, and every reader checks
--    (statek-store-pg `reservation.rs`: `CorruptData`).
--
--    Adding a column with a constant default is a catalogue-only change.
--    Rows of batches made before this migration (k rows with one
--    batch_id, each count 1) stay readable and replayable as they are.
--    `statek.reserve_batch` keeps its signature and output columns
--    (CREATE OR REPLACE), so binaries built before V7 still reserve
--    batches during a rolling upgrade; their tail ids are no longer
--    stored, and their readers see a range as its first sequence only:
--    upgrade every binary before reading evidence.
--
-- 2. Which slot ran which run. A claim for a batch of slots records each
--    claim (every attempt, never overwritten) in `statek.run_claims`:
--    shard and sequence of the slot that claimed it, run, attempt, lease
--    token, claimed_at, and finished_at set once by complete or fail.

ALTER TABLE statek.scheduler_reservations
    ADD COLUMN sequence_count integer NOT NULL DEFAULT 1;

ALTER TABLE statek.scheduler_reservations
    ADD CONSTRAINT scheduler_reservations_range_check CHECK (
        sequence_count >= 1
        -- A range is a batch, keyed by its own id.
        AND (sequence_count = 1 OR batch_id = reservation_id)
        -- Its last sequence is a sequence.
        AND sequence <= 9223372036854775807 - sequence_count);

-- k contiguous reservations as one range row (k = p_count). Output as
-- for statek.reserve, with `sequence`/`reserved_at` of the range's first
-- sequence and `tail_rows` = the sequences it covers after the first
-- (k - 1; the name is kept from V5 for binaries built before V7).
-- p_tail_ids is NULL, or (from binaries built before V7) k - 1 ids that
-- are checked for their number and not stored.
CREATE OR REPLACE FUNCTION statek.reserve_batch(
    p_batch_id uuid,
    p_shard_id text,
    p_policy_digest bytea,
    p_count bigint,
    p_tail_ids uuid[],
    p_expected_timeline integer,
    p_synchronous_commit text
) RETURNS TABLE (
    status text,
    timeline integer,
    synchronous_commit text,
    policy_digest bytea,
    cycle_length integer,
    next_sequence bigint,
    digest_ok boolean,
    sequence bigint,
    reserved_at timestamptz,
    tail_rows bigint,
    advanced bigint
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_timeline integer;
BEGIN
    IF p_synchronous_commit IS NOT NULL THEN
        PERFORM set_config('synchronous_commit', p_synchronous_commit, true);
    END IF;
    v_timeline := statek.server_timeline();
    IF p_expected_timeline IS NOT NULL AND v_timeline IS DISTINCT FROM p_expected_timeline THEN
        RETURN QUERY SELECT 'timeline'::text, v_timeline, current_setting('synchronous_commit'),
            NULL::bytea, NULL::integer, NULL::bigint, NULL::boolean,
            NULL::bigint, NULL::timestamptz, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    IF p_count IS NULL OR p_count < 1 OR p_count > 2147483647
       OR (p_tail_ids IS NOT NULL AND cardinality(p_tail_ids) <> p_count - 1) THEN
        RAISE EXCEPTION 'statek: a batch of % reservations needs no tail ids or % of them, got %',
            p_count, p_count - 1, coalesce(cardinality(p_tail_ids), 0)
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH locked AS MATERIALIZED (
        SELECT s.policy_digest, s.cycle_length, s.next_sequence,
               sha256('\x73746174656b2e706f6c6963792e763100'::bytea || s.policy_bytes)
                   = s.policy_digest AS digest_ok
        FROM statek.scheduler_shards AS s
        WHERE s.shard_id = p_shard_id
        FOR UPDATE
    ),
    head AS (
        INSERT INTO statek.scheduler_reservations AS r
            (reservation_id, shard_id, sequence, slot, policy_digest, batch_id, sequence_count)
        SELECT p_batch_id, p_shard_id, l.next_sequence,
               (l.next_sequence % l.cycle_length)::integer, p_policy_digest, p_batch_id,
               p_count::integer
        FROM locked AS l
        WHERE l.digest_ok AND l.policy_digest = p_policy_digest
          AND l.cycle_length BETWEEN 1 AND 4096
          AND l.next_sequence BETWEEN 0 AND 9223372036854775807 - p_count
          -- Rows of a batch made before V7 left after its head was
          -- pruned: never reserve the batch a second time.
          AND NOT EXISTS (SELECT 1 FROM statek.scheduler_reservations AS o
                          WHERE o.batch_id = p_batch_id)
        ON CONFLICT (reservation_id) DO NOTHING
        RETURNING r.sequence, r.reserved_at, r.sequence_count
    ),
    moved AS (
        UPDATE statek.scheduler_shards AS s
        SET next_sequence = h.sequence + h.sequence_count
        FROM head AS h
        WHERE s.shard_id = p_shard_id
        RETURNING s.next_sequence
    )
    SELECT 'attempted'::text, v_timeline, current_setting('synchronous_commit'),
           l.policy_digest, l.cycle_length, l.next_sequence, l.digest_ok,
           h.sequence, h.reserved_at,
           coalesce(h.sequence_count - 1, 0)::bigint, (SELECT count(*) FROM moved)
    FROM locked AS l LEFT JOIN head AS h ON true;
END;
$$;

-- CREATE OR REPLACE keeps the function's owner and grants; say it again.
REVOKE ALL ON FUNCTION statek.reserve_batch(uuid, text, bytea, bigint, uuid[], integer, text)
    FROM PUBLIC;

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
