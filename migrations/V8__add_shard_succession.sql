-- Why: a policy change needed a new shard *and a drain* (stop the old
-- deployment, wait, start the new one), and nothing stopped two shards
-- from serving one worker pool at once, which voids both bounds. This
-- migration makes the hand-over one atomic, durable step that the database
-- checks for every role (issue 13, DESIGN §7):
--
-- 1. Schedules. Shards that succeed each other belong to one named
--    schedule (`schedule_id`, outside the canonical policy bytes). A shard
--    registered without one belongs to the schedule named like itself;
--    every shard registered before this migration does.
-- 2. Seal and successor. A rollout, in one transaction, locks the live
--    shard's row, seals it at its cursor N (`sealed_at_sequence` = N: its
--    last sequence is N - 1), names its successor (`successor_id`), stores
--    the seam bounds computed for that N (`seam_bounds`), and registers
--    the successor with `predecessor_id`. The successor's sequences start
--    at 0 on its own cursor.
-- 3. What the database refuses, whoever asks (the owner included):
--    - a seal that is not at the cursor, that changes anything else, that
--      names no successor or an existing shard, or a second seal; a
--      sealed row never changes again (its cursor is frozen, it is never
--      unsealed);
--    - a seal whose successor is not registered by the same transaction
--      (the successor foreign key is checked at commit);
--    - a successor whose predecessor is not sealed naming it, or is in
--      another schedule; a second successor of one shard (UNIQUE);
--    - a second first shard in a schedule (UNIQUE over schedules of shards
--      without predecessor). With at most one successor per shard and
--      successors only of sealed shards, a schedule is one chain, and only
--      its last shard is unsealed: at most one shard of a schedule accepts
--      reservations at any moment;
--    - a reservation on a sealed shard, or on a successor whose
--      predecessor is not sealed: checked in the reservation functions'
--      locked row (so a replay of an id reserved before the seal still
--      finds its original sequence: the id is looked up when nothing was
--      inserted), and again by a trigger on reservation rows, for writers
--      that bypass the functions.
--
-- Sealing needs UPDATE on the seal columns, which the role profile gives
-- only to the owner: a runtime credential registers and reserves but
-- cannot change which policy schedules a fleet.

ALTER TABLE statek.scheduler_shards
    ADD COLUMN schedule_id        text,
    ADD COLUMN predecessor_id     text
        REFERENCES statek.scheduler_shards (shard_id),
    ADD COLUMN sealed_at_sequence bigint CHECK (sealed_at_sequence >= 0),
    ADD COLUMN successor_id       text
        REFERENCES statek.scheduler_shards (shard_id) DEFERRABLE INITIALLY DEFERRED,
    ADD COLUMN sealed_at          timestamptz,
    -- One object per tenant of the successor: tenant, last_pick_before_seal
    -- (sequence in this shard, or null), first_pick_after_seal (sequence in
    -- the successor), reservations_across_seam (statek_policy::PolicySeam).
    ADD COLUMN seam_bounds        jsonb;

-- Existing shards are each the first shard of the schedule named like
-- them. The V1 trigger lets only the cursor move, so it is off for this
-- one statement inside the migration's transaction.
ALTER TABLE statek.scheduler_shards DISABLE TRIGGER scheduler_shards_immutable;
UPDATE statek.scheduler_shards SET schedule_id = shard_id;
ALTER TABLE statek.scheduler_shards ENABLE TRIGGER scheduler_shards_immutable;

ALTER TABLE statek.scheduler_shards
    ALTER COLUMN schedule_id SET NOT NULL,
    -- Same grammar as statek_policy::ScheduleId (and shard ids).
    ADD CONSTRAINT scheduler_shards_schedule_id_check CHECK (
        octet_length(schedule_id) BETWEEN 1 AND 128
        AND schedule_id ~ '^[A-Za-z0-9._:-]+$'
        AND schedule_id NOT IN ('.', '..')),
    -- The seal columns are set together or not at all.
    ADD CONSTRAINT scheduler_shards_seal_complete CHECK (
        (sealed_at_sequence IS NULL) = (successor_id IS NULL)
        AND (sealed_at_sequence IS NULL) = (sealed_at IS NULL)
        AND (sealed_at_sequence IS NULL) = (seam_bounds IS NULL)),
    ADD CONSTRAINT scheduler_shards_not_own_successor CHECK (
        successor_id <> shard_id AND predecessor_id <> shard_id),
    -- At most one successor per shard, at most one predecessor per shard.
    ADD CONSTRAINT scheduler_shards_one_successor UNIQUE (predecessor_id),
    ADD CONSTRAINT scheduler_shards_one_predecessor UNIQUE (successor_id);

