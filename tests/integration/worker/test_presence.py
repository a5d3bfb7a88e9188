"""A worker's row in awa.workers: registered at start, heartbeated, removed at stop, expired
when it stops heartbeating (readers ignore it, the leader deletes it); the kinds it runs."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest

import awa_cli as awa
from tests.helpers import running_worker, wait_until

pytestmark = [pytest.mark.integration]


@dataclass
class Greet:
    name: str = ""


def greeting_app() -> awa.App:
    app = awa.App()

    @app.task(Greet, queue="mail")
    async def greet(job: awa.Job) -> None:
        """Say hello to one person.

        The rest of the docstring is not shown."""

    return app


def rows(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT id, host, pid, queues, kinds, running, version, heartbeat_at FROM awa.workers"
        ).fetchall()


@pytest.mark.asyncio
async def test_a_worker_registers_heartbeats_and_leaves(dsn: str) -> None:
    async with running_worker(
        greeting_app(), dsn, {"mail": 3, "default": 2}, heartbeat_interval=0.2, maintenance=False
    ) as worker:
        await wait_until(lambda: len(rows(dsn)) == 1)
        [(wid, host, pid, queues, kinds, running, version, _)] = rows(dsn)
        assert wid == worker.presence.id and str(wid).startswith(f"{host}:{pid}:")
        assert queues == {"mail": 3, "default": 2} and running == 0 and version
        assert kinds == [{"kind": "greet", "queue": "mail", "doc": "Say hello to one person."}]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE awa.workers SET heartbeat_at = now() - interval '1 hour'")
        async with awa.AsyncClient(dsn) as client:
            await wait_until(lambda: _live(client, 1), timeout=15)
            [live] = await client.list_workers()
            assert live.id == wid and live.heartbeat_age_seconds < 5
            # A row pruned under a live worker comes back at the next beat.
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("DELETE FROM awa.workers")
            await wait_until(lambda: len(rows(dsn)) == 1)
    assert rows(dsn) == []


async def _live(client: awa.AsyncClient, n: int) -> bool:
    return len(await client.list_workers()) == n


@pytest.mark.asyncio
async def test_a_dead_workers_row_is_ignored_then_pruned_by_the_leader(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.workers (id, host, pid, heartbeat_at)"
            " VALUES ('gone:1:1', 'gone', 1, now() - interval '31 seconds')"
        )
    async with awa.AsyncClient(dsn) as client:
        assert await client.list_workers() == []  # stale: not shown even before the prune
        async with running_worker(
            greeting_app(), dsn, {"mail": 1}, heartbeat_interval=0.2, rescue_interval=0.2
        ) as worker:
            await wait_until(lambda: [r[0] for r in rows(dsn)] == [worker.presence.id])
            assert [w.id for w in await client.list_workers()] == [worker.presence.id]


@pytest.mark.asyncio
async def test_kinds_lists_what_live_workers_run_and_flags_what_nobody_runs(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        awa.insert(conn, {"name": "ada"}, kind="greet", queue="mail")
        awa.insert(conn, {"id": 1}, kind="Orphan", queue="other")
        awa.insert(conn, {"id": 2}, kind="greet", queue="elsewhere")
    async with awa.AsyncClient(dsn) as client:
        # No worker yet: every kind with jobs that could run is flagged.
        assert {(k.kind, k.queue, k.unhandled) for k in await client.list_kinds()} == {
            ("greet", "mail", True),
            ("Orphan", "other", True),
            ("greet", "elsewhere", True),
        }
        async with running_worker(greeting_app(), dsn, {"mail": 1}, maintenance=False):
            await wait_until(lambda: len(rows(dsn)) == 1)
            kinds = {(k.kind, k.queue): k for k in await client.list_kinds()}
    greet = kinds[("greet", "mail")]
    assert greet.workers and greet.doc == "Say hello to one person." and not greet.unhandled
    assert kinds[("Orphan", "other")].unhandled  # no handler, no live worker on that queue
    assert kinds[("greet", "elsewhere")].unhandled  # no live worker serves that queue
