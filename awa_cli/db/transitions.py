"""SQL text of the outcome core's transitions (awa_cli/outcomes.py). Parameters only."""

from __future__ import annotations

from awa_cli.events import RescueReason

# A park whose callback was resumed before the handler returned (callback_result already set)
# re-enters execution instead of waiting: it becomes available with its attempt refunded.
FINALIZE = """
UPDATE awa.jobs AS j SET
    state = CASE WHEN v.state = 'waiting_external' AND j.callback_result IS NOT NULL
                 THEN 'available'::awa.job_state ELSE v.state END,
    run_at = CASE WHEN v.state = 'waiting_external' AND j.callback_result IS NOT NULL THEN now()
                  WHEN v.delay IS NULL THEN j.run_at
                  ELSE now() + v.delay * interval '1 second' END,
    attempt = j.attempt - v.refund
              - CASE WHEN v.state = 'waiting_external' AND j.callback_result IS NOT NULL THEN 1 ELSE 0 END,
    errors = CASE WHEN v.error IS NULL THEN j.errors ELSE j.errors || jsonb_build_array(v.error) END,
    output = CASE WHEN v.state = 'completed' THEN v.output ELSE j.output END,
    heartbeat_at = NULL,
    deadline_at = NULL,
    finalized_at = CASE WHEN v.state IN ('completed', 'failed', 'cancelled') THEN now() END,
    callback_id = CASE WHEN v.state = 'waiting_external' AND j.callback_result IS NULL
                       THEN j.callback_id END,
    callback_timeout_at = CASE WHEN v.state = 'waiting_external' AND j.callback_result IS NULL
                               THEN j.callback_timeout_at END,
    callback_in_handler = false
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(states)s::awa.job_state[],
            %(delays)s::float8[], %(errors)s::jsonb[], %(outputs)s::jsonb[], %(refunds)s::int[],
            %(callback_ids)s::uuid[])
     AS v(id, lease, state, delay, error, output, refund, callback_id)
WHERE j.id = v.id AND j.run_lease = v.lease AND j.state = 'running'
  AND (v.callback_id IS NULL OR j.callback_id = v.callback_id)
RETURNING {returning}
"""


# The batch path returns only what the UPDATE changed; the committed row is the claimed row
# with those changes (see committed_row). The per-job path returns the whole row.
FINALIZE_CHANGED = FINALIZE.format(
    returning="j.id, j.state::text AS state, j.run_at, j.attempt, j.finalized_at, j.callback_id, "
    "j.callback_timeout_at"
)


FINALIZE_FULL = FINALIZE.format(returning="j.*")


RESCUE_CANDIDATES = {
    RescueReason.STALE_HEARTBEAT: """
        SELECT * FROM awa.jobs WHERE state = 'running'
          AND heartbeat_at < now() - %(staleness)s * interval '1 second'
        ORDER BY heartbeat_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED""",
    RescueReason.DEADLINE_EXCEEDED: """
        SELECT * FROM awa.jobs WHERE state = 'running' AND deadline_at < now()
        ORDER BY deadline_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED""",
    RescueReason.EXPIRED_CALLBACK: """
        SELECT * FROM awa.jobs WHERE state = 'waiting_external' AND callback_timeout_at < now()
        ORDER BY callback_timeout_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED""",
}


# Retryable with backoff, or failed on the last attempt; the callback id dies with the
# rescue; run_lease is kept so the next claim fences the rescued attempt off.
RESCUE = """
WITH candidates AS ({candidates})
UPDATE awa.jobs AS j SET
    state = CASE WHEN j.attempt >= j.max_attempts THEN 'failed' ELSE 'retryable' END::awa.job_state,
    run_at = CASE WHEN j.attempt >= j.max_attempts THEN j.run_at
                  ELSE now() + least(power(2, least(j.attempt, 62)) * (1 + random() * 0.25), 86400)
                               * interval '1 second' END,
    errors = j.errors || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
        'error', %(message)s::text, 'attempt', j.attempt, 'at', now(),
        'terminal', CASE WHEN j.attempt >= j.max_attempts THEN true END))),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    heartbeat_at = NULL, deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
    callback_in_handler = false,
    rescue_pending = CASE WHEN j.kind = ANY (%(spec_kinds)s::text[]) THEN %(reason)s END
FROM candidates WHERE j.id = candidates.id
RETURNING j.*
"""


