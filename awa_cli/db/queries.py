"""Named SQL text. Parameters only (``%(name)s``); no string formatting of values."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from awa_cli.jobs import JOB_COLUMNS, PreparedJob

# The inference clause for the partial unique index; a duplicate key skips the row instead
# of raising, so a caller's transaction (or a follow-up's) survives a duplicate.
_ON_UNIQUE_CONFLICT = (
    "ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) "
    "DO NOTHING"
)

INSERT_ONE = f"""
INSERT INTO awa.jobs AS j (kind, queue, args, state, priority, max_attempts, run_at,
                      deadline_duration, metadata, tags, unique_key, unique_states, ordering_key)
VALUES (%(kind)s, %(queue)s, %(args)s::jsonb,
        CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
        %(priority)s, %(max_attempts)s, coalesce(%(run_at)s::timestamptz, now()),
        %(deadline_duration)s, %(metadata)s::jsonb, %(tags)s::text[], %(unique_key)s,
        %(unique_states)s::awa.job_state[], %(ordering_key)s)
{_ON_UNIQUE_CONFLICT}
RETURNING {JOB_COLUMNS}
"""

# One statement for a whole batch: per-row columns as arrays, shared options as scalars.
INSERT_MANY = f"""
INSERT INTO awa.jobs (kind, queue, args, state, priority, max_attempts, run_at,
                      deadline_duration, metadata, tags, unique_key, unique_states, ordering_key)
SELECT t.kind, t.queue, t.args,
       CASE WHEN %(run_at)s::timestamptz > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
       %(priority)s, %(max_attempts)s, coalesce(%(run_at)s::timestamptz, now()),
       %(deadline_duration)s, %(metadata)s::jsonb, %(tags)s::text[], t.unique_key,
       %(unique_states)s::awa.job_state[], %(ordering_key)s
FROM unnest(%(kinds)s::text[], %(queues)s::text[], %(args)s::jsonb[], %(unique_keys)s::bytea[])
     AS t(kind, queue, args, unique_key)
{_ON_UNIQUE_CONFLICT}
"""

# Many jobs, each with its own options, in one statement (follow-ups): ids are drawn first so
# that each input row learns its own id, or NULL where its unique key is held (by a job
# already there or by an earlier row of the same statement).
INSERT_EACH = f"""
WITH t AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('awa.jobs', 'id')) AS id, u.*
    FROM unnest(%(kinds)s::text[], %(queues)s::text[], %(args)s::jsonb[], %(priorities)s::int[],
                %(max_attempts)s::int[], %(run_ats)s::timestamptz[], %(deadline_durations)s::float8[],
                %(metadata)s::jsonb[], %(tags)s::jsonb[], %(unique_keys)s::bytea[],
                %(unique_states)s::jsonb[], %(ordering_keys)s::text[])
         WITH ORDINALITY AS u(kind, queue, args, priority, max_attempts, run_at, deadline_duration,
                              metadata, tags, unique_key, unique_states, ordering_key, ord)
), inserted AS (
    INSERT INTO awa.jobs AS j (id, kind, queue, args, state, priority, max_attempts, run_at,
                               deadline_duration, metadata, tags, unique_key, unique_states, ordering_key)
    OVERRIDING SYSTEM VALUE
    SELECT t.id, t.kind, t.queue, t.args,
           CASE WHEN t.run_at > now() THEN 'scheduled' ELSE 'available' END::awa.job_state,
           t.priority, t.max_attempts, coalesce(t.run_at, now()), t.deadline_duration, t.metadata,
           ARRAY(SELECT jsonb_array_elements_text(t.tags)), t.unique_key,
           CASE WHEN t.unique_states IS NOT NULL
                THEN ARRAY(SELECT jsonb_array_elements_text(t.unique_states))::awa.job_state[] END,
           t.ordering_key
    FROM t ORDER BY t.ord
    {_ON_UNIQUE_CONFLICT}
    RETURNING j.id
)
SELECT inserted.id FROM t LEFT JOIN inserted ON inserted.id = t.id ORDER BY t.ord
"""

FIND_UNIQUE_HOLDER = """
SELECT id FROM awa.jobs
WHERE unique_key = %(unique_key)s AND unique_key IS NOT NULL AND state = ANY (unique_states)
LIMIT 1
"""

GET_JOB = "SELECT * FROM awa.jobs WHERE id = %(id)s"

LIST_JOBS = """
SELECT * FROM awa.jobs
WHERE (%(state)s::awa.job_state IS NULL OR state = %(state)s::awa.job_state)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
ORDER BY id DESC
LIMIT %(limit)s
"""

NOTIFY_QUEUE = "SELECT pg_notify(awa.channel_for(%(queue)s), '')"


def insert_params(job: PreparedJob) -> dict[str, Any]:
    return {
        "kind": job.kind,
        "queue": job.queue,
        "args": job.args_json,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "run_at": job.run_at,
        "deadline_duration": job.deadline_duration,
        "metadata": job.metadata_json,
        "tags": job.tags,
        "unique_key": job.unique_key,
        "unique_states": job.unique_states,
        "ordering_key": job.ordering_key,
    }


def insert_many_params(jobs: Sequence[PreparedJob]) -> dict[str, Any]:
    """Parameters for INSERT_MANY; the shared options come from the first job."""
    first = jobs[0]
    params = insert_params(first)
    params.update(
        kinds=[j.kind for j in jobs],
        queues=[j.queue for j in jobs],
        args=[j.args_json for j in jobs],
        unique_keys=[j.unique_key for j in jobs],
    )
    return params


def insert_each_params(jobs: Sequence[PreparedJob]) -> dict[str, Any]:
    """Parameters for INSERT_EACH: one array element per job for every column."""
    return {
        "kinds": [j.kind for j in jobs],
        "queues": [j.queue for j in jobs],
        "args": [j.args_json for j in jobs],
        "priorities": [j.priority for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "run_ats": [j.run_at for j in jobs],
        "deadline_durations": [j.deadline_duration for j in jobs],
        "metadata": [j.metadata_json for j in jobs],
        "tags": [json.dumps(j.tags) for j in jobs],
        "unique_keys": [j.unique_key for j in jobs],
        "unique_states": [
            None if j.unique_states is None else json.dumps(j.unique_states) for j in jobs
        ],
        "ordering_keys": [j.ordering_key for j in jobs],
    }
