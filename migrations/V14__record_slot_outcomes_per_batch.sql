-- Why: a slot is consumed whatever its tenant's queue held, and until now
-- only a claimed slot left evidence (its attempt, on the run row or in
-- `statek.run_claims`). Whether a slot that claimed nothing found its
-- tenant idle, contended or limited lived only in a Worker's metrics, so
-- an audit could not count, per tenant, the slots it was given and could
-- not use (issue 23, "Fairness for free", item 2: "each decided slot's
-- outcome class is recorded, per batch").
--
-- From this migration on, a Worker records, once per reserved range, the
-- outcome class of every slot of the range as runs of equal classes:
-- `statek.slot_outcomes` holds one row per reservation range (the range
-- row of V5's `statek.scheduler_reservations`), with `classes` (one
-- letter per run) and `counts` (the run lengths, in slots). A range of
-- 2,560 slots that found every tenant idle is one row `classes = 'k'`,
-- `counts = {2560}`: slots decided without a claim are reported in
-- ranges, never one by one.
--
-- The classes (one letter each; docs/design.md, "Slot outcome classes"):
--   c  claimed: a run was claimed for the slot (whatever became of it);
--   i  idle: the claim asked the database, the tenant had no claimable run;
--   k  idle, known: the Worker knew the tenant empty and did not ask;
--   n  contended: claimable runs existed, other claimers held them all;
--   l  limited: the tenant's cap or rate limit let it start none;
--   x  unused: the Worker stopped (or its claim failed for good) before
--      deciding the slot; the slot is consumed all the same.
--
-- What the database holds, against every role:
-- - Rows are written only by `statek.record_slot_outcomes` (SECURITY
--   DEFINER; the runtime role may EXECUTE it and has no privilege on the
--   table), which takes the records of many ranges of one shard in one
--   call (a scheduler groups the ranges that finished while its previous
--   call was under way) and answers each. It refuses a record that does
--   not cover exactly one retained reservation range (its first sequence
--   and its length), a malformed record (unknown letters, runs that are
--   empty or not merged), and a record that calls a slot anything but `c`
--   when a claim of that slot is on record (run rows or history): a
--   claimed slot cannot be hidden. A refused record is answered
--   `refused: ...` and not written; the call's other records are (no
--   subtransaction per record). A malformed call as a whole raises SK002.
--   It cannot tell whether an unclaimed slot's tenant was really idle;
--   the audit judges that from runnable and claim times.
-- - A record is written once: the same record again is a replay (after a
--   lost acknowledgement) and changes nothing; a different one for the
--   same range is refused. No row is ever updated.
-- - A trigger checks every new row the same way (coverage and claims),
--   whoever inserts it, and sets its time; the function refuses an
--   isolation level other than read committed (0A000).
-- - What it cannot see: a claim that commits after the record. The
--   Worker records a range only when every claim of its batch was
--   answered the first time (a claim whose answer was lost may still be
--   running on the server: such a range stays unrecorded), so that only
--   a caller recording another replica's range before its claims could
--   make a record contradict a later claim. Claims win: an audit reads a
--   claim of the history over its record's letter.
-- - A record goes when its reservation range goes (ON DELETE CASCADE):
--   retention prunes both together, by database time, and nothing else
--   deletes a record.
-- - A range without a record (a Worker that crashed or stopped before
--   recording it, a record whose statement failed, a range reserved
--   before this migration) is reported by readers as unrecorded, never
--   guessed.
--
-- A range is recorded after its batch's last run finished; the check
-- above costs one index range scan over the range's claims.

CREATE TABLE statek.slot_outcomes (
    shard_id        text        NOT NULL,
    first_sequence  bigint      NOT NULL,
    -- The range's length in slots (its reservation's `sequence_count`).
    slot_count      integer     NOT NULL CHECK (slot_count BETWEEN 1 AND 2147483647),
    -- One class letter per run of equal classes, adjacent runs differ.
    classes         text        NOT NULL
        CHECK (octet_length(classes) BETWEEN 1 AND 4096
               AND classes ~ '^[ciknlx]*$'
               AND classes !~ '(.)\1'),
    -- The runs' lengths, in slots: as many as letters, each at least 1,
    -- adding up to `slot_count` (checked by the recording function).
    counts          integer[]   NOT NULL
        CHECK (cardinality(counts) = octet_length(classes)
               AND array_ndims(counts) = 1
               AND 0 < ALL (counts)),
    -- Database clock.
    recorded_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (shard_id, first_sequence),
    FOREIGN KEY (shard_id, first_sequence)
        REFERENCES statek.scheduler_reservations (shard_id, sequence) ON DELETE CASCADE
);

-- A record never changes.
CREATE FUNCTION statek.refuse_slot_outcome_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'statek: a slot outcome record never changes (shard %, first sequence %)',
        OLD.shard_id, OLD.first_sequence USING ERRCODE = 'SK001';
END;
$$;

