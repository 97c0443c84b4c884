-- Why: a store that found acknowledged reservations lost in a failover
-- halted only itself (migration V5's guard, `failover.rs`): the halt lived
-- in one process, so the next process (a supervisor's restart, another
-- replica) reserved on the new timeline as if nothing had happened, and a
-- process that died before its first reservation on the new timeline never
-- detected anything (issue 22). This migration makes the halt durable and
-- shared, checked by the database for every role:
--
-- 1. Timelines. Every reservation row records the server's timeline it was
--    written on (`timeline`), and every shard the timeline of its last
--    reservation (`last_timeline`). A store that reserves on a shard for
--    the first time (it sends no expected timeline: it has no ring to
--    check) while the shard's last reservation was made on another
--    timeline halts the shard as *unverified*, inside the reservation
--    function, instead of reserving: nobody can tell whether that other
--    timeline acknowledged reservations this one lacks.
-- 2. Losses. `statek.record_reservation_loss` records what a store found
--    lost (shard, both timelines, the lost ids and sequences, when, by
--    which replica and role) in `statek.shard_halts`, and halts the shard
--    unless the store was configured to continue. No role writes that
--    table directly (the runtime role has no INSERT; a trigger sets the
--    time and the role, so a direct insert by the owner forges neither),
--    and no role changes or deletes a row of it.
-- 3. The halt. A halted shard names its first open halt (`halt_id`); the
--    reservation functions refuse it (status 'halted', nothing inserted),
--    the reservation-row trigger refuses it for writers that bypass them,
--    and the shard trigger refuses a cursor move or a seal while it is set.
-- 4. The resume. Only the owner (`statek shard resume SHARD
--    --acknowledge-loss`) runs `statek.resume_shard`: it records, per open
--    halt, a row in `statek.shard_resumes` with the reissued range (the
--    sequences that were acknowledged on the old timeline and are, or will
--    be, handed out again on the new one; computed by a trigger from the
--    halt, never given by the caller), then clears the shard's halt. A
--    resume row never changes either.

ALTER TABLE statek.scheduler_shards
    -- The server's timeline of the shard's last reservation (NULL: none
    -- since this migration).
    ADD COLUMN last_timeline integer CHECK (last_timeline >= 1),
    -- The first open halt of the shard (NULL: not halted).
    ADD COLUMN halt_id bigint;

ALTER TABLE statek.scheduler_reservations
    -- The server's timeline the row was written on (NULL: before V10).
    ADD COLUMN timeline integer CHECK (timeline >= 1);

CREATE TABLE statek.shard_halts (
    halt_id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    shard_id            text        NOT NULL REFERENCES statek.scheduler_shards (shard_id),
    -- 'lost': a store re-read its acknowledged reservations on the new
    -- timeline and found these missing or moved; 'unverified': a store
    -- with nothing to re-read met a shard last reserved on another timeline.
    cause               text        NOT NULL CHECK (cause IN ('lost', 'unverified')),
    -- False when the detecting store was configured to continue
    -- (LostReservationAction::Continue): recorded, not halted.
    halts               boolean     NOT NULL,
    from_timeline       integer     NOT NULL CHECK (from_timeline >= 1),
    to_timeline         integer     NOT NULL CHECK (to_timeline >= 1),
    -- How many acknowledged reservations the store re-read (0: unverified).
    checked             integer     NOT NULL CHECK (checked >= 0),
    -- One object per lost reservation (or batch): reservation_id,
    -- sequence (the first acknowledged), count, evidence ('missing',
    -- 'reissued' with held_by, 'moved' with moved_to).
    lost                jsonb       NOT NULL CHECK (jsonb_typeof(lost) = 'array'),
    -- The shard's cursor on the new timeline when the loss was recorded.
    cursor_at_detection bigint      NOT NULL CHECK (cursor_at_detection >= 0),
    -- The replica as it named itself (application name, process id, host).
    detected_by         text        NOT NULL CHECK (char_length(detected_by) BETWEEN 1 AND 256),
    -- Set by the insert trigger: the login role and the database time.
    detected_role       text        NOT NULL,
    detected_at         timestamptz NOT NULL,
    CONSTRAINT shard_halts_timelines_differ CHECK (from_timeline <> to_timeline),
    CONSTRAINT shard_halts_cause_matches_losses CHECK (
        (cause = 'lost') = (jsonb_array_length(lost) > 0)
        AND (cause = 'lost' OR checked = 0))
);

CREATE INDEX shard_halts_shard_idx ON statek.shard_halts (shard_id, halt_id);

CREATE TABLE statek.shard_resumes (
    halt_id         bigint      PRIMARY KEY REFERENCES statek.shard_halts (halt_id),
    shard_id        text        NOT NULL REFERENCES statek.scheduler_shards (shard_id),
    -- The reissued range [reissued_first, reissued_end): set by the insert
    -- trigger from the halt. reissued_end NULL (an unverified halt): every
    -- sequence from reissued_first that the old timeline acknowledged after
    -- its last replicated point may be handed out again; nobody knows how
    -- many.
    reissued_first  bigint      NOT NULL CHECK (reissued_first >= 0),
    reissued_end    bigint      CHECK (reissued_end > reissued_first),
    note            text        CHECK (char_length(note) <= 1024),
    -- Set by the insert trigger.
    resumed_role    text        NOT NULL,
    resumed_at      timestamptz NOT NULL
);

-- Readers accept a reissued sequence by this name: a sequence that a
-- replica acknowledged on `from_timeline` and that the new primary holds
-- (or will hold) under another reservation id.
CREATE VIEW statek.reissued_ranges AS
    SELECT r.shard_id, r.halt_id, h.cause, h.from_timeline, h.to_timeline,
           r.reissued_first, r.reissued_end, r.resumed_at
    FROM statek.shard_resumes AS r
    JOIN statek.shard_halts AS h ON h.halt_id = r.halt_id;

-- A halt row: its time and role come from the database, not the caller.
CREATE FUNCTION statek.stamp_shard_halt() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    NEW.detected_role := session_user;
    NEW.detected_at := now();
    RETURN NEW;
END;
$$;

CREATE TRIGGER shard_halts_stamped
    BEFORE INSERT ON statek.shard_halts
    FOR EACH ROW EXECUTE FUNCTION statek.stamp_shard_halt();

-- A resume row: only of a halting halt of the same shard; its range, time
-- and role come from the halt and the database, not the caller.
CREATE FUNCTION statek.stamp_shard_resume() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_halt statek.shard_halts%ROWTYPE;
BEGIN
    SELECT * INTO v_halt FROM statek.shard_halts AS h WHERE h.halt_id = NEW.halt_id;
    IF NOT FOUND OR v_halt.shard_id IS DISTINCT FROM NEW.shard_id OR NOT v_halt.halts THEN
        RAISE EXCEPTION 'statek: % is not a halt of shard %', NEW.halt_id, NEW.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    IF v_halt.cause = 'lost' THEN
        SELECT min(l.sequence), max(l.sequence + l.count)
        INTO NEW.reissued_first, NEW.reissued_end
        FROM jsonb_to_recordset(v_halt.lost) AS l(sequence bigint, count bigint);
    ELSE
        NEW.reissued_first := v_halt.cursor_at_detection;
        NEW.reissued_end := NULL;
    END IF;
    NEW.resumed_role := session_user;
    NEW.resumed_at := now();
    RETURN NEW;
END;
$$;

CREATE TRIGGER shard_resumes_stamped
    BEFORE INSERT ON statek.shard_resumes
    FOR EACH ROW EXECUTE FUNCTION statek.stamp_shard_resume();

-- Halts and resumes are evidence: never changed, never deleted, whoever asks.
CREATE FUNCTION statek.refuse_halt_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'statek: % rows are evidence and never change or go', TG_TABLE_NAME
        USING ERRCODE = 'SK001';
END;
$$;

CREATE TRIGGER shard_halts_immutable
    BEFORE UPDATE OR DELETE ON statek.shard_halts
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_halt_change();

CREATE TRIGGER shard_resumes_immutable
    BEFORE UPDATE OR DELETE ON statek.shard_resumes
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_halt_change();

CREATE TRIGGER shard_halts_no_truncate
    BEFORE TRUNCATE ON statek.shard_halts
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();

CREATE TRIGGER shard_resumes_no_truncate
    BEFORE TRUNCATE ON statek.shard_resumes
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();

-- The V8 rule, extended by the halt and the last timeline: policy columns,
-- registration time, schedule and predecessor never change; an unsealed,
-- unhalted row's only change is its cursor moving forwards (with the
-- timeline of that reservation); the halt is set to an open halt of the
-- shard and cleared only by a recorded resume, changing nothing else; a
-- halted row's cursor never moves and it is never sealed; the seal happens
-- exactly once, at the cursor; a sealed row never changes.
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
    -- The halt and the resume change nothing else, but that the resume
    -- takes the server's timeline as the shard's last (the owner
    -- acknowledged the change of timeline).
    IF NEW.halt_id IS DISTINCT FROM OLD.halt_id THEN
        IF NEW.next_sequence IS DISTINCT FROM OLD.next_sequence
           OR (NEW.last_timeline IS DISTINCT FROM OLD.last_timeline
               AND (NEW.halt_id IS NOT NULL
                    OR NEW.last_timeline IS DISTINCT FROM statek.server_timeline()))
           OR NEW.sealed_at_sequence IS NOT NULL THEN
            RAISE EXCEPTION 'statek: a halt or resume of shard % changes nothing else',
                OLD.shard_id USING ERRCODE = 'SK001';
        END IF;
        IF NEW.halt_id IS NOT NULL THEN
            IF OLD.halt_id IS NOT NULL
               OR NOT EXISTS (SELECT 1 FROM statek.shard_halts AS h
                              WHERE h.halt_id = NEW.halt_id AND h.shard_id = OLD.shard_id
                                AND h.halts
                                AND NOT EXISTS (SELECT 1 FROM statek.shard_resumes AS r
                                                WHERE r.halt_id = h.halt_id)) THEN
                RAISE EXCEPTION 'statek: shard % is halted only by an open recorded halt of its own',
                    OLD.shard_id USING ERRCODE = 'SK001';
            END IF;
        ELSIF NOT EXISTS (SELECT 1 FROM statek.shard_resumes AS r WHERE r.halt_id = OLD.halt_id) THEN
            RAISE EXCEPTION 'statek: shard % is resumed only by a recorded resume of halt %',
                OLD.shard_id, OLD.halt_id USING ERRCODE = 'SK001';
        END IF;
        RETURN NEW;
    END IF;
    IF OLD.halt_id IS NOT NULL THEN
        RAISE EXCEPTION 'statek: shard % is halted (halt %): no reservation and no seal until an owner resumes it',
            OLD.shard_id, OLD.halt_id USING ERRCODE = 'SK001';
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
        IF NEW.last_timeline IS DISTINCT FROM OLD.last_timeline
           AND NEW.last_timeline IS DISTINCT FROM statek.server_timeline() THEN
            RAISE EXCEPTION 'statek: the last timeline of shard % is the server''s timeline',
                OLD.shard_id USING ERRCODE = 'SK001';
        END IF;
        RETURN NEW;
    END IF;
    -- The seal.
    IF NEW.next_sequence IS DISTINCT FROM OLD.next_sequence
       OR NEW.sealed_at_sequence IS DISTINCT FROM OLD.next_sequence
       OR NEW.last_timeline IS DISTINCT FROM OLD.last_timeline THEN
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

