-- awa 0013: the signals an operator reads (issue 28; architecture §14).
--
-- A worker whose claims fail (a revoked grant, a read-only server) says so in its own row of
-- awa.workers, written by its presence heartbeat (an UPDATE of that row, which the README's
-- least-privilege role may do): since when, and the first line of the last error. NULL while
-- claims work. `awa doctor` fails on a live worker with claims failing; `awa serve`'s workers
-- page can show it.
ALTER TABLE awa.workers ADD COLUMN IF NOT EXISTS claim_failing_since timestamptz;
ALTER TABLE awa.workers ADD COLUMN IF NOT EXISTS claim_error text;

-- The maintenance leader writes the backend pid of the session that holds the leader lock
-- into its own worker row, so `awa doctor` names the leader by the worker's host:pid (the
-- lock itself only shows a PostgreSQL backend pid).
ALTER TABLE awa.workers ADD COLUMN IF NOT EXISTS leader_backend_pid integer;
