"""Rows for the SQL statement tests: jobs inserted directly, statements run by name."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from awa_cli.db.statements import SQL


def add_jobs(db: psycopg.Connection, count: int = 1, **columns: Any) -> list[int]:
    """Insert ``count`` jobs with these column values (kind defaults to ``k``); their ids."""
    columns.setdefault("kind", "k")
    names = sql.SQL(", ").join(sql.Identifier(name) for name in columns)
    values = sql.SQL(", ").join(sql.Placeholder(name) for name in columns)
    statement = sql.SQL(
        "INSERT INTO awa.jobs ({names}) SELECT {values} FROM generate_series(1, %(count)s)"
        " RETURNING id"
    ).format(names=names, values=values)
    rows = db.execute(statement, {**columns, "count": count}).fetchall()
    return sorted(row[0] for row in rows)


def run(db: psycopg.Connection, name: str, **params: Any) -> list[dict[str, Any]]:
    """Run the named statement; its rows as dicts (empty for a statement without rows)."""
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(SQL[name], params)
        return cur.fetchall() if cur.description else []


def rowcount(db: psycopg.Connection, name: str, **params: Any) -> int:
    with db.cursor() as cur:
        cur.execute(SQL[name], params)
        return cur.rowcount


def job_record(db: psycopg.Connection, job_id: int) -> dict[str, Any] | None:
    with db.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()


def dead_record(db: psycopg.Connection, job_id: int) -> dict[str, Any] | None:
    with db.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM awa.dead_letters WHERE id = %s", (job_id,)).fetchone()


def ids_in(db: psycopg.Connection, table: str) -> list[int]:
    query = sql.SQL("SELECT id FROM {} ORDER BY id").format(sql.Identifier("awa", table))
    return [row[0] for row in db.execute(query).fetchall()]


def fail(db: psycopg.Connection, ids: list[int]) -> None:
    """Make jobs failed as an exhausted attempt leaves them."""
    db.execute(
        "UPDATE awa.jobs SET state = 'failed', attempt = max_attempts, finalized_at = now(),"
        ' errors = errors || \'[{"error": "RuntimeError: boom", "attempt": 1}]\''
        " WHERE id = ANY (%s)",
        (ids,),
    )
