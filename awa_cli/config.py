"""``awa.toml``: parsed once into frozen dataclasses, every value checked and every error naming its key.

The file is read with :mod:`tomllib`; each table is checked against a small schema
(:data:`_SCHEMA`) so that unknown tables and keys, wrong types and out-of-range values all
fail the same way: one line, ``awa.toml: [queues.email] concurrency: expected ...``.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from awa_cli.db.dsn import redact
from awa_cli.results import AwaError

CONFIG_FILE_NAME = "awa.toml"
EMBEDDED_DIR_NAME = ".awa"


class ConfigError(AwaError):
    """A config problem; the message is one line naming the file and the key.

    ``key`` is the key as shown in the message (``[queues.email] concurrency``), or None for
    problems with the file as a whole (missing, not TOML).
    """

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.message = message
        self.key = key
        self.source = source


@dataclass(frozen=True)
class DatabaseConfig:
    url: str | None = None
    embedded_dir: Path = field(default_factory=lambda: Path.cwd() / EMBEDDED_DIR_NAME)


@dataclass(frozen=True)
class AppConfig:
    modules: tuple[str, ...] = ()
    plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkerConfig:
    processes: int = 1
    shutdown_timeout: float = 30.0


@dataclass(frozen=True)
class QueueConfig:
    concurrency: int = 10
    deadline: float = 0.0  # seconds a job may run; 0 means no deadline


@dataclass(frozen=True)
class MaintenanceConfig:
    heartbeat_interval: float = 5.0
    heartbeat_staleness: float = 15.0
    rescue_interval: float = 5.0
    leader_election_interval: float = 5.0
    completed_retention: float = 86400.0
    failed_retention: float = 259200.0


@dataclass(frozen=True)
class MetricsConfig:
    prometheus_port: int | None = None  # None: no Prometheus endpoint


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
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)

    def to_display_dict(self, *, human_durations: bool = False) -> dict[str, Any]:
        """Plain JSON-able data; the URL's password redacted.

        Durations are seconds (floats), or strings like ``"24h"`` with ``human_durations``.
        """

        def section(obj: Any, table: str) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for f in fields(obj):
                value = getattr(obj, f.name)
                if human_durations and _SCHEMA[table][f.name] in _DURATIONS:
                    value = format_duration(value)
                out[f.name] = str(value) if isinstance(value, Path) else value
                if isinstance(value, tuple):
                    out[f.name] = list(value)
            return out

        database = section(self.database, "database")
        if self.database.url is not None:
            database["url"] = redact(self.database.url)
        return {
            "path": None if self.path is None else str(self.path),
            "base_dir": str(self.base_dir),
            "database": database,
            "app": section(self.app, "app"),
            "worker": section(self.worker, "worker"),
            "queues": {name: section(queue, "queues.*") for name, queue in self.queues.items()},
            "maintenance": section(self.maintenance, "maintenance"),
            "metrics": section(self.metrics, "metrics"),
            "telemetry": section(self.telemetry, "telemetry"),
        }


# --- durations -------------------------------------------------------------------------------

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-z]+)")
_BARE_NUMBER = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*")


# A hundred years: longer is a typo, and would overflow timers and timestamp arithmetic.
MAX_DURATION_SECONDS = 36500 * 86400.0


def parse_duration(value: Any, key: str) -> float:
    """Seconds from ``30``, ``1.5``, ``"500ms"``, ``"30s"``, ``"5m"``, ``"24h"``, ``"1d"``, ``"1h30m"``.

    A bare number (or numeric string) is seconds. Negative, empty, non-finite values, more
    than 36500 days and unknown units raise :class:`ConfigError` naming ``key``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f'{key}: expected a duration like "30s", got {_show(value)}', key=key)
    if isinstance(value, str):
        seconds = _parse_duration_text(value, key)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(f"{key}: expected a non-negative duration, got {_show(value)}", key=key)
    if seconds > MAX_DURATION_SECONDS:
        raise ConfigError(
            f"{key}: expected a duration of at most 36500d, got {_show(value)}", key=key
        )
    return seconds


def _parse_duration_text(text: str, key: str) -> float:
    bad = ConfigError(
        f'{key}: expected a duration like "30s", "5m" or "1h30m" (units ms, s, m, h, d), '
        f"got {_show(text)}",
        key=key,
    )
    if _BARE_NUMBER.fullmatch(text):
        return float(text)
    if text.strip().startswith("-"):
        raise ConfigError(f"{key}: expected a non-negative duration, got {_show(text)}", key=key)
    total, position = 0.0, 0
    for match in _DURATION_PART.finditer(text):
        unit = match.group(2)
        if match.start() != position or unit not in _UNIT_SECONDS:
            raise bad
        total += float(match.group(1)) * _UNIT_SECONDS[unit]
        position = match.end()
    if position == 0 or text[position:].strip():
        raise bad
    return total


