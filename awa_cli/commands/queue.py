"""`awa queue`: list queues and watch their statistics."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context
from awa_cli.jobs import JobState

STATES = [s.value for s in JobState]

_STATS = """
SELECT queue, state::text, count(*) AS n,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'available' AND run_at <= now()))
           AS oldest_available,
       count(*) FILTER (WHERE state = 'completed' AND finalized_at > now() - interval '60 seconds')
           AS completed_last_minute
FROM awa.jobs
WHERE %(queue)s::text IS NULL OR queue = %(queue)s
GROUP BY queue, state
"""


async def fetch_stats(
    dsn: str, queue: str | None, configured: dict[str, Any]
) -> list[dict[str, Any]]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        rows = await (await conn.execute(_STATS, {"queue": queue})).fetchall()
    stats: dict[str, dict[str, Any]] = {}
    names = set(configured) | {r[0] for r in rows}
    if queue is not None:
        names = {queue}
    for name in sorted(names):
        stats[name] = {
            "queue": name,
            "counts": {s: 0 for s in STATES},
            "completed_per_second": 0.0,
            "oldest_available_age_seconds": None,
            "concurrency": configured[name].concurrency if name in configured else None,
        }
    for name, state, n, oldest, completed_recent in rows:
        entry = stats[name]
        entry["counts"][state] = n
        entry["completed_per_second"] += round(completed_recent / 60.0, 3)
        if oldest is not None:
            entry["oldest_available_age_seconds"] = round(float(oldest), 3)
    return list(stats.values())


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _render(stats: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    table = Table("queue", *STATES, "completed/s", "oldest available", title="awa queue stats")
    for s in stats:
        table.add_row(
            s["queue"],
            *(str(s["counts"][st]) for st in STATES),
            f"{s['completed_per_second']:.2f}",
            _age(s["oldest_available_age_seconds"]),
        )
    return table


@click.group(name="queue")
def command() -> None:
    """List queues and show their statistics."""


@command.command(name="list")
@json_option
@pass_context
def list_queues(ctx: CliContext, json_flag: bool) -> None:
    """Queues that are configured or hold jobs, with job counts."""
    stats = asyncio.run(fetch_stats(ctx.dsn(), None, ctx.config.queues))
    if ctx.wants_json(json_flag):
        ctx.terminal.json(
            [
                {
                    "queue": s["queue"],
                    "configured": s["concurrency"] is not None,
                    "concurrency": s["concurrency"],
                    "jobs": sum(s["counts"].values()),
                    "available": s["counts"]["available"],
                    "running": s["counts"]["running"],
                }
                for s in stats
            ]
        )
        return
    ctx.terminal.table(
        ["queue", "concurrency", "jobs", "available", "running"],
        [
            (
                s["queue"],
                s["concurrency"] or "-",
                sum(s["counts"].values()),
                s["counts"]["available"],
                s["counts"]["running"],
            )
            for s in stats
        ],
    )


@command.command(name="stats")
@click.argument("queue", required=False)
@click.option(
    "--watch", is_flag=True, help="Refresh in place every --interval seconds until Ctrl-C."
)
@click.option("--interval", type=click.FloatRange(0.2, 3600), default=1.0, show_default=True)
@json_option
@pass_context
def stats(
    ctx: CliContext, queue: str | None, watch: bool, interval: float, json_flag: bool
) -> None:
    """Per queue: counts by state, completions per second (last minute), oldest available job."""
    dsn = ctx.dsn()
    configured = ctx.config.queues
    if ctx.wants_json(json_flag):
        ctx.terminal.json(asyncio.run(fetch_stats(dsn, queue, configured)))
        return
    if not watch:
        rows = asyncio.run(fetch_stats(dsn, queue, configured))
        ctx.terminal.table(
            ["queue", *STATES, "completed/s", "oldest available"],
            [
                (
                    s["queue"],
                    *(s["counts"][st] for st in STATES),
                    f"{s['completed_per_second']:.2f}",
                    _age(s["oldest_available_age_seconds"]),
                )
                for s in rows
            ],
        )
        return
    from rich.live import Live

    with Live(console=ctx.terminal.out, auto_refresh=False) as live:
        try:
            while True:
                live.update(_render(asyncio.run(fetch_stats(dsn, queue, configured))), refresh=True)
                time.sleep(interval)
        except KeyboardInterrupt:
            pass
