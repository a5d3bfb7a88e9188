-- Operator actions (Client.cancel / Client.retry, awa job cancel / retry).

-- name: cancel
-- Cancel a pending, running or waiting job (a running handler is fenced by the lease guard).
UPDATE awa.jobs SET state = 'cancelled', finalized_at = now(), heartbeat_at = NULL,
    deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL, callback_in_handler = false
WHERE id = %(id)s AND state NOT IN ('completed', 'failed', 'cancelled')
RETURNING *;

-- name: retry
-- Make a failed, cancelled, retryable or scheduled job available now, its attempts reset.
UPDATE awa.jobs SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL,
    heartbeat_at = NULL, deadline_at = NULL, callback_id = NULL, callback_timeout_at = NULL,
    callback_in_handler = false
WHERE id = %(id)s AND state IN ('failed', 'cancelled', 'retryable', 'scheduled')
RETURNING *;

-- name: job_state
-- Why an operator action matched nothing: the job's state, or no row when it does not exist.
SELECT state FROM awa.jobs WHERE id = %(id)s;