CREATE TRIGGER slot_outcomes_never_change
    BEFORE UPDATE ON statek.slot_outcomes
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_slot_outcome_change();

-- A record goes only with its reservation range (the cascade of the
-- range's delete): a direct delete while the range is retained is
-- refused, whoever asks.
CREATE FUNCTION statek.refuse_kept_slot_outcome_delete() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM statek.scheduler_reservations AS r
               WHERE r.shard_id = OLD.shard_id AND r.sequence = OLD.first_sequence) THEN
        RAISE EXCEPTION 'statek: the slot outcome record of shard % at sequence % goes only with its reservation range',
            OLD.shard_id, OLD.first_sequence USING ERRCODE = 'SK001';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER slot_outcomes_deleted_with_their_range
    BEFORE DELETE ON statek.slot_outcomes
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_kept_slot_outcome_delete();

-- Every new record, whoever inserts it (the owner too): its range is a
-- retained reservation range of that length, its counts add up to it, no
-- slot with a claim on record is called anything but `c`, and its time is
-- the database's. `statek.record_slot_outcomes` answers the same refusals
-- before it inserts; this is the table's own line of defence.
CREATE FUNCTION statek.check_new_slot_outcome() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slots integer;
    v_sequence bigint;
BEGIN
    SELECT r.sequence_count INTO v_slots
    FROM statek.scheduler_reservations AS r
    WHERE r.shard_id = NEW.shard_id AND r.sequence = NEW.first_sequence;
    IF NOT FOUND OR v_slots IS DISTINCT FROM NEW.slot_count
       OR (SELECT sum(c) FROM unnest(NEW.counts) AS u(c)) IS DISTINCT FROM v_slots::bigint THEN
        RAISE EXCEPTION 'statek: a slot outcome record covers exactly one retained reservation range (shard %, sequence %)',
            NEW.shard_id, NEW.first_sequence USING ERRCODE = 'SK002';
    END IF;
    WITH runs_of AS (
        SELECT u.class, u.n,
               NEW.first_sequence + sum(u.n) OVER (ORDER BY u.ord) - u.n AS first_seq
        FROM unnest(string_to_array(NEW.classes, NULL), NEW.counts) WITH ORDINALITY AS u(class, n, ord)
    ),
    claims AS (
        SELECT r.claim_sequence AS sequence FROM statek.runs AS r
        WHERE r.claim_shard_id = NEW.shard_id
          AND r.claim_sequence BETWEEN NEW.first_sequence AND NEW.first_sequence + v_slots - 1
        UNION ALL
        SELECT h.sequence FROM statek.run_claims AS h
        WHERE h.shard_id = NEW.shard_id
          AND h.sequence BETWEEN NEW.first_sequence AND NEW.first_sequence + v_slots - 1
    )
    SELECT c.sequence INTO v_sequence
    FROM claims AS c
    JOIN runs_of AS o ON c.sequence >= o.first_seq AND c.sequence < o.first_seq + o.n
    WHERE o.class <> 'c'
    LIMIT 1;
    IF v_sequence IS NOT NULL THEN
        RAISE EXCEPTION 'statek: slot % of shard % claimed a run; its record must call it c',
            v_sequence, NEW.shard_id USING ERRCODE = 'SK002';
    END IF;
    NEW.recorded_at := clock_timestamp();
    RETURN NEW;
END;
$$;

CREATE TRIGGER slot_outcomes_checked
    BEFORE INSERT ON statek.slot_outcomes
    FOR EACH ROW EXECUTE FUNCTION statek.check_new_slot_outcome();

CREATE TRIGGER slot_outcomes_no_truncate
    BEFORE TRUNCATE ON statek.slot_outcomes
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();

-- Records the outcome classes of reserved ranges of one shard, many per
-- call (a scheduler groups the ranges that finished while its last call
-- was under way): record i is the range starting at p_first_sequences[i],
-- its class runs p_classes[i] (one letter each) with lengths taken in
-- order from p_counts, p_run_counts[i] of them. One row per record, in
-- call order: 'recorded', 'replayed' (the same record was there), or
-- 'refused: <why>' (nothing of that record is written; the others are).
CREATE FUNCTION statek.record_slot_outcomes(
    p_shard_id text, p_first_sequences bigint[], p_classes text[], p_run_counts integer[],
    p_counts integer[])
