-- The audit log (architecture §15.4): who did what, written by the CLI's admin commands
-- (actor 'cli:<os user>') and by awa serve.

-- name: audit_insert
-- One entry. Written in the transaction of the action it records where there is one, so an
-- action that rolls back leaves no entry claiming it happened; a refused or failed action is
-- recorded on its own with result 'refused' or 'failed'.
INSERT INTO awa.audit_log (actor, action, target, result, detail)
VALUES (%(actor)s::text, %(action)s::text, %(target)s::text, %(result)s::text,
        coalesce(%(detail)s::jsonb, '{}'))
RETURNING id, at, actor, action, target, result, detail

-- name: audit_prune
-- Retention ([maintenance] audit_retention, seconds): the leader deletes up to %(batch)s of
-- the oldest entries past it per statement, walking audit_log_at_idx. No row lock first:
-- FOR UPDATE needs UPDATE, which the README's worker role does not have (entries are
-- append-only; a second sweep at once, `awa rescue run`, waits on the rows and skips them).
DELETE FROM awa.audit_log WHERE id IN (
    SELECT id FROM awa.audit_log
    WHERE at < now() - %(retention)s::float8 * interval '1 second'
    ORDER BY at
    LIMIT %(batch)s)

-- name: audit_list
-- The newest entries first, optionally for one actor, action or target (or any of the
-- targets that name one job: `job:42`, `42`, `id=42`), or since a time.
SELECT id, at, actor, action, target, result, detail FROM awa.audit_log
WHERE (%(actor)s::text IS NULL OR actor = %(actor)s::text)
  AND (%(action)s::text IS NULL OR action = %(action)s::text)
  AND (%(target)s::text IS NULL OR target = %(target)s::text)
  AND (%(targets)s::text[] IS NULL OR target = ANY (%(targets)s::text[]))
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s::timestamptz)
ORDER BY at DESC, id DESC
LIMIT %(limit)s
