-- awa 0004: progress, results you can wait for, and the job's history (architecture §11).
--
-- Every column is added to awa.jobs AND awa.dead_letters (the DLQ moves copy rows by column
-- name; tests/integration/db/test_migrations.py checks both tables have the same columns).

-- progress: {"percent", "message", "checkpoint", "at"} as the handler last reported it with
-- job.set_progress(); kept across retries (the next attempt resumes from it) and whatever the
-- outcome. attempted_by: "host:pid" of the worker that claimed the current attempt.
-- awaited: someone calls wait_for_job on this job, so its end is announced (below).
ALTER TABLE awa.jobs
    ADD COLUMN progress jsonb,
    ADD COLUMN attempted_by text,
    ADD COLUMN awaited boolean NOT NULL DEFAULT false;

ALTER TABLE awa.dead_letters
    ADD COLUMN progress jsonb,
    ADD COLUMN attempted_by text,
    ADD COLUMN awaited boolean NOT NULL DEFAULT false;

-- The end of an awaited job is announced on ONE channel, awa_job_done (payload: the job id),
-- from the transaction that finishes it, whichever transition that is (a worker's batched
-- finalise, a callback resolution, an operator cancel, a rescue) or that removes the row (a
-- move to the dead-letter queue, retention). Only awaited jobs notify: a NOTIFY holds
-- PostgreSQL's notify lock through its transaction's commit, so a notification for every job
-- would serialise the batched completion path; jobs nobody waits for pay one boolean test in
-- the trigger's WHEN clause (no function call, no event queued).
CREATE FUNCTION awa.notify_job_done() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('awa_job_done', OLD.id::text);
    ELSE
        PERFORM pg_notify('awa_job_done', NEW.id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_done
    AFTER UPDATE OF state ON awa.jobs
    FOR EACH ROW
    WHEN (NEW.awaited AND NEW.state IN ('completed', 'failed', 'cancelled')
          AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION awa.notify_job_done();

CREATE TRIGGER jobs_notify_removed
    AFTER DELETE ON awa.jobs
    FOR EACH ROW
    WHEN (OLD.awaited)
    EXECUTE FUNCTION awa.notify_job_done();

-- The follow-ups a job produced (metadata awa.trigger_id, set by the outcome core), for
-- `awa job show`'s timeline. Partial: only follow-ups are in it, so plain inserts pay nothing
-- but the predicate.
CREATE INDEX jobs_trigger_id_idx ON awa.jobs ((metadata ->> 'awa.trigger_id'))
    WHERE metadata ? 'awa.trigger_id';
CREATE INDEX dead_letters_trigger_id_idx ON awa.dead_letters ((metadata ->> 'awa.trigger_id'))
    WHERE metadata ? 'awa.trigger_id';