RETURNS TABLE (first_sequence bigint, status text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_records integer := cardinality(p_first_sequences);
    v_offset integer := 0;
    v_first bigint;
    v_letters text;
    v_runs integer;
    v_counts integer[];
    v_total bigint;
    v_slots integer;
    v_sequence bigint;
    v_class text;
    v_existing statek.slot_outcomes%ROWTYPE;
BEGIN
    IF p_shard_id IS NULL OR v_records IS NULL OR v_records < 1 OR v_records > 1024
       OR cardinality(p_classes) IS DISTINCT FROM v_records
       OR cardinality(p_run_counts) IS DISTINCT FROM v_records
       OR array_position(p_first_sequences, NULL) IS NOT NULL
       OR array_position(p_classes, NULL) IS NOT NULL
       OR array_position(p_run_counts, NULL) IS NOT NULL
       OR p_counts IS NULL OR array_position(p_counts, NULL) IS NOT NULL
       OR (SELECT sum(n) FROM unnest(p_run_counts) AS u(n)) IS DISTINCT FROM cardinality(p_counts)::bigint
       OR NOT (0 < ALL (p_run_counts)) THEN
        RAISE EXCEPTION 'statek: a slot outcome call names 1..=1024 records of one shard, each with its classes and one count per class run'
            USING ERRCODE = 'SK002';
    END IF;
    IF array_lower(p_counts, 1) <> 1 OR array_lower(p_first_sequences, 1) <> 1
       OR array_lower(p_classes, 1) <> 1 OR array_lower(p_run_counts, 1) <> 1 THEN
        RAISE EXCEPTION 'statek: a slot outcome call''s arrays start at index 1'
            USING ERRCODE = 'SK002';
    END IF;
    -- The check against claims needs a snapshot per statement that sees
    -- every committed claim: read committed only (as statek.claim_slots).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'statek: slot outcomes must be recorded at read committed, not %',
            current_setting('transaction_isolation') USING ERRCODE = '0A000';
    END IF;
    FOR i IN 1 .. v_records LOOP
        v_first := p_first_sequences[i];
        v_letters := p_classes[i];
        v_runs := p_run_counts[i];
        v_counts := p_counts[v_offset + 1 : v_offset + v_runs];
        v_offset := v_offset + v_runs;
        first_sequence := v_first;
        IF octet_length(v_letters) IS DISTINCT FROM v_runs
           OR NOT (v_runs BETWEEN 1 AND 4096) OR v_letters !~ '^[ciknlx]*$'
           OR v_letters ~ '(.)\1' OR NOT (0 < ALL (v_counts)) THEN
            status := format('refused: statek: classes %s with %s counts are not runs of the letters c, i, k, n, l, x, adjacent runs differing, each at least 1 slot',
                left(v_letters, 64), v_runs);
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT r.sequence_count INTO v_slots
        FROM statek.scheduler_reservations AS r
        WHERE r.shard_id = p_shard_id AND r.sequence = v_first;
        IF NOT FOUND THEN
            status := format('refused: statek: shard %s has no retained reservation range starting at sequence %s',
                p_shard_id, v_first);
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT sum(c) INTO v_total FROM unnest(v_counts) AS u(c);
        IF v_total IS DISTINCT FROM v_slots::bigint THEN
            status := format('refused: statek: the reservation range of shard %s at sequence %s holds %s slots, the record names %s',
                p_shard_id, v_first, v_slots, v_total);
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_sequence := NULL;
        -- A slot whose claim is on record is recorded claimed.
        WITH runs_of AS (
            SELECT u.class, u.n, v_first + sum(u.n) OVER (ORDER BY u.ord) - u.n AS first_seq
            FROM unnest(string_to_array(v_letters, NULL), v_counts) WITH ORDINALITY AS u(class, n, ord)
        ),
        claims AS (
            SELECT r.claim_sequence AS sequence FROM statek.runs AS r
            WHERE r.claim_shard_id = p_shard_id
              AND r.claim_sequence BETWEEN v_first AND v_first + v_slots - 1
            UNION ALL
            SELECT h.sequence FROM statek.run_claims AS h
            WHERE h.shard_id = p_shard_id
              AND h.sequence BETWEEN v_first AND v_first + v_slots - 1
        )
        SELECT c.sequence, o.class INTO v_sequence, v_class
        FROM claims AS c
        JOIN runs_of AS o ON c.sequence >= o.first_seq AND c.sequence < o.first_seq + o.n
        WHERE o.class <> 'c'
        ORDER BY c.sequence
        LIMIT 1;
        IF v_sequence IS NOT NULL THEN
            status := format('refused: statek: slot %s of shard %s claimed a run but the record calls it %s',
                v_sequence, p_shard_id, v_class);
            RETURN NEXT;
            CONTINUE;
        END IF;
        INSERT INTO statek.slot_outcomes AS o (shard_id, first_sequence, slot_count, classes, counts)
        VALUES (p_shard_id, v_first, v_slots, v_letters, v_counts)
        ON CONFLICT (shard_id, first_sequence) DO NOTHING;
        IF FOUND THEN
            status := 'recorded';
        ELSE
            SELECT * INTO v_existing FROM statek.slot_outcomes AS o
            WHERE o.shard_id = p_shard_id AND o.first_sequence = v_first;
            IF v_existing.classes = v_letters AND v_existing.counts = v_counts THEN
                status := 'replayed';
            ELSE
                status := format('refused: statek: the reservation range of shard %s at sequence %s already has another outcome record',
                    p_shard_id, v_first);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION statek.record_slot_outcomes(text, bigint[], text[], integer[], integer[])
    FROM PUBLIC;
