-- Why: two promises that until now rested on the Rust code alone.
--
-- 1. A runtime role could break a shard. It held INSERT on reservation
--    rows and UPDATE on the cursor, so it could write a row at any
--    sequence, slot or digest, or move a cursor forward by any amount; one
--    row at cursor + 3 halted the shard for good. From here on reservations
--    are written only by two SECURITY DEFINER functions owned by the owner
--    role, `statek.reserve` and `statek.reserve_batch`: they write a row
--    only at the locked cursor, with the shard's slot and digest, and move
--    the cursor by exactly the rows written. The role profile grants the
--    runtime role EXECUTE on them and no INSERT/UPDATE on the tables. New
--    shard rows are checked by a trigger (cursor 0, digest of the bytes,
--    cycle length = sum of the weights), and TRUNCATE of shards and
--    reservations is refused like DELETE of a shard.
--
-- 2. An acknowledged reservation could be lost and its sequence handed out
--    again: after a crash of a server whose commits did not wait for the
--    WAL flush (`synchronous_commit = off`), or after a failover to an
--    asynchronous standby. The functions set the caller's required
--    `synchronous_commit` for their own transaction (`set_config(..., true)`,
--    so it holds behind PgBouncer in transaction mode too), and refuse to
--    reserve when the server's timeline is not the one the caller last
--    reserved on: a promotion changes the timeline, and the caller then
--    re-checks its recently acknowledged reservations before it reserves on
--    the new primary (statek-store-pg `failover.rs`).
--
-- 3. A batch reservation is one row. Until now a batch wrote k rows
--    (V4), so a slot cost a row whether or not its tenant
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
--    Rows of batches made under V4 (k rows with one batch_id, each count
--    1) stay readable and replayable as they are. Binaries built before
--    V5 wrote reservations directly; upgrade every binary before reading
--    evidence (older readers see a range as its first sequence only).
--
-- The statements inside the functions are the one-statement reservations
-- of V1/V4 unchanged: lock the cursor row, insert unless the id exists
-- (ON CONFLICT sees committed and in-flight rows), advance only if a row
-- was inserted. Still one round trip per reservation: the caller sends one
-- `SELECT * FROM statek.reserve(...)`.

-- The server's current WAL timeline, or NULL on a standby (in recovery).
-- The timeline is the first 8 hex digits of the current WAL file name; it
-- changes at once on promotion (pg_control_checkpoint() shows the new one
-- only after the next checkpoint).
CREATE FUNCTION statek.server_timeline() RETURNS integer
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN pg_is_in_recovery() THEN NULL
                ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
           END
$$;

