"""`awa queue`: list queues, watch their statistics, pause and resume them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

import click
import psycopg

from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.db.dsn import redact
from awa_cli.jobs import JobState

STATES = [s.value for s in JobState]
EXIT_NOT_FOUND = 4
# What a watch survives: the database restarting or dropping the connection.
_DISCONNECTED = (psycopg.OperationalError, psycopg.InterfaceError, OSError, TimeoutError)


def merge_configured(
    found: list[dict[str, Any]],
    queue: str | None,
    configured: dict[str, Any],
    paused: set[str] | None = None,
    known: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """The client's stats plus every configured (or ``known``) queue (zeros when empty), with
    concurrency and the paused flag."""
    by_name = {s["queue"]: s for s in found}
    names = {queue} if queue is not None else set(configured) | set(by_name) | set(known)
    stats = []
    for name in sorted(names):
        entry = by_name.get(name) or {
            "queue": name,
            "counts": {s: 0 for s in STATES},
            "completed_per_second": 0.0,
            "oldest_available_age_seconds": None,
        }
        concurrency = configured[name].concurrency if name in configured else None
        stats.append({**entry, "concurrency": concurrency, "paused": name in (paused or set())})
    return stats


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _row(s: dict[str, Any]) -> tuple[Any, ...]:
    return (
        s["queue"],
        "paused" if s.get("paused") else "",
        *(s["counts"][st] for st in STATES),
        f"{s['completed_per_second']:.2f}",
        _age(s["oldest_available_age_seconds"]),
    )


def _render(stats: list[dict[str, Any]], caption: str) -> Any:
    from rich.table import Table

    table = Table(
        "queue",
        "paused",
        *STATES,
        "completed/s",
        "oldest available",
        title="awa queue stats",
        caption=caption,
    )
    for s in stats:
        table.add_row(*(str(v) for v in _row(s)))
    return table


@click.group(name="queue")
def command() -> None:
    """List queues, show their statistics, pause and resume them."""


async def _stats_and_controls(
    client: Any, queue: str | None, configured: dict[str, Any]
) -> tuple[list[dict[str, Any]], set[str], set[str]]:
    """The stats, the paused queues and every known queue (one client, one session)."""
    found = await client.queue_stats(queue)
    controls = await client.list_queues(sorted(configured))
    return found, {q.queue for q in controls if q.paused}, {q.queue for q in controls}


def _set_paused(ctx: CliContext, queue: str, paused: bool, json_flag: bool) -> None:
    info = run_with_client(ctx, lambda c: c.pause_queue(queue) if paused else c.resume_queue(queue))
    if ctx.wants_json(json_flag):
        ctx.terminal.json(info.to_json())
        return
    if paused:
        ctx.terminal.data(
            f"queue {queue} paused: no worker claims from it; running jobs finish, inserts work"
        )
    else:
        ctx.terminal.data(f"queue {queue} resumed")


@command.command(name="pause")
@click.argument("queue")
@json_option
@pass_context
def pause(ctx: CliContext, queue: str, json_flag: bool) -> None:
    """Pause QUEUE: within a second no worker anywhere claims from it. Running jobs finish,
    inserts still work; `awa queue resume QUEUE` starts it again."""
    _set_paused(ctx, queue, True, json_flag)


@command.command(name="resume")
@click.argument("queue")
@json_option
@pass_context
def resume(ctx: CliContext, queue: str, json_flag: bool) -> None:
    """Resume a paused QUEUE and wake its workers."""
    _set_paused(ctx, queue, False, json_flag)


@command.command(name="list")
@json_option
@pass_context
def list_queues(ctx: CliContext, json_flag: bool) -> None:
    """Queues that are configured, known to awa.queues or hold jobs, with job counts and
    whether they are paused."""
    configured = ctx.config.queues
    found, paused, known = run_with_client(ctx, lambda c: _stats_and_controls(c, None, configured))
    stats = merge_configured(found, None, configured, paused, known)
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
                    "paused": s["paused"],
                }
                for s in stats
            ]
        )
        return
    ctx.terminal.table(
        ["queue", "paused", "concurrency", "jobs", "available", "running"],
        [
            (
                s["queue"],
                "paused" if s["paused"] else "",
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
    "--watch",
    is_flag=True,
    help="Refresh every --interval seconds until Ctrl-C; survives a lost database connection "
    "(the last table stays, marked 'disconnected, retrying').",
)
@click.option("--interval", type=click.FloatRange(0.2, 3600), default=1.0, show_default=True)
@json_option
@pass_context
def stats(
    ctx: CliContext, queue: str | None, watch: bool, interval: float, json_flag: bool
) -> None:
    """Per queue: counts by state, completions per second (last minute), oldest available job.

    A QUEUE that is neither configured nor holds jobs exits 4 (with --watch: a note, and the
    watch goes on, as jobs may arrive).
    """
    configured = ctx.config.queues
    if watch and not ctx.wants_json(json_flag):
        try:
            run_with_client(ctx, lambda c: _watch(ctx, c, queue, interval))
        except KeyboardInterrupt:
            pass
        return
    found, paused, known = run_with_client(ctx, lambda c: _stats_and_controls(c, queue, configured))
    if queue is not None and not found and queue not in configured and queue not in known:
        ctx.terminal.error(f"queue {queue!r} is not configured and holds no jobs")
        raise SystemExit(EXIT_NOT_FOUND)
    rows = merge_configured(found, queue, configured, paused)
    if ctx.wants_json(json_flag):
        ctx.terminal.json(rows)
        return
    ctx.terminal.table(
        ["queue", "paused", *STATES, "completed/s", "oldest available"], [_row(s) for s in rows]
    )


async def _watch(ctx: CliContext, client: Any, queue: str | None, interval: float) -> None:
    """One loop on one client: fetch, show, sleep; a lost connection keeps the last table,
    says 'disconnected, retrying' and tries again each interval until the database is back."""
    configured = ctx.config.queues
    # The table says it is disconnected; the pool's own warnings would garble the screen.
    logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
    fetch_timeout = max(2.0, 2 * interval)

    async def fetch() -> list[dict[str, Any]]:
        found, paused, _ = await asyncio.wait_for(
            _stats_and_controls(client, queue, configured), fetch_timeout
        )
        return merge_configured(found, queue, configured, paused)

    if ctx.terminal.out.is_terminal:
        from rich.live import Live

        with Live(console=ctx.terminal.out, auto_refresh=False) as live:

            async def redraw(stats: list[dict[str, Any]], caption: str, _: str | None) -> None:
                live.update(_render(stats, caption), refresh=True)

            await _loop(fetch, redraw, queue, configured, interval)
    else:
        await _loop(fetch, _plain_view(ctx), queue, configured, interval)


Show = Callable[[list[dict[str, Any]], str, str | None], Awaitable[None]]


async def _loop(
    fetch: Callable[[], Awaitable[list[dict[str, Any]]]],
    show: Show,
    queue: str | None,
    configured: dict[str, Any],
    interval: float,
) -> None:
    last: list[dict[str, Any]] = []
    down_since: str | None = None
    while True:
        try:
            last = await fetch()
            down_since = None
            note = ""
            if (
                queue is not None
                and queue not in configured
                and not any(sum(s["counts"].values()) for s in last)
            ):
                note = f"; queue {queue!r} is not configured and holds no jobs"
            await show(last, f"updated {datetime.now():%H:%M:%S}{note}", None)
        except _DISCONNECTED as exc:
            down_since = down_since or f"{datetime.now():%H:%M:%S}"
            text = str(exc).strip()
            reason = redact(text.splitlines()[0]) if text else type(exc).__name__
            status = f"disconnected, retrying (since {down_since}): {reason}"
            await show(last, status, status)
        await asyncio.sleep(interval)


def _plain_view(ctx: CliContext) -> Show:
    """Piped: the table as TSV after each successful fetch, problems on stderr (once per
    outage, then once more when it is over)."""
    last_problem: list[str | None] = [None]
    since = [time.monotonic()]

    async def show(stats: list[dict[str, Any]], caption: str, problem: str | None) -> None:
        if problem is not None:
            if last_problem[0] is None:
                ctx.terminal.status(problem)
                since[0] = time.monotonic()
            last_problem[0] = problem
            return
        if last_problem[0] is not None:
            ctx.terminal.status(f"reconnected after {time.monotonic() - since[0]:.0f}s")
            last_problem[0] = None
        ctx.terminal.table(
            ["queue", "paused", *STATES, "completed/s", "oldest available"],
            [_row(s) for s in stats],
        )
        ctx.terminal.data("")

    return show
