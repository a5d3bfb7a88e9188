"""The root ``awa`` group: global options and assembly, nothing else."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
import psycopg

from awa_cli.commands.context import CliContext
from awa_cli.results import AwaError, CallbackNotFound, JobNotFound, ValidationError
from awa_cli.terminal import Terminal

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 4


def exit_code_for(exc: BaseException) -> int:
    from awa_cli.errors import AppNotFound, BatchNotFound, PeriodicNotFound
    from awa_cli.config import ConfigError

    if isinstance(exc, (ValidationError, ConfigError, AppNotFound)):
        return EXIT_USAGE
    if isinstance(exc, (JobNotFound, CallbackNotFound, PeriodicNotFound, BatchNotFound)):
        return EXIT_NOT_FOUND
    return EXIT_FAILED


_LINE_BREAKS: dict[str, str | int | None] = {
    c: repr(c)[1:-1] for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
}


def single_line(text: str) -> str:
    """``text`` with every character Python or a terminal takes as a line break escaped."""
    return text.translate(str.maketrans(_LINE_BREAKS))


def one_line(exc: BaseException) -> str:
    """The error as one line for people; passwords in database errors are redacted."""
    from awa_cli.db.dsn import redact
    from awa_cli.db.preflight import is_missing_schema, missing_schema_message

    text = str(exc).strip()
    message = text.splitlines()[0] if text else type(exc).__name__
    if is_missing_schema(exc):  # an unmigrated database, whatever the command
        message = missing_schema_message(_dbname_of(exc))
    elif isinstance(exc, psycopg.Error):
        message = f"database error: {message}"
    return single_line(redact(message))


def _dbname_of(exc: BaseException) -> str | None:
    """The database a psycopg error came from, when the driver still knows it."""
    pgconn = getattr(exc, "pgconn", None)
    try:
        name = pgconn.db if pgconn is not None else None
    except Exception:  # a closed connection may no longer answer
        return None
    return name.decode(errors="replace") if isinstance(name, bytes) and name else None


class AwaGroup(click.Group):
    """Turns awa's errors into one line on stderr and the documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (AwaError, psycopg.Error, OSError) as exc:
            obj = ctx.find_object(CliContext)
            if obj is not None and obj.verbose:
                raise
            click.echo(f"Error: {one_line(exc)}", err=True)
            ctx.exit(exit_code_for(exc))

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        """click's main, with usage errors as one line (``Error: … (see 'awa job --help')``)."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(single_line(f"Error: {exc.format_message()}{hint}"), err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(
    cls=AwaGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option(
    "--config",
    "config_option",
    metavar="PATH",
    help="Config file (default: $AWA_CONFIG, else ./awa.toml).",
)
@click.option(
    "--database-url",
    metavar="URL",
    help="PostgreSQL URL (default: $AWA_DATABASE_URL, else [database] url, else the embedded server).",
)
@click.option("--json", "json_output", is_flag=True, help="Machine-readable JSON output.")
@click.option("--no-color", is_flag=True, help="No colours (NO_COLOR is honoured too).")
@click.option("-v", "--verbose", count=True, help="More logging; tracebacks on errors.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
@click.version_option(package_name="awa-worker", prog_name="awa")
@click.pass_context
def cli(
    ctx: click.Context,
    config_option: str | None,
    database_url: str | None,
    json_output: bool,
    no_color: bool,
    verbose: int,
    quiet: bool,
) -> None:
    """awa: a PostgreSQL-backed background job queue.

    Run workers with `awa worker`, inspect and operate on jobs and queues, resolve external
    callbacks, and manage the embedded PostgreSQL server.
    """
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    from awa_cli.db import pool_logs

    # stderr, one line per record; the pool's connection failures one line per backoff step
    pool_logs.configure(level, verbose)
    ctx.obj = CliContext(
        config_option=config_option,
        database_url_option=database_url,
        json_output=json_output,
        verbose=verbose,
        terminal=Terminal(no_color=no_color, quiet=quiet),
    )


def _register_commands() -> None:
    from awa_cli.commands import callback, config, db, job, migrate, plugins, queue, rescue, worker
    from awa_cli.commands import audit, batch, cron, dlq, doctor, serve

    for module in (
        audit,
        batch,
        callback,
        config,
        cron,
        db,
        dlq,
        doctor,
        job,
        migrate,
        plugins,
        queue,
        rescue,
        serve,
        worker,
    ):
        cli.add_command(module.command)


_register_commands()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="awa")