def format_duration(seconds: float) -> str:
    """The shortest ``parse_duration`` text for ``seconds``: ``86400 -> "1d"``, ``5400 -> "1h30m"``."""
    if seconds < 1 and seconds != 0:
        return f"{seconds * 1000:g}ms"
    parts: list[str] = []
    rest = seconds
    for unit in ("d", "h", "m"):
        whole = int(rest // _UNIT_SECONDS[unit])
        if whole:
            parts.append(f"{whole}{unit}")
            rest -= whole * _UNIT_SECONDS[unit]
    if rest or not parts:
        parts.append(f"{round(rest, 6):g}s")
    return "".join(parts)


# --- the schema ------------------------------------------------------------------------------

Parser = Callable[[Any, str], Any]


def _show(value: Any) -> str:
    """A value the way TOML would spell it, for error messages."""
    return json.dumps(value, default=str, ensure_ascii=False)


def _integer(low: int, high: int) -> Parser:
    def parse(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key}: expected a positive integer, got {_show(value)}", key=key)
        if not low <= value <= high:
            raise ConfigError(f"{key}: must be between {low} and {high}, got {value}", key=key)
        return value

    return parse


def _duration(*, zero_allowed: bool) -> Parser:
    def parse(value: Any, key: str) -> float:
        seconds = parse_duration(value, key)
        if seconds == 0 and not zero_allowed:
            raise ConfigError(f"{key}: must be greater than zero, got {_show(value)}", key=key)
        return seconds

    return parse


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: expected a non-empty string, got {_show(value)}", key=key)
    return value


def _http_url(value: Any, key: str) -> str:
    """An http(s) base URL with a host (the OTLP collector's)."""
    from urllib.parse import urlsplit

    text = _text(value, key)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f'{key}: expected an http(s) URL like "http://127.0.0.1:4318", got {_show(value)}',
            key=key,
        )
    return text.rstrip("/")


def _texts(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of strings, got {_show(value)}", key=key)
    return tuple(_text(item, f"{key}[{index}]") for index, item in enumerate(value))


_ANY_DURATION = _duration(zero_allowed=True)
_INTERVAL = _duration(zero_allowed=False)
_DURATIONS = (_ANY_DURATION, _INTERVAL)

# table -> key -> parser; the dataclass defaults are the defaults. "queues.*" is each [queues.NAME].
_SCHEMA: dict[str, dict[str, Parser]] = {
    "database": {"url": _text, "embedded_dir": _text},
    "app": {"modules": _texts, "plugins": _texts},
    "worker": {"processes": _integer(1, 1024), "shutdown_timeout": _ANY_DURATION},
    "queues.*": {"concurrency": _integer(1, 10_000), "deadline": _ANY_DURATION},
    "maintenance": {
        "heartbeat_interval": _INTERVAL,
        "heartbeat_staleness": _INTERVAL,
        "rescue_interval": _INTERVAL,
        "leader_election_interval": _INTERVAL,
        "completed_retention": _ANY_DURATION,
        "failed_retention": _ANY_DURATION,
    },
    "metrics": {"prometheus_port": _integer(1, 65535)},
    "telemetry": {"otlp_endpoint": _http_url, "service_name": _text},
}
_TABLES = ("database", "app", "worker", "queues", "maintenance", "metrics", "telemetry")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _table_label(*path: str) -> str:
    return "[" + ".".join(p if _BARE_KEY.fullmatch(p) else json.dumps(p) for p in path) + "]"


def _as_table(value: Any, label: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{label}: expected a table, got {_show(value)}", key=label)
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


def _build(data: dict[str, Any], path: Path | None, base_dir: Path) -> Config:
    for name in data:
        if name not in _TABLES:
            label = _table_label(name)
            raise ConfigError(
                f"unknown table {label} (known tables: {', '.join(_TABLES)})", key=label
            )
    tables = {name: _as_table(data.get(name, {}), _table_label(name)) for name in _TABLES}

    database = _section(tables["database"], "database", "[database]")
    embedded_dir = base_dir / Path(database.pop("embedded_dir", EMBEDDED_DIR_NAME)).expanduser()

    queues: dict[str, QueueConfig] = {}
    for name, raw in tables["queues"].items():
        label = _table_label("queues", name)
        if not 1 <= len(name) <= 200:
            raise ConfigError(f"{label}: a queue name must be 1 to 200 characters", key=label)
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
        maintenance=maintenance,
        metrics=MetricsConfig(**_section(tables["metrics"], "metrics", "[metrics]")),
        telemetry=TelemetryConfig(**_section(tables["telemetry"], "telemetry", "[telemetry]")),
    )


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
    "MaintenanceConfig",
    "MetricsConfig",
    "QueueConfig",
    "WorkerConfig",
    "format_duration",
    "load_config",
    "parse_duration",
    "resolve_config_path",
]
