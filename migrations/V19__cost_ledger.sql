-- Why: cost fairness (issue 25) runs on PostgreSQL. A shard may now share
-- cost (`[fairness] unit = "cost"`), and the database keeps its ledger
-- (docs/guarantees.md, "Cost mode: the bound"): each tenant's balance is
-- credited q per slot, cut to b_cap, and charged each attempt once, with
-- the attempt's end; a slot whose tenant is in debt with a claimable run is
-- a debt slot, consumed without a claim.
--
-- - `statek.check_new_shard` accepts the canonical bytes of a cost-mode
--   policy (the slot-mode bytes as before, then `,"cost":{"quantum":q,
--   "max_cost":c,"default_cost":d,"balance_cap":b}`; q, c in 1..=2^40,
--   d in 0..=c, b in 0..=2^40). `statek.shard_costs` holds a cost shard's
--   parameters and schedule, written once by a trigger when the shard is
--   registered.
-- - The ledger, per schedule (so that an attempt claimed on a sealed shard
--   and finished after the seal charges the same ledger) and tenant:
--   `statek.cost_credits` holds the credit K granted so far (how far each
--   shard credited the tenant: `statek.cost_credit_progress`), and
--   `statek.cost_charges` what was charged, as
--   partial sums per writer (the backend's pid mod 16: no row shared by
--   every replica's finishes). The balance is K − Σ charged. Only a claim
--   moves K, under its row lock; finishes only add to their partial sum.
-- - An attempt a cost-mode slot claimed carries `statek.runs.charge_pending`
--   until it is charged, once, by the trigger `runs_charge_cost` in the
--   statement that ends it: its holder's finish (the reported cost cut to
--   C_max, or the default when it reported none), or the default when it
--   ends otherwise (cancelled while running, rescued after its lease
--   expired, or taken over by another claim). So the ledger equals the
--   sum over ended cost-mode attempts of min(cost, C_max), or the default
--   where `statek.run_attempts.cost` is NULL (not `least(cost, C_max)`
--   alone: `least` ignores NULL).
-- - `statek.claim_slots` (V18's statement) refuses a cost shard's slots
--   unless `statek.claim_cost_slots` is claiming them (one probe more per
--   claim; the body is edited in place, its grants kept).
--   `statek.claim_cost_slots` claims for the slots of a cost shard: it
--   decides each tenant's debt slots on its ledger, claims for the others
--   through `statek.claim_slots`, and answers one more column, `debt`.
-- - `statek.slot_outcomes` accepts the class `d` (debt).

-- Slot outcomes: the debt class.
ALTER TABLE statek.slot_outcomes DROP CONSTRAINT slot_outcomes_classes_check;
ALTER TABLE statek.slot_outcomes ADD CONSTRAINT slot_outcomes_classes_check
    CHECK (octet_length(classes) BETWEEN 1 AND 4096
           AND classes ~ '^[ciknldx]*$'
           AND classes !~ '(.)\1');
DO $$
DECLARE
    v_def text;
BEGIN
    v_def := pg_get_functiondef(
        'statek.record_slot_outcomes(text, bigint[], text[], integer[], integer[])'::regprocedure);
    IF position('^[ciknlx]*$' IN v_def) = 0 THEN
        RAISE EXCEPTION 'statek: V19 expected V14''s statek.record_slot_outcomes';
    END IF;
    v_def := replace(v_def, '^[ciknlx]*$', '^[ciknldx]*$');
    v_def := replace(v_def, 'letters c, i, k, n, l, x,', 'letters c, i, k, n, l, d, x,');
    EXECUTE v_def;
END;
$$;

-- New shards: slot-mode policies as before, and cost-mode ones.
CREATE OR REPLACE FUNCTION statek.check_new_shard() RETURNS trigger
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
    v_cost jsonb;
    v_q numeric;
    v_c numeric;
    v_d numeric;
    v_b numeric;
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
               || ']'
      INTO v_tenants, v_distinct, v_invalid, v_weights, v_canonical
      FROM jsonb_array_elements(v_doc -> 'tenants') AS t(value);
    -- Cost mode (V19): four integers, in the order of the canonical bytes.
    v_cost := v_doc -> 'cost';
    IF v_cost IS NOT NULL THEN
        IF jsonb_typeof(v_cost) IS DISTINCT FROM 'object'
           OR (SELECT count(*) FROM jsonb_object_keys(v_cost)) <> 4
           OR EXISTS (SELECT 1 FROM jsonb_each(v_cost) AS e(key, value)
                      WHERE e.key NOT IN ('quantum', 'max_cost', 'default_cost', 'balance_cap')
                         OR jsonb_typeof(e.value) <> 'number'
                         OR (e.value #>> '{}') !~ '^(0|[1-9][0-9]{0,12})$') THEN
            RAISE EXCEPTION 'statek: the cost parameters of shard % are not four integers quantum, max_cost, default_cost, balance_cap',
                NEW.shard_id USING ERRCODE = 'SK001';
        END IF;
        v_q := (v_cost ->> 'quantum')::numeric;
        v_c := (v_cost ->> 'max_cost')::numeric;
        v_d := (v_cost ->> 'default_cost')::numeric;
        v_b := (v_cost ->> 'balance_cap')::numeric;
        IF NOT (v_q BETWEEN 1 AND 1099511627776) OR NOT (v_c BETWEEN 1 AND 1099511627776)
           OR NOT (v_d BETWEEN 0 AND v_c) OR NOT (v_b BETWEEN 0 AND 1099511627776) THEN
            RAISE EXCEPTION 'statek: the cost parameters of shard % are out of range (quantum and max_cost 1..=2^40, default_cost 0..=max_cost, balance_cap 0..=2^40)',
                NEW.shard_id USING ERRCODE = 'SK001';
        END IF;
        v_canonical := v_canonical || ',"cost":{"quantum":' || v_q || ',"max_cost":' || v_c
                       || ',"default_cost":' || v_d || ',"balance_cap":' || v_b || '}';
    END IF;
    v_canonical := v_canonical || '}';
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

-- A cost shard's parameters, from its policy bytes, once.
CREATE TABLE statek.shard_costs (
    shard_id      text   PRIMARY KEY REFERENCES statek.scheduler_shards (shard_id),
    schedule_id   text   NOT NULL,
    quantum       bigint NOT NULL CHECK (quantum BETWEEN 1 AND 1099511627776),
    max_cost      bigint NOT NULL CHECK (max_cost BETWEEN 1 AND 1099511627776),
    default_cost  bigint NOT NULL CHECK (default_cost BETWEEN 0 AND max_cost),
    balance_cap   bigint NOT NULL CHECK (balance_cap BETWEEN 0 AND 1099511627776)
);
COMMENT ON TABLE statek.shard_costs IS
    'The cost parameters of each cost-mode shard (V19), from its policy bytes: written once at registration, never changed.';

CREATE FUNCTION statek.record_shard_costs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cost jsonb := convert_from(NEW.policy_bytes, 'UTF8')::jsonb -> 'cost';
BEGIN
    IF v_cost IS NOT NULL THEN
        INSERT INTO statek.shard_costs
            (shard_id, schedule_id, quantum, max_cost, default_cost, balance_cap)
        VALUES (NEW.shard_id, NEW.schedule_id, (v_cost ->> 'quantum')::bigint,
                (v_cost ->> 'max_cost')::bigint, (v_cost ->> 'default_cost')::bigint,
                (v_cost ->> 'balance_cap')::bigint);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER scheduler_shards_record_costs
    AFTER INSERT ON statek.scheduler_shards
    FOR EACH ROW EXECUTE FUNCTION statek.record_shard_costs();

CREATE FUNCTION statek.refuse_shard_costs_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'statek: the cost parameters of shard % are bound forever', OLD.shard_id
        USING ERRCODE = 'SK001';
END;
$$;

CREATE TRIGGER shard_costs_immutable
    BEFORE UPDATE OR DELETE ON statek.shard_costs
    FOR EACH ROW EXECUTE FUNCTION statek.refuse_shard_costs_change();
CREATE TRIGGER shard_costs_no_truncate
    BEFORE TRUNCATE ON statek.shard_costs
    FOR EACH STATEMENT EXECUTE FUNCTION statek.refuse_truncate();

-- The ledger.
CREATE TABLE statek.cost_credits (
    schedule_id     text    NOT NULL,
    tenant_id       text    NOT NULL,
    -- Credit granted so far (cost units); the balance is this minus the
    -- tenant's charges. NULL until the first claim decides a slot.
    credit          numeric,
    PRIMARY KEY (schedule_id, tenant_id)
);
COMMENT ON TABLE statek.cost_credits IS
    'Cost mode''s ledger (V19): per schedule and tenant, the credit its slots granted, cut to b_cap; moved only by statek.claim_cost_slots under its row lock.';

-- How far each shard of a schedule has credited each tenant: every slot
-- of the tenant up to `as_of_sequence` of the shard is credited. One row
-- per shard, so that a late claim on a sealed shard (a batch reserved
-- before the seal) credits that shard's slots from where that shard
-- stopped, not from its first slot. Written under the tenant's
-- statek.cost_credits row lock.
CREATE TABLE statek.cost_credit_progress (
    schedule_id     text    NOT NULL,
    tenant_id       text    NOT NULL,
    shard_id        text    NOT NULL,
    as_of_sequence  bigint  NOT NULL CHECK (as_of_sequence >= -1),
    PRIMARY KEY (schedule_id, tenant_id, shard_id)
);
COMMENT ON TABLE statek.cost_credit_progress IS
    'Cost mode''s ledger (V19): per schedule, tenant and shard, the last sequence whose slot of the tenant is credited.';

CREATE TABLE statek.cost_charges (
    schedule_id  text     NOT NULL,
    tenant_id    text     NOT NULL,
    -- The charging backend's pid mod 16: finishes of many replicas add to
    -- different rows.
    writer       smallint NOT NULL CHECK (writer BETWEEN 0 AND 15),
    charged      numeric  NOT NULL CHECK (charged >= 0),
    PRIMARY KEY (schedule_id, tenant_id, writer)
);
COMMENT ON TABLE statek.cost_charges IS
    'Cost mode''s ledger (V19): what each tenant''s attempts were charged, as partial sums per writer; only the trigger runs_charge_cost adds to it.';

-- Charges `p_amount` to `p_tenant` in the ledger of `p_shard_id`'s
-- schedule (nothing for a slot-mode shard).
CREATE FUNCTION statek.add_cost_charge(p_shard_id text, p_tenant text, p_amount bigint)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO statek.cost_charges AS g (schedule_id, tenant_id, writer, charged)
    SELECT c.schedule_id, p_tenant, (pg_backend_pid() % 16)::smallint, p_amount
    FROM statek.shard_costs AS c WHERE c.shard_id = p_shard_id
    ON CONFLICT (schedule_id, tenant_id, writer)
        DO UPDATE SET charged = g.charged + EXCLUDED.charged
$$;

-- An attempt a cost-mode slot claimed, until it is charged.
ALTER TABLE statek.runs ADD COLUMN charge_pending boolean;
COMMENT ON COLUMN statek.runs.charge_pending IS
    'The attempt on this row was claimed by a cost-mode slot and is not charged yet (V19): the statement that ends it charges it once (trigger runs_charge_cost).';

CREATE FUNCTION statek.charge_cost_attempt() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_cost statek.shard_costs%ROWTYPE;
BEGIN
    SELECT * INTO v_cost FROM statek.shard_costs AS c WHERE c.shard_id = OLD.claim_shard_id;
    IF NOT FOUND THEN
        NEW.charge_pending := NULL;
        RETURN NEW;
    END IF;
    IF NEW.claim_token IS DISTINCT FROM OLD.claim_token THEN
        -- Taken over (its lease expired) or moved: it reported nothing.
        IF OLD.claim_finished_at IS NULL THEN
            PERFORM statek.add_cost_charge(OLD.claim_shard_id, OLD.tenant_id, v_cost.default_cost);
        ELSE
            PERFORM statek.add_cost_charge(OLD.claim_shard_id, OLD.tenant_id,
                CASE WHEN OLD.claim_cost IS NULL THEN v_cost.default_cost
                     ELSE least(OLD.claim_cost, v_cost.max_cost) END);
        END IF;
        NEW.charge_pending := NULL;
    ELSIF NEW.claim_finished_at IS NOT NULL AND OLD.claim_finished_at IS NULL THEN
        -- Its holder's finish: what it reported, at most C_max.
        PERFORM statek.add_cost_charge(OLD.claim_shard_id, OLD.tenant_id,
            CASE WHEN NEW.claim_cost IS NULL THEN v_cost.default_cost
                 ELSE least(NEW.claim_cost, v_cost.max_cost) END);
        NEW.charge_pending := NULL;
    ELSIF OLD.state = 'running' AND NEW.state IS DISTINCT FROM 'running' THEN
        -- Cancelled, or rescued after its lease expired: nothing reported.
        PERFORM statek.add_cost_charge(OLD.claim_shard_id, OLD.tenant_id, v_cost.default_cost);
        NEW.charge_pending := NULL;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER runs_charge_cost
    BEFORE UPDATE ON statek.runs
    FOR EACH ROW WHEN (OLD.charge_pending)
    EXECUTE FUNCTION statek.charge_cost_attempt();

-- Of the slots 0..=p_sequence of a cycle of length p_length, how many
-- are at one of p_positions (a tenant's places in the cycle, 0-based,
-- ascending): 0 for a negative sequence.
CREATE FUNCTION statek.cycle_picks_through(p_positions integer[], p_length integer, p_sequence bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN p_sequence < 0 THEN 0::bigint ELSE
        (p_sequence / p_length) * cardinality(p_positions)
        + (SELECT count(*) FROM unnest(p_positions) AS u(p) WHERE u.p <= p_sequence % p_length)
    END
$$;

-- One row of a claim's answer (statek.claim_slots), kept by
-- statek.claim_cost_slots between its steps.
CREATE TYPE statek.slot_claim_answer AS (
    ord bigint, sequence bigint, slot_tenant text, decided boolean,
    run_id uuid, tenant_id text, payload bytea, attempt integer, max_attempts integer,
    enqueued_at timestamptz, available_at timestamptz, claimed_at timestamptz,
    lease_expires_at timestamptz, lease_token uuid, recorded bigint,
    contended boolean, limited boolean);

-- Which backends are inside statek.claim_cost_slots now, and in which
-- transaction: only that function writes here (the owner's table, no
-- grant), so a claim of a cost shard's slots through statek.claim_slots
-- can tell it was called from there and from nowhere else.
CREATE UNLOGGED TABLE statek.cost_claims_open (
    backend  integer PRIMARY KEY,
    xact     xid8    NOT NULL
);
COMMENT ON TABLE statek.cost_claims_open IS
    'The backends inside statek.claim_cost_slots (V19), with their transaction: written and emptied by that function only; statek.claim_slots claims a cost shard''s slots only for them.';

-- V18's statement (statek.claim_slots) refuses a cost shard's slots
-- unless statek.claim_cost_slots is claiming them: one probe of
-- statek.shard_costs per claim, and nothing more for a slot-mode shard.
-- The function is edited in place (its body as V18 wrote it, two lines
-- added), so its grants stay.
DO $$
DECLARE
    v_def text;
    v_begin text := E'#variable_conflict use_column\nBEGIN\n';
    v_check text := E'    PERFORM statek.check_claimed_slots(p_shard_id, p_sequences, p_tenants);\n';
BEGIN
    v_def := pg_get_functiondef(
        'statek.claim_slots(bigint[], text[], uuid[], float8, text, bigint)'::regprocedure);
    IF (length(v_def) - length(replace(v_def, v_begin, ''))) / length(v_begin) <> 1
       OR (length(v_def) - length(replace(v_def, v_check, ''))) / length(v_check) <> 1 THEN
        RAISE EXCEPTION 'statek: V19 expected V18''s statek.claim_slots';
    END IF;
    v_def := replace(v_def, v_check, v_check || $check$    -- A cost shard's slots (V19): only from statek.claim_cost_slots,
    -- which decides their debt first.
    IF EXISTS (SELECT 1 FROM statek.shard_costs AS c WHERE c.shard_id = p_shard_id)
       AND NOT EXISTS (SELECT 1 FROM statek.cost_claims_open AS o
                       WHERE o.backend = pg_backend_pid() AND o.xact = pg_current_xact_id()) THEN
        RAISE EXCEPTION 'statek: shard % shares cost: its slots are claimed through statek.claim_cost_slots',
            p_shard_id USING ERRCODE = 'SK002';
    END IF;
$check$);
    EXECUTE v_def;
END;
$$;

-- Claims for the slots of a cost shard. Per tenant of the claim, in id
-- order: its ledger row is locked (created at its first claim, balance 0);
-- its slots are credited q each (the slots of the tenant since the row's
-- sequence, skipped ones included), the credit cut to b_cap above its
-- charges; its first slots while the balance is negative are debt slots.
-- The other slots are claimed for through V18's statement, then the
-- credit of the decided slots is written and the claimed attempts marked
-- to be charged. A debt slot of a tenant without a claimable run (none
-- left, none claimed by this statement) is idle instead (`debt` false).
CREATE FUNCTION statek.claim_cost_slots(
    p_sequences bigint[], p_tenants text[], p_tokens uuid[], p_lease_secs float8,
    p_shard_id text, p_max_runs bigint)
RETURNS TABLE (
    ord bigint, sequence bigint, slot_tenant text, decided boolean,
    run_id uuid, tenant_id text, payload bytea, attempt integer, max_attempts integer,
    enqueued_at timestamptz, available_at timestamptz, claimed_at timestamptz,
    lease_expires_at timestamptz, lease_token uuid, recorded bigint,
    contended boolean, limited boolean, debt boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_cost statek.shard_costs%ROWTYPE;
    v_map smallint[];
    v_ids text[];
    v_length integer;
    v_positions integer[];
    v_answer statek.slot_claim_answer[] := '{}';
    v_count integer := coalesce(cardinality(p_sequences), 0);
    v_tenant text;
    v_seqs bigint[];
    v_index integer;
    v_row statek.cost_credits%ROWTYPE;
    v_charged numeric;
    v_credit numeric;
    v_as_of bigint;
    v_base bigint;
    v_k numeric;
    v_debt boolean[];
    v_t_ids text[] := '{}';
    v_t_credit numeric[] := '{}';
    v_t_as_of bigint[] := '{}';
    v_t_charged numeric[] := '{}';
    v_keep integer[] := '{}';
    v_cutoff bigint;
    v_last bigint;
    v_i integer;
    r record;
BEGIN
    SELECT * INTO v_cost FROM statek.shard_costs AS c WHERE c.shard_id = p_shard_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'statek: shard % shares slots: its slots are claimed through statek.claim_slots',
            p_shard_id USING ERRCODE = 'SK002';
    END IF;
    IF cardinality(p_tokens) IS DISTINCT FROM cardinality(p_sequences) THEN
        RAISE EXCEPTION 'statek: a claim names % slots and % lease tokens',
            cardinality(p_sequences), cardinality(p_tokens) USING ERRCODE = 'SK002';
    END IF;
    IF v_count = 0 THEN
        RETURN;
    END IF;
    IF array_lower(p_sequences, 1) <> 1 OR array_lower(p_tenants, 1) <> 1
       OR array_lower(p_tokens, 1) <> 1 THEN
        RAISE EXCEPTION 'statek: a claim''s arrays start at index 1' USING ERRCODE = 'SK002';
    END IF;
    -- Reserved slots of the shard, each its cycle's tenant, in order.
    PERFORM statek.check_claimed_slots(p_shard_id, p_sequences, p_tenants);
    SELECT m.slot_map, m.tenant_ids INTO v_map, v_ids
    FROM statek.shard_slot_maps AS m WHERE m.shard_id = p_shard_id;
    v_length := cardinality(v_map);
    v_debt := array_fill(false, ARRAY[v_count]);
    FOR v_tenant, v_seqs IN
        SELECT s.tenant_id, array_agg(s.sequence ORDER BY s.sequence)
        FROM unnest(p_sequences, p_tenants) AS s(sequence, tenant_id)
        GROUP BY s.tenant_id ORDER BY s.tenant_id COLLATE "C"
    LOOP
        v_index := array_position(v_ids, v_tenant) - 1;
        v_positions := ARRAY(SELECT (m.i - 1)::integer
                             FROM unnest(v_map) WITH ORDINALITY AS m(t, i)
                             WHERE m.t = v_index ORDER BY m.i);
        INSERT INTO statek.cost_credits (schedule_id, tenant_id)
        VALUES (v_cost.schedule_id, v_tenant)
        ON CONFLICT (schedule_id, tenant_id) DO NOTHING;
        SELECT * INTO v_row FROM statek.cost_credits AS c
        WHERE c.schedule_id = v_cost.schedule_id AND c.tenant_id = v_tenant
        FOR UPDATE;
        SELECT coalesce(sum(g.charged), 0) INTO v_charged FROM statek.cost_charges AS g
        WHERE g.schedule_id = v_cost.schedule_id AND g.tenant_id = v_tenant;
        -- A tenant's first slot starts it at balance 0; each shard of the
        -- schedule credits its own slots from where it stopped (a new
        -- shard from its first slot), the balance cut to this shard's
        -- cap.
        v_credit := least(coalesce(v_row.credit, v_charged), v_charged + v_cost.balance_cap);
        SELECT g.as_of_sequence INTO v_as_of FROM statek.cost_credit_progress AS g
        WHERE g.schedule_id = v_cost.schedule_id AND g.tenant_id = v_tenant
          AND g.shard_id = p_shard_id;
        v_as_of := coalesce(v_as_of, -1);
        v_base := statek.cycle_picks_through(v_positions, v_length, v_as_of);
        FOR j IN 1 .. cardinality(v_seqs) LOOP
            v_k := least(v_credit + v_cost.quantum
                             * (statek.cycle_picks_through(v_positions, v_length,
                                                           greatest(v_seqs[j], v_as_of))
                                - v_base),
                         v_charged + v_cost.balance_cap);
            -- Credit only grows along the slots: the first slot out of
            -- debt ends the tenant's debt slots in this claim.
            EXIT WHEN v_k >= v_charged;
            v_debt[array_position(p_sequences, v_seqs[j])] := true;
        END LOOP;
        v_t_ids := v_t_ids || v_tenant;
        v_t_credit := v_t_credit || v_credit;
        v_t_as_of := v_t_as_of || v_as_of;
        v_t_charged := v_t_charged || v_charged;
    END LOOP;
    FOR i IN 1 .. v_count LOOP
        IF NOT v_debt[i] THEN
            v_keep := v_keep || i;
        END IF;
    END LOOP;
    IF cardinality(v_keep) > 0 THEN
        INSERT INTO statek.cost_claims_open AS o (backend, xact)
        VALUES (pg_backend_pid(), pg_current_xact_id())
        ON CONFLICT (backend) DO UPDATE SET xact = EXCLUDED.xact;
        v_answer := ARRAY(
            SELECT ROW(v_keep[c.ord::integer], c.sequence, c.slot_tenant, c.decided, c.run_id,
                       c.tenant_id, c.payload, c.attempt, c.max_attempts, c.enqueued_at,
                       c.available_at, c.claimed_at, c.lease_expires_at, c.lease_token,
                       c.recorded, c.contended, c.limited)::statek.slot_claim_answer
            FROM statek.claim_slots(
                ARRAY(SELECT p_sequences[k] FROM unnest(v_keep) AS u(k)),
                ARRAY(SELECT p_tenants[k] FROM unnest(v_keep) AS u(k)),
                ARRAY(SELECT p_tokens[k] FROM unnest(v_keep) AS u(k)),
                p_lease_secs, p_shard_id, p_max_runs) AS c
            ORDER BY c.ord);
        DELETE FROM statek.cost_claims_open AS o WHERE o.backend = pg_backend_pid();
    END IF;
    -- The decided prefix: every slot, or up to the last slot the claim
    -- decided when it left slots undecided.
    SELECT CASE WHEN bool_and(c.decided) IS NOT FALSE THEN v_count
                ELSE max(c.ord) FILTER (WHERE c.decided) END
      INTO v_cutoff FROM unnest(v_answer) AS c;
    v_cutoff := coalesce(v_cutoff, 0);
    -- The credit of the decided slots, written once per tenant.
    FOR i IN 1 .. cardinality(v_t_ids) LOOP
        SELECT max(s.sequence) INTO v_last
        FROM unnest(p_sequences, p_tenants) WITH ORDINALITY AS s(sequence, tenant_id, o)
        WHERE s.tenant_id = v_t_ids[i] AND s.o <= v_cutoff;
        CONTINUE WHEN v_last IS NULL;
        v_index := array_position(v_ids, v_t_ids[i]) - 1;
        v_positions := ARRAY(SELECT (m.i - 1)::integer
                             FROM unnest(v_map) WITH ORDINALITY AS m(t, i)
                             WHERE m.t = v_index ORDER BY m.i);
        UPDATE statek.cost_credits AS c
        SET credit = least(v_t_credit[i] + v_cost.quantum
                               * (statek.cycle_picks_through(v_positions, v_length,
                                                             greatest(v_last, v_t_as_of[i]))
                                  - statek.cycle_picks_through(v_positions, v_length, v_t_as_of[i])),
                           v_t_charged[i] + v_cost.balance_cap)
        WHERE c.schedule_id = v_cost.schedule_id AND c.tenant_id = v_t_ids[i];
        INSERT INTO statek.cost_credit_progress AS g
            (schedule_id, tenant_id, shard_id, as_of_sequence)
        VALUES (v_cost.schedule_id, v_t_ids[i], p_shard_id, greatest(v_last, v_t_as_of[i]))
        ON CONFLICT (schedule_id, tenant_id, shard_id)
            DO UPDATE SET as_of_sequence = greatest(g.as_of_sequence, EXCLUDED.as_of_sequence);
    END LOOP;
    -- The attempts claimed are charged when they end.
    UPDATE statek.runs AS r SET charge_pending = true
    WHERE r.run_id IN (SELECT c.run_id FROM unnest(v_answer) AS c WHERE c.run_id IS NOT NULL);
    RETURN QUERY
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
    slots AS (
        SELECT s.sequence, s.tenant_id, s.o
        FROM unnest(p_sequences, p_tenants) WITH ORDINALITY AS s(sequence, tenant_id, o)
    ),
    has_run AS (
        SELECT t.tenant_id,
               EXISTS (SELECT 1 FROM unnest(v_answer) AS c
                       WHERE c.slot_tenant = t.tenant_id AND c.run_id IS NOT NULL)
               OR EXISTS (SELECT 1 FROM statek.runs AS r CROSS JOIN now
                          WHERE r.tenant_id = t.tenant_id
                            AND r.state IN ('available', 'running')
                            AND r.available_at <= now.t
                            AND (r.state = 'available' OR r.lease_expires_at <= now.t)
                            AND r.attempt < r.max_attempts) AS found
        FROM (SELECT DISTINCT s.tenant_id FROM slots AS s
              WHERE v_debt[s.o::integer] AND s.o <= v_cutoff) AS t
    )
    SELECT s.o, s.sequence, s.tenant_id,
           CASE WHEN v_debt[s.o::integer] THEN s.o <= v_cutoff ELSE c.decided END,
           c.run_id, c.tenant_id, c.payload, c.attempt, c.max_attempts, c.enqueued_at,
           c.available_at, c.claimed_at, c.lease_expires_at, c.lease_token,
           coalesce(c.recorded, (SELECT max(x.recorded) FROM unnest(v_answer) AS x), 0),
           coalesce(c.contended, false), coalesce(c.limited, false),
           v_debt[s.o::integer] AND s.o <= v_cutoff AND coalesce(h.found, false)
    FROM slots AS s
    LEFT JOIN unnest(v_answer) AS c ON c.ord = s.o
    LEFT JOIN has_run AS h ON h.tenant_id = s.tenant_id
    ORDER BY s.o;
END;
$$;
REVOKE ALL ON FUNCTION statek.claim_cost_slots(bigint[], text[], uuid[], float8, text, bigint)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.add_cost_charge(text, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.record_shard_costs() FROM PUBLIC;
REVOKE ALL ON FUNCTION statek.charge_cost_attempt() FROM PUBLIC;

-- Whoever may claim slots may claim a cost shard's.
DO $$
DECLARE
    v_grantee regrole;
BEGIN
    FOR v_grantee IN
        SELECT DISTINCT a.grantee::regrole
        FROM pg_proc AS p CROSS JOIN LATERAL aclexplode(p.proacl) AS a
        WHERE p.oid = 'statek.claim_slots(bigint[], text[], uuid[], float8, text, bigint)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION statek.claim_cost_slots(bigint[], text[], uuid[], float8, text, bigint) TO %s',
                       v_grantee);
    END LOOP;
END;
$$;