-- One reservation. Output columns (by name, read by reservation.rs):
--   status              'timeline' (nothing tried: the server's timeline is
--                       not p_expected_timeline), else 'attempted'
--   timeline            the server's timeline
--   synchronous_commit  in force for this transaction
--   policy_digest, cycle_length, next_sequence, digest_ok
--                       the locked shard row (NULL: no such shard)
--   sequence, slot, reserved_at
--                       the inserted row (NULL: nothing inserted)
--   advanced            cursor rows advanced (0 or 1)
CREATE FUNCTION statek.reserve(
    p_reservation_id uuid,
    p_shard_id text,
    p_policy_digest bytea,
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
    slot integer,
    reserved_at timestamptz,
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
            NULL::bigint, NULL::integer, NULL::timestamptz, 0::bigint;
        RETURN;
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
    inserted AS (
        INSERT INTO statek.scheduler_reservations AS r
            (reservation_id, shard_id, sequence, slot, policy_digest)
        SELECT p_reservation_id, p_shard_id, l.next_sequence,
               (l.next_sequence % l.cycle_length)::integer, p_policy_digest
        FROM locked AS l
        WHERE l.digest_ok AND l.policy_digest = p_policy_digest
          AND l.cycle_length BETWEEN 1 AND 4096
          AND l.next_sequence BETWEEN 0 AND 9223372036854775806
        ON CONFLICT (reservation_id) DO NOTHING
        RETURNING r.sequence, r.slot, r.reserved_at
    ),
    moved AS (
        UPDATE statek.scheduler_shards AS s
        SET next_sequence = i.sequence + 1
        FROM inserted AS i
        WHERE s.shard_id = p_shard_id
        RETURNING s.next_sequence
    )
    SELECT 'attempted'::text, v_timeline, current_setting('synchronous_commit'),
           l.policy_digest, l.cycle_length, l.next_sequence, l.digest_ok,
           i.sequence, i.slot, i.reserved_at,
           (SELECT count(*) FROM moved)
    FROM locked AS l LEFT JOIN inserted AS i ON true;
END;
$$;

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
-- (k - 1). p_tail_ids is NULL, or k - 1 ids that are checked for their
-- number and not stored.
CREATE FUNCTION statek.reserve_batch(
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
          -- Rows of a batch made under V4 (k rows) left after its head
          -- was pruned: never reserve the batch a second time.
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

-- Only the role profile decides who may reserve.
REVOKE ALL ON FUNCTION statek.server_timeline() FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.reserve(uuid, text, bytea, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.reserve_batch(uuid, text, bytea, bigint, uuid[], integer, text)
    FROM PUBLIC;

-- A new shard starts at sequence 0, its digest is the digest of its bytes,
-- its bytes are a canonical policy (statek_policy's encoder: a known
-- algorithm, 1..=1024 tenants with valid, distinct ids sorted by their raw
-- bytes and weights 1..=1024, no other key, no whitespace), its cycle
-- length is the sum of its weights, and its registration time is the
-- database's. Anything else would bind a shard id forever to something
-- every replica refuses (CorruptData) or that starts mid-sequence.
CREATE FUNCTION statek.check_new_shard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_doc jsonb;
    v_tenants integer;
    v_distinct integer;
    v_invalid integer;
    v_weights bigint;
    v_canonical text;
BEGIN
    IF NEW.next_sequence IS DISTINCT FROM 0 THEN
        RAISE EXCEPTION 'statek: shard % must start at sequence 0, not %',
            NEW.shard_id, NEW.next_sequence USING ERRCODE = 'SK001';
    END IF;
    IF sha256('\x73746174656b2e706f6c6963792e763100'::bytea || NEW.policy_bytes)
           IS DISTINCT FROM NEW.policy_digest THEN
        RAISE EXCEPTION 'statek: the digest of shard % is not the digest of its policy bytes',
            NEW.shard_id USING ERRCODE = 'SK001';
    END IF;
    BEGIN
        v_doc := convert_from(NEW.policy_bytes, 'UTF8')::jsonb;
    EXCEPTION WHEN others THEN
        v_doc := NULL;
    END;
    IF jsonb_typeof(v_doc) IS DISTINCT FROM 'object'
       OR jsonb_typeof(v_doc -> 'tenants') IS DISTINCT FROM 'array'
       OR (v_doc ->> 'algorithm') IS NULL
       OR (v_doc ->> 'algorithm') NOT IN ('swrr-v1', 'min-gap-v1', 'min-gap-v2') THEN
        RAISE EXCEPTION 'statek: the policy bytes of shard % are not a policy of a known algorithm',
            NEW.shard_id USING ERRCODE = 'SK001';
    END IF;
    SELECT count(*), count(DISTINCT t.value ->> 'id'),
           count(*) FILTER (WHERE NOT (
               jsonb_typeof(t.value -> 'id') = 'string'
               AND octet_length(t.value ->> 'id') BETWEEN 1 AND 128
               AND (t.value ->> 'id') ~ '^[A-Za-z0-9._:-]+$'
               AND (t.value ->> 'id') NOT IN ('.', '..')
               AND jsonb_typeof(t.value -> 'weight') = 'number'
               AND (t.value ->> 'weight') ~ '^[1-9][0-9]{0,3}$'
               AND (t.value ->> 'weight')::integer BETWEEN 1 AND 1024)),
           sum(CASE WHEN (t.value ->> 'weight') ~ '^[1-9][0-9]{0,3}$'
                    THEN (t.value ->> 'weight')::bigint END),
           '{"algorithm":"' || (v_doc ->> 'algorithm') || '","tenants":['
               || string_agg('{"id":"' || (t.value ->> 'id') || '","weight":'
                             || (t.value ->> 'weight') || '}',
                             ',' ORDER BY (t.value ->> 'id') COLLATE "C")
               || ']}'
      INTO v_tenants, v_distinct, v_invalid, v_weights, v_canonical
      FROM jsonb_array_elements(v_doc -> 'tenants') AS t(value);
    IF v_tenants NOT BETWEEN 1 AND 1024 OR v_distinct <> v_tenants OR v_invalid > 0
       OR convert_to(v_canonical, 'UTF8') IS DISTINCT FROM NEW.policy_bytes THEN
        RAISE EXCEPTION 'statek: the policy bytes of shard % are not a canonical policy (1..=1024 distinct valid tenant ids, weights 1..=1024, canonical form)',
            NEW.shard_id USING ERRCODE = 'SK001';
    END IF;
    IF v_weights IS DISTINCT FROM NEW.cycle_length THEN
        RAISE EXCEPTION 'statek: shard % has cycle length % but its weights sum to %',
            NEW.shard_id, NEW.cycle_length, v_weights USING ERRCODE = 'SK001';
    END IF;
    NEW.registered_at := now();
    RETURN NEW;
END;
$$;

CREATE TRIGGER scheduler_shards_checked_on_insert
    BEFORE INSERT ON statek.scheduler_shards
    FOR EACH ROW EXECUTE FUNCTION statek.check_new_shard();

-- Retention deletes evidence only once it is at least an hour old (the
-- shortest retention `SchedulerFairnessRetentionPolicy` accepts): a
-- younger row may belong to an acknowledgement whose retry must replay it,
-- and a failover check reads a missing row below the cursor as pruned.
-- `now()` is the deleting transaction's start, the clock prune reads.
CREATE FUNCTION statek.refuse_young_reservation_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.reserved_at > now() - interval '1 hour' THEN
        RAISE EXCEPTION 'statek: reservation % is younger than one hour and cannot be deleted',
            OLD.reservation_id USING ERRCODE = 'SK001';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER scheduler_reservations_kept_an_hour
    BEFORE DELETE ON statek.scheduler_reservations
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_young_reservation_delete();

-- TRUNCATE skips row triggers: refuse it like DELETE of a shard. Retention
-- deletes old reservation rows in batches.
CREATE FUNCTION statek.refuse_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'statek: % holds evidence and cannot be truncated', TG_TABLE_NAME
        USING ERRCODE = 'SK001';
END;
$$;

CREATE TRIGGER scheduler_shards_no_truncate
    BEFORE TRUNCATE ON statek.scheduler_shards
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();

CREATE TRIGGER scheduler_reservations_no_truncate
    BEFORE TRUNCATE ON statek.scheduler_reservations
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();
