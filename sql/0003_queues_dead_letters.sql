-- awa 0003: queue controls (pause), the dead-letter queue and the audit log (architecture §10, §15.4).

-- One row per queue an operator paused or resumed, or a worker announced. A queue with no row
-- is not paused. The claim checks `paused` by primary key, so the table must stay small: it
-- holds queue names, never jobs.
CREATE TABLE awa.queues (
    name       text PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 200),
    paused     boolean NOT NULL DEFAULT false,
    paused_at  timestamptz,
    -- who paused it (the audit actor, e.g. 'cli:alice'); cleared on resume
    paused_by  text,
    -- whether exhausted jobs of this queue move to awa.dead_letters, as the config of the
    -- last worker that announced the queue says ([queues.NAME] dead_letter, [dead_letter]
    -- default): so a transition made by a process without that config (a Client in the
    -- application failing a callback) dead-letters the same way a worker would
    dead_letter boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Dead letters: jobs moved out of awa.jobs when exhausted, for inspection and retry.
--
-- Every column of awa.jobs with the same type, then dead_at and dead_reason. The statements
-- that move rows between the two tables copy columns by name (db/sql/dead_letters.sql), so a
-- later migration that adds a column to awa.jobs must add it here too (same name and type);
-- tests/integration/db/test_migrations.py fails until it does.
--
-- The id is the job's id (no identity here): a dead letter keeps it, and a retry puts the job
-- back into awa.jobs under the same id (OVERRIDING SYSTEM VALUE). That cannot collide with a
-- new job, because ids come only from awa.jobs' sequence and a job is in exactly one of the
-- two tables at any time (the move is one statement).
--
-- Unique keys: there is deliberately NO unique index here. A job that moves to the DLQ
-- releases its unique key (it is failed, and a failed job holds its key only if `failed` is
-- in its unique_states, which the DLQ does not honour): a new job with the same key may be
-- inserted while the dead letter waits. A retry from the DLQ re-inserts with ON CONFLICT DO
-- NOTHING, so a dead letter whose key is taken again stays in the DLQ (reported as skipped)
-- rather than breaking the rule that one job holds a key.
CREATE TABLE awa.dead_letters (
    id                  bigint PRIMARY KEY,
    kind                text NOT NULL,
    queue               text NOT NULL,
    args                jsonb NOT NULL,
    state               awa.job_state NOT NULL,
    priority            smallint NOT NULL,
    attempt             integer NOT NULL,
    max_attempts        integer NOT NULL,
    run_at              timestamptz NOT NULL,
    run_lease           bigint NOT NULL,
    heartbeat_at        timestamptz,
    deadline_at         timestamptz,
    deadline_duration   double precision,
    callback_id         uuid,
    callback_timeout_at timestamptz,
    callback_in_handler boolean NOT NULL,
    callback_result     jsonb,
    errors              jsonb NOT NULL,
    metadata            jsonb NOT NULL,
    tags                text[] NOT NULL,
    unique_key          bytea,
    unique_states       awa.job_state[],
    output              jsonb,
    ordering_key        text,
    rescue_pending      text,
    created_at          timestamptz NOT NULL,
    attempted_at        timestamptz,
    finalized_at        timestamptz,
    dead_at             timestamptz NOT NULL DEFAULT now(),
    dead_reason         text NOT NULL CHECK (dead_reason IN
                            ('exhausted', 'terminal_error', 'rescued', 'callback_failed', 'manual'))
);

-- Listing (newest first) and depth per queue or kind; retention pruning and the unfiltered
-- listing by dead_at.
CREATE INDEX dead_letters_queue_idx ON awa.dead_letters (queue, dead_at DESC, id DESC);
CREATE INDEX dead_letters_kind_idx ON awa.dead_letters (kind, dead_at DESC, id DESC);
CREATE INDEX dead_letters_dead_at_idx ON awa.dead_letters (dead_at, id);

-- Who did what (architecture §15.4): the CLI's admin commands (actor 'cli:<os user>') and awa serve.
CREATE TABLE awa.audit_log (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text NOT NULL,
    action text NOT NULL,
    target text,
    -- 'ok', 'refused', 'failed', or a short outcome such as a count
    result text NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX audit_log_at_idx ON awa.audit_log (at);
