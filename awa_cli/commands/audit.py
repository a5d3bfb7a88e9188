"""`awa audit`: the audit log (who did what, when, to which target, how it ended) from the
terminal, filtered as the dashboard's audit page is."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import click

from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.commands.shared import limit_option
from awa_cli.errors import ConfigError, ValidationError


def parse_since(text: str) -> datetime:
    """``--since``: a duration back from now (``1h``, ``30m``, ``7d``) or an ISO 8601 time
    (``2026-12-01T21:00:00+00:00``; without an offset, UTC)."""
    from awa_cli.config import parse_duration

    try:
        return datetime.now(UTC) - timedelta(seconds=parse_duration(text, "--since"))
    except ConfigError:
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(
            "--since", f'expected a duration like "1h" or an ISO 8601 time, got {json.dumps(text)}'
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@click.command(name="audit")
@click.option("--since", metavar="DURATION|TIME", help="Only entries since (1h, 7d, or ISO 8601).")
@click.option("--action", help="Only this action (job.cancel, queue.pause, dlq.purge, login...).")
@click.option("--actor", help="Only this actor (cli:alice, serve:ops, callback).")
@click.option("--job", "job_id", type=int, metavar="ID", help="Only the entries of job ID.")
@limit_option(most=1000)
@json_option
@pass_context
def command(
    ctx: CliContext,
    since: str | None,
    action: str | None,
    actor: str | None,
    job_id: int | None,
    limit: int,
    json_flag: bool,
) -> None:
    """Show the audit log, newest first: every operator action of the CLI (actor
    cli:<os user>), awa serve (serve:<token name>) and signed HTTP callbacks (callback), with
    its target, result (ok, refused, failed) and detail (a bulk action's count, a refusal's
    reason). --json prints a list of {"id", "at", "actor", "action", "target", "result",
    "detail"}."""
    after = None if since is None else parse_since(since)
    entries = run_with_client(
        ctx,
        lambda c: c.list_audit(actor=actor, action=action, since=after, limit=limit, job_id=job_id),
    )
    if ctx.wants_json(json_flag):
        ctx.terminal.json([e.to_json() for e in entries])
        return
    ctx.terminal.table(
        ["at", "actor", "action", "target", "result", "detail"],
        [
            (
                e.at.isoformat(timespec="seconds"),
                e.actor,
                e.action,
                e.target or "",
                e.result,
                json.dumps(e.detail, sort_keys=True, default=str) if e.detail else "",
            )
            for e in entries
        ],
    )
