-- Batches (architecture §16): awa.batches and awa.batch_shards. The members' counting and
-- the callbacks' enqueueing live in sql/0012_batches.sql (triggers on awa.jobs and the
-- functions awa.batch_seal, awa.batch_fire, awa.batch_enqueue): they run inside whatever
-- statement moves a member, so this file only opens, fills, seals and reads batches.

-- name: batch_create
INSERT INTO awa.batches (shards, on_success, on_complete, on_death, metadata)
VALUES (%(shards)s, %(on_success)s::jsonb, %(on_complete)s::jsonb, %(on_death)s::jsonb,
        %(metadata)s::jsonb)
RETURNING id

-- name: batch_insert_members
-- Members into an open batch, each with its own options (the shape of insert_each), and
-- counted by awa.batch_add (sql/0012_batches.sql) in the same statement, so even an
-- autocommit connection never holds a member its batch did not count. awa.batch_add takes
-- the counter rows, then the batch row (the order every counting statement takes them in),
-- and refuses a sealed batch (SQLSTATE AWB01) or a missing one (AWB02): the statement then
-- fails whole. A held unique key skips that member (NULL id in its place).
{{each_rows}}
), inserted AS (
    INSERT INTO awa.jobs AS j (id, kind, queue, args, state, priority, max_attempts, run_at,
                               deadline_duration, metadata, tags, unique_key, unique_states,
                               ordering_key, concurrency_key, batch_id)
    OVERRIDING SYSTEM VALUE
{{each_values}}
           t.ordering_key, t.concurrency_key, %(batch_id)s::bigint
    FROM t ORDER BY t.ord
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING
    RETURNING j.id
), counted AS MATERIALIZED (
    SELECT awa.batch_add(%(batch_id)s::bigint, coalesce(array_agg(inserted.id), '{}')) AS done
    FROM inserted
)
SELECT t.id AS slot, inserted.id
FROM counted, t LEFT JOIN inserted ON inserted.id = t.id
ORDER BY t.ord

-- name: batch_seal
-- Seal (no member can be added any more) and enqueue the callbacks whose condition already
-- holds, in this transaction: awa.batch_seal in sql/0012_batches.sql. False: already
-- sealed; NULL: no such batch.
SELECT awa.batch_seal(%(id)s::bigint) AS sealed

-- name: batch_is_sealed
-- No row: no such batch.
SELECT sealed_at IS NOT NULL AS sealed FROM awa.batches WHERE id = %(id)s::bigint

-- name: batch_get
SELECT b.*, awa.batch_counts(b.id) AS counts FROM awa.batches AS b WHERE b.id = %(id)s::bigint

-- name: batch_list
-- Newest first; %(state)s: open, running, completed or NULL (any).
SELECT b.*, awa.batch_counts(b.id) AS counts FROM awa.batches AS b
WHERE %(state)s::text IS NULL
   OR (%(state)s = 'open' AND b.sealed_at IS NULL)
   OR (%(state)s = 'running' AND b.sealed_at IS NOT NULL AND b.completed_at IS NULL)
   OR (%(state)s = 'completed' AND b.completed_at IS NOT NULL)
ORDER BY b.created_at DESC, b.id DESC
LIMIT %(limit)s

-- name: batch_member_states
-- The members still in awa.jobs by exact state (over the partial index jobs_batch_idx).
SELECT state::text AS state, count(*) AS n FROM awa.jobs
WHERE batch_id = %(id)s::bigint GROUP BY state ORDER BY state

-- name: batch_members
-- A page of members, newest first.
SELECT id, kind, state::text AS state FROM awa.jobs
WHERE batch_id = %(id)s::bigint ORDER BY id DESC LIMIT %(limit)s