-- A new shard is born unhalted, with no last timeline.
CREATE FUNCTION statek.check_new_shard_halt() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.halt_id IS NOT NULL OR NEW.last_timeline IS NOT NULL THEN
        RAISE EXCEPTION 'statek: shard % is registered without a halt or a last timeline',
            NEW.shard_id USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER scheduler_shards_halt_on_insert
    BEFORE INSERT ON statek.scheduler_shards
    FOR EACH ROW EXECUTE FUNCTION statek.check_new_shard_halt();

-- A reservation row of a shard that does not accept reservations (sealed,
-- or now halted), written by anyone: the functions below already refuse it
-- in their locked row.
CREATE OR REPLACE FUNCTION statek.refuse_reservation_on_sealed_shard() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_sealed bigint;
    v_halt bigint;
BEGIN
    SELECT s.sealed_at_sequence, s.halt_id INTO v_sealed, v_halt
    FROM statek.scheduler_shards AS s WHERE s.shard_id = NEW.shard_id;
    IF v_sealed IS NOT NULL THEN
        RAISE EXCEPTION 'statek: shard % is sealed and accepts no reservation', NEW.shard_id
            USING ERRCODE = 'SK001';
    END IF;
    IF v_halt IS NOT NULL THEN
        RAISE EXCEPTION 'statek: shard % is halted (halt %) and accepts no reservation',
            NEW.shard_id, v_halt USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

