"""``awa.toml``: parsed once into frozen dataclasses, every value checked and every error naming its key.

The file is read with :mod:`tomllib`; each table is checked against a small schema
(:data:`_SCHEMA`) so that unknown tables and keys, wrong types and out-of-range values all
fail the same way: one line, ``awa.toml: [queues.email] concurrency: expected ...``.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from awa_cli import defaults
from awa_cli.db.dsn import redact
from awa_cli import config_values as values
from awa_cli.config_values import Parser
from awa_cli.durations import format_duration, parse_duration, show_value
from awa_cli.enqueue import InsertOpts, check_name, prepare
from awa_cli.errors import ConfigError, ValidationError
from awa_cli.errors import ScheduleError
from awa_cli.limits import Limit, check_limits, parse_key, parse_rate
from awa_cli.periodic import Schedule

if TYPE_CHECKING:
    from awa_cli.app import App

CONFIG_FILE_NAME = "awa.toml"
EMBEDDED_DIR_NAME = ".awa"


@dataclass(frozen=True)
class DatabaseConfig:
    url: str | None = None
    embedded_dir: Path = field(default_factory=lambda: Path.cwd() / EMBEDDED_DIR_NAME)
    # A direct (or session-mode pooler) URL of the same database for the connections that
    # need a session of their own: the worker's LISTEN and the maintenance leader's lock.
    listen_url: str | None = None


@dataclass(frozen=True)
class AppConfig:
    modules: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerConfig:
    processes: int = 1
    shutdown_timeout: float = defaults.SHUTDOWN_TIMEOUT


@dataclass(frozen=True)
class QueueConfig:
    concurrency: int = defaults.QUEUE_CONCURRENCY
    deadline: float = 0.0  # seconds a job may run; 0 means no deadline
    # Exhausted jobs move to the dead-letter queue; None: as [dead_letter] default says.
    dead_letter: bool | None = None
    # seconds of waiting per priority level gained by an available job (architecture §13); 0: none
    priority_aging: float = 0.0
    # claim up to `concurrency` jobs beyond the free slots while attempts are short
    claim_ahead: bool = True


@dataclass(frozen=True)
class DeadLetterConfig:
    default: bool = False  # dead-lettering for every queue that does not set its own


@dataclass(frozen=True)
class MaintenanceConfig:
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL
    heartbeat_staleness: float = defaults.HEARTBEAT_STALENESS
    rescue_interval: float = defaults.RESCUE_INTERVAL
    leader_election_interval: float = defaults.LEADER_ELECTION_INTERVAL
    completed_retention: float = defaults.COMPLETED_RETENTION
    failed_retention: float = defaults.FAILED_RETENTION
    dead_letter_retention: float = defaults.DEAD_LETTER_RETENTION
    audit_retention: float = defaults.AUDIT_RETENTION
    vacuum_dead_tuples: int = defaults.VACUUM_DEAD_TUPLES  # 0: the leader never vacuums


@dataclass(frozen=True)
class MetricsConfig:
    prometheus_port: int | None = None  # None: no Prometheus endpoint
    host: str = "127.0.0.1"  # the address the endpoint binds to; "0.0.0.0" exposes it


@dataclass(frozen=True)
class PeriodicConfig:
    """One ``[periodic.NAME]`` table: a schedule registered on the loaded app (architecture §9)."""

    cron: str
    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    catch_up: str = "latest"
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    tags: tuple[str, ...] | None = None
    metadata: dict[str, Any] | None = None
    deadline_duration: float | None = None

    REQUIRED = ("cron", "kind")

    def insert_options(self) -> dict[str, Any]:
        """The insert options that are set (queue, priority, ...), as keyword arguments."""
        names = ("queue", "priority", "max_attempts", "tags", "metadata", "deadline_duration")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


@dataclass(frozen=True)
class ServeToken:
    """One ``[serve.tokens.NAME]`` entry: the env var holding the bearer token, and its role."""

    name: str
    token_env: str
    role: str  # "viewer" (reads) or "operator" (also acts)


@dataclass(frozen=True)
class ServeConfig:
    """``[serve]``: ``awa serve``'s address, its bearer tokens and the callback signing keys
    (both as environment variable names: secrets never live in the file)."""

    host: str = "127.0.0.1"
    port: int = 8477
    tokens: tuple[ServeToken, ...] = ()
    callback_secrets: tuple[str, ...] = ()  # env var names, newest first
    callback_base_url: str | None = None  # public URL of the /callbacks mount point
    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides loopback (needs tokens)
    secure_cookies: bool = False  # Secure, __Host- cookies (behind a TLS-terminating proxy)
    forwarded_allow_ips: str | None = None  # proxies trusted for X-Forwarded-Proto/-For
    max_body: int = 1024 * 1024  # the largest request body read, in bytes


@dataclass(frozen=True)
class TelemetryConfig:
    otlp_endpoint: str | None = None  # None: the OpenTelemetry plugin is not loaded
    service_name: str = "awa-worker"


def _default_queues() -> dict[str, QueueConfig]:
    return {"default": QueueConfig()}


@dataclass(frozen=True)
class Config:
    """The whole resolved config. Build it with :func:`load_config`."""

    path: Path | None
    base_dir: Path
    database: DatabaseConfig = field(default_factory=DatabaseConfig)
    app: AppConfig = field(default_factory=AppConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    queues: dict[str, QueueConfig] = field(default_factory=_default_queues)
    dead_letter: DeadLetterConfig = field(default_factory=DeadLetterConfig)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    periodic: dict[str, PeriodicConfig] = field(default_factory=dict)
    serve: ServeConfig = field(default_factory=ServeConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    limits: dict[str, Limit] = field(default_factory=dict)

    def to_display_dict(self, *, human_durations: bool = False) -> dict[str, Any]:
        """Plain JSON-able data; the URL's password redacted.

        Durations are seconds (floats), or strings like ``"24h"`` with ``human_durations``.
        """

        def section(obj: Any, table: str) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for f in fields(obj):
                value = getattr(obj, f.name)
                is_duration = _SCHEMA[table][f.name] in _DURATIONS
                if human_durations and is_duration and value is not None:
                    value = format_duration(value)
                out[f.name] = str(value) if isinstance(value, Path) else value
                if isinstance(value, tuple):
                    out[f.name] = list(value)
            return out

        database = section(self.database, "database")
        if self.database.url is not None:
            database["url"] = redact(self.database.url)
        if self.database.listen_url is not None:
            database["listen_url"] = redact(self.database.listen_url)
        return {
            "path": None if self.path is None else str(self.path),
            "base_dir": str(self.base_dir),
            "database": database,
            "app": section(self.app, "app"),
            "worker": section(self.worker, "worker"),
            "queues": {name: section(queue, "queues.*") for name, queue in self.queues.items()},
            "dead_letter": section(self.dead_letter, "dead_letter"),
            "maintenance": section(self.maintenance, "maintenance"),
            "metrics": section(self.metrics, "metrics"),
            "periodic": {
                name: section(entry, "periodic.*") for name, entry in self.periodic.items()
            },
            "serve": {
                **section(self.serve, "serve"),
                "tokens": {
                    t.name: {"token_env": t.token_env, "role": t.role} for t in self.serve.tokens
                },
            },
            "telemetry": section(self.telemetry, "telemetry"),
            "limits": {name: limit.to_json() for name, limit in self.limits.items()},
        }


# --- the schema ------------------------------------------------------------------------------


SERVE_ROLES = ("viewer", "operator")


def _serve_tokens(value: Any, key: str) -> tuple[ServeToken, ...]:
    """``tokens = { alice = { token_env = "ALICE_TOKEN", role = "operator" } }``."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a table of name = {{token_env, role}}", key=key)
    tokens = []
    for name, raw in value.items():
        label = _table_label("serve", "tokens", name)
        entry = _as_table(raw, label)
        for unknown in entry.keys() - {"token_env", "role"}:
            raise ConfigError(
                f"unknown key {label} {unknown} (known keys: token_env, role)", key=label
            )
        if "token_env" not in entry:
            raise ConfigError(f"{label} token_env: missing", key=f"{label} token_env")
        role = entry.get("role", "viewer")
        if role not in SERVE_ROLES:
            raise ConfigError(
                f"{label} role: expected viewer or operator, got {values.show(role)}",
                key=f"{label} role",
            )
        tokens.append(
            ServeToken(name, values.env_name(entry["token_env"], f"{label} token_env"), role)
        )
    return tuple(tokens)