PRUNE = """
DELETE FROM awa.jobs WHERE id IN (
    SELECT id FROM awa.jobs
    WHERE rescue_pending IS NULL AND (
        (state = 'completed' AND finalized_at < now() - %(completed)s * interval '1 second')
        OR (state IN ('failed', 'cancelled') AND finalized_at < now() - %(failed)s * interval '1 second'))
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
"""


# Resolutions match a job waiting on the callback, or one whose handler registered it and
# has not parked yet (its later park is then a harmless stale no-op).
CALLBACK_GUARD = """
    callback_id = %(callback_id)s AND state IN ('waiting_external', 'running')
    AND (%(lease)s::bigint IS NULL OR run_lease = %(lease)s::bigint)
"""


RESOLVE = {
    "complete": f"""
        UPDATE awa.jobs SET state = 'completed', finalized_at = now(), callback_timeout_at = NULL,
            callback_in_handler = false, callback_result = %(payload)s::jsonb,
            heartbeat_at = NULL, deadline_at = NULL
        WHERE {CALLBACK_GUARD}
        RETURNING *, attempt AS parked_attempt""",
    "fail": f"""
        UPDATE awa.jobs SET state = 'failed', finalized_at = now(), callback_timeout_at = NULL,
            callback_in_handler = false, heartbeat_at = NULL, deadline_at = NULL,
            errors = errors || jsonb_build_array(
                jsonb_set(jsonb_set(%(entry)s::jsonb, '{{attempt}}', to_jsonb(attempt)),
                          '{{error}}', to_jsonb(%(error)s::text)))
        WHERE {CALLBACK_GUARD}
        RETURNING *, attempt AS parked_attempt""",
    "retry": f"""
        UPDATE awa.jobs AS j SET state = 'available', attempt = 0, run_at = now(),
            callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false,
            heartbeat_at = NULL, deadline_at = NULL
        FROM (SELECT id, attempt FROM awa.jobs WHERE {CALLBACK_GUARD} FOR UPDATE) AS before
        WHERE j.id = before.id
        RETURNING j.*, before.attempt AS parked_attempt""",
}


# A handler waiting inside wait_for_callback gets the payload and keeps running; a job
# parked by WaitForCallback becomes claimable again (its attempt refunded, so the re-entry
# continues the same attempt); a handler that registered but has not parked yet finds the
# payload when it parks or waits.
RESUME = """
UPDATE awa.jobs SET
    callback_result = %(payload)s::jsonb,
    state = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler
                 THEN 'available'::awa.job_state ELSE 'running'::awa.job_state END,
    attempt = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler
                   THEN attempt - 1 ELSE attempt END,
    run_at = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler THEN now() ELSE run_at END,
    heartbeat_at = CASE WHEN state = 'waiting_external' AND NOT callback_in_handler THEN NULL ELSE now() END,
    callback_id = CASE WHEN state = 'running' THEN callback_id END,
    callback_timeout_at = CASE WHEN state = 'running' THEN callback_timeout_at END,
    callback_in_handler = false
WHERE callback_id = %(callback_id)s AND state IN ('waiting_external', 'running')
RETURNING *
"""


HEARTBEAT_CALLBACK = f"""
UPDATE awa.jobs SET callback_timeout_at = now() + %(timeout)s * interval '1 second'
WHERE {CALLBACK_GUARD}
RETURNING *
"""


CANCEL = """
UPDATE awa.jobs SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
    deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false
WHERE id = %(id)s AND state NOT IN ('completed', 'failed', 'cancelled')
RETURNING *
"""


RETRY = """
UPDATE awa.jobs SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
    heartbeat_at = NULL, deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
    callback_in_handler = false
WHERE id = %(id)s AND state IN ('failed', 'cancelled', 'retryable', 'scheduled')
RETURNING *
"""


NOTIFY_QUEUES = "SELECT pg_notify(awa.channel_for(q), '') FROM unnest(%(queues)s::text[]) AS q"
