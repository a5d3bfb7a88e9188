-- 0005: live workers (issue 20) and the indexes the dashboard reads through.

-- One row per running worker process: registered when it starts, touched every
-- heartbeat_interval (one UPDATE), deleted when it stops. A row whose heartbeat is older than
-- 30 s belongs to a process that died: readers ignore it and the maintenance leader deletes it.
CREATE TABLE awa.workers (
    id           text PRIMARY KEY,                 -- host:pid:start
    host         text NOT NULL,
    pid          integer NOT NULL,
    -- {"queue": concurrency}
    queues       jsonb NOT NULL DEFAULT '{}',
    -- [{"kind": "send_email", "queue": "email", "doc": "first line of the handler's docstring"}]
    kinds        jsonb NOT NULL DEFAULT '[]',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    running      integer NOT NULL DEFAULT 0,
    version      text NOT NULL DEFAULT ''
);

CREATE INDEX workers_heartbeat_idx ON awa.workers (heartbeat_at);

-- The dashboard's jobs list, newest first within a state: keyset pages by id walk this in
-- order instead of filtering the primary key (a rare state would otherwise read the whole
-- table to fill a page). Partial: completed rows, nearly all of a table, are found at once by
-- the primary key walked backwards, and every index entry is paid by the workers (an update
-- of `state` is never HOT), so the completing update writes no entry here. A kind filter
-- walks the primary key with a filter (kinds are few and mixed), with no index of its own.
CREATE INDEX jobs_state_id_idx ON awa.jobs (state, id) WHERE state <> 'completed';

-- The overview's exact counts of the live states per queue, and the oldest available job,
-- read index-only: its size is the unfinished work, not the table (terminal rows, usually
-- nearly all of them, are estimated from a sample instead).
CREATE INDEX jobs_active_idx ON awa.jobs (queue, state, run_at)
    WHERE state NOT IN ('completed', 'failed', 'cancelled');
