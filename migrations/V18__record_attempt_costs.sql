-- Why: cost fairness (issue 25, "Fair by cost, charged after the run")
-- charges each attempt what its handler reports it cost, after the run.
-- This migration records that cost as evidence, with the attempt's
-- finish and in the same statement: the first part of the ledger. Nothing
-- is charged to anyone yet (slot mode, the only mode this version runs,
-- shares slots); an operator and an audit can already read what each
-- attempt cost, and the ledger of cost mode will be the sum of these.
--
-- - `statek.runs.claim_cost` and `statek.run_claims.cost`: the cost the
--   attempt's holder recorded with its finish, 0..=2^40 units
--   (1,099,511,627,776, statek_policy::MAX_COST_PARAMETER; a handler that
--   reports more is recorded as 2^40 by the executor), NULL when it
--   reported none or was not finished by its holder (its lease expired,
--   it was rescued or cancelled). A run row holds its current attempt's
--   cost beside its claim (V13); a later claim moves both into the
--   history, as it moves the claim.
-- - `statek.run_attempts` gains the column `cost`.
-- - `statek.finish_runs` gains a sixth argument, one cost per finished
--   run (NULL: none reported). The five-argument form stays and records
--   no cost: binaries built before this migration call it, and this
--   version does when no attempt of a finish reports a cost (so it still
--   finishes runs on a database not migrated yet, as long as its
--   handlers report no cost). Whoever could
--   execute the five-argument form may execute the new one (granted
--   below, so a fleet keeps finishing runs before `statek roles apply`).
-- - A claim history row stays immutable but for the finish, set once; the
--   cost is set with it (V7's trigger, extended): neither changes after.
-- - Both claim functions copy the cost into the history with the claim
--   (`statek.claim_slots`, `statek.claim_run`: V17's statements with the
--   column added; nothing else changes in them).

ALTER TABLE statek.runs
    ADD COLUMN claim_cost bigint
        CONSTRAINT runs_claim_cost_range CHECK (claim_cost BETWEEN 0 AND 1099511627776);
ALTER TABLE statek.run_claims
    ADD COLUMN cost bigint
        CONSTRAINT run_claims_cost_range CHECK (cost BETWEEN 0 AND 1099511627776);
COMMENT ON COLUMN statek.runs.claim_cost IS
    'Cost (0..=2^40 units) the holder of the attempt on this row recorded with its finish; NULL: none reported, or not finished by its holder (V18).';
COMMENT ON COLUMN statek.run_claims.cost IS
    'Cost (0..=2^40 units) the holder of this attempt recorded with its finish; NULL: none reported, or not finished by its holder (V18).';

-- V7's rule, with the cost: a claim row changes once, when its finish time
-- is set, and its cost may be set in that same update; nothing after.
CREATE OR REPLACE FUNCTION statek.refuse_run_claim_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'statek: claim % of run % is evidence and cannot be deleted',
            OLD.attempt, OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    IF OLD.finished_at IS NOT NULL
       OR NEW.finished_at IS NULL
       OR OLD.cost IS NOT NULL
       OR (NEW.run_id, NEW.attempt, NEW.tenant_id, NEW.shard_id, NEW.sequence,
           NEW.lease_token, NEW.claimed_at)
          IS DISTINCT FROM
          (OLD.run_id, OLD.attempt, OLD.tenant_id, OLD.shard_id, OLD.sequence,
           OLD.lease_token, OLD.claimed_at) THEN
        RAISE EXCEPTION 'statek: claim % of run % is immutable but for finished_at and its cost, set once',
            OLD.attempt, OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

-- Every attempt (V13), with its cost (V18).
CREATE OR REPLACE VIEW statek.run_attempts AS
    SELECT c.run_id, c.attempt, c.tenant_id, c.shard_id, c.sequence, c.lease_token,
           c.claimed_at,
           statek.run_attempt_finished_at(c.finished_at, c.attempt, r.state, r.attempt,
                                          r.finished_at) AS finished_at,
           c.cost
    FROM statek.run_claims AS c
    JOIN statek.runs AS r ON r.run_id = c.run_id
    UNION ALL
    SELECT r.run_id, r.attempt, r.tenant_id, r.claim_shard_id, r.claim_sequence, r.claim_token,
           r.claimed_at, r.claim_finished_at, r.claim_cost
    FROM statek.runs AS r
    WHERE r.claim_token IS NOT NULL;

-- Claims for reserved slots (V17), moving the superseded attempt's cost
-- into the history with its claim.
CREATE OR REPLACE FUNCTION statek.claim_slots(
    p_sequences bigint[], p_tenants text[], p_tokens uuid[], p_lease_secs float8,
    p_shard_id text, p_max_runs bigint)
RETURNS TABLE (
    ord bigint, sequence bigint, slot_tenant text, decided boolean,
    run_id uuid, tenant_id text, payload bytea, attempt integer, max_attempts integer,
    enqueued_at timestamptz, available_at timestamptz, claimed_at timestamptz,
    lease_expires_at timestamptz, lease_token uuid, recorded bigint,
    contended boolean, limited boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF cardinality(p_tokens) IS DISTINCT FROM cardinality(p_sequences) THEN
        RAISE EXCEPTION 'statek: a claim names % slots and % lease tokens',
            cardinality(p_sequences), cardinality(p_tokens) USING ERRCODE = 'SK002';
    END IF;
    IF array_position(p_tokens, NULL) IS NOT NULL
       OR (SELECT count(DISTINCT t.token) FROM unnest(p_tokens) AS t(token)) <> cardinality(p_tokens) THEN
        RAISE EXCEPTION 'statek: every slot of a claim has its own lease token' USING ERRCODE = 'SK002';
    END IF;
    IF p_lease_secs IS NULL OR NOT (p_lease_secs BETWEEN 0.001 AND 86400) THEN
        RAISE EXCEPTION 'statek: a lease is 0.001..=86400 seconds, not %', p_lease_secs
            USING ERRCODE = 'SK002';
    END IF;
    IF p_max_runs IS NULL OR p_max_runs < 1 THEN
        RAISE EXCEPTION 'statek: a claim claims at least one run, not %', p_max_runs
            USING ERRCODE = 'SK002';
    END IF;
    -- The check across run rows and history at the end needs a fresh
    -- snapshot per statement: read committed only (as claim_allowance).
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'statek: claims must run at read committed, not %',
            current_setting('transaction_isolation') USING ERRCODE = '0A000';
    END IF;
    PERFORM statek.check_claimed_slots(p_shard_id, p_sequences, p_tenants);
    RETURN QUERY
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
    slots AS MATERIALIZED (
        SELECT s.sequence, s.tenant_id, s.token, s.ord,
               row_number() OVER (PARTITION BY s.tenant_id ORDER BY s.ord) AS nth
        FROM unnest(p_sequences, p_tenants, p_tokens) WITH ORDINALITY
             AS s(sequence, tenant_id, token, ord)
    ),
    demand AS MATERIALIZED (
        SELECT slots.tenant_id, count(*) AS wanted FROM slots GROUP BY slots.tenant_id
    ),
    -- The limits function runs only when a tenant of the claim has limits
    -- (a one-time filter in a CTE of its own). Until V17 only tenants
    -- found to have a claimable run (one probe each, `live`) were asked;
    -- now every tenant with limits is, and its limits row is locked the
    -- same way.
    limited_live AS MATERIALIZED (
        SELECT d.tenant_id, d.wanted FROM demand AS d
        WHERE EXISTS (SELECT 1 FROM statek.tenant_limits AS l WHERE l.tenant_id = d.tenant_id)
    ),
    limited_allowance AS MATERIALIZED (
        SELECT f.tenant_id, f.allowed
        FROM statek.claim_allowance(
            ARRAY(SELECT limited_live.tenant_id FROM limited_live ORDER BY limited_live.tenant_id),
            ARRAY(SELECT limited_live.wanted FROM limited_live ORDER BY limited_live.tenant_id)) AS f
        WHERE EXISTS (SELECT 1 FROM limited_live)
    ),
    -- Tenants of the claim with a rate limit: their claims are counted
    -- for it (`rate_counted`, part 2 below).
    rated AS MATERIALIZED (
        SELECT l.tenant_id FROM statek.tenant_limits AS l
        WHERE l.tenant_id IN (SELECT limited_live.tenant_id FROM limited_live)
          AND l.rate_limit IS NOT NULL
    ),
    allowance AS MATERIALIZED (
        SELECT d.tenant_id, coalesce(a.allowed, d.wanted) AS allowed
        FROM demand AS d
        LEFT JOIN limited_allowance AS a ON a.tenant_id = d.tenant_id
    ),
    picked AS MATERIALIZED (
        SELECT p.run_id, d.tenant_id, p.attempt, p.claim_token, p.claim_shard_id,
               p.claim_sequence, p.claimed_at, p.claim_finished_at, p.claim_cost,
               row_number() OVER (PARTITION BY d.tenant_id
                                  ORDER BY p.priority DESC, p.available_at, p.queue_seq) AS nth
        FROM demand AS d JOIN allowance AS a ON a.tenant_id = d.tenant_id
        CROSS JOIN now
        CROSS JOIN LATERAL (
            SELECT runs.run_id, runs.priority, runs.available_at, runs.queue_seq,
                   runs.attempt, runs.claim_token, runs.claim_shard_id, runs.claim_sequence,
                   runs.claimed_at, runs.claim_finished_at, runs.claim_cost
            FROM statek.runs
            WHERE runs.tenant_id = d.tenant_id
              AND runs.state IN ('available', 'running')
              AND runs.available_at <= now.t
              AND (runs.state = 'available' OR runs.lease_expires_at <= now.t)
              AND runs.attempt < runs.max_attempts
            ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
            LIMIT a.allowed
            FOR UPDATE OF runs SKIP LOCKED
        ) AS p
    ),
    all_pairs AS MATERIALIZED (
        SELECT s.ord, s.sequence, s.token, p.run_id,
               row_number() OVER (ORDER BY s.ord) AS rank
        FROM slots AS s
        JOIN picked AS p ON p.tenant_id = s.tenant_id AND p.nth = s.nth
    ),
    pairs AS MATERIALIZED (
        SELECT all_pairs.ord, all_pairs.sequence, all_pairs.token, all_pairs.run_id
        FROM all_pairs WHERE all_pairs.rank <= p_max_runs
    ),
    cutoff AS MATERIALIZED (
        SELECT CASE WHEN (SELECT count(*) FROM all_pairs) > p_max_runs
                    THEN (SELECT max(pairs.ord) FROM pairs)
                    ELSE (SELECT max(slots.ord) FROM slots) END AS ord
    ),
    claimed AS (
        UPDATE statek.runs AS r
        SET state = 'running',
            attempt = r.attempt + 1,
            lease_token = pairs.token,
            lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_secs),
            claimed_at = clock_timestamp(),
            claim_shard_id = p_shard_id,
            claim_sequence = pairs.sequence,
            claim_token = pairs.token,
            claim_finished_at = NULL,
            claim_cost = NULL,
            rate_counted = r.tenant_id IN (SELECT rated.tenant_id FROM rated)
        FROM pairs
        WHERE r.run_id = pairs.run_id
        RETURNING pairs.ord, r.run_id, r.tenant_id, r.payload, r.attempt, r.max_attempts,
                  r.enqueued_at, r.available_at, r.claimed_at, r.lease_expires_at, r.lease_token
    ),
    -- The attempt a claimed run's row held until now (V13), moved into
    -- the claim history as it was, with its cost (V18): superseded (its
    -- lease expired), failed, rescued or cancelled, and retried. A row without a claim token
    -- holds none (never claimed, or claimed before V13, whose claim row
    -- exists).
    superseded AS (
        INSERT INTO statek.run_claims
            (run_id, attempt, tenant_id, shard_id, sequence, lease_token, claimed_at,
             finished_at, cost)
        SELECT p.run_id, p.attempt, p.tenant_id, p.claim_shard_id, p.claim_sequence,
               p.claim_token, p.claimed_at, p.claim_finished_at, p.claim_cost
        FROM picked AS p
        WHERE p.claim_token IS NOT NULL
          AND p.run_id IN (SELECT pairs.run_id FROM pairs)
        ON CONFLICT (run_id, attempt) DO NOTHING
    ),
    -- Tenants with a decided slot left without a run: one ordered probe
    -- each for a claimable run this statement did not pick (none: idle;
    -- one, locked by another claimer or beyond the limits: contended or
    -- limited).
    short AS MATERIALIZED (
        SELECT DISTINCT s.tenant_id
        FROM slots AS s CROSS JOIN cutoff
        WHERE s.ord <= cutoff.ord AND s.ord NOT IN (SELECT pairs.ord FROM pairs)
    ),
    contention AS MATERIALIZED (
        SELECT short.tenant_id, left_over.run_id IS NOT NULL AS contended
        FROM short CROSS JOIN now
        LEFT JOIN LATERAL (
            SELECT runs.run_id
            FROM statek.runs
            WHERE runs.tenant_id = short.tenant_id
              AND runs.state IN ('available', 'running')
              AND runs.available_at <= now.t
              AND (runs.state = 'available' OR runs.lease_expires_at <= now.t)
              AND runs.attempt < runs.max_attempts
              AND runs.run_id NOT IN (SELECT all_pairs.run_id FROM all_pairs)
            ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
            LIMIT 1
        ) AS left_over ON true
    )
    SELECT s.ord, s.sequence, s.tenant_id, s.ord <= cutoff.ord,
           c.run_id, c.tenant_id, c.payload,
           c.attempt, c.max_attempts, c.enqueued_at, c.available_at, c.claimed_at,
           c.lease_expires_at, c.lease_token,
           (SELECT count(*) FROM claimed),
           c.run_id IS NULL AND coalesce(ct.contended, false),
           c.run_id IS NULL AND coalesce(ct.contended, false)
               AND s.nth > coalesce(al.allowed, s.nth)
    FROM slots AS s CROSS JOIN cutoff
    LEFT JOIN claimed AS c ON c.ord = s.ord
    LEFT JOIN contention AS ct ON ct.tenant_id = s.tenant_id
    LEFT JOIN allowance AS al ON al.tenant_id = s.tenant_id
    ORDER BY s.ord;
    -- A slot claims at most one run, ever. The unique index
    -- `runs_claim_slot_key` holds it among the attempts on run rows, the
    -- history's `run_claims_shard_sequence_key` among the moved ones; this
    -- checks across the two, in a statement of its own (a fresh snapshot,
    -- taken after any move of these slots that the claim above waited
    -- for on the unique index).
    IF EXISTS (
        SELECT 1 FROM statek.run_claims AS c
        WHERE c.shard_id = p_shard_id
          AND c.sequence BETWEEN p_sequences[1] AND p_sequences[cardinality(p_sequences)]
          AND c.sequence = ANY (p_sequences)) THEN
        RAISE EXCEPTION 'statek: a slot of shard % already claimed a run', p_shard_id
            USING ERRCODE = '23505', CONSTRAINT = 'run_claims_shard_sequence_key';
    END IF;
END;
$$;

-- One claim outside the fair order (V17), the same.
CREATE OR REPLACE FUNCTION statek.claim_run(p_tenant_id text, p_token uuid, p_lease_secs float8)
RETURNS TABLE (
    judged_at timestamptz, allowed bigint,
    run_id uuid, tenant_id text, payload bytea, attempt integer, max_attempts integer,
    enqueued_at timestamptz, available_at timestamptz, claimed_at timestamptz,
    lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_token IS NULL OR p_lease_secs IS NULL OR NOT (p_lease_secs BETWEEN 0.001 AND 86400) THEN
        RAISE EXCEPTION 'statek: a claim has a lease token and a lease of 0.001..=86400 seconds'
            USING ERRCODE = 'SK002';
    END IF;
    RETURN QUERY
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
    allowance AS MATERIALIZED (
        SELECT coalesce((
            SELECT a.allowed
            FROM statek.claim_allowance(ARRAY[p_tenant_id], ARRAY[1::bigint]) AS a
            WHERE EXISTS (SELECT 1 FROM statek.tenant_limits AS l WHERE l.tenant_id = p_tenant_id)
        ), 1) AS allowed
    ),
    candidate AS MATERIALIZED (
        SELECT runs.run_id, runs.tenant_id, runs.attempt, runs.claim_token, runs.claim_shard_id,
               runs.claim_sequence, runs.claimed_at, runs.claim_finished_at, runs.claim_cost
        FROM statek.runs CROSS JOIN now
        WHERE runs.tenant_id = p_tenant_id
          AND runs.state IN ('available', 'running')
          AND runs.available_at <= now.t
          AND (runs.state = 'available' OR runs.lease_expires_at <= now.t)
          AND runs.attempt < runs.max_attempts
        ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
        LIMIT (SELECT allowance.allowed FROM allowance)
        FOR UPDATE OF runs SKIP LOCKED
    ),
    claimed AS (
        UPDATE statek.runs AS r
        SET state = 'running',
            attempt = r.attempt + 1,
            lease_token = p_token,
            lease_expires_at = clock_timestamp() + make_interval(secs => p_lease_secs),
            claimed_at = clock_timestamp(),
            claim_shard_id = NULL,
            claim_sequence = NULL,
            claim_token = p_token,
            claim_finished_at = NULL,
            claim_cost = NULL,
            rate_counted = EXISTS (SELECT 1 FROM statek.tenant_limits AS l
                                   WHERE l.tenant_id = p_tenant_id AND l.rate_limit IS NOT NULL)
        FROM candidate
        WHERE r.run_id = candidate.run_id
        RETURNING r.run_id, r.tenant_id, r.payload, r.attempt, r.max_attempts, r.enqueued_at,
                  r.available_at, r.claimed_at, r.lease_expires_at
    ),
    superseded AS (
        INSERT INTO statek.run_claims
            (run_id, attempt, tenant_id, shard_id, sequence, lease_token, claimed_at,
             finished_at, cost)
        SELECT c.run_id, c.attempt, c.tenant_id, c.claim_shard_id, c.claim_sequence,
               c.claim_token, c.claimed_at, c.claim_finished_at, c.claim_cost
        FROM candidate AS c
        WHERE c.claim_token IS NOT NULL
        ON CONFLICT (run_id, attempt) DO NOTHING
    )
    SELECT now.t, (SELECT allowance.allowed FROM allowance),
           claimed.run_id, claimed.tenant_id, claimed.payload, claimed.attempt,
           claimed.max_attempts, claimed.enqueued_at, claimed.available_at,
           claimed.claimed_at, claimed.lease_expires_at
    FROM now LEFT JOIN claimed ON true;
END;
$$;

-- Completes or fails runs by their lease tokens (V17), recording each
-- attempt's cost with its finish.
CREATE FUNCTION statek.finish_runs(
    p_run_ids uuid[], p_tokens uuid[], p_kinds text[], p_retry_secs float8[], p_errors text[],
    p_costs bigint[])
RETURNS TABLE (
    ord bigint, run_id uuid, state text, available_at timestamptz, already_recorded boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF cardinality(p_run_ids) IS NULL
       OR cardinality(p_tokens) IS DISTINCT FROM cardinality(p_run_ids)
       OR cardinality(p_kinds) IS DISTINCT FROM cardinality(p_run_ids)
       OR cardinality(p_retry_secs) IS DISTINCT FROM cardinality(p_run_ids)
       OR cardinality(p_errors) IS DISTINCT FROM cardinality(p_run_ids)
       OR cardinality(p_costs) IS DISTINCT FROM cardinality(p_run_ids) THEN
        RAISE EXCEPTION 'statek: a finish names one run id, token, kind, retry delay, error and cost per run'
            USING ERRCODE = 'SK002';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_costs) AS c(cost)
               WHERE NOT (c.cost BETWEEN 0 AND 1099511627776)) THEN
        RAISE EXCEPTION 'statek: an attempt costs 0..=1099511627776 (2^40) units, or reports none (NULL)'
            USING ERRCODE = 'SK002';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_kinds) AS k(kind)
               WHERE k.kind IS NULL OR k.kind NOT IN ('complete', 'fail')) THEN
        RAISE EXCEPTION 'statek: a finish is ''complete'' or ''fail''' USING ERRCODE = 'SK002';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_run_ids, p_tokens, p_retry_secs) AS f(run_id, token, retry)
               WHERE f.run_id IS NULL OR f.token IS NULL OR f.retry IS NULL
                  OR NOT (f.retry BETWEEN 0 AND 31622400))
       OR (SELECT count(DISTINCT r.run_id) FROM unnest(p_run_ids) AS r(run_id))
          <> cardinality(p_run_ids) THEN
        RAISE EXCEPTION 'statek: a finish names each run once, with a token and a retry delay of 0..=31622400 seconds'
            USING ERRCODE = 'SK002';
    END IF;
    RETURN QUERY
    -- In run id order: the update below takes the runs in this order (one
    -- index probe each), so two finishes naming the same runs lock them
    -- in the same order and wait for each other instead of deadlocking.
    WITH input AS MATERIALIZED (
        SELECT i.ord, i.run_id, i.token, i.kind, i.retry_secs, i.error, i.cost
        FROM unnest(p_run_ids, p_tokens, p_kinds, p_retry_secs, p_errors, p_costs)
             WITH ORDINALITY AS i(run_id, token, kind, retry_secs, error, cost, ord)
        ORDER BY i.run_id
    ),
    now AS MATERIALIZED (SELECT clock_timestamp() AS t),
    finished AS (
        UPDATE statek.runs AS r
        SET state = CASE WHEN i.kind = 'complete' THEN 'completed'
                         WHEN r.attempt < r.max_attempts THEN 'available'
                         ELSE 'failed' END,
            available_at = CASE WHEN i.kind = 'fail' AND r.attempt < r.max_attempts
                                THEN now.t + make_interval(secs => i.retry_secs)
                                ELSE r.available_at END,
            finished_at = CASE WHEN i.kind = 'fail' AND r.attempt < r.max_attempts
                               THEN NULL ELSE now.t END,
            -- The attempt's finish time, kept with its claim on the row
            -- (V13) until a later claim moves both into the history.
            claim_finished_at = CASE WHEN r.claim_token = i.token THEN now.t
                                     ELSE r.claim_finished_at END,
            -- Its cost, with its finish (V18), in the same statement.
            claim_cost = CASE WHEN r.claim_token = i.token THEN i.cost
                              ELSE r.claim_cost END,
            lease_token = NULL, lease_expires_at = NULL,
            last_error = CASE WHEN i.kind = 'fail' THEN i.error ELSE r.last_error END
        FROM input AS i CROSS JOIN now
        -- The runs their token still holds (each row locked by this
        -- update, and re-checked on its newest version when a concurrent
        -- finish of the same run committed first). Only a lease a claim
        -- function gave: a run whose token has no claim of its attempt (a
        -- token set by hand) is not finished here. An attempt is finished
        -- once: its claim has no finish time yet.
        WHERE r.run_id = i.run_id AND r.lease_token = i.token AND r.state = 'running'
          AND ((r.claim_token = i.token AND r.claim_finished_at IS NULL)
               OR EXISTS (SELECT 1 FROM statek.run_claims AS c
                          WHERE c.run_id = r.run_id AND c.attempt = r.attempt
                            AND c.lease_token = i.token AND c.finished_at IS NULL))
        RETURNING i.ord, r.run_id, i.token, i.kind, i.cost, r.state, r.available_at,
                  now.t AS claim_finished_at
    ),
    -- A failure of an attempt claimed before V13 sets its claim row's
    -- finish time (V12); an attempt claimed since keeps it on the run row.
    history AS (
        UPDATE statek.run_claims AS c
        SET finished_at = f.claim_finished_at, cost = f.cost
        FROM finished AS f
        WHERE f.kind = 'fail'
          AND c.run_id = f.run_id AND c.lease_token = f.token AND c.finished_at IS NULL
    ),
    -- The claims of the runs not finished here and their runs, read
    -- locked (FOR SHARE): a flush of the same claims that committed
    -- meanwhile is seen as it is now (a failure on the claim row, a
    -- completion on the run row).
    earlier AS MATERIALIZED (
        SELECT i.ord,
               statek.run_attempt_finished_at(c.finished_at, c.attempt, r.state, r.attempt,
                                              r.finished_at) AS finished_at
        FROM input AS i
        JOIN statek.run_claims AS c ON c.run_id = i.run_id AND c.lease_token = i.token
        JOIN statek.runs AS r ON r.run_id = c.run_id
        WHERE i.ord NOT IN (SELECT finished.ord FROM finished)
        FOR SHARE OF c, r
    ),
    -- The same for an attempt still on its run row (V13).
    earlier_on_row AS MATERIALIZED (
        SELECT i.ord, r.claim_finished_at AS finished_at
        FROM input AS i
        JOIN statek.runs AS r ON r.run_id = i.run_id AND r.claim_token = i.token
        WHERE i.ord NOT IN (SELECT finished.ord FROM finished)
        FOR SHARE OF r
    )
    SELECT i.ord, i.run_id, f.state, f.available_at,
           coalesce(e.finished_at, o.finished_at) IS NOT NULL
    FROM input AS i
    LEFT JOIN finished AS f ON f.ord = i.ord
    LEFT JOIN earlier AS e ON e.ord = i.ord
    LEFT JOIN earlier_on_row AS o ON o.ord = i.ord
    ORDER BY i.ord;
