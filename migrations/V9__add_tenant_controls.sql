-- Why: the fair order decides whose turn a slot is; issue 14 lets a
-- tenant's turn be limited after that decision, and makes the run table
-- something an operator can live with for years.
--
-- 1. Priority inside a tenant's queue. `runs.priority` (-100..=100,
--    default 0, higher first); the claim takes the highest priority first,
--    then the oldest available time, then the per-insert sequence (FIFO).
--    The claim index gains the priority as its second column; the V2
--    index it replaces is dropped. Priority never crosses tenants: every
--    claim still reads one tenant's part of the index only.
--
-- 2. Tenant limits, a runtime setting rather than policy (they do not
--    change the cycle): `statek.tenant_limits`, at most one row per
--    tenant, with a concurrency cap (`max_running`: unexpired leases of
--    the tenant, across every replica) and a rate limit (`rate_limit`
--    claims in any sliding window of `rate_window_ms`, by database time,
--    counted from the claim history). Both are checked inside the claim
--    statement by `statek.claim_allowance`, which first locks the limits
--    rows of the claimed-for tenants FOR UPDATE (in tenant order, so two
--    batches never deadlock) and only then counts, in a statement of its
--    own. That matters: under READ COMMITTED a count taken in the claim
--    statement's snapshot misses claims committed while the statement
--    waited, so two claimers could both see `c - 1` running. A VOLATILE
--    function's later statement takes a fresh snapshot, which sees every
--    claim committed by the lock holders before it. Claims of a tenant
--    without a row take no lock at all. The function is SECURITY DEFINER
--    (owned by the owner role) so that the runtime role may lock the rows
--    without the UPDATE privilege that would let it change them.
--
-- 3. One wake-up per statement: the per-row insert trigger of V3 becomes
--    a statement trigger over a transition table that notifies once per
--    tenant with a run claimable now, so a bulk enqueue of 100,000 runs
--    of one tenant sends one notification (delivered at commit, as
--    before). The update trigger (a run put back to `available`) stays.
--
-- 4. Retention of finished runs. Claim history rows (V7) could never be
--    deleted, so neither could their runs. From here on a claim row may
--    be deleted, and only when the database agrees
--    (`statek.run_claim_deletable`): its run is finished (completed,
--    failed or cancelled), the claim is at least an hour old (the
--    shortest retention anywhere, and longer than any rate window), and,
--    for a claim made for a slot, that slot's reservation evidence has
--    been pruned already. Claim history inside the reservation retention
--    window is kept however runs are pruned. The partial index on
--    `finished_at` serves pruning (oldest first) and its backlog gauge.
--
-- 5. The operator's view: indexes for listing runs newest first, overall
--    and per tenant, and for counting a tenant's running runs (the cap).
--
-- Adding a NOT NULL column with a constant default is a catalogue-only
-- change; the CHECK is added NOT VALID and validated at once (a scan, no
-- rewrite). The new indexes are built under this migration's locks: on a
-- large run table expect the migration to take a while, and prune
-- finished runs (section 4) to keep it small.

ALTER TABLE statek.runs ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE statek.runs ADD CONSTRAINT runs_priority_range
    CHECK (priority BETWEEN -100 AND 100) NOT VALID;
ALTER TABLE statek.runs VALIDATE CONSTRAINT runs_priority_range;

-- The claim path: one tenant, highest priority, then oldest, live runs only.
CREATE INDEX runs_claim_priority_idx
    ON statek.runs (tenant_id, priority DESC, available_at, queue_seq)
    WHERE state IN ('available', 'running');
DROP INDEX statek.runs_claim_idx;

-- The cap: a tenant's running runs by lease expiry (small: running only).
CREATE INDEX runs_running_idx
    ON statek.runs (tenant_id, lease_expires_at)
    WHERE state = 'running';

-- Retention and its backlog: finished runs, oldest finish first.
CREATE INDEX runs_finished_idx
    ON statek.runs (finished_at, run_id)
    WHERE state IN ('completed', 'failed', 'cancelled');

-- `statek runs list`, newest first, paged by the per-insert sequence.
CREATE INDEX runs_list_idx ON statek.runs (queue_seq);
CREATE INDEX runs_tenant_list_idx ON statek.runs (tenant_id, queue_seq);

-- The rate limit counts a tenant's recent claims.
CREATE INDEX run_claims_tenant_claimed_idx
    ON statek.run_claims (tenant_id, claimed_at);

