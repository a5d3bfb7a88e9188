"""`awa doctor`: check a deployment and say what to fix (checks in awa_cli/doctor.py)."""

from __future__ import annotations

import asyncio

import click

from awa_cli.commands.context import CliContext, json_option, pass_context
from awa_cli.config import parse_duration

STATUS_LABEL = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}


@click.command(name="doctor")
@json_option
@click.option(
    "--long-transaction-threshold",
    "long_transaction",
    metavar="DURATION",
    default="5m",
    show_default=True,
    help="Report transactions in awa's database open longer than this.",
)
@pass_context
def command(ctx: CliContext, json_flag: bool, long_transaction: str) -> None:
    """Check a deployment and say what to fix.

    Checks, in order: database (reachable), schema (migrations current), server (version),
    synchronous_commit (and fsync), max_connections (against what [worker] processes and the
    configured queues need), listen_notify (a NOTIFY reaches a listener within 2s, on
    [database] listen_url when set; it fails behind a transaction-mode pooler, and the fix
    names listen_url), leader (a worker holds the maintenance lock, named by
    its host:pid; a warning when none does), claims (fails while a live worker's claims fail,
    e.g. a revoked grant), dead_workers (fails while running jobs are held by a worker that is
    gone: its process ended, or it has no live row and their heartbeats are stale),
    stuck_rescues (jobs overdue for rescue by 3 x heartbeat_staleness),
    oldest_available (warn after 5m, fail after 1h), table_bloat (dead tuples of awa's
    tables) and long_transactions (open longer than --long-transaction-threshold while
    holding back vacuum). Each is ok, warn or fail, with a one-line fix; --json prints
    {"checks": [{"name", "status", "detail", "fix"}]}.

    With a least-privilege role (the README's), the schema check warns that it cannot read
    awa.schema_migrations and the other checks go on.

    Exits 0 when no check fails (warnings allowed), 1 when one fails or the database cannot
    be reached.
    """
    from awa_cli.doctor import DoctorOptions, diagnose, failed

    config = ctx.config
    options = DoctorOptions(
        heartbeat_staleness=config.maintenance.heartbeat_staleness,
        processes=config.worker.processes,
        queues=len(config.queues),
        long_transaction_threshold=parse_duration(long_transaction, "--long-transaction-threshold"),
        listen_url=ctx.listen_url(),
    )
    checks = asyncio.run(diagnose(ctx.dsn(), options))
    if ctx.wants_json(json_flag):
        ctx.terminal.json({"checks": [c.to_json() for c in checks]})
    else:
        ctx.terminal.table(
            ("check", "status", "detail", "fix"),
            [(c.name, STATUS_LABEL[str(c.status)], c.detail, c.fix or "") for c in checks],
            title="awa doctor",
        )
    if failed(checks):
        ctx.terminal.status(f"{sum(c.status == 'fail' for c in checks)} check(s) failed")
        raise SystemExit(1)
