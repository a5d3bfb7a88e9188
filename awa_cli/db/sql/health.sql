-- name: schema_presence
-- Whether the awa schema is there, without needing any grant: awa.jobs exists, and whether
-- this role may read the migration ledger (the least-privilege worker role may not; then the
-- pending-migration check is skipped).
SELECT to_regclass('awa.jobs') IS NOT NULL AS has_jobs,
       CASE WHEN to_regclass('awa.schema_migrations') IS NULL THEN false
            ELSE has_table_privilege('awa.schema_migrations', 'SELECT') END AS ledger_readable

-- name: ping
-- One round trip: the database answers on this connection (awa serve's /readyz).
SELECT 1;

-- name: pooler_mark
-- The setting awa's pools pass in the options startup parameter (-c awa.direct=on): absent
-- on a connection that came through a pooler (PgBouncer drops or refuses the parameter),
-- which then needs psycopg's prepared statements off (architecture §18).
SELECT current_setting('awa.direct', true) AS direct;

-- name: sync_standby_named
-- Whether the server replicates synchronously (synchronous_standby_names set): then claims
-- too wait for the standby, so a promoted standby knows of every claim a handler acted on.
SELECT current_setting('synchronous_standby_names') <> '' AS synchronous;

-- name: claims_wait_for_standby
SET synchronous_commit TO on;
