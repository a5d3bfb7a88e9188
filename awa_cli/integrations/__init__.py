"""Enqueue from an ORM, inside the ORM's own transaction (architecture §14).

- :mod:`awa_cli.integrations.sqlalchemy`: ``insert(session, args, **opts)`` for a
  ``Session`` or an ``AsyncSession`` on the psycopg (3) dialect (``postgresql+psycopg://``).
- :mod:`awa_cli.integrations.django`: ``insert(args, using="default", **opts)`` on Django's
  PostgreSQL backend with psycopg 3, inside ``transaction.atomic()``.

Both hand the ORM's psycopg connection to :func:`awa_cli.insert` / :func:`awa_cli.insert_async`,
so the job is visible exactly when the caller's transaction commits and gone if it rolls back.
Each needs its extra: ``pip install "awa-worker[sqlalchemy]"`` or ``"awa-worker[django]"``.
"""
