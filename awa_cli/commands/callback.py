"""`awa callback`: resolve external callbacks through the same outcome core as a worker.

The configured app and plugins are loaded, so follow-up specs run in the resolution's
transaction and hooks fire in this process (with a bounded wait before it exits). A job whose
kind the loaded app does not register is refused unless ``--bare`` (no follow-ups, no hooks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context, run_with_client
from awa_cli.commands.job import parse_json_option, show_row
from awa_cli.jobs import parse_callback_id
from awa_cli.errors import ResolutionRefused


@click.group(name="callback")
def command() -> None:
    """Resolve, resume or extend external callbacks of waiting jobs."""


def _options(fn: Any) -> Any:
    fn = click.option(
        "--bare", is_flag=True, help="Resolve without the app: no follow-ups, no hooks."
    )(fn)
    fn = json_option(fn)
    return click.argument("callback_id")(fn)


def _resolve(
    ctx: CliContext, callback_id: str, bare: bool, json_flag: bool, verb: str, action: Any
) -> None:
    parse_callback_id(callback_id)  # a malformed id is a usage error before any connection
    app = None if bare else ctx.app
    hooks = () if bare else ctx.plugins.event_hooks()

    async def run(client: Any) -> Any:
        if app is not None:
            waiting = await client.waiting_job(callback_id)
            if waiting.kind not in app.tasks:
                raise ResolutionRefused(
                    f"job {waiting.id} has kind {waiting.kind!r}, which the loaded app does not "
                    "register, so its follow-ups are unknown; use --bare to resolve it without "
                    "follow-ups or hooks"
                )
        return await action(client)

    result = run_with_client(ctx, run, app=app, plugin_hooks=hooks)
    row = getattr(result, "job", result)
    if ctx.wants_json(json_flag):
        data = row.to_json()
        if hasattr(result, "outcome"):
            data = {"outcome": result.outcome, "job": data}
        ctx.terminal.json(data)
        return
    outcome = f" ({result.outcome})" if hasattr(result, "outcome") else ""
    show_row(ctx, row, False, verb=f"{verb}{outcome}")


def _payload_data(payload: str | None) -> Any:
    return parse_json_option(payload, "--payload") if payload is not None else None


def _payload_command(
    name: str, payload_help: str, verb: str
) -> Callable[[Callable[[Any, str, Any], Any]], click.Command]:
    """Make ``call(client, callback_id, payload)`` the ``awa callback NAME`` command, its
    docstring the help: it resolves with the call, the --payload JSON parsed (None without)."""

    def make(call: Callable[[Any, str, Any], Any]) -> click.Command:
        @command.command(name=name, help=call.__doc__)
        @_options
        @click.option("--payload", metavar="JSON", help=payload_help)
        @pass_context
        def payload_command(
            ctx: CliContext, callback_id: str, bare: bool, json_flag: bool, payload: str | None
        ) -> None:
            data = _payload_data(payload)
            _resolve(ctx, callback_id, bare, json_flag, verb, lambda c: call(c, callback_id, data))

        return payload_command

    return make


@_payload_command("complete", "JSON payload stored with the completion.", "completed")
def complete(client: Any, callback_id: str, data: Any) -> Any:
    """Complete the job waiting on CALLBACK_ID."""
    return client.complete_external(callback_id, data)


@command.command(name="fail")
@_options
@click.option("--error", "error", required=True, help="The error recorded on the job, verbatim.")
@pass_context
def fail(ctx: CliContext, callback_id: str, bare: bool, json_flag: bool, error: str) -> None:
    """Fail the job waiting on CALLBACK_ID."""
    _resolve(
        ctx, callback_id, bare, json_flag, "failed", lambda c: c.fail_external(callback_id, error)
    )


@command.command(name="retry")
@_options
@pass_context
def retry(ctx: CliContext, callback_id: str, bare: bool, json_flag: bool) -> None:
    """Make the job waiting on CALLBACK_ID available again, attempts reset."""
    _resolve(
        ctx, callback_id, bare, json_flag, "made available", lambda c: c.retry_external(callback_id)
    )


@_payload_command("resume", "JSON payload handed to the handler.", "resumed")
def resume(client: Any, callback_id: str, data: Any) -> Any:
    """Hand a payload to the job waiting on CALLBACK_ID and let it continue."""
    return client.resume_external(callback_id, data)


@command.command(name="heartbeat")
@_options
@click.option("--timeout", default="1h", show_default=True, help="New timeout from now (e.g. 30m).")
@pass_context
def heartbeat(ctx: CliContext, callback_id: str, bare: bool, json_flag: bool, timeout: str) -> None:
    """Extend the timeout of the callback CALLBACK_ID."""
    from awa_cli.config import ConfigError, parse_duration
    from awa_cli.results import ValidationError

    try:
        seconds = parse_duration(timeout, "--timeout")
    except ConfigError as exc:
        raise ValidationError("--timeout", exc.message) from None
    _resolve(
        ctx,
        callback_id,
        True,
        json_flag,
        "extended",
        lambda c: c.heartbeat_callback(callback_id, seconds),
    )


@command.command(name="resolve")
@_options
@click.option("--payload", metavar="JSON", help="JSON payload.")
@click.option(
    "--default-action",
    type=click.Choice(["complete", "fail", "ignore"]),
    default="ignore",
    show_default=True,
    help="What resolving does.",
)
@pass_context
def resolve(
    ctx: CliContext,
    callback_id: str,
    bare: bool,
    json_flag: bool,
    payload: str | None,
    default_action: str,
) -> None:
    """Resolve CALLBACK_ID by --default-action (ignore changes nothing)."""
    data = _payload_data(payload)
    _resolve(
        ctx,
        callback_id,
        bare,
        json_flag,
        "resolved",
        lambda c: c.resolve_callback(callback_id, data, default_action),
    )