-- One first shard per schedule: a second shard joins a schedule only as
-- the successor of its sealed last shard (`statek rollout`).
CREATE UNIQUE INDEX scheduler_shards_one_chain_per_schedule
    ON statek.scheduler_shards (schedule_id) WHERE predecessor_id IS NULL;

-- The V1 rule, extended: policy columns, registration time, schedule and
-- predecessor never change; an unsealed row's only change is its cursor
-- moving forwards; the one other change is the seal, exactly once, at the
-- cursor; a sealed row never changes.
CREATE OR REPLACE FUNCTION statek.refuse_shard_policy_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'statek: shard % is bound forever and cannot be deleted', OLD.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    IF NEW.shard_id IS DISTINCT FROM OLD.shard_id
       OR NEW.policy_bytes IS DISTINCT FROM OLD.policy_bytes
       OR NEW.policy_digest IS DISTINCT FROM OLD.policy_digest
       OR NEW.cycle_length IS DISTINCT FROM OLD.cycle_length
       OR NEW.registered_at IS DISTINCT FROM OLD.registered_at
       OR NEW.schedule_id IS DISTINCT FROM OLD.schedule_id
       OR NEW.predecessor_id IS DISTINCT FROM OLD.predecessor_id THEN
        RAISE EXCEPTION 'statek: the policy, schedule and predecessor of shard % are immutable',
            OLD.shard_id USING ERRCODE = 'SK001';
    END IF;
    IF OLD.sealed_at_sequence IS NOT NULL THEN
        RAISE EXCEPTION 'statek: shard % is sealed at sequence % and never changes again',
            OLD.shard_id, OLD.sealed_at_sequence USING ERRCODE = 'SK001';
    END IF;
    IF NEW.sealed_at_sequence IS NULL THEN
        IF NEW.successor_id IS NOT NULL OR NEW.sealed_at IS NOT NULL
           OR NEW.seam_bounds IS NOT NULL THEN
            RAISE EXCEPTION 'statek: shard % is sealed only by setting its seal sequence',
                OLD.shard_id USING ERRCODE = 'SK001';
        END IF;
        IF NEW.next_sequence <= OLD.next_sequence THEN
            RAISE EXCEPTION 'statek: the cursor of shard % only moves forwards', OLD.shard_id
                USING ERRCODE = 'SK001';
        END IF;
        RETURN NEW;
    END IF;
    -- The seal.
    IF NEW.next_sequence IS DISTINCT FROM OLD.next_sequence
       OR NEW.sealed_at_sequence IS DISTINCT FROM OLD.next_sequence THEN
        RAISE EXCEPTION 'statek: shard % is sealed at its cursor %, not at %',
            OLD.shard_id, OLD.next_sequence, NEW.sealed_at_sequence USING ERRCODE = 'SK001';
    END IF;
    IF NEW.successor_id IS NULL OR jsonb_typeof(NEW.seam_bounds) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'statek: a seal of shard % names its successor and its seam bounds',
            OLD.shard_id USING ERRCODE = 'SK001';
    END IF;
    IF EXISTS (SELECT 1 FROM statek.scheduler_shards AS s WHERE s.shard_id = NEW.successor_id) THEN
        RAISE EXCEPTION 'statek: the successor % of shard % must be a new shard, registered by the sealing transaction',
            NEW.successor_id, OLD.shard_id USING ERRCODE = 'SK001';
    END IF;
    NEW.sealed_at := now();
    RETURN NEW;
END;
$$;

-- A new shard: its schedule defaults to its own id; it is never born
-- sealed; it names a predecessor exactly when a sealed shard of its
-- schedule names it as successor.
CREATE FUNCTION statek.check_new_shard_succession() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_named_by text;
    v_predecessor record;