CREATE TABLE statek.tenant_limits (
    tenant_id       text        PRIMARY KEY
        CHECK (octet_length(tenant_id) BETWEEN 1 AND 128
               AND tenant_id ~ '^[A-Za-z0-9._:-]+$'
               AND tenant_id NOT IN ('.', '..')),
    -- At most this many unexpired leases of the tenant at once.
    max_running     integer     CHECK (max_running BETWEEN 1 AND 100000),
    -- At most `rate_limit` claims in any window of `rate_window_ms`.
    rate_limit      integer     CHECK (rate_limit BETWEEN 1 AND 1000000),
    rate_window_ms  integer     CHECK (rate_window_ms BETWEEN 1 AND 3600000),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenant_limits_rate_complete CHECK ((rate_limit IS NULL) = (rate_window_ms IS NULL)),
    CONSTRAINT tenant_limits_not_empty CHECK (max_running IS NOT NULL OR rate_limit IS NOT NULL)
);

-- How many runs each tenant may claim now, of as many as it `wanted`:
-- `wanted` for a tenant without limits; else what its cap and rate leave.
-- Holds the tenants' limits rows locked until the caller commits.
CREATE FUNCTION statek.claim_allowance(tenants text[], wanted bigint[])
RETURNS TABLE (tenant_id text, allowed bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- The fresh snapshot below is what makes the lock sufficient; at
    -- REPEATABLE READ or SERIALIZABLE there is none: refuse.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'statek: claims must run at read committed, not %',
            current_setting('transaction_isolation') USING ERRCODE = '0A000';
    END IF;
    PERFORM 1
    FROM statek.tenant_limits AS l
    WHERE l.tenant_id = ANY (tenants)
    ORDER BY l.tenant_id
    FOR UPDATE OF l;
    RETURN QUERY
    SELECT w.tenant_id,
           CASE WHEN l.tenant_id IS NULL THEN w.wanted
           ELSE greatest(0::bigint, least(
               w.wanted,
               coalesce(l.max_running - (
                   SELECT count(*) FROM statek.runs AS r
                   WHERE r.tenant_id = w.tenant_id AND r.state = 'running'
                     AND r.lease_expires_at > clock_timestamp()), w.wanted),
               coalesce(l.rate_limit - (
                   SELECT count(*) FROM statek.run_claims AS c
                   WHERE c.tenant_id = w.tenant_id
                     AND c.claimed_at > clock_timestamp()
                         - make_interval(secs => l.rate_window_ms / 1000.0)), w.wanted)))
           END
    FROM unnest(tenants, wanted) AS w(tenant_id, wanted)
    LEFT JOIN statek.tenant_limits AS l ON l.tenant_id = w.tenant_id;
END;
$$;

-- Section 3: one notification per tenant per inserting statement.
DROP TRIGGER runs_notify_available_on_insert ON statek.runs;

CREATE FUNCTION statek.notify_runs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('statek_runs', t.tenant_id)
    FROM (SELECT DISTINCT inserted.tenant_id
          FROM inserted_runs AS inserted
          WHERE inserted.state = 'available'
            AND inserted.available_at <= clock_timestamp()) AS t;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_notify_available_on_insert
    AFTER INSERT ON statek.runs
    REFERENCING NEW TABLE AS inserted_runs
    FOR EACH STATEMENT EXECUTE FUNCTION statek.notify_runs_inserted();

-- Section 4: may this claim row be deleted now? `now()` is the deleting
-- transaction's start, the clock run pruning reads.
CREATE FUNCTION statek.run_claim_deletable(
    claim_run_id uuid, claim_shard text, claim_sequence bigint, claim_claimed_at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT claim_claimed_at <= now() - interval '1 hour'
       AND EXISTS (SELECT 1 FROM statek.runs AS r
                   WHERE r.run_id = claim_run_id
                     AND r.state IN ('completed', 'failed', 'cancelled'))
       AND (claim_shard IS NULL OR NOT EXISTS (
               SELECT 1
               FROM (SELECT kept.sequence, kept.sequence_count
                     FROM statek.scheduler_reservations AS kept
                     WHERE kept.shard_id = claim_shard AND kept.sequence <= claim_sequence
                     ORDER BY kept.sequence DESC
                     LIMIT 1) AS covering
               WHERE covering.sequence + covering.sequence_count > claim_sequence))
$$;

-- Updates stay as V7 allows (finished_at, once); deletes are checked.
DROP TRIGGER run_claims_immutable ON statek.run_claims;

CREATE TRIGGER run_claims_immutable
    BEFORE UPDATE ON statek.run_claims
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_run_claim_change();

CREATE FUNCTION statek.refuse_kept_run_claim_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT statek.run_claim_deletable(OLD.run_id, OLD.shard_id, OLD.sequence, OLD.claimed_at) THEN
        RAISE EXCEPTION 'statek: claim % of run % is evidence still kept (its run is live, it is younger than an hour, or its slot''s reservation is retained)',
            OLD.attempt, OLD.run_id USING ERRCODE = 'SK001';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER run_claims_deleted_only_when_expired
    BEFORE DELETE ON statek.run_claims
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_kept_run_claim_delete();
