-- Why: producers retry enqueues (a lost acknowledgement again), so a run
-- may carry an idempotency key, unique per tenant, that turns a repeated
-- enqueue into a no-op. And an idle worker fleet should not poll the
-- database: a run that becomes claimable now (inserted available, or put
-- back to 'available' after a failure) notifies channel `statek_runs` with
-- its tenant id, so sleeping workers wake at once.

ALTER TABLE statek.runs
    ADD COLUMN idempotency_key text
        CHECK (idempotency_key IS NULL OR octet_length(idempotency_key) BETWEEN 1 AND 256);

-- NULL keys never collide (runs without a key are always new).
CREATE UNIQUE INDEX runs_tenant_idempotency_key_idx
    ON statek.runs (tenant_id, idempotency_key);

CREATE FUNCTION statek.notify_run_available() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'available' AND NEW.available_at <= clock_timestamp() THEN
        PERFORM pg_notify('statek_runs', NEW.tenant_id);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER runs_notify_available_on_insert
    AFTER INSERT ON statek.runs
    FOR EACH ROW EXECUTE FUNCTION statek.notify_run_available();

CREATE TRIGGER runs_notify_available_on_update
    AFTER UPDATE OF state ON statek.runs
    FOR EACH ROW
    WHEN (NEW.state = 'available' AND OLD.state IS DISTINCT FROM 'available')
    EXECUTE FUNCTION statek.notify_run_available();
