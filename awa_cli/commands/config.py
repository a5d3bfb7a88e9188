"""`awa config check`: load and validate the config, then show it as awa will use it."""

from __future__ import annotations

import json
import keyword
import re
from importlib.util import find_spec
from typing import Any

import click

from awa_cli.commands.context import CliContext, json_option, pass_context
from awa_cli.config import ConfigError
from awa_cli.db.dsn import redact
from awa_cli.results import AwaError, ValidationError


@click.group(name="config")
def command() -> None:
    """Inspect awa's configuration (awa.toml)."""


@command.command(name="check")
@json_option
@pass_context
def check(ctx: CliContext, json_flag: bool) -> None:
    """Validate the config and print every table resolved, with the database URL awa will
    use.

    No database is contacted. The [app] modules are imported, as the worker imports them: a
    module that cannot be imported, a schedule the code declares badly (App.periodic), a
    [periodic.NAME] table naming an unregistered kind and a [limits.NAME] table that does
    not fit the app (its kind or queue, its key path in the args) are config errors naming
    the key (exit 2).
    """
    config = ctx.config
    source = str(ctx.config_path[0]) if config.path else None
    for index, spec in enumerate(config.app.modules):
        _check_import_spec(spec, f"[app] modules[{index}]", source)
    for index, spec in enumerate(config.app.plugins):
        _check_import_spec(spec, f"[app] plugins[{index}]", source)
    if config.app.modules or config.periodic:
        app = _check_app(ctx, source)
        _check_limits(ctx, app)
    if config.telemetry.otlp_endpoint is not None and find_spec("opentelemetry") is None:
        key = "[telemetry] otlp_endpoint"
        raise ConfigError(
            f'{key}: needs the otel extra (pip install "awa-worker[otel]")', key=key, source=source
        )

    url, url_source = _resolved_url(ctx)
    if ctx.wants_json(json_flag):
        display = config.to_display_dict()
        display["database"]["url"] = url
        display["database"]["url_source"] = url_source
        ctx.terminal.json(display)
    else:
        display = config.to_display_dict(human_durations=True)
        embedded = f"embedded ({display['database']['embedded_dir']})"
        display["database"]["url"] = url if url else embedded
        _print_toml_like(ctx, display, url_source)
    ctx.terminal.status(f"config OK ({source or 'no config file, defaults'})")


def _check_app(ctx: CliContext, source: str | None) -> Any:
    """Import the app with the config's schedules on it, as `awa worker` does: a module that
    cannot be imported or raises (a bad ``App.periodic(...)`` in the code), or a schedule of
    an unregistered kind, is a config error naming the key (exit 2)."""
    try:
        return ctx.app  # loading registers and checks the [periodic.NAME] schedules
    except (ConfigError, ValidationError):
        raise
    except AwaError as exc:
        raise ConfigError(str(exc), key="[app] modules", source=source) from None


def _check_limits(ctx: CliContext, app: Any) -> None:
    """The [limits.NAME] tables against the imported app (their kind or queue exists, their
    key path is in the args type): the check the worker runs at start
    (``awa_cli.limits.validate_limits``; exit 2, one line naming each key)."""
    from awa_cli.commands.worker import check_limits_against_app

    check_limits_against_app(ctx, app)


def _resolved_url(ctx: CliContext) -> tuple[str | None, str]:
    """The redacted URL from ``CliContext.database_url`` and where it came from."""
    url = ctx.database_url()
    if not url:
        return None, "embedded"
    if ctx.database_url_option:
        origin = "--database-url"
    elif ctx.env.get("AWA_DATABASE_URL"):
        origin = "$AWA_DATABASE_URL"
    else:
        origin = "[database] url"
    return redact(url), origin


def _check_import_spec(spec: str, key: str, source: str | None) -> None:
    """``module`` or ``module:attr``, each part an identifier; nothing is imported."""
    module, _, attr = spec.partition(":")
    parts = module.split(".") + ([attr] if ":" in spec else [])
    if not all(part.isidentifier() and not keyword.iskeyword(part) for part in parts):
        raise ConfigError(
            f'{key}: expected "module" or "module:attr", got {json.dumps(spec)}',
            key=key,
            source=source,
        )


def _print_toml_like(ctx: CliContext, display: dict[str, Any], url_source: str) -> None:
    out = ctx.terminal.data
    out(f"# config file: {display['path'] or '(none; defaults)'}")
    out(f"# base dir: {display['base_dir']}")
    tables: list[tuple[str, dict[str, Any]]] = [
        (name, display[name]) for name in ("database", "app", "worker")
    ]
    tables += [
        (f"queues.{q if re.fullmatch(r'[A-Za-z0-9_-]+', q) else json.dumps(q)}", values)
        for q, values in display["queues"].items()
    ]
    tables += [
        (name, display[name])
        for name in ("dead_letter", "maintenance", "metrics", "serve", "telemetry")
    ]
    for group in ("periodic", "limits"):  # every table resolved, as the JSON has them
        tables += [
            (f"{group}.{p if re.fullmatch(r'[A-Za-z0-9_-]+', p) else json.dumps(p)}", values)
            for p, values in display[group].items()
        ]
    for name, values in tables:
        out("")
        out(f"[{name}]")
        for key, value in values.items():
            if value is None:
                out(f"# {key} = (not set)")
            elif name == "database" and key == "url" and url_source != "embedded":
                out(f"{key} = {json.dumps(value)}  # from {url_source}")
            else:
                out(f"{key} = {_toml_value(value)}")


def _toml_value(value: Any) -> str:
    """A value as TOML spells it: JSON for scalars and lists, inline tables for tables."""
    if isinstance(value, dict):
        items = ", ".join(
            f"{k if re.fullmatch(r'[A-Za-z0-9_-]+', k) else json.dumps(k)} = {_toml_value(v)}"
            for k, v in value.items()
        )
        return f"{{ {items} }}" if items else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)