_ANY_DURATION = values.duration(zero_allowed=True)
_INTERVAL = values.duration(zero_allowed=False)
_DURATIONS = (_ANY_DURATION, _INTERVAL)

# table -> key -> parser; the dataclass defaults are the defaults. "queues.*" is each [queues.NAME].
_SCHEMA: dict[str, dict[str, Parser]] = {
    "database": {
        "url": values.nonempty_text,
        "embedded_dir": values.nonempty_text,
        "listen_url": values.nonempty_text,
    },
    "app": {"modules": values.texts, "plugins": values.texts},
    "worker": {"processes": values.integer(1, 1024), "shutdown_timeout": _ANY_DURATION},
    "queues.*": {
        "concurrency": values.integer(1, 10_000),
        "deadline": _ANY_DURATION,
        "dead_letter": values.boolean,
        "priority_aging": _ANY_DURATION,
        "claim_ahead": values.boolean,
    },
    "dead_letter": {"default": values.boolean},
    "maintenance": {
        "heartbeat_interval": _INTERVAL,
        "heartbeat_staleness": _INTERVAL,
        "rescue_interval": _INTERVAL,
        "leader_election_interval": _INTERVAL,
        "completed_retention": _ANY_DURATION,
        "failed_retention": _ANY_DURATION,
        "dead_letter_retention": _ANY_DURATION,
        "audit_retention": _ANY_DURATION,
        "vacuum_dead_tuples": values.count(2_000_000_000),
    },
    "metrics": {"prometheus_port": values.integer(1, 65535), "host": values.host},
    "periodic.*": {
        "cron": values.nonempty_text,
        "kind": values.nonempty_text,
        "args": values.inline_table,
        "timezone": values.nonempty_text,
        "catch_up": values.nonempty_text,
        "queue": values.nonempty_text,
        "priority": values.integer(1, 4),
        "max_attempts": values.integer(1, 1000),
        "tags": values.texts,
        "metadata": values.inline_table,
        "deadline_duration": _ANY_DURATION,
    },
    "serve": {
        "host": values.nonempty_text,
        "port": values.integer(1, 65535),
        "tokens": _serve_tokens,
        "callback_secrets": values.env_names,
        "callback_base_url": values.http_url,
        "allowed_hosts": values.host_names,
        "secure_cookies": values.boolean,
        "forwarded_allow_ips": values.nonempty_text,
        "max_body": values.integer(1024, 64 * 1024 * 1024),
    },
    "telemetry": {"otlp_endpoint": values.otlp_url, "service_name": values.nonempty_text},
    "limits.*": {
        "kind": values.nonempty_text,
        "queue": values.nonempty_text,
        "key": parse_key,
        "max_running": values.integer(1, 100_000),
        "rate": parse_rate,
    },
}
_TABLES = (
    "database",
    "app",
    "worker",
    "queues",
    "dead_letter",
    "maintenance",
    "metrics",
    "periodic",
    "serve",
    "telemetry",
    "limits",
)
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _table_label(*path: str) -> str:
    return "[" + ".".join(p if _BARE_KEY.fullmatch(p) else json.dumps(p) for p in path) + "]"


