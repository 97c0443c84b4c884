-- Why: every reservation serialises on its shard's cursor row, so one
-- commit per reservation caps a shard's reservation rate. A batch reserves
-- k contiguous sequences in one short transaction (one cursor lock, one
-- commit). The batch is idempotent by a client-made UUIDv7 `batch_id`
-- stored on each of its rows: a retry after a lost acknowledgement finds
-- the rows and returns the same range. Rows of single reservations keep
-- `batch_id` NULL. Each row still has its own `reservation_id`, sequence
-- and slot, so the evidence, retention and the bound (counted in
-- reservations) are unchanged.
--
-- Adding a NULL column is a catalogue-only change. The partial index holds
-- batch rows only; building it scans the table once under a SHARE lock
-- (reservations wait, reads go on), which is quick at the row counts that
-- retention keeps (see docs/benchmarks.md for 5M rows).

ALTER TABLE statek.scheduler_reservations ADD COLUMN batch_id uuid;

CREATE INDEX scheduler_reservations_batch_idx
    ON statek.scheduler_reservations (batch_id, sequence)
    WHERE batch_id IS NOT NULL;
