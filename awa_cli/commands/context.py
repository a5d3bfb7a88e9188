"""The object every command receives: config, terminal, and a lazily resolved database."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from awa_cli.config import Config, load_config, resolve_config_path
from awa_cli.errors import EmbeddedNotRunning
from awa_cli.terminal import Terminal

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.plugins.manager import PluginHost


@dataclass
class CliContext:
    config_option: str | None
    database_url_option: str | None
    json_output: bool
    verbose: int
    terminal: Terminal
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @cached_property
    def config_path(self) -> tuple[Path | None, bool]:
        return resolve_config_path(self.config_option, self.env)

    @cached_property
    def config(self) -> Config:
        path, explicit = self.config_path
        return load_config(path, explicit=explicit)

    def database_url(self) -> str | None:
        """The configured URL, or None when the embedded server is to be used."""
        config = self.config  # an explicit --config is validated even when the URL is given
        url = self.database_url_option or self.env.get("AWA_DATABASE_URL") or config.database.url
        if url:
            from awa_cli.config import ConfigError
            from awa_cli.db.dsn import redact
            from awa_cli.db.preflight import check_url

            try:
                check_url(url)
            except ValueError as exc:
                raise ConfigError(
                    "invalid database URL: expected postgresql://user@host:port/dbname "
                    f"or key=value parameters, got {redact(url)!r} ({exc})",
                    key="database url",
                ) from None
        return url

    def listen_url(self) -> str | None:
        """``[database] listen_url``: a direct or session-mode URL for the connections that
        need a session (LISTEN, the leader's lock) when the URL is a transaction pooler."""
        url = self.config.database.listen_url
        if url:
            from awa_cli.config import ConfigError
            from awa_cli.db.dsn import redact
            from awa_cli.db.preflight import check_url

            try:
                check_url(url)
            except ValueError as exc:
                raise ConfigError(
                    f"[database] listen_url: invalid database URL {redact(url)!r} ({exc})",
                    key="[database] listen_url",
                ) from None
        return url

    def dsn(self, *, create: bool = False) -> str:
        """A DSN to connect to: the configured URL, else the embedded server's when it runs.

        A stopped embedded server is never started here (only ``awa db start`` starts it),
        and a missing one is created only with ``create`` (``awa migrate``, the quick
        start): any other command in a directory without ``awa.toml`` says so instead of
        quietly creating an empty server there (D25, D29). Raises ``EmbeddedNotRunning``."""
        url = self.database_url()
        if url:
            return url
        from awa_cli.db.embedded import EmbeddedPostgres

        server = EmbeddedPostgres(self.config.database.embedded_dir)
        if not server.status().running and (server.initialised() or not create):
            raise EmbeddedNotRunning(self._not_running(server.data_dir, server.initialised()))
        return server.start()

    def _not_running(self, data_dir: Path, initialised: bool) -> str:
        if initialised:
            return (
                f"the embedded PostgreSQL server in {data_dir} is stopped: "
                "start it with `awa db start` (or configure [database] url)"
            )
        path, _ = self.config_path
        where = f"{path} sets no [database] url" if path else f"no awa.toml in {Path.cwd()}"
        return (
            f"no database: {where}, no --database-url or AWA_DATABASE_URL, and no embedded "
            f"server in {data_dir} (create one with `awa db start`, or pass --config)"
        )

    def wants_json(self, local_flag: bool = False) -> bool:
        return self.json_output or local_flag

    @cached_property
    def plugins(self) -> PluginHost:
        """The plugins; each one that fails to load is reported once, on stderr (even with
        -q: a metrics or alerting plugin that silently went missing is worse than a line)."""

        def report(line: str) -> None:
            self.terminal.err.print(line, markup=False, highlight=False)

        return self.load_plugins(report=report)

    def load_plugins(self, report: Any) -> PluginHost:
        """A fresh plugin host; ``report`` gets each problem (None: logged instead)."""
        from awa_cli.plugins.manager import build_plugin_host

        port = self.config.metrics.prometheus_port
        host = self.config.metrics.host

        def prometheus() -> Any:
            from awa_cli.plugins.prometheus import PrometheusPlugin

            return PrometheusPlugin(port, self.env, host=host)

        extra = [] if port is None else [("awa_cli.plugins.prometheus", prometheus)]
        telemetry = self.config.telemetry
        if telemetry.otlp_endpoint is not None:  # otherwise the plugin is never imported

            def otel() -> Any:
                from awa_cli.plugins.otel import OtelPlugin

                return OtelPlugin(telemetry.otlp_endpoint, service_name=telemetry.service_name)

            extra.append(("awa_cli.plugins.otel", otel))
        return build_plugin_host(
            self.config.app.plugins,
            self.config.base_dir,
            report=report,
            extra_builtins=extra,
        )

    @cached_property
    def app(self) -> App:
        """The ``[app] modules`` merged into one app, with the ``[periodic.NAME]`` schedules
        of the config registered on it."""
        from awa_cli.config import register_schedules
        from awa_cli.loading import load_apps

        app = load_apps(self.config.app.modules, self.config.base_dir)
        register_schedules(app, self.config)
        return app


pass_context = click.make_pass_decorator(CliContext)


def json_option(fn: Any) -> Any:
    """``--json`` after the command, same as ``awa --json COMMAND``."""
    return click.option("--json", "json_flag", is_flag=True, help="Machine-readable JSON output.")(
        fn
    )


def run_with_client(
    ctx: CliContext, action: Any, *, app: Any = None, plugin_hooks: Any = ()
) -> Any:
    """Cross the async boundary once: open an AsyncClient, run ``action(client)``, close it
    (waiting briefly for dispatched hooks)."""
    import asyncio

    from awa_cli.audit import cli_actor
    from awa_cli.client import AsyncClient

    dsn = ctx.dsn()

    async def main() -> Any:
        client = AsyncClient(dsn, app, plugin_hooks=plugin_hooks, max_connections=2)
        client.core.actor = cli_actor()  # admin actions are audited as cli:<os user>
        try:
            return await action(client)
        finally:
            await client.close(hook_timeout=10.0)

    return asyncio.run(main())
