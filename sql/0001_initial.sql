-- awa 0001: schema, job table, indexes for claiming, deduplication and the maintenance sweeps.
CREATE SCHEMA IF NOT EXISTS awa;

CREATE TYPE awa.job_state AS ENUM (
    'scheduled', 'available', 'running', 'waiting_external',
    'retryable', 'completed', 'failed', 'cancelled'
);

CREATE TABLE awa.jobs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind                text NOT NULL CHECK (char_length(kind) BETWEEN 1 AND 200),
    queue               text NOT NULL DEFAULT 'default' CHECK (char_length(queue) BETWEEN 1 AND 200),
    args                jsonb NOT NULL DEFAULT '{}',
    state               awa.job_state NOT NULL DEFAULT 'available',
    priority            smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 1 AND 4),
    attempt             integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL DEFAULT 25 CHECK (max_attempts BETWEEN 1 AND 1000),
    run_at              timestamptz NOT NULL DEFAULT now(),
    run_lease           bigint NOT NULL DEFAULT 0,
    heartbeat_at        timestamptz,
    deadline_at         timestamptz,
    -- seconds; NULL = the queue's deadline, 0 = no deadline
    deadline_duration   double precision CHECK (deadline_duration >= 0),
    callback_id         uuid,
    callback_timeout_at timestamptz,
    -- true while a handler waits inside wait_for_callback (it keeps its slot)
    callback_in_handler boolean NOT NULL DEFAULT false,
    callback_result     jsonb,
    errors              jsonb NOT NULL DEFAULT '[]',
    metadata            jsonb NOT NULL DEFAULT '{}',
    tags                text[] NOT NULL DEFAULT '{}' CHECK (cardinality(tags) <= 20),
    unique_key          bytea,
    unique_states       awa.job_state[],
    output              jsonb,
    ordering_key        text,
    -- set by a rescue whose follow-up specs have not yet committed (reason text)
    rescue_pending      text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    attempted_at        timestamptz,
    finalized_at        timestamptz
);

-- Claiming: runnable rows only, in claim order.
CREATE INDEX jobs_claim_idx ON awa.jobs (queue, priority, run_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');

-- Waking up for scheduled and retryable work when it falls due.
CREATE INDEX jobs_due_idx ON awa.jobs (queue, run_at) WHERE state IN ('scheduled', 'retryable');

-- Deduplication: the key is held only while the job is in one of its unique_states.
CREATE UNIQUE INDEX jobs_unique_key_idx ON awa.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state = ANY (unique_states);

-- Maintenance sweeps.
CREATE INDEX jobs_heartbeat_idx ON awa.jobs (heartbeat_at) WHERE state = 'running';
CREATE INDEX jobs_deadline_idx ON awa.jobs (deadline_at)
    WHERE state = 'running' AND deadline_at IS NOT NULL;
CREATE INDEX jobs_callback_timeout_idx ON awa.jobs (callback_timeout_at)
    WHERE state = 'waiting_external';
CREATE UNIQUE INDEX jobs_callback_id_idx ON awa.jobs (callback_id) WHERE callback_id IS NOT NULL;
CREATE INDEX jobs_retention_idx ON awa.jobs (state, finalized_at)
    WHERE state IN ('completed', 'failed', 'cancelled');
CREATE INDEX jobs_rescue_pending_idx ON awa.jobs (id) WHERE rescue_pending IS NOT NULL;

-- Wake workers: one NOTIFY per queue that received runnable work in a statement.
-- Channel: awa_<queue> (hashed when the name would not fit in an identifier).
CREATE FUNCTION awa.channel_for(queue text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT CASE WHEN octet_length(queue) <= 59 THEN 'awa_' || queue
                      ELSE 'awa_' || md5(queue) END $$;

CREATE FUNCTION awa.notify_inserted() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    -- A worker's own sessions set awa.defer_notify: they notify after their commits instead
    -- (a NOTIFY inside the transaction would serialise commits on the global notify lock).
    IF current_setting('awa.defer_notify', true) = 'on' THEN
        RETURN NULL;
    END IF;
    FOR q IN SELECT DISTINCT queue FROM inserted WHERE state = 'available' LOOP
        PERFORM pg_notify(awa.channel_for(q), '');
    END LOOP;
    RETURN NULL;
END $$;

-- One notification per queue per statement: a bulk insert wakes its workers once.
CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON awa.jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION awa.notify_inserted();