BEGIN
    NEW.schedule_id := coalesce(NEW.schedule_id, NEW.shard_id);
    -- BEFORE INSERT triggers run before ON CONFLICT: registering an
    -- existing shard again is decided by the caller's ON CONFLICT (or the
    -- primary key), not here.
    IF EXISTS (SELECT 1 FROM statek.scheduler_shards AS s WHERE s.shard_id = NEW.shard_id) THEN
        RETURN NEW;
    END IF;
    IF NEW.sealed_at_sequence IS NOT NULL OR NEW.successor_id IS NOT NULL
       OR NEW.sealed_at IS NOT NULL OR NEW.seam_bounds IS NOT NULL THEN
        RAISE EXCEPTION 'statek: shard % cannot be registered sealed', NEW.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    SELECT s.shard_id INTO v_named_by
      FROM statek.scheduler_shards AS s WHERE s.successor_id = NEW.shard_id;
    IF NEW.predecessor_id IS DISTINCT FROM v_named_by THEN
        RAISE EXCEPTION 'statek: shard % names predecessor % but is the successor of %',
            NEW.shard_id, coalesce(NEW.predecessor_id, 'none'), coalesce(v_named_by, 'none')
            USING ERRCODE = 'SK001';
    END IF;
    IF NEW.predecessor_id IS NOT NULL THEN
        SELECT s.schedule_id, s.sealed_at_sequence INTO v_predecessor
          FROM statek.scheduler_shards AS s WHERE s.shard_id = NEW.predecessor_id;
        IF v_predecessor.sealed_at_sequence IS NULL
           OR v_predecessor.schedule_id IS DISTINCT FROM NEW.schedule_id THEN
            RAISE EXCEPTION 'statek: shard % succeeds % only in its schedule % once it is sealed',
                NEW.shard_id, NEW.predecessor_id, v_predecessor.schedule_id
                USING ERRCODE = 'SK001';
        END IF;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER scheduler_shards_succession_on_insert
    BEFORE INSERT ON statek.scheduler_shards
    FOR EACH ROW EXECUTE FUNCTION statek.check_new_shard_succession();

-- A reservation row of a shard that does not accept reservations, written
-- by anyone (the functions below already refuse it in their locked row).
CREATE FUNCTION statek.refuse_reservation_on_sealed_shard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM statek.scheduler_shards AS s
               WHERE s.shard_id = NEW.shard_id AND s.sealed_at_sequence IS NOT NULL) THEN
        RAISE EXCEPTION 'statek: shard % is sealed and accepts no reservation', NEW.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER scheduler_reservations_not_on_sealed_shard
    BEFORE INSERT ON statek.scheduler_reservations
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_reservation_on_sealed_shard();

-- The reservation functions of V5, unchanged but for one condition: the
-- locked shard row must accept reservations (`accepting`: not sealed, and
-- its predecessor, if any, sealed naming it). Same signatures and result
-- columns, so grants and callers stay as they are; a caller that finds
-- nothing inserted and its id unknown reads the seal to say why.
CREATE OR REPLACE FUNCTION statek.reserve(
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
                   = s.policy_digest AS digest_ok,
               s.sealed_at_sequence IS NULL
               AND (s.predecessor_id IS NULL
                    OR EXISTS (SELECT 1 FROM statek.scheduler_shards AS p
                               WHERE p.shard_id = s.predecessor_id
                                 AND p.successor_id = s.shard_id
                                 AND p.sealed_at_sequence IS NOT NULL)) AS accepting
        FROM statek.scheduler_shards AS s
        WHERE s.shard_id = p_shard_id
        FOR UPDATE OF s
    ),
    inserted AS (
        INSERT INTO statek.scheduler_reservations AS r
            (reservation_id, shard_id, sequence, slot, policy_digest)
        SELECT p_reservation_id, p_shard_id, l.next_sequence,
               (l.next_sequence % l.cycle_length)::integer, p_policy_digest
        FROM locked AS l
        WHERE l.digest_ok AND l.accepting AND l.policy_digest = p_policy_digest
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
                   = s.policy_digest AS digest_ok,
               s.sealed_at_sequence IS NULL
               AND (s.predecessor_id IS NULL
                    OR EXISTS (SELECT 1 FROM statek.scheduler_shards AS p
                               WHERE p.shard_id = s.predecessor_id
                                 AND p.successor_id = s.shard_id
                                 AND p.sealed_at_sequence IS NOT NULL)) AS accepting
        FROM statek.scheduler_shards AS s
        WHERE s.shard_id = p_shard_id
        FOR UPDATE OF s
    ),
    head AS (
        INSERT INTO statek.scheduler_reservations AS r
            (reservation_id, shard_id, sequence, slot, policy_digest, batch_id, sequence_count)
        SELECT p_batch_id, p_shard_id, l.next_sequence,
               (l.next_sequence % l.cycle_length)::integer, p_policy_digest, p_batch_id,
               p_count::integer
        FROM locked AS l
        WHERE l.digest_ok AND l.accepting AND l.policy_digest = p_policy_digest
          AND l.cycle_length BETWEEN 1 AND 4096
          AND l.next_sequence BETWEEN 0 AND 9223372036854775807 - p_count
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
