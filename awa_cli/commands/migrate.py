"""`awa migrate`: apply the schema migrations."""

from __future__ import annotations

from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context
from awa_cli.db import migrations


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _migrate_or_explain_interrupt(conn: Any) -> list[migrations.Migration]:
    """Migrate; on Ctrl-C say what was rolled back and what stands, and exit 130."""
    pending = migrations.status(conn)
    before = {r.version for r in pending if r.applied_at is not None}
    running: list[migrations.Migration] = []
    try:
        return migrations.migrate(conn, starting=running.append)
    except KeyboardInterrupt:
        current = running[-1] if running else None
        done = [f"{m.version:04d}_{m.name}" for m in running[:-1] if m.version not in before]
        what = f"migration {current.version:04d} rolled back" if current else "nothing started"
        kept = f"applied before it: {', '.join(done)}" if done else "nothing applied"
        click.echo(f"interrupted: {what}, {kept}", err=True)
        raise SystemExit(EXIT_INTERRUPTED) from None


@click.command(name="migrate")
@click.option(
    "--status", "show_status", is_flag=True, help="List migrations and whether each is applied."
)
@click.option(
    "--sql",
    "show_sql",
    is_flag=True,
    help="Print the SQL of every migration; no connection is made.",
)
@json_option
@pass_context
def command(ctx: CliContext, show_status: bool, show_sql: bool, json_flag: bool) -> None:
    """Apply pending schema migrations (safe to run concurrently; a no-op when up to date)."""
    if show_sql:
        for migration in migrations.available():
            ctx.terminal.data(f"-- {migration.version:04d}_{migration.name}.sql")
            ctx.terminal.data(migration.sql.rstrip() + "\n")
        return
    import psycopg

    with psycopg.connect(ctx.dsn(create=True), autocommit=True) as conn:
        if show_status:
            rows = migrations.status(conn)
            if ctx.wants_json(json_flag):
                ctx.terminal.json(
                    [
                        {
                            "version": r.version,
                            "name": r.name,
                            "applied": r.applied_at is not None,
                            "applied_at": r.applied_at.isoformat() if r.applied_at else None,
                        }
                        for r in rows
                    ]
                )
            else:
                ctx.terminal.table(
                    ["version", "name", "applied_at"],
                    [(f"{r.version:04d}", r.name, r.applied_at or "pending") for r in rows],
                )
            return
        applied = _migrate_or_explain_interrupt(conn)
    if ctx.wants_json(json_flag):
        ctx.terminal.json({"applied": [f"{m.version:04d}_{m.name}" for m in applied]})
    elif applied:
        for m in applied:
            ctx.terminal.status(f"applied {m.version:04d}_{m.name}")
    else:
        ctx.terminal.status("database is up to date")
