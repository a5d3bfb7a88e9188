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
