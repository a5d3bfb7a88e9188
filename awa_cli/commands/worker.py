"""`awa worker`: run the worker daemon."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import click

from awa_cli import defaults
from awa_cli.commands.context import CliContext, pass_context
from awa_cli.config import ConfigError
from awa_cli.db.preflight import check_database
from awa_cli.enqueue import check_name
from awa_cli.results import ValidationError

log = logging.getLogger("awa.worker")


def parse_queue_options(
    values: tuple[str, ...], default_concurrency: int = defaults.QUEUE_CONCURRENCY
) -> dict[str, int]:
    queues: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not name:
            raise click.BadParameter(
                f"{value!r}: expected NAME or NAME=CONCURRENCY", param_hint="--queue"
            )
        try:
            check_name(name, "--queue")  # the same rule as inserts: a name a job can have
        except ValidationError as exc:
            problem = str(exc).removeprefix("--queue: ")
            raise click.BadParameter(f"queue name {problem}", param_hint="--queue") from None
        concurrency = default_concurrency
        if sep:
            try:
                concurrency = int(number)
            except ValueError:
                raise click.BadParameter(
                    f"{value!r}: concurrency must be an integer", param_hint="--queue"
                ) from None
            if not 1 <= concurrency <= 10000:
                raise click.BadParameter(
                    f"{value!r}: concurrency must be 1-10000", param_hint="--queue"
                )
        queues[name] = concurrency
    return queues


def require_app_modules(ctx: CliContext) -> None:
    if not ctx.config.app.modules:
        raise ConfigError(
            "no [app] modules configured: the worker has no handlers", key="app.modules"
        )


def require_handlers(ctx: CliContext, app: Any) -> None:
    """A worker whose app registers no handler would fail every job it claims (architecture
    §15.5): refuse to start (exit 2)."""
    if not app.tasks:
        modules = ", ".join(ctx.config.app.modules)
        raise ConfigError(
            f"[app] modules: {modules} register no task: the worker has no handlers",
            key="[app] modules",
            source=str(ctx.config.path) if ctx.config.path else None,
        )


def check_limits_against_app(ctx: CliContext, app: Any, queues: Iterable[str] = ()) -> None:
    """The ``[limits.NAME]`` tables checked against the loaded app (``validate_limits``): any
    error is a config error (exit 2), one line per problem, each naming its key."""
    from awa_cli.limits import validate_limits

    config = ctx.config
    if not config.limits:
        return
    errors = validate_limits(config.limits.values(), app, [*config.queues, *queues])
    if errors:
        source = str(config.path) if config.path else None
        message = "; ".join(e.message for e in errors)  # one line, every problem
        raise ConfigError(message, key=errors[0].key, source=source)


def build_worker(
    ctx: CliContext, queue_options: tuple[str, ...], accept_limits_change: bool = False
) -> Any:
    from awa_cli.config import QueueConfig, dead_letter_enabled
    from awa_cli.worker.queues import QueueSpec
    from awa_cli.worker.runtime import Worker

    config = ctx.config
    require_app_modules(ctx)
    app = ctx.app
    require_handlers(ctx, app)
    check_limits_against_app(ctx, app, parse_queue_options(queue_options))

    def spec(name: str, concurrency: int, q: QueueConfig) -> QueueSpec:
        return QueueSpec(
            name,
            concurrency,
            q.deadline,
            dead_letter_enabled(config, name),
            q.priority_aging,
            q.claim_ahead,
        )

    if queue_options:  # --queue NAME=N: the concurrency from the flag, the rest from [queues]
        specs = {
            name: spec(name, n, config.queues.get(name, QueueConfig()))
            for name, n in parse_queue_options(queue_options).items()
        }
    else:
        specs = {name: spec(name, q.concurrency, q) for name, q in config.queues.items()}
    m = config.maintenance
    return Worker(
        app,
        ctx.dsn(),
        specs,
        listen_dsn=ctx.listen_url(),
        plugins=ctx.plugins,
        callback_base_url=config.serve.callback_base_url,
        limits=tuple(config.limits.values()),
        accept_limits_change=accept_limits_change,
        heartbeat_interval=m.heartbeat_interval,
        heartbeat_staleness=m.heartbeat_staleness,
        rescue_interval=m.rescue_interval,
        leader_election_interval=m.leader_election_interval,
        completed_retention=m.completed_retention,
        failed_retention=m.failed_retention,
        dead_letter_retention=m.dead_letter_retention,
        audit_retention=m.audit_retention,
        vacuum_dead_tuples=m.vacuum_dead_tuples,
        shutdown_timeout=config.worker.shutdown_timeout,
    )


async def run_until_signalled(worker: Any, env: Mapping[str, str] | None = None) -> None:
    """Run the worker; the first SIGTERM/SIGINT drains gracefully, a second exits at once.

    With ``env`` the service manager (or the supervisor) is told READY/STOPPING (notify.py).
    """
    from awa_cli.worker.notify import notify_worker_lifecycle

    loop = asyncio.get_running_loop()
    stop_requested = asyncio.Event()
    signals_seen = 0

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            log.warning("second signal: exiting at once", extra={"action": "worker_abort"})
            raise SystemExit(1)
        log.info(
            "received %s: draining", signal.Signals(signum).name, extra={"action": "worker_signal"}
        )
        stop_requested.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    run_task = loop.create_task(worker.run())
    stop_task = loop.create_task(stop_requested.wait())
    notify_task = loop.create_task(notify_worker_lifecycle(worker, stop_requested, env or {}))
    try:
        await asyncio.wait({run_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if run_task.done():
            run_task.result()
            return
        await worker.shutdown()
        await run_task
    finally:
        notify_task.cancel()


@click.command(name="worker")
@click.option(
    "--queue",
    "queues",
    multiple=True,
    metavar="NAME[=CONCURRENCY]",
    help="Queue to work (repeatable); replaces the config's [queues].",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 256),
    default=None,
    help="Worker processes to supervise (default: [worker] processes).",
)
@click.option(
    "--accept-limits-change",
    is_flag=True,
    help="Start even though live workers enforce other [limits]: this worker's replace the "
    "fleet's announced limits (restart the others with the same config).",
)
@pass_context
def command(
    ctx: CliContext, queues: tuple[str, ...], processes: int | None, accept_limits_change: bool
) -> None:
    """Run the worker daemon in the foreground until SIGTERM/SIGINT.

    The first SIGTERM or SIGINT drains: stop claiming, turn every running job's
    job.is_cancelled() true, let running jobs finish (up to [worker] shutdown_timeout; then
    async handlers are cancelled and def handlers abandoned, their jobs left retryable), flush
    their outcomes, release the maintenance lock, exit 0. A second signal exits at once with
    status 1.

    Any database error inside the worker is logged at ERROR and retried with backoff. A
    worker task that ends unexpectedly makes it exit 1. An app that registers no task is
    refused (exit 2).

    With more than one process a supervisor starts that many worker processes, restarts one
    that dies (with backoff) and forwards the drain to them; it runs no jobs itself.

    Under systemd (NOTIFY_SOCKET set) it reports READY once it can claim, STATUS, STOPPING,
    and WATCHDOG while its claims work.

    [limits.NAME] tables are checked against the app at start (exit 2 naming the key). The
    fleet shares one set of limits: when a live worker enforces other [limits] than this
    one's config, the worker logs the difference at ERROR and exits 2, unless
    --accept-limits-change (then its limits replace the announced ones; awa doctor fails
    until every worker runs with them).
    """
    processes = processes or ctx.config.worker.processes
    if queues:
        parse_queue_options(queues)  # usage errors before any connection is tried
    if processes > 1:
        from awa_cli.worker.supervisor import SupervisorPlan, supervise

        config = ctx.config
        sizes = (
            parse_queue_options(queues)
            if queues
            else {n: q.concurrency for n, q in config.queues.items()}
        )
        argv = [
            sys.executable,
            "-m",
            "awa_cli",
            *(["--config", str(config.path)] if config.path else []),
            *(["-v"] * ctx.verbose),
            *(["-q"] if ctx.terminal.quiet else []),
            "worker",
            *(f"--queue={q}" for q in queues),
            *(["--accept-limits-change"] if accept_limits_change else []),
            "--processes",
            "1",
        ]
        # The URL goes by environment, not argv (ps shows argv); resolved once, so the
        # children share one embedded server rather than race to start it.
        require_app_modules(ctx)  # config errors (exit 2) before the database (exit 1)
        check_limits_against_app(ctx, ctx.app, sizes)
        dsn = ctx.dsn()
        check_database(dsn)  # one clear line and exit 1, not N children failing in a loop
        env = {**ctx.env, "AWA_DATABASE_URL": dsn}
        plan = SupervisorPlan(argv, env, processes, sizes, config.worker.shutdown_timeout)
        raise SystemExit(supervise(plan, ctx.env))
    worker = build_worker(ctx, queues, accept_limits_change)
    check_database(ctx.dsn())  # before "started": unreachable, refused or unmigrated is fatal
    asyncio.run(run_until_signalled(worker, ctx.env))
