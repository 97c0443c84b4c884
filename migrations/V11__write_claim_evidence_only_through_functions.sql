-- Why: until V10 the runtime role wrote the claim history
-- (`statek.run_claims`) with its own INSERT and UPDATE statements and held
-- UPDATE on every column of `statek.runs`. A runtime credential could
-- therefore write evidence that no claim made: a claim row for a run it
-- never claimed, a slot it never reserved, or a slot whose cycle tenant is
-- someone else, and change a run's tenant or attempt count. From this
-- migration on the evidence is written only by three SECURITY DEFINER
-- functions, which check what they are told against the database's own
-- records before they write:
--
-- 1. `statek.claim_slots`: the batch claim of a reserved range (the
--    statement statek-store-pg sent itself until V10, now the function's
--    body). It refuses (SQLSTATE SK002) a slot whose sequence is in no
--    reservation range of the shard (ranges are rows of
--    `statek.scheduler_reservations`: `sequence` .. `sequence +
--    sequence_count`, below the cursor by construction), and a slot whose
--    tenant is not the cycle's tenant at `sequence mod L`.
-- 2. `statek.claim_run`: one claim of a tenant's run outside the fair
--    order (no slot named; its claim row names none either).
-- 3. `statek.finish_runs`: completes or fails runs by their lease tokens
--    and sets each claim's finish time once.
--
-- The slot map the claim checks against lives in the database:
-- `statek.shard_slot_maps` holds, per shard, the tenant index of each slot
-- and the tenants in index order. `statek.attach_slot_map` (the store calls
-- it at registration) accepts a map only when its SHA-256, computed as
-- statek_policy's `CycleDigest` is ('statek.cycle.v1' NUL, the algorithm's
-- name, NUL, L as 4 bytes big-endian, each slot's tenant index as 2 bytes
-- big-endian), equals the shard's stored cycle digest (V6), and takes the
-- tenant names from the shard's canonical policy bytes (JSON, tenants
-- sorted by id: index i is the i-th tenant). Since the runtime role may
-- register shards, and so choose their cycle digest, the digest alone does
-- not tie a map to its policy: the function also requires each tenant to
-- appear exactly its weight's number of times, and for `swrr-v1` (the
-- default algorithm, simple enough to run here) it compiles the cycle
-- itself and requires the map to be that cycle. For the `min-gap`
-- algorithms (searches that only the Rust compiler runs) the shares are
-- checked, the order is not: every replica still compares its own
-- compilation with the stored cycle digest before it ticks
-- (`CycleMismatch`). A map row never changes and is never deleted. A shard registered before V6 has no cycle digest: no
-- map can be checked for it, and claims of its slots are refused; roll it
-- out to a new shard (`statek rollout`).
--
-- Afterwards the runtime role keeps INSERT on `statek.runs` (enqueue) and
-- UPDATE only of the columns its own statements set (heartbeat, cancel,
-- lease rescue, retry): never `tenant_id`, `payload`, `attempt`,
-- `claimed_at` or `priority`. It loses INSERT and UPDATE on
-- `statek.run_claims` (see crates/statek-store-pg/src/roles.sql, applied
-- again after this migration by `statek roles apply`).
--
-- Nothing is rewritten: existing claim rows stay as they are.