def _as_table(value: Any, label: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{label}: expected a table, got {values.show(value)}", key=label)
    return value


def _section(raw: dict[str, Any], schema: str, label: str) -> dict[str, Any]:
    """Parsed keyword arguments for one table; unknown keys are errors."""
    parsers = _SCHEMA[schema]
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        key = f"{label} {name}"
        if name not in parsers:
            known = ", ".join(parsers)
            raise ConfigError(f"unknown key {key} (known keys: {known})", key=key)
        kwargs[name] = parsers[name](value, key)
    return kwargs


def _expand_user(text: str) -> Path:
    """``[database] embedded_dir`` with a leading ``~`` or ``~user`` expanded; a user with no
    home directory (``~nobody0``) is the key's error, not a traceback."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        key = "[database] embedded_dir"
        raise ConfigError(
            f"{key}: cannot expand {show_value(text)}: no such user or no home directory",
            key=key,
        ) from None


def _build(data: dict[str, Any], path: Path | None, base_dir: Path) -> Config:
    for name in data:
        if name not in _TABLES:
            label = _table_label(name)
            raise ConfigError(
                f"unknown table {label} (known tables: {', '.join(_TABLES)})", key=label
            )
    tables = {name: _as_table(data.get(name, {}), _table_label(name)) for name in _TABLES}

    database = _section(tables["database"], "database", "[database]")
    embedded_dir = base_dir / _expand_user(database.pop("embedded_dir", EMBEDDED_DIR_NAME))

    queues: dict[str, QueueConfig] = {}
    for name, raw in tables["queues"].items():
        label = _table_label("queues", name)
        if not 1 <= len(name) <= 200:
            raise ConfigError(f"{label}: a queue name must be 1 to 200 characters", key=label)
        try:
            check_name(name, label)  # the rule inserts apply, so every configured queue is usable
        except ValidationError as exc:
            raise ConfigError(str(exc), key=label) from None
        queues[name] = QueueConfig(**_section(_as_table(raw, label), "queues.*", label))

    maintenance = MaintenanceConfig(
        **_section(tables["maintenance"], "maintenance", "[maintenance]")
    )
    if maintenance.heartbeat_staleness <= maintenance.heartbeat_interval:
        key = "[maintenance] heartbeat_staleness"
        raise ConfigError(
            f"{key}: must be longer than heartbeat_interval "
            f"({format_duration(maintenance.heartbeat_interval)}), "
            f"got {format_duration(maintenance.heartbeat_staleness)}",
            key=key,
        )
    return Config(
        path=path,
        base_dir=base_dir,
        database=DatabaseConfig(embedded_dir=embedded_dir, **database),
        app=AppConfig(**_section(tables["app"], "app", "[app]")),
        worker=WorkerConfig(**_section(tables["worker"], "worker", "[worker]")),
        queues=queues or _default_queues(),
        dead_letter=DeadLetterConfig(
            **_section(tables["dead_letter"], "dead_letter", "[dead_letter]")
        ),
        maintenance=maintenance,
        metrics=MetricsConfig(**_section(tables["metrics"], "metrics", "[metrics]")),
        periodic={
            name: _periodic(name, _as_table(raw, _table_label("periodic", name)))
            for name, raw in tables["periodic"].items()
        },
        serve=ServeConfig(**_section(tables["serve"], "serve", "[serve]")),
        telemetry=TelemetryConfig(**_section(tables["telemetry"], "telemetry", "[telemetry]")),
        limits=_limits(tables["limits"]),
    )


# --- [limits.NAME] ---------------------------------------------------------------------------


def _limits(tables: dict[str, Any]) -> dict[str, Limit]:
    """Every ``[limits.NAME]`` table (architecture §13): one of kind or queue, key, max_running."""
    limits: dict[str, Limit] = {}
    for name, raw in tables.items():
        label = _table_label("limits", name)
        if not 1 <= len(name) <= 200:
            raise ConfigError(f"{label}: a limit name must be 1 to 200 characters", key=label)
        kwargs = _section(_as_table(raw, label), "limits.*", label)
        if ("kind" in kwargs) == ("queue" in kwargs):
            raise ConfigError(f"{label}: set exactly one of kind or queue", key=label)
        for required in ("key", "max_running"):
            if required not in kwargs:
                key = f"{label} {required}"
                raise ConfigError(f"{label}: missing required key {required}", key=key)
        rate = kwargs.pop("rate", None)
        if rate is not None:
            kwargs["rate_count"], kwargs["rate_window"] = rate
        limits[name] = Limit(name=name, **kwargs)
    check_limits(limits.values())
    return limits


# --- [periodic.NAME] -------------------------------------------------------------------------


def _schedule_key(label: str, attribute: str) -> str:
    """The TOML key a schedule's attribute comes from (the table itself for its name)."""
    return label if attribute == "name" else f"{label} {attribute}"


def _periodic(name: str, raw: dict[str, Any]) -> PeriodicConfig:
    """One ``[periodic.NAME]`` table, checked as far as it can be without the app: the name,
    expression, time zone, policy and insert options. The kind is checked when the app is
    loaded (:func:`register_schedules`)."""
    label = _table_label("periodic", name)
    kwargs = _section(raw, "periodic.*", label)
    for required in PeriodicConfig.REQUIRED:
        if required not in kwargs:
            key = f"{label} {required}"
            raise ConfigError(f"{label}: missing required key {required}", key=key)
    entry = PeriodicConfig(**kwargs)
    try:
        Schedule(name, entry.cron, entry.kind, entry.args, entry.timezone, entry.catch_up)  # type: ignore[arg-type]
    except ScheduleError as exc:
        key = _schedule_key(label, exc.attribute)
        raise ConfigError(f"{key}: {exc.reason}", key=key) from None
    try:
        prepare(entry.args, InsertOpts(kind=entry.kind, **entry.insert_options()))
    except ValidationError as exc:
        key = _schedule_key(label, exc.field)
        raise ConfigError(f"{label} {exc}", key=key) from None
    return entry


def register_schedules(app: App, config: Config) -> None:
    """Register each ``[periodic.NAME]`` of ``config`` on the loaded ``app``; a kind the app
    does not register (or a name its code registers too) is a :class:`ConfigError`."""
    source = None if config.path is None else str(config.path)
    for name, entry in config.periodic.items():
        label = _table_label("periodic", name)
        try:
            app.periodic(
                name,
                entry.cron,
                entry.args,
                timezone=entry.timezone,
                catch_up=entry.catch_up,  # type: ignore[arg-type]
                kind=entry.kind,
                **entry.insert_options(),
            )
        except ScheduleError as exc:
            key = _schedule_key(label, exc.attribute)
            where = " (the app of [app] modules)" if exc.attribute == "kind" else ""
            raise ConfigError(f"{key}: {exc.reason}{where}", key=key, source=source) from None


def dead_letter_enabled(config: Config, queue: str) -> bool:
    """Whether exhausted jobs of ``queue`` move to the dead-letter queue (architecture §10).

    ``[queues.NAME] dead_letter`` when the queue sets it, else ``[dead_letter] default``; a
    queue the config does not name follows the default too.
    """
    own = config.queues.get(queue)
    if own is not None and own.dead_letter is not None:
        return own.dead_letter
    return config.dead_letter.default


# --- finding and loading ---------------------------------------------------------------------


def resolve_config_path(option: str | None, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """``--config``, else ``$AWA_CONFIG``, else ``./awa.toml`` if present; and whether it was explicit."""
    if option:
        return Path(option), True
    if env.get("AWA_CONFIG"):
        return Path(env["AWA_CONFIG"]), True
    default = Path(CONFIG_FILE_NAME)
    if default.is_file():
        return default, False
    return None, False


def load_config(path: Path | None, *, explicit: bool) -> Config:
    """The config in ``path`` (all defaults when None, or when an implicit file has vanished)."""
    if path is None or (not explicit and not path.exists()):
        return _build({}, None, Path.cwd())
    source = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("config file not found", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", source=source) from None
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text", source=source) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", source=source) from None
    resolved = path.resolve()
    try:
        return _build(data, resolved, resolved.parent)
    except ConfigError as exc:
        raise ConfigError(exc.message, key=exc.key, source=source) from None


__all__ = [
    "AppConfig",
    "Config",
    "ConfigError",
    "DatabaseConfig",
    "DeadLetterConfig",
    "MaintenanceConfig",
    "MetricsConfig",
    "PeriodicConfig",
    "QueueConfig",
    "ServeConfig",
    "ServeToken",
    "WorkerConfig",
    "dead_letter_enabled",
    "format_duration",
    "load_config",
    "parse_duration",
    "register_schedules",
    "resolve_config_path",
]