END;
$$;

-- The form binaries built before V18 call, and this version's when no
-- attempt of the finish reports a cost: no cost recorded.
CREATE OR REPLACE FUNCTION statek.finish_runs(
    p_run_ids uuid[], p_tokens uuid[], p_kinds text[], p_retry_secs float8[], p_errors text[])
RETURNS TABLE (
    ord bigint, run_id uuid, state text, available_at timestamptz, already_recorded boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT * FROM statek.finish_runs(
        p_run_ids, p_tokens, p_kinds, p_retry_secs, p_errors,
        array_fill(NULL::bigint, ARRAY[coalesce(cardinality(p_run_ids), 0)]));
END;
$$;

REVOKE ALL ON FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[], bigint[])
    FROM PUBLIC;

-- Whoever may finish runs through the five-argument form may through the
-- new one: the grants of the old form, copied (the role profile grants
-- the same; see crates/statek-store-pg/src/roles.sql).
DO $$
DECLARE
    v_grantee regrole;
BEGIN
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole
        FROM pg_proc AS p CROSS JOIN LATERAL aclexplode(p.proacl) AS a
        WHERE p.oid = 'statek.finish_runs(uuid[], uuid[], text[], float8[], text[])'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[], bigint[]) TO %s',
                       v_grantee);
    END LOOP;
END;
$$;