CREATE TABLE statek.shard_slot_maps (
    shard_id     text        PRIMARY KEY REFERENCES statek.scheduler_shards (shard_id),
    -- The policy's tenants, in index order (sorted by id).
    tenant_ids   text[]      NOT NULL CHECK (cardinality(tenant_ids) BETWEEN 1 AND 4096),
    -- The tenant index of each slot: L entries.
    slot_map     smallint[]  NOT NULL CHECK (cardinality(slot_map) BETWEEN 1 AND 4096),
    attached_at  timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION statek.refuse_slot_map_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'statek: the slot map of shard % is bound forever and cannot be changed or deleted',
        OLD.shard_id USING ERRCODE = 'SK001';
END;
$$;

CREATE TRIGGER shard_slot_maps_immutable
    BEFORE UPDATE OR DELETE ON statek.shard_slot_maps
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_slot_map_change();

CREATE TRIGGER shard_slot_maps_no_truncate
    BEFORE TRUNCATE ON statek.shard_slot_maps
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();

-- Attaches the slot map of a registered shard, once; a second call with
-- the same map does nothing, with another map it is refused.
CREATE FUNCTION statek.attach_slot_map(p_shard_id text, p_slot_map smallint[])
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_shard    record;
    v_policy   jsonb;
    v_tenants  text[];
    v_cycle    bytea;
    v_existing smallint[];
    v_weights  integer[];
    v_scores   bigint[];
    v_best     integer;
    v_score    bigint;
BEGIN
    SELECT m.slot_map INTO v_existing FROM statek.shard_slot_maps AS m WHERE m.shard_id = p_shard_id;
    IF FOUND THEN
        IF v_existing IS DISTINCT FROM p_slot_map THEN
            RAISE EXCEPTION 'statek: shard % has another slot map', p_shard_id USING ERRCODE = 'SK002';
        END IF;
        RETURN;
    END IF;
    SELECT s.policy_bytes, s.cycle_length, s.cycle_digest INTO v_shard
    FROM statek.scheduler_shards AS s WHERE s.shard_id = p_shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'statek: shard % is not registered', p_shard_id USING ERRCODE = 'SK002';
    END IF;
    IF v_shard.cycle_digest IS NULL THEN
        RAISE EXCEPTION 'statek: shard % was registered before migration V6 and has no cycle digest to check a slot map against; roll it out to a new shard',
            p_shard_id USING ERRCODE = 'SK002';
    END IF;
    v_policy := convert_from(v_shard.policy_bytes, 'UTF8')::jsonb;
    v_tenants := ARRAY(SELECT t.value ->> 'id'
                       FROM jsonb_array_elements(v_policy -> 'tenants') WITH ORDINALITY AS t(value, i)
                       ORDER BY t.i);
    v_weights := ARRAY(SELECT (t.value ->> 'weight')::integer
                       FROM jsonb_array_elements(v_policy -> 'tenants') WITH ORDINALITY AS t(value, i)
                       ORDER BY t.i);
    IF p_slot_map IS NULL OR cardinality(p_slot_map) <> v_shard.cycle_length
       OR array_ndims(p_slot_map) <> 1 OR array_lower(p_slot_map, 1) <> 1
       OR EXISTS (SELECT 1 FROM unnest(p_slot_map) AS m(tenant_index)
                  WHERE m.tenant_index IS NULL OR m.tenant_index < 0
                     OR m.tenant_index >= cardinality(v_tenants)) THEN
        RAISE EXCEPTION 'statek: a slot map of shard % has one tenant index below % for each of its % slots',
            p_shard_id, cardinality(v_tenants), v_shard.cycle_length USING ERRCODE = 'SK002';
    END IF;
    v_cycle := '\x73746174656b2e6379636c652e763100'::bytea
               || convert_to(v_policy ->> 'algorithm', 'UTF8') || decode('00', 'hex')
               || int4send(v_shard.cycle_length)
               || (SELECT string_agg(int2send(m.tenant_index), ''::bytea ORDER BY m.i)
                   FROM unnest(p_slot_map) WITH ORDINALITY AS m(tenant_index, i));
    IF sha256(v_cycle) IS DISTINCT FROM v_shard.cycle_digest THEN
        RAISE EXCEPTION 'statek: this slot map of shard % does not match its stored cycle digest',
            p_shard_id USING ERRCODE = 'SK002';
    END IF;
    -- Each tenant exactly its weight's number of picks.
    IF EXISTS (SELECT 1
               FROM generate_series(1, cardinality(v_weights)) AS t(i)
               WHERE v_weights[t.i] <> (SELECT count(*) FROM unnest(p_slot_map) AS m(tenant_index)
                                        WHERE m.tenant_index = t.i - 1)) THEN
        RAISE EXCEPTION 'statek: this slot map of shard % does not give each tenant its weight''s number of slots',
            p_shard_id USING ERRCODE = 'SK002';
    END IF;
    -- swrr-v1, compiled here as statek_policy's reference does: each step
    -- adds every weight to its tenant's score, picks the highest score
    -- (the first tenant on a tie) and takes L from it.
    IF v_policy ->> 'algorithm' = 'swrr-v1' THEN
        v_scores := array_fill(0::bigint, ARRAY[cardinality(v_weights)]);
        FOR step IN 1 .. v_shard.cycle_length LOOP
            v_best := 1;
            v_score := NULL;
            FOR t IN 1 .. cardinality(v_weights) LOOP
                v_scores[t] := v_scores[t] + v_weights[t];
                IF v_score IS NULL OR v_scores[t] > v_score THEN
                    v_best := t;
                    v_score := v_scores[t];
                END IF;
            END LOOP;
            v_scores[v_best] := v_scores[v_best] - v_shard.cycle_length;
            IF p_slot_map[step] <> v_best - 1 THEN
                RAISE EXCEPTION 'statek: this slot map of shard % is not the swrr-v1 cycle of its policy (slot %)',
                    p_shard_id, step - 1 USING ERRCODE = 'SK002';
            END IF;
        END LOOP;
    END IF;
    INSERT INTO statek.shard_slot_maps (shard_id, tenant_ids, slot_map)
    VALUES (p_shard_id, v_tenants, p_slot_map)
    ON CONFLICT (shard_id) DO NOTHING;
    SELECT m.slot_map INTO v_existing FROM statek.shard_slot_maps AS m WHERE m.shard_id = p_shard_id;
    IF v_existing IS DISTINCT FROM p_slot_map THEN
        -- A concurrent attach of another map won the race.
        RAISE EXCEPTION 'statek: shard % has another slot map', p_shard_id USING ERRCODE = 'SK002';
    END IF;
END;
$$;

-- Refuses (SK002) slots that are not reserved slots of the shard with the
-- cycle's tenant. `p_sequences` strictly increasing. One ordered index
-- probe for the range of the first slot; a probe per slot only when the
-- slots leave that range.
CREATE FUNCTION statek.check_claimed_slots(
    p_shard_id text, p_sequences bigint[], p_tenants text[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_map      smallint[];
    v_tenants  text[];
    v_length   integer;
    v_end      bigint;
    v_count    integer := cardinality(p_sequences);
    v_sequence bigint;
    v_tenant   text;
BEGIN
    IF v_count IS NULL OR v_count = 0 THEN
        RETURN;
    END IF;
    IF cardinality(p_tenants) IS DISTINCT FROM v_count THEN
        RAISE EXCEPTION 'statek: a claim names % slots and % tenants', v_count, cardinality(p_tenants)
            USING ERRCODE = 'SK002';
    END IF;
    SELECT m.slot_map, m.tenant_ids INTO v_map, v_tenants
    FROM statek.shard_slot_maps AS m WHERE m.shard_id = p_shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'statek: shard % has no slot map (register it with this version of statek, or roll a shard registered before migration V6 out to a new one)',
            p_shard_id USING ERRCODE = 'SK002';
    END IF;
    v_length := cardinality(v_map);
    SELECT r.sequence + r.sequence_count INTO v_end
    FROM statek.scheduler_reservations AS r
    WHERE r.shard_id = p_shard_id AND r.sequence <= p_sequences[1]
    ORDER BY r.sequence DESC
    LIMIT 1;
    FOR i IN 1 .. v_count LOOP
        v_sequence := p_sequences[i];
        v_tenant := p_tenants[i];
        IF v_sequence IS NULL OR (i > 1 AND v_sequence <= p_sequences[i - 1]) THEN
            RAISE EXCEPTION 'statek: the slots of a claim are distinct sequences in increasing order'
                USING ERRCODE = 'SK002';
        END IF;
        IF v_end IS NULL OR v_sequence >= v_end THEN
            SELECT r.sequence + r.sequence_count INTO v_end
            FROM statek.scheduler_reservations AS r
            WHERE r.shard_id = p_shard_id AND r.sequence <= v_sequence
            ORDER BY r.sequence DESC
            LIMIT 1;
            IF v_end IS NULL OR v_sequence >= v_end THEN
                RAISE EXCEPTION 'statek: sequence % is not a reserved slot of shard % (no reservation range holds it)',
                    v_sequence, p_shard_id USING ERRCODE = 'SK002';
            END IF;
        END IF;
        IF v_tenant IS DISTINCT FROM v_tenants[v_map[(v_sequence % v_length)::integer + 1] + 1] THEN
            RAISE EXCEPTION 'statek: slot % of shard % belongs to tenant %, not %',
                v_sequence, p_shard_id, v_tenants[v_map[(v_sequence % v_length)::integer + 1] + 1],
                v_tenant USING ERRCODE = 'SK002';
        END IF;
    END LOOP;
END;
$$;

-- The batch claim of reserved slots (statek-store-pg's `claim_slots`).
-- `p_sequences` (increasing), `p_tenants`, `p_tokens`: one per slot;
-- `p_lease_secs` the lease; `p_max_runs` the most runs to claim. Per
-- tenant, one SKIP LOCKED pick of as many of its claimable runs as it has
-- slots and its limits allow (`statek.claim_allowance`), highest priority
-- first, then by available time, then insertion order; the tenant's k-th
-- slot takes its k-th run. Only the first `p_max_runs` pairs in slot order
-- are claimed; the slots after the last kept pair are undecided when pairs
-- were left over. Each claimed run gets its slot's token, its expiry and
-- one claim row naming the slot. A decided slot without a run is contended
-- when a claimable run of its tenant exists that was not taken (locked by
-- another claimer), else idle; limited instead of contended when the slot
-- is beyond what the tenant's limits allowed.
CREATE FUNCTION statek.claim_slots(
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
    -- Tenants with any claimable run now, locked or not: one ordered index
    -- probe each (a scalar subquery: PostgreSQL drops ORDER BY/LIMIT inside
    -- EXISTS).
    live AS MATERIALIZED (
        SELECT d.tenant_id, d.wanted
        FROM demand AS d CROSS JOIN now
        WHERE (SELECT true FROM statek.runs
               WHERE runs.tenant_id = d.tenant_id
                 AND runs.state IN ('available', 'running')
                 AND runs.available_at <= now.t
                 AND (runs.state = 'available' OR runs.lease_expires_at <= now.t)
                 AND runs.attempt < runs.max_attempts
               ORDER BY runs.priority DESC, runs.available_at, runs.queue_seq
               LIMIT 1)
    ),
    -- The limits function runs only when a live tenant has limits (a
    -- one-time filter in a CTE of its own).
    limited_live AS MATERIALIZED (
        SELECT d.tenant_id, d.wanted FROM live AS d
        WHERE EXISTS (SELECT 1 FROM statek.tenant_limits AS l WHERE l.tenant_id = d.tenant_id)
    ),
    limited_allowance AS MATERIALIZED (
        SELECT f.tenant_id, f.allowed
        FROM statek.claim_allowance(
            ARRAY(SELECT limited_live.tenant_id FROM limited_live ORDER BY limited_live.tenant_id),
            ARRAY(SELECT limited_live.wanted FROM limited_live ORDER BY limited_live.tenant_id)) AS f
        WHERE EXISTS (SELECT 1 FROM limited_live)
    ),
    allowance AS MATERIALIZED (
        SELECT d.tenant_id, coalesce(a.allowed, d.wanted) AS allowed
        FROM live AS d
        LEFT JOIN limited_allowance AS a ON a.tenant_id = d.tenant_id
    ),
    picked AS MATERIALIZED (
        SELECT p.run_id, d.tenant_id,
               row_number() OVER (PARTITION BY d.tenant_id
                                  ORDER BY p.priority DESC, p.available_at, p.queue_seq) AS nth
        FROM live AS d JOIN allowance AS a ON a.tenant_id = d.tenant_id
        CROSS JOIN now
        CROSS JOIN LATERAL (
            SELECT runs.run_id, runs.priority, runs.available_at, runs.queue_seq
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
            claimed_at = clock_timestamp()
        FROM pairs
        WHERE r.run_id = pairs.run_id
        RETURNING pairs.ord, r.run_id, r.tenant_id, r.payload, r.attempt, r.max_attempts,
                  r.enqueued_at, r.available_at, r.claimed_at, r.lease_expires_at, r.lease_token
    ),
    history AS (
        INSERT INTO statek.run_claims
            (run_id, attempt, tenant_id, shard_id, sequence, lease_token, claimed_at)
        SELECT c.run_id, c.attempt, c.tenant_id, p_shard_id, pairs.sequence, c.lease_token,
               c.claimed_at
        FROM claimed AS c JOIN pairs ON pairs.ord = c.ord
        RETURNING run_claims.run_id
    ),
    -- Tenants with a decided slot left without a run: one ordered probe
    -- each for a claimable run this statement did not pick.
    short AS MATERIALIZED (
        SELECT DISTINCT s.tenant_id
        FROM slots AS s CROSS JOIN cutoff
        WHERE s.ord <= cutoff.ord AND s.ord NOT IN (SELECT pairs.ord FROM pairs)
          AND s.tenant_id IN (SELECT live.tenant_id FROM live)
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
           (SELECT count(*) FROM history),
           c.run_id IS NULL AND coalesce(ct.contended, false),
           c.run_id IS NULL AND coalesce(ct.contended, false)
               AND s.nth > coalesce(al.allowed, s.nth)
    FROM slots AS s CROSS JOIN cutoff
    LEFT JOIN claimed AS c ON c.ord = s.ord
    LEFT JOIN contention AS ct ON ct.tenant_id = s.tenant_id
    LEFT JOIN allowance AS al ON al.tenant_id = s.tenant_id
    ORDER BY s.ord;
END;
$$;

-- One claim of tenant `p_tenant_id`'s best claimable run, outside the
-- fair order (statek-store-pg's `claim_run`): `allowed` is what its limits
-- let it start now (1 without limits, 0 when capped or rate-limited). Its
-- claim row names no slot. `judged_at` is the instant the claim judged.
CREATE FUNCTION statek.claim_run(p_tenant_id text, p_token uuid, p_lease_secs float8)
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
        SELECT runs.run_id
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
            claimed_at = clock_timestamp()
        FROM candidate
        WHERE r.run_id = candidate.run_id
        RETURNING r.run_id, r.tenant_id, r.payload, r.attempt, r.max_attempts, r.enqueued_at,
                  r.available_at, r.claimed_at, r.lease_expires_at
    ),
    history AS (
        INSERT INTO statek.run_claims (run_id, attempt, tenant_id, lease_token, claimed_at)
        SELECT claimed.run_id, claimed.attempt, claimed.tenant_id, p_token, claimed.claimed_at
        FROM claimed
    )
    SELECT now.t, (SELECT allowance.allowed FROM allowance),
           claimed.run_id, claimed.tenant_id, claimed.payload, claimed.attempt,
           claimed.max_attempts, claimed.enqueued_at, claimed.available_at,
           claimed.claimed_at, claimed.lease_expires_at
    FROM now LEFT JOIN claimed ON true;
END;
$$;

-- Completes or fails runs by their lease tokens (statek-store-pg's
-- `finish_runs`, `complete_run`, `fail_run`). One element per run in
-- input order (`ord`, 1-based): `p_kinds` 'complete' or 'fail',
-- `p_retry_secs` the delay of a failure's next attempt, `p_errors` its
-- text. Answers one row per element: the run's new state when this call
-- finished it, else whether the claim of that token already has a finish
-- time (a replay).
CREATE FUNCTION statek.finish_runs(
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
        RETURNING i.ord, r.run_id, i.token, r.state, r.available_at,
                  coalesce(r.finished_at, clock_timestamp()) AS claim_finished_at
    ),
    history AS (
        UPDATE statek.run_claims AS c
        SET finished_at = f.claim_finished_at
        FROM finished AS f
        WHERE c.run_id = f.run_id AND c.lease_token = f.token AND c.finished_at IS NULL
    ),
    -- The claims of the runs not finished here, read locked (FOR SHARE):
    -- a flush of the same claims that committed meanwhile is seen as it is
    -- now.
    earlier AS MATERIALIZED (
        SELECT i.ord, c.finished_at
        FROM input AS i
        JOIN statek.run_claims AS c ON c.run_id = i.run_id AND c.lease_token = i.token
        WHERE i.ord NOT IN (SELECT finished.ord FROM finished)
        FOR SHARE OF c
    )
    SELECT i.ord, i.run_id, f.state, f.available_at,
           e.finished_at IS NOT NULL
    FROM input AS i
    LEFT JOIN finished AS f ON f.ord = i.ord
    LEFT JOIN earlier AS e ON e.ord = i.ord
    ORDER BY i.ord;
END;
$$;

REVOKE ALL ON FUNCTION statek.attach_slot_map(text, smallint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.check_claimed_slots(text, bigint[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.claim_slots(bigint[], text[], uuid[], float8, text, bigint)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.claim_run(text, uuid, float8) FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.finish_runs(uuid[], uuid[], text[], float8[], text[]) FROM PUBLIC;
