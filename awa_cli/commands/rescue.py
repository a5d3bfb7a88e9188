"""`awa rescue run`: one maintenance sweep on demand (for a timer or an operator)."""

from __future__ import annotations

from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client


@click.group(name="rescue")
def command() -> None:
    """Rescue stale, overdue and expired jobs."""


@command.command(name="run")
@click.option("--dry-run", is_flag=True, help="Only list what would be rescued; change nothing.")
@json_option
@pass_context
def run(ctx: CliContext, dry_run: bool, json_flag: bool) -> None:
    """Run one sweep: rescue stale heartbeats, exceeded deadlines and expired callbacks, insert
    pending rescue follow-ups, prune old jobs and dead letters. Safe to run while workers run.

    With the configured app and plugins loaded, Rescued hooks fire in this process and
    on_rescued follow-ups are inserted (in a transaction after the rescue). Exits 0 when the
    sweep ran, even if a follow-up spec raised: the rescue stands and a later sweep retries.
    """
    from awa_cli.maintenance import sweep_once

    config = ctx.config
    app = ctx.app if config.app.modules else None
    m = config.maintenance

    async def sweep(client: Any) -> Any:
        await client.ensure_open()
        return await sweep_once(
            client.core,
            heartbeat_staleness=m.heartbeat_staleness,
            completed_retention=m.completed_retention,
            failed_retention=m.failed_retention,
            dry_run=dry_run,
            dead_letter_retention=m.dead_letter_retention,
            audit_retention=m.audit_retention,
        )

    report = run_with_client(ctx, sweep, app=app, plugin_hooks=ctx.plugins.event_hooks())
    if ctx.wants_json(json_flag):
        ctx.terminal.json(report.to_json())
        return
    rows = [
        (reason, len(jobs), ", ".join(str(j.id) for j in jobs[:20]))
        for reason, jobs in report.rescued.items()
    ]
    ctx.terminal.table(
        ["reason", "jobs", "ids"], rows, title="would rescue" if dry_run else "rescued"
    )
    if not dry_run:
        ctx.terminal.status(
            f"rescue follow-ups: {report.follow_ups_done} inserted, {report.follow_ups_failed} failed "
            f"(retried by a later sweep); pruned {report.pruned} old jobs"
            f" and {report.dead_letters_pruned} old dead letters"
        )
