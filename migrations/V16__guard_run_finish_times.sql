-- Why: a finished run's `finished_at` is evidence (`statek.run_attempts`
-- reads an attempt's finish time from it, and run retention judges a
-- run's age by it), and only statek's own functions write it: the finish
-- function, cancel, rescue and retry, all SECURITY DEFINER. V12's trigger
-- `runs_completion_guarded` kept a completion from changing, and kept any
-- role but the owner from completing a run, but it fired only when the
-- old or the new state was `completed`. The retention role holds
-- `UPDATE (finished_at)` on `statek.runs` (only because `FOR UPDATE` row
-- locks need an UPDATE privilege), so it could move the finish time of a
-- failed or cancelled run, or give a live run one; so could any role
-- granted UPDATE by hand.
--
-- From this migration on, the trigger also fires when `finished_at`
-- changes, and only the owner (statek's SECURITY DEFINER functions run as
-- the owner) may change it: any other role gets SQLSTATE SK001, whoever it
-- is. A completion still fires the trigger once, as before; a failure, a
-- cancel, a rescue or a retry now fires it too (one more trigger call on
-- those paths, none on the claim's).
--
-- Nothing is rewritten; the trigger is replaced under a short lock.

CREATE OR REPLACE FUNCTION statek.guard_run_completion() RETURNS trigger
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

DROP TRIGGER runs_completion_guarded ON statek.runs;
CREATE TRIGGER runs_completion_guarded
    BEFORE UPDATE ON statek.runs
    FOR EACH ROW
    WHEN (OLD.state = 'completed' OR NEW.state = 'completed'
          OR OLD.finished_at IS DISTINCT FROM NEW.finished_at)
    EXECUTE FUNCTION statek.guard_run_completion();
