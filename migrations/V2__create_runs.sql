-- Why: the default tenant-isolated executor needs a durable run queue. Each
-- run belongs to exactly one tenant; a claim looks at one tenant only, picks
-- the oldest available run (available_at, then insertion order) with
-- FOR UPDATE SKIP LOCKED, and leases it with a fresh token. Ownership lives
-- in the row (lease_token, lease_expires_at), never in a session or an
-- advisory lock, so a crashed worker's run becomes claimable again when its
-- lease expires.

CREATE TABLE statek.runs (
    run_id            uuid        PRIMARY KEY,
    tenant_id         text        NOT NULL
        CHECK (octet_length(tenant_id) BETWEEN 1 AND 128
               AND tenant_id ~ '^[A-Za-z0-9._:-]+$'
               AND tenant_id NOT IN ('.', '..')),
    -- Per-insert sequence: FIFO tie-break, never the random run_id.
    queue_seq         bigint      GENERATED ALWAYS AS IDENTITY,
    payload           bytea       NOT NULL,
    state             text        NOT NULL DEFAULT 'available'
        CHECK (state IN ('available', 'running', 'completed', 'failed', 'cancelled')),
    -- Number of claims so far (1 on the first execution).
    attempt           integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts      integer     NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 1000),
    enqueued_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    available_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_token       uuid,
    lease_expires_at  timestamptz,
    claimed_at        timestamptz,
    finished_at       timestamptz,
    last_error        text,
    CONSTRAINT runs_lease_consistent CHECK (
        (state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- The claim path: one tenant, oldest first, only live runs.
CREATE INDEX runs_claim_idx
    ON statek.runs (tenant_id, available_at, queue_seq)
    WHERE state IN ('available', 'running');
