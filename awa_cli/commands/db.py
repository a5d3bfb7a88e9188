"""`awa db start|stop|status|url`: the embedded PostgreSQL server.

The server lives in ``[database] embedded_dir`` (default ``.awa/`` beside the config) and is
shared by every ``awa`` process using that directory. Only ``awa db start`` starts a stopped
server (``awa migrate`` also creates a new one, the quick start); every other command says
how instead of starting or creating one (exit 1).
"""

from __future__ import annotations

from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context
from awa_cli.db.embedded import EmbeddedPostgres, EmbeddedStatus


def _server(ctx: CliContext) -> EmbeddedPostgres:
    return EmbeddedPostgres(ctx.config.database.embedded_dir)


def _status_dict(status: EmbeddedStatus) -> dict[str, Any]:
    return {
        "running": status.running,
        "pid": status.pid,
        "data_dir": str(status.data_dir),
        "socket_dir": str(status.socket_dir),
        "dsn": status.dsn,
    }


def _note_external_url(ctx: CliContext) -> None:
    if ctx.database_url():
        ctx.terminal.status(
            "note: a database URL is configured, so other commands do not use the embedded server"
        )


@click.group(name="db")
def command() -> None:
    """The embedded PostgreSQL server (used when no database URL is configured).

    Only awa db start starts a stopped server (awa migrate also creates a missing one);
    other commands exit 1 saying so. It keeps running after the command exits (awa db stop
    stops it).

    PostgreSQL refuses to run as root. Run as root, awa runs the server as the system user
    'awa' (created with useradd the first time; 'nobody' if that fails), makes it the owner
    of the data directory, and adds o+x (search permission for others) to each directory
    above the data directory that user cannot enter, and to pgserver's install tree. A home
    directory such as /root becomes traversable (not listable) by every user. Each of these
    actions is printed on stderr when it happens: "running as root: the server runs as system
    user 'awa' (created)" and "added o+x to DIR". To avoid it, run awa as an unprivileged
    user, keep [database] embedded_dir outside home directories, or set [database] url.
    """


@command.command()
@json_option
@pass_context
def start(ctx: CliContext, json_flag: bool) -> None:
    """Start the embedded server (initialising its data directory on first use)."""
    server = _server(ctx)
    was_running = server.status().running
    dsn = server.start()
    status = server.status()
    if ctx.wants_json(json_flag):
        ctx.terminal.json({**_status_dict(status), "already_running": was_running})
        return
    verb = "already running" if was_running else "started"
    ctx.terminal.status(f"embedded PostgreSQL {verb} (pid {status.pid}, data {status.data_dir})")
    ctx.terminal.data(dsn)
    _note_external_url(ctx)


@command.command()
@json_option
@pass_context
def stop(ctx: CliContext, json_flag: bool) -> None:
    """Stop the embedded server (fast shutdown: open sessions are disconnected)."""
    server = _server(ctx)
    was_running = server.stop()
    if ctx.wants_json(json_flag):
        ctx.terminal.json(
            {"stopped": was_running, "was_running": was_running, "data_dir": str(server.data_dir)}
        )
        return
    ctx.terminal.status(
        "embedded PostgreSQL stopped" if was_running else "embedded PostgreSQL was not running"
    )


@command.command()
@json_option
@pass_context
def status(ctx: CliContext, json_flag: bool) -> None:
    """Whether the embedded server is running, its pid, data directory and socket."""
    state = _server(ctx).status()
    if ctx.wants_json(json_flag):
        ctx.terminal.json(_status_dict(state))
        return
    ctx.terminal.data(f"state:      {'running' if state.running else 'stopped'}")
    if state.pid is not None:
        ctx.terminal.data(f"pid:        {state.pid}")
    ctx.terminal.data(f"data dir:   {state.data_dir}")
    ctx.terminal.data(f"socket dir: {state.socket_dir}")
    if state.dsn:
        ctx.terminal.data(f"url:        {state.dsn}")


@command.command()
@json_option
@pass_context
def url(ctx: CliContext, json_flag: bool) -> None:
    """Print the embedded server's connection URL (does not start it)."""
    server = _server(ctx)
    if ctx.wants_json(json_flag):
        ctx.terminal.json({"url": server.dsn(), "running": server.status().running})
        return
    ctx.terminal.data(server.dsn())
