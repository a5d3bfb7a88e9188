"""A plugin with a plain (sync) ``awa_job_event`` that reads the job from the database, and
an ``awa_worker_stopping`` that declares no arguments (pluggy lets it)."""

from __future__ import annotations

from typing import Any

import psycopg

import awa_cli

SEEN: list[tuple[int, str, str, Any]] = []  # (job id, event name, state in the db, args)
CONFIG: dict[str, Any] = {}
STOPPING: list[bool] = []


def reset() -> None:
    SEEN.clear()
    CONFIG.clear()
    STOPPING.clear()


@awa_cli.hookimpl
def awa_job_event(event: Any) -> None:
    state = "unread"
    dsn = CONFIG.get("dsn")
    if dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT state::text FROM awa.jobs WHERE id = %s", (event.job.id,)
            ).fetchone()
            state = row[0] if row else "missing"
    SEEN.append((event.job.id, event.name, state, event.args))


@awa_cli.hookimpl
def awa_worker_stopping() -> None:
    STOPPING.append(True)
