-- Why: a fair claim cost the database more than it needed (issue 23,
-- "Fairness for free"). Three changes make it cheaper; none changes what
-- a claim or a finish answers.
--
-- Part 1: each tenant of a claim is probed once.
--
-- A claim statement sets the pace of a fair Worker under a backlog
-- (issue 23, "Fairness for free"): its claims go in sequence order, one
-- statement at a time, so each claim's time is time every tenant waits.
-- `statek.claim_slots` (V13) probed each tenant of a claim twice for its
-- claimable runs: once to find the tenants with any (`live`, an ordered
-- index probe each), then again to pick and lock them (the same probe,
-- with SKIP LOCKED). A backlogged tenant paid both on every claim.
--
-- From this migration on, the claim picks directly: each tenant of the
-- claim is probed once, by the pick. What the first probe decided follows
-- from the pick and the probe that already ran for the tenants left
-- short: a tenant whose pick took fewer runs than it had decided slots is
-- probed once more for a claimable run the statement did not take (none:
-- the slot is idle; one: contended, or limited when beyond what the
-- tenant's limits allowed), exactly as before for a tenant that had work.
-- An idle tenant costs one probe, as it did. Answers are unchanged: every
-- slot gets the run, or the class, it got from V13's statement.
--
-- One difference: `statek.claim_allowance` (which locks the tenant's
-- limits row until the claim commits) now runs for every tenant of the
-- claim that has limits, not only for those found to have a claimable
-- run. A claim of an idle tenant with limits locks its row as a claim of
-- a busy one did.
--
-- Part 1 changes no table, index or grant.

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
               p.claim_sequence, p.claimed_at, p.claim_finished_at,
               row_number() OVER (PARTITION BY d.tenant_id
                                  ORDER BY p.priority DESC, p.available_at, p.queue_seq) AS nth
        FROM demand AS d JOIN allowance AS a ON a.tenant_id = d.tenant_id
        CROSS JOIN now
        CROSS JOIN LATERAL (
            SELECT runs.run_id, runs.priority, runs.available_at, runs.queue_seq,
                   runs.attempt, runs.claim_token, runs.claim_shard_id, runs.claim_sequence,
                   runs.claimed_at, runs.claim_finished_at
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
            rate_counted = r.tenant_id IN (SELECT rated.tenant_id FROM rated)
        FROM pairs
        WHERE r.run_id = pairs.run_id
        RETURNING pairs.ord, r.run_id, r.tenant_id, r.payload, r.attempt, r.max_attempts,
                  r.enqueued_at, r.available_at, r.claimed_at, r.lease_expires_at, r.lease_token
    ),
    -- The attempt a claimed run's row held until now (V13), moved into
    -- the claim history as it was: superseded (its lease expired), failed,
    -- rescued or cancelled, and retried. A row without a claim token
    -- holds none (never claimed, or claimed before V13, whose claim row
    -- exists).
    superseded AS (
        INSERT INTO statek.run_claims
            (run_id, attempt, tenant_id, shard_id, sequence, lease_token, claimed_at,
             finished_at)
        SELECT p.run_id, p.attempt, p.tenant_id, p.claim_shard_id, p.claim_sequence,
               p.claim_token, p.claimed_at, p.claim_finished_at
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

-- One claim outside the fair order (V11), recorded on the run row (V13),
-- counted for its tenant's rate limit when it has one (V17).
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
               runs.claim_sequence, runs.claimed_at, runs.claim_finished_at
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
             finished_at)
        SELECT c.run_id, c.attempt, c.tenant_id, c.claim_shard_id, c.claim_sequence,
               c.claim_token, c.claimed_at, c.claim_finished_at
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

-- Part 2: the rate limit's count without an index entry per claim.
--
-- Why: V13 indexed every claim on a run row by tenant and claim time
-- (`runs_tenant_claimed_idx`) so that a rate limit could count a tenant's
-- recent claims. Every claimed run paid for it twice (an index entry at the
-- claim and another at the finish: neither update of a claimed row is
-- HOT), about 160 WAL bytes of the roughly 650 a fair run wrote more than
-- a run of the batched FIFO queue, for every tenant, while rate limits are
-- set for few tenants, if any.
--
-- From this migration on a run row says whether its claim counts for a
-- rate limit (`rate_counted`), and only those claims are indexed
-- (`runs_rate_counted_idx`, partial). A claim sets it when its tenant has
-- a rate limit at the claim (both claim functions, in the statement that
-- reads the tenant's limits). When a rate limit is set on a tenant that
-- had none, or its window grows, the tenant's claims on run rows inside
-- the new window are marked (a trigger on `statek.tenant_limits`, as the
-- owner), so the limit counts them exactly as V13's count did. Claims in
-- the history (`statek.run_claims`) keep their own index and always
-- count. What changes:
-- - `statek.tenant_claims_since(tenant, since)` counts the claims a rate
--   limit counts: every claim in the history, and a run row's claim when
--   it is marked. It is exact for `since` no earlier than the tenant's
--   rate window before now while the tenant has a rate limit (the only
--   way statek calls it); for a tenant without one it counts the history
--   only.
-- - A claim whose statement read the tenant's limits before a new rate
--   limit committed and that commits after the limit's marking read the
--   runs is not marked: at most the claims in flight at that moment.
-- - A completed run's row changes in one way more: the owner may mark its
--   claim (`rate_counted` from false to true, nothing else); every other
--   change is still refused (V12, V16).
-- The runtime role cannot set `rate_counted`: it has no UPDATE on
-- `statek.runs` and its INSERT names other columns (V13).

ALTER TABLE statek.runs ADD COLUMN rate_counted boolean NOT NULL DEFAULT false;

-- V16's guard, and the one change a completed row may take: its claim
-- marked for a rate limit, by the owner (the marking trigger below).
CREATE OR REPLACE FUNCTION statek.guard_run_completion() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner boolean := pg_has_role(current_user,
                                   (SELECT c.relowner FROM pg_class AS c WHERE c.oid = TG_RELID),
                                   'MEMBER');
BEGIN
    IF OLD.state = 'completed' THEN
        IF v_owner AND NEW.rate_counted AND NOT OLD.rate_counted
           AND to_jsonb(NEW) - 'rate_counted' = to_jsonb(OLD) - 'rate_counted' THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'statek: run % is completed; its row is evidence and never changes',
            OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    IF NOT v_owner THEN
        IF NEW.state = 'completed' THEN
            RAISE EXCEPTION 'statek: only statek.finish_runs completes a run (run %)',
                OLD.run_id USING ERRCODE = 'SK001';
        END IF;
        RAISE EXCEPTION 'statek: only statek''s functions set a run''s finish time (run %)',
            OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

-- The claims of tenants with a rate limit now, inside their window: the
-- claims V13's count saw that a limit counts.
UPDATE statek.runs AS r
SET rate_counted = true
FROM statek.tenant_limits AS l
WHERE l.tenant_id = r.tenant_id AND l.rate_limit IS NOT NULL
  AND r.claim_token IS NOT NULL AND NOT r.rate_counted
  AND r.claimed_at > clock_timestamp() - make_interval(secs => l.rate_window_ms / 1000.0);

CREATE INDEX runs_rate_counted_idx
    ON statek.runs (tenant_id, claimed_at)
    WHERE rate_counted;

DROP INDEX statek.runs_tenant_claimed_idx;

-- The claims a rate limit counts (see above).
CREATE OR REPLACE FUNCTION statek.tenant_claims_since(p_tenant text, p_since timestamptz)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (SELECT count(*) FROM statek.run_claims AS c
            WHERE c.tenant_id = p_tenant AND c.claimed_at > p_since)
         + (SELECT count(*) FROM statek.runs AS r
            WHERE r.tenant_id = p_tenant AND r.rate_counted
              AND r.claimed_at > p_since)
$$;

-- A rate limit set on a tenant without one, or a window that grew: the
-- tenant's claims on run rows inside the window are marked (one pass over
-- the tenant's runs, `runs_tenant_list_idx`; as the owner). They are
-- locked in run id order first, the order `statek.finish_runs` locks in,
-- so a finish of the same runs meanwhile waits instead of deadlocking.
CREATE FUNCTION statek.mark_rate_counted_claims() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    WITH marked AS MATERIALIZED (
        SELECT m.run_id FROM statek.runs AS m
        WHERE m.tenant_id = NEW.tenant_id
          AND m.claim_token IS NOT NULL AND NOT m.rate_counted
          AND m.claimed_at > clock_timestamp() - make_interval(secs => NEW.rate_window_ms / 1000.0)
        ORDER BY m.run_id
        FOR UPDATE OF m
    )
    UPDATE statek.runs AS r
    SET rate_counted = true
    FROM marked
    WHERE r.run_id = marked.run_id AND NOT r.rate_counted;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenant_limits_rate_set
    AFTER INSERT ON statek.tenant_limits
    FOR EACH ROW
    WHEN (NEW.rate_limit IS NOT NULL)
    EXECUTE FUNCTION statek.mark_rate_counted_claims();

CREATE TRIGGER tenant_limits_rate_widened
    AFTER UPDATE ON statek.tenant_limits
    FOR EACH ROW
    WHEN (NEW.rate_limit IS NOT NULL
          AND (OLD.rate_limit IS NULL OR NEW.rate_window_ms > OLD.rate_window_ms))
    EXECUTE FUNCTION statek.mark_rate_counted_claims();

REVOKE ALL ON FUNCTION statek.mark_rate_counted_claims() FROM PUBLIC;

-- Part 3: a finish locks and updates each run once.
--
-- Why: `statek.finish_runs` (V13) first locked the runs it would finish
-- (`FOR UPDATE`, in run id order) and then updated them: two passes over
-- each run, and a lock record in the WAL (about 54 bytes) per finished
-- run that a batched FIFO queue's completion does not write. The order
-- was there so that two finishes naming the same runs wait for each other
-- instead of deadlocking.
--
-- From this migration on the update locks each run as it finishes it,
-- taking the runs in run id order: the input is sorted, and the update
-- probes the primary key once per input row, in that order (the plan for
-- at most 1,024 ids against an indexed table; were another plan chosen,
-- two finishes of the same runs could deadlock, an error the caller
-- retries, SQLSTATE 40P01). The same conditions hold (the token still
-- holds the run, it is running, its attempt has no finish time yet, its
-- token is a claim's): a finish that committed first is seen on the run's
-- newest version and the run is answered "already recorded", as before.
-- Answers are unchanged.

-- Completes or fails runs by their lease tokens (V12), recording the
-- attempt's finish time on the run row for claims made since V13, in one
-- pass over the runs (V17).
CREATE OR REPLACE FUNCTION statek.finish_runs(
    p_run_ids uuid[], p_tokens uuid[], p_kinds text[], p_retry_secs float8[], p_errors text[])
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
       OR cardinality(p_errors) IS DISTINCT FROM cardinality(p_run_ids) THEN
        RAISE EXCEPTION 'statek: a finish names one run id, token, kind, retry delay and error per run'
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
        SELECT i.ord, i.run_id, i.token, i.kind, i.retry_secs, i.error
        FROM unnest(p_run_ids, p_tokens, p_kinds, p_retry_secs, p_errors)
             WITH ORDINALITY AS i(run_id, token, kind, retry_secs, error, ord)
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
        RETURNING i.ord, r.run_id, i.token, i.kind, r.state, r.available_at,
                  now.t AS claim_finished_at
    ),
    -- A failure of an attempt claimed before V13 sets its claim row's
    -- finish time (V12); an attempt claimed since keeps it on the run row.
    history AS (
        UPDATE statek.run_claims AS c
        SET finished_at = f.claim_finished_at
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