-- Records a halt of `p_shard_id` on the current (primary) server and sets
-- the shard's halt when it `halts` and the shard is neither halted nor
-- sealed. Returns no row for an unknown shard, else the halt's id, whether
-- the shard is halted now, and the database time of the record.
CREATE FUNCTION statek.insert_shard_halt(
    p_shard_id text,
    p_cause text,
    p_halts boolean,
    p_from_timeline integer,
    p_to_timeline integer,
    p_checked integer,
    p_lost jsonb,
    p_detected_by text
) RETURNS TABLE (recorded_id bigint, shard_halted boolean, recorded_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cursor bigint;
    v_halt bigint;
    v_sealed bigint;
    v_id bigint;
    v_at timestamptz;
BEGIN
    SELECT s.next_sequence, s.halt_id, s.sealed_at_sequence INTO v_cursor, v_halt, v_sealed
    FROM statek.scheduler_shards AS s WHERE s.shard_id = p_shard_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO statek.shard_halts AS h
        (shard_id, cause, halts, from_timeline, to_timeline, checked, lost,
         cursor_at_detection, detected_by)
    -- A sealed shard takes no reservation anyway: its record does not halt.
    VALUES (p_shard_id, p_cause, p_halts AND v_sealed IS NULL, p_from_timeline, p_to_timeline,
            p_checked, p_lost,
            v_cursor, left(coalesce(nullif(p_detected_by, ''), 'unnamed replica'), 256))
    RETURNING h.halt_id, h.detected_at INTO v_id, v_at;
    IF p_halts AND v_halt IS NULL AND v_sealed IS NULL THEN
        UPDATE statek.scheduler_shards SET halt_id = v_id WHERE shard_id = p_shard_id;
        v_halt := v_id;
    END IF;
    RETURN QUERY SELECT v_id, v_halt IS NOT NULL, v_at;
END;
$$;

-- What a store found lost (failover.rs): recorded as a 'lost' halt on the
-- primary, durable at `p_synchronous_commit` like a reservation. `p_lost`
-- as in `shard_halts.lost`; each entry is checked (22023 on a bad one).
CREATE FUNCTION statek.record_reservation_loss(
    p_shard_id text,
    p_halts boolean,
    p_from_timeline integer,
    p_checked integer,
    p_lost jsonb,
    p_detected_by text,
    p_synchronous_commit text
) RETURNS TABLE (recorded_id bigint, shard_halted boolean, recorded_at timestamptz)
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
    IF v_timeline IS NULL THEN
        RAISE EXCEPTION 'statek: a reservation loss is recorded on the primary, not on a standby'
            USING ERRCODE = '25006';
    END IF;
    IF p_lost IS NULL OR jsonb_typeof(p_lost) IS DISTINCT FROM 'array'
       OR jsonb_array_length(p_lost) = 0 THEN
        RAISE EXCEPTION 'statek: a reservation loss names at least one lost reservation'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (
        SELECT 1
        FROM jsonb_array_elements(p_lost) AS e(v)
        WHERE jsonb_typeof(e.v) IS DISTINCT FROM 'object'
           OR jsonb_typeof(e.v -> 'reservation_id') IS DISTINCT FROM 'string'
           OR (e.v ->> 'reservation_id') !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
           OR jsonb_typeof(e.v -> 'sequence') IS DISTINCT FROM 'number'
           OR (e.v ->> 'sequence') !~ '^[0-9]{1,18}$'
           OR jsonb_typeof(e.v -> 'count') IS DISTINCT FROM 'number'
           OR (e.v ->> 'count') !~ '^[1-9][0-9]{0,9}$'
           OR (e.v ->> 'count')::bigint > 2147483647
           OR (e.v ->> 'evidence') IS NULL
           OR (e.v ->> 'evidence') NOT IN ('missing', 'reissued', 'moved')
           OR ((e.v ->> 'evidence') = 'reissued')
              <> (jsonb_typeof(e.v -> 'held_by') IS NOT DISTINCT FROM 'string')
           OR ((e.v ->> 'evidence') = 'moved')
              <> (jsonb_typeof(e.v -> 'moved_to') IS NOT DISTINCT FROM 'number')
    ) THEN
        RAISE EXCEPTION 'statek: each lost reservation names its id, first sequence, count and evidence'
            USING ERRCODE = '22023';
    END IF;
    IF p_checked IS NULL OR p_checked < jsonb_array_length(p_lost) THEN
        RAISE EXCEPTION 'statek: % lost of % checked reservations', jsonb_array_length(p_lost), p_checked
            USING ERRCODE = '22023';
    END IF;
    IF p_from_timeline IS NULL OR p_from_timeline = v_timeline THEN
        RAISE EXCEPTION 'statek: a reservation loss is a move from another timeline to %', v_timeline
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY SELECT * FROM statek.insert_shard_halt(
        p_shard_id, 'lost', coalesce(p_halts, true), p_from_timeline, v_timeline, p_checked,
        p_lost, p_detected_by);
END;
$$;

-- Inside a reservation function, for a store with no ring to check (it
-- sent no expected timeline): a shard whose last reservation was made on
-- another timeline than `p_timeline` is halted as unverified.
CREATE FUNCTION statek.halt_unverified(p_shard_id text, p_timeline integer) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_last integer;
    v_halt bigint;
    v_sealed bigint;
BEGIN
    SELECT s.last_timeline, s.halt_id, s.sealed_at_sequence INTO v_last, v_halt, v_sealed
    FROM statek.scheduler_shards AS s WHERE s.shard_id = p_shard_id
    FOR UPDATE;
    IF FOUND AND v_last IS NOT NULL AND v_last <> p_timeline
       AND v_halt IS NULL AND v_sealed IS NULL THEN
        PERFORM statek.insert_shard_halt(
            p_shard_id, 'unverified', true, v_last, p_timeline, 0, '[]'::jsonb,
            current_setting('application_name'));
    END IF;
END;
$$;

-- Only the owner resumes (no grant to any other role): one resume row per
-- open halt of the shard (the range is the trigger's), then the shard's
-- halt is cleared and the server's timeline becomes its last (so the next
-- new store does not halt it again for the same change). Returns no row when the shard is unknown or has no
-- open halt.
CREATE FUNCTION statek.resume_shard(p_shard_id text, p_note text)
RETURNS TABLE (
    resumed_halt_id bigint,
    cause text,
    from_timeline integer,
    to_timeline integer,
    reissued_first bigint,
    reissued_end bigint,
    resumed_at timestamptz
)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_halt record;
    v_resume record;
BEGIN
    PERFORM 1 FROM statek.scheduler_shards AS s WHERE s.shard_id = p_shard_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR v_halt IN
        SELECT h.halt_id, h.cause, h.from_timeline, h.to_timeline
        FROM statek.shard_halts AS h
        WHERE h.shard_id = p_shard_id AND h.halts
          AND NOT EXISTS (SELECT 1 FROM statek.shard_resumes AS r WHERE r.halt_id = h.halt_id)
        ORDER BY h.halt_id
    LOOP
        INSERT INTO statek.shard_resumes AS r
            (halt_id, shard_id, reissued_first, note, resumed_role, resumed_at)
        VALUES (v_halt.halt_id, p_shard_id, 0, p_note, session_user, now())
        RETURNING r.reissued_first, r.reissued_end, r.resumed_at INTO v_resume;
        resumed_halt_id := v_halt.halt_id;
        cause := v_halt.cause;
        from_timeline := v_halt.from_timeline;
        to_timeline := v_halt.to_timeline;
        reissued_first := v_resume.reissued_first;
        reissued_end := v_resume.reissued_end;
        resumed_at := v_resume.resumed_at;
        RETURN NEXT;
    END LOOP;
    UPDATE statek.scheduler_shards AS s
    SET halt_id = NULL, last_timeline = coalesce(statek.server_timeline(), s.last_timeline)
    WHERE s.shard_id = p_shard_id AND s.halt_id IS NOT NULL;
END;
$$;

-- The reservation functions of V8, with the halt: same signatures and
-- result columns (grants and callers stay as they are). A store that sends
-- no expected timeline first halts a shard last reserved on another
-- timeline (`halt_unverified`); a halted shard is not `accepting` and its
-- status is 'halted' (nothing inserted; a replay of an id reserved before
-- the halt still finds its original sequence); every row written records
-- its timeline, and the cursor's move records it as the shard's last.
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
    IF p_expected_timeline IS NULL AND v_timeline IS NOT NULL THEN
        PERFORM statek.halt_unverified(p_shard_id, v_timeline);
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
                                 AND p.sealed_at_sequence IS NOT NULL))
               AND s.halt_id IS NULL AS accepting,
               s.halt_id
        FROM statek.scheduler_shards AS s
        WHERE s.shard_id = p_shard_id
        FOR UPDATE OF s
    ),
    inserted AS (
        INSERT INTO statek.scheduler_reservations AS r
            (reservation_id, shard_id, sequence, slot, policy_digest, timeline)
        SELECT p_reservation_id, p_shard_id, l.next_sequence,
               (l.next_sequence % l.cycle_length)::integer, p_policy_digest, v_timeline
        FROM locked AS l
        WHERE l.digest_ok AND l.accepting AND l.policy_digest = p_policy_digest
          AND l.cycle_length BETWEEN 1 AND 4096
          AND l.next_sequence BETWEEN 0 AND 9223372036854775806
        ON CONFLICT (reservation_id) DO NOTHING
        RETURNING r.sequence, r.slot, r.reserved_at
    ),
    moved AS (
        UPDATE statek.scheduler_shards AS s
        SET next_sequence = i.sequence + 1, last_timeline = v_timeline
        FROM inserted AS i
        WHERE s.shard_id = p_shard_id
        RETURNING s.next_sequence
    )
    SELECT CASE WHEN l.halt_id IS NULL THEN 'attempted' ELSE 'halted' END, v_timeline, current_setting('synchronous_commit'),
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
    IF p_expected_timeline IS NULL AND v_timeline IS NOT NULL THEN
        PERFORM statek.halt_unverified(p_shard_id, v_timeline);
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
                                 AND p.sealed_at_sequence IS NOT NULL))
               AND s.halt_id IS NULL AS accepting,
               s.halt_id
        FROM statek.scheduler_shards AS s
        WHERE s.shard_id = p_shard_id
        FOR UPDATE OF s
    ),
    head AS (
        INSERT INTO statek.scheduler_reservations AS r
            (reservation_id, shard_id, sequence, slot, policy_digest, batch_id, sequence_count,
             timeline)
        SELECT p_batch_id, p_shard_id, l.next_sequence,
               (l.next_sequence % l.cycle_length)::integer, p_policy_digest, p_batch_id,
               p_count::integer, v_timeline
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
        SET next_sequence = h.sequence + h.sequence_count, last_timeline = v_timeline
        FROM head AS h
        WHERE s.shard_id = p_shard_id
        RETURNING s.next_sequence
    )
    SELECT CASE WHEN l.halt_id IS NULL THEN 'attempted' ELSE 'halted' END, v_timeline, current_setting('synchronous_commit'),
           l.policy_digest, l.cycle_length, l.next_sequence, l.digest_ok,
           h.sequence, h.reserved_at,
           coalesce(h.sequence_count - 1, 0)::bigint, (SELECT count(*) FROM moved)
    FROM locked AS l LEFT JOIN head AS h ON true;
END;
$$;
