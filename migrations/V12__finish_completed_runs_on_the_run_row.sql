-- Why: a fair run wrote its claim history twice (issue 23, "Fairness for
-- free"). The claim inserted the attempt's row into
-- `statek.run_claims` and the finish updated that row's `finished_at`.
-- The update is a second heap tuple: it is not HOT on a full page, so it
-- adds three more index entries, and it fires the row trigger that guards
-- the evidence. A batched FIFO queue writes neither. On every completed
-- run that was about a quarter of the rows the fair path wrote.
--
-- From this migration on, a completion writes the run row only. Its
-- finish time is `statek.runs.finished_at`, which a completed run keeps
-- for the rest of its life: a completed run is never claimed again (no
-- statement puts a `completed` run back to `available`). So the
-- finish time of an attempt is
--
--   run_claims.finished_at                  when it is set (a failure), else
--   runs.finished_at                        when the run is `completed` and
--                                           the claim is of its last attempt
--                                           (`run_claims.attempt = runs.attempt`), else
--   none                                    (running, lease lost, cancelled).
--
-- `statek.run_attempt_finished_at` computes exactly that, and the view
-- `statek.run_attempts` shows every claim row with it: the claim history
-- as an operator reads it. Every reader goes through one of them:
-- `PgStore::run_history` (so the demo's checks), the chaos judge, the
-- tests.
--
-- A failure still sets its claim's finish time once, because the run
-- row's `finished_at` is cleared when the run is retried. Failures are the
-- rare path. The evidence rules of V7 and V9 are unchanged: a claim row is
-- inserted only by the claim functions (V11), its only change is
-- `finished_at` set once, and it is deleted only when V9's rule allows.
-- A replayed completion (a lost acknowledgement) is still answered
-- "already recorded". The function now also reads the run, locked (FOR
-- SHARE), so a completion that committed meanwhile is seen as it is now.
--
-- The run row's `state` and `finished_at` are now evidence for a
-- completed attempt, and the runtime role may update both (heartbeat,
-- cancel, rescue and retry set them; the retention role holds UPDATE of
-- `finished_at` for its row locks). So a trigger guards them against
-- every role: a `completed` run's row never changes again, and only
-- `statek.finish_runs` (running as the table's owner) completes a run. It
-- fires only on those two cases (its WHEN clause), once per completion.
--
-- Nothing is rewritten. Claim rows of completions made before this
-- migration keep their finish time; the helper prefers it.

CREATE FUNCTION statek.run_attempt_finished_at(
    claim_finished_at timestamptz, claim_attempt integer,
    run_state text, run_attempt integer, run_finished_at timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(claim_finished_at,
                    CASE WHEN run_state = 'completed' AND claim_attempt = run_attempt
                         THEN run_finished_at END)
$$;

-- V11's `statek.finish_runs` with one change: a completion writes the run
-- row only. Completes or fails runs by their lease tokens (statek-store-pg's
-- `finish_runs`, `complete_run`, `fail_run`). One element per run in
-- input order (`ord`, 1-based): `p_kinds` 'complete' or 'fail',
-- `p_retry_secs` the delay of a failure's next attempt, `p_errors` its
-- text. Answers one row per element: the run's new state when this call
-- finished it, else whether the attempt of that token already has a finish
-- time (`statek.run_attempt_finished_at`: a replay).
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
    WITH input AS MATERIALIZED (
        SELECT i.ord, i.run_id, i.token, i.kind, i.retry_secs, i.error
        FROM unnest(p_run_ids, p_tokens, p_kinds, p_retry_secs, p_errors)
             WITH ORDINALITY AS i(run_id, token, kind, retry_secs, error, ord)
    ),
    -- The runs their token still holds, locked in run id order: two
    -- flushes naming the same runs wait for each other instead of
    -- deadlocking.
    -- Only a lease a claim function gave: a run whose token has no claim
    -- row of its attempt (a token set by hand) is not finished here.
    held AS MATERIALIZED (
        SELECT i.ord, r.run_id
        FROM input AS i JOIN statek.runs AS r ON r.run_id = i.run_id
        WHERE r.lease_token = i.token AND r.state = 'running'
          AND EXISTS (SELECT 1 FROM statek.run_claims AS c
                      WHERE c.run_id = r.run_id AND c.attempt = r.attempt
                        AND c.lease_token = i.token)
        ORDER BY r.run_id
        FOR UPDATE OF r
    ),
    finished AS (
        UPDATE statek.runs AS r
        SET state = CASE WHEN i.kind = 'complete' THEN 'completed'
                         WHEN r.attempt < r.max_attempts THEN 'available'
                         ELSE 'failed' END,
            available_at = CASE WHEN i.kind = 'fail' AND r.attempt < r.max_attempts
                                THEN clock_timestamp() + make_interval(secs => i.retry_secs)
                                ELSE r.available_at END,
            finished_at = CASE WHEN i.kind = 'fail' AND r.attempt < r.max_attempts
                               THEN NULL ELSE clock_timestamp() END,
            lease_token = NULL, lease_expires_at = NULL,
            last_error = CASE WHEN i.kind = 'fail' THEN i.error ELSE r.last_error END
        FROM held AS h JOIN input AS i ON i.ord = h.ord
        WHERE r.run_id = h.run_id AND r.lease_token = i.token AND r.state = 'running'
        RETURNING i.ord, r.run_id, i.token, i.kind, r.state, r.available_at,
                  coalesce(r.finished_at, clock_timestamp()) AS claim_finished_at
    ),
    -- Only a failure sets its claim's finish time (V12): a completion's
    -- is the run row's `finished_at`.
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
    )
    SELECT i.ord, i.run_id, f.state, f.available_at,
           e.finished_at IS NOT NULL
    FROM input AS i
    LEFT JOIN finished AS f ON f.ord = i.ord
    LEFT JOIN earlier AS e ON e.ord = i.ord
    ORDER BY i.ord;
END;
$$;

-- Every attempt's claim with its finish time: `statek.run_claims` as it
-- reads with V12's rule. A plain view (its owner's rights): no writes.
CREATE VIEW statek.run_attempts AS
    SELECT c.run_id, c.attempt, c.tenant_id, c.shard_id, c.sequence, c.lease_token,
           c.claimed_at,
           statek.run_attempt_finished_at(c.finished_at, c.attempt, r.state, r.attempt,
                                          r.finished_at) AS finished_at
    FROM statek.run_claims AS c
    JOIN statek.runs AS r ON r.run_id = c.run_id;

REVOKE ALL ON statek.run_attempts FROM PUBLIC;

-- A completed run is terminal, and only the finish function completes a
-- run: the runtime role cannot forge, move or erase a completion.
CREATE FUNCTION statek.guard_run_completion() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF OLD.state = 'completed' THEN
        RAISE EXCEPTION 'statek: run % is completed; its row is evidence and never changes',
            OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    IF NOT pg_has_role(current_user,
                       (SELECT c.relowner FROM pg_class AS c WHERE c.oid = TG_RELID),
                       'MEMBER') THEN
        RAISE EXCEPTION 'statek: only statek.finish_runs completes a run (run %)',
            OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER runs_completion_guarded
    BEFORE UPDATE ON statek.runs
    FOR EACH ROW
    WHEN (OLD.state = 'completed' OR NEW.state = 'completed')
    EXECUTE FUNCTION statek.guard_run_completion();
REVOKE ALL ON FUNCTION statek.run_attempt_finished_at(timestamptz, integer, text, integer, timestamptz)
    FROM PUBLIC;
