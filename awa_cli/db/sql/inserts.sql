-- Inserting jobs. A duplicate unique key skips the row instead of raising (the ON CONFLICT
-- clause infers the partial unique index), so a caller's transaction, or a follow-up's,
-- survives a duplicate. Parameters are shaped by awa_cli/db/params.py.

-- name: insert_one
-- One job; RETURNING lists INSERTED_COLUMNS (awa_cli/jobs.py), the values the server chose:
-- JobRow.inserted builds the rest from what was sent. No row back: its unique key is held.
INSERT INTO awa.jobs AS j (kind, queue, args, state, priority, max_attempts, run_at,
                      deadline_duration, metadata, tags, unique_key, unique_states, ordering_key, concurrency_key)
VALUES (%(kind)s, %(queue)s, %(args)s::jsonb,
        CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
        %(priority)s, %(max_attempts)s, coalesce(%(run_at)s::timestamptz, now()),
        %(deadline_duration)s, %(metadata)s::jsonb, %(tags)s::text[], %(unique_key)s,
        %(unique_states)s::awa.job_state[], %(ordering_key)s, %(concurrency_key)s)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING
RETURNING j.id, j.state, j.run_at, j.created_at;

-- name: insert_many
-- One statement for a whole batch: per-row columns as arrays, shared options as scalars.
INSERT INTO awa.jobs (kind, queue, args, state, priority, max_attempts, run_at,
                      deadline_duration, metadata, tags, unique_key, unique_states, ordering_key,
                      concurrency_key)
SELECT t.kind, t.queue, t.args,
       CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
       %(priority)s, %(max_attempts)s, coalesce(%(run_at)s::timestamptz, now()),
       %(deadline_duration)s, %(metadata)s::jsonb, %(tags)s::text[], t.unique_key,
       %(unique_states)s::awa.job_state[], %(ordering_key)s, %(concurrency_key)s
FROM unnest(%(kinds)s::text[], %(queues)s::text[], %(args)s::jsonb[], %(unique_keys)s::bytea[])
     AS t(kind, queue, args, unique_key)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING;

-- fragment: each_rows
-- The CTE t of a statement inserting many jobs each with its own options (insert_each,
-- batch_insert_members): one input row per job, in order, with its id drawn first.
WITH t AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('awa.jobs', 'id')) AS id, u.*
    FROM unnest(%(kinds)s::text[], %(queues)s::text[], %(args)s::jsonb[], %(priorities)s::int[],
                %(max_attempts)s::int[], %(run_ats)s::timestamptz[], %(deadline_durations)s::float8[],
                %(metadata)s::jsonb[], %(tags)s::jsonb[], %(unique_keys)s::bytea[],
                %(unique_states)s::jsonb[], %(ordering_keys)s::text[], %(concurrency_keys)s::text[])
         WITH ORDINALITY AS u(kind, queue, args, priority, max_attempts, run_at, deadline_duration,
                              metadata, tags, unique_key, unique_states, ordering_key,
                              concurrency_key, ord)

-- fragment: each_values
-- The first columns of t's rows as awa.jobs takes them (id through unique_states), after the
-- column list (id, kind, queue, args, state, priority, max_attempts, run_at,
-- deadline_duration, metadata, tags, unique_key, unique_states, ...).
    SELECT t.id, t.kind, t.queue, t.args,
           CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
           t.priority, t.max_attempts, coalesce(t.run_at, now()), t.deadline_duration, t.metadata,
           ARRAY(SELECT jsonb_array_elements_text(t.tags)), t.unique_key,
           CASE WHEN t.unique_states IS NOT NULL
                THEN ARRAY(SELECT jsonb_array_elements_text(t.unique_states))::awa.job_state[] END,

-- name: insert_each
-- Many jobs, each with its own options, in one statement (follow-ups): ids are drawn first so
-- that each input row learns its own id, or NULL where its unique key is held (by a job
-- already there or by an earlier row of the same statement).
{{each_rows}}
), inserted AS (
    INSERT INTO awa.jobs AS j (id, kind, queue, args, state, priority, max_attempts, run_at,
                               deadline_duration, metadata, tags, unique_key, unique_states, ordering_key,
                               concurrency_key)
    OVERRIDING SYSTEM VALUE
{{each_values}}
           t.ordering_key, t.concurrency_key
    FROM t ORDER BY t.ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING
    RETURNING j.id
)
SELECT inserted.id FROM t LEFT JOIN inserted ON inserted.id = t.id ORDER BY t.ord;

-- name: find_unique_holder
-- The job holding a unique key (for UniqueConflict's message).
SELECT id FROM awa.jobs
WHERE unique_key = %(unique_key)s AND unique_key IS NOT NULL AND state = ANY (unique_states)
LIMIT 1;


-- name: copy_jobs
-- Bulk insert without unique keys (insert_many): COPY in text format, encoded by
-- awa_cli/db/copy.py; every row shares the options after (kind, queue, args).
COPY awa.jobs (kind, queue, args, state, priority, max_attempts, deadline_duration, metadata, tags, ordering_key, concurrency_key) FROM STDIN;

-- name: copy_jobs_run_at
-- copy_jobs for rows given a run_at.
COPY awa.jobs (kind, queue, args, state, priority, max_attempts, deadline_duration, metadata, tags, ordering_key, concurrency_key, run_at) FROM STDIN;
