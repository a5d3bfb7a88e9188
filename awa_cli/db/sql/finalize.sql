-- Finalising worker attempts: running -> completed / retryable / failed / cancelled /
-- scheduled (snooze) / waiting_external (park), many jobs in one statement over unnest(...)
-- arrays, each guarded by (id, run_lease, state = 'running').

-- name: finalize_changed
-- A park whose callback was resumed before the handler returned (callback_result already set)
-- re-enters execution instead of waiting: it becomes available with its attempt refunded.
-- Returns only what the UPDATE changed; the committed row is the claimed row with those
-- changes (awa_cli.attempts.committed_row). %(progress)s: the attempt's last reported progress
-- (NULL: the row's stays), so the outcome always carries the latest progress. The rows are
-- locked in id order first (running.sql: lock_running_in_id_order), as the heartbeat's.
{{lock_running_in_id_order}}
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
    callback_in_handler = false,
    progress = coalesce(v.progress, j.progress)
FROM unnest(%(ids)s::bigint[], %(leases)s::bigint[], %(states)s::awa.job_state[],
            %(delays)s::float8[], %(errors)s::jsonb[], %(outputs)s::jsonb[], %(refunds)s::int[],
            %(callback_ids)s::uuid[], %(progress)s::jsonb[])
     AS v(id, lease, state, delay, error, output, refund, callback_id, progress)
WHERE j.id = v.id AND j.run_lease = v.lease AND j.state = 'running'
  AND (v.callback_id IS NULL OR j.callback_id = v.callback_id)
  AND j.id IN (SELECT id FROM locked)
RETURNING j.id, j.state::text AS state, j.run_at, j.attempt, j.finalized_at, j.callback_id, j.callback_timeout_at,
          j.has_dependents, j.workflow_id;

