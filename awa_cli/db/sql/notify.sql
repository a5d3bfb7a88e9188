-- Waking workers. A queue's channel is awa.channel_for(queue) (sql/0001_initial.sql): the
-- schema's function is the one source of channel names, for the insert trigger, for these
-- statements and for the listener (queue_channels).

-- name: notify_queue
SELECT pg_notify(awa.channel_for(%(queue)s), '');

-- name: notify_queues
-- One NOTIFY per queue that received follow-ups (a worker's sessions defer the trigger's).
SELECT pg_notify(awa.channel_for(q), '') FROM unnest(%(queues)s::text[]) AS q;

-- name: notify_callback_waiter
-- Wake a handler waiting inside wait_for_callback (payload: the job id).
SELECT pg_notify(%(channel)s, %(id)s);

-- name: queue_channels
-- The listener's channel for each queue, from the schema's own function.
SELECT q, awa.channel_for(q) FROM unnest(%(queues)s::text[]) AS q;

-- name: listen
-- A psycopg.sql template: the caller composes the channel as an Identifier.
LISTEN {};

-- name: notify_cancel
-- Sent from an operator cancel's transaction (payload: the job id): a worker running the job
-- flips its job.is_cancelled() and cancels an async handler after a grace (architecture §15.6).
SELECT pg_notify(%(channel)s, %(id)s);

-- name: notify_limits
-- Slots of these limits freed (payload: the sender's worker id, a space, a limit's name; one
-- NOTIFY each): sent after the results commit, coalesced per finalised batch, by a worker
-- whose claim was short.
SELECT pg_notify(%(channel)s, %(sender)s || ' ' || n) FROM unnest(%(names)s::text[]) AS n;
