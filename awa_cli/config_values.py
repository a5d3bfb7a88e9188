"""The value parsers of ``awa.toml``: each takes a TOML value and the key it came from, and
returns the typed value or raises :class:`~awa_cli.errors.ConfigError` naming that key in one
line. :mod:`awa_cli.config` composes them into the schema of every table."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from awa_cli.durations import parse_duration, show_value
from awa_cli.errors import ConfigError

Parser = Callable[[Any, str], Any]


show = show_value


def integer(low: int, high: int) -> Parser:
    def parse(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key}: expected a positive integer, got {show(value)}", key=key)
        if not low <= value <= high:
            raise ConfigError(f"{key}: must be between {low} and {high}, got {value}", key=key)
        return value

    return parse


def count(high: int) -> Parser:
    """A whole number from 0 to ``high`` (0 typically turns the feature off)."""

    def parse(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"{key}: expected a whole number (0 or more), got {show(value)}", key=key
            )
        if value > high:
            raise ConfigError(f"{key}: must be between 0 and {high}, got {value}", key=key)
        return value

    return parse


def duration(*, zero_allowed: bool) -> Parser:
    def parse(value: Any, key: str) -> float:
        seconds = parse_duration(value, key)
        if seconds == 0 and not zero_allowed:
            raise ConfigError(f"{key}: must be greater than zero, got {show(value)}", key=key)
        return seconds

    return parse


def nonempty_text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: expected a non-empty string, got {show(value)}", key=key)
    return value


def boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {show(value)}", key=key)
    return value


def otlp_url(value: Any, key: str) -> str:
    """An http(s) base URL with a host (the OTLP collector's)."""
    from urllib.parse import urlsplit

    text = nonempty_text(value, key)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f'{key}: expected an http(s) URL like "http://127.0.0.1:4318", got {show(value)}',
            key=key,
        )
    return text.rstrip("/")


def texts(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of strings, got {show(value)}", key=key)
    return tuple(nonempty_text(item, f"{key}[{index}]") for index, item in enumerate(value))


def host_names(value: Any, key: str) -> tuple[str, ...]:
    """``[serve] allowed_hosts``: host names, each optionally with ``:port``."""
    names = texts(value, key)
    for index, name in enumerate(names):
        bare, _, port = name.rpartition(":") if name.count(":") == 1 else (name, "", "")
        if not HOST_NAME.fullmatch(bare) or (port and not (port.isdigit() and len(port) <= 5)):
            raise ConfigError(
                f'{key}[{index}]: expected a host name like "jobs.example.com" or '
                f'"jobs.example.com:8443", got {show(name)}',
                key=key,
            )
    return tuple(n.lower() for n in names)


HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def host(value: Any, key: str) -> str:
    """An IP address (v4 or v6) or a host name to bind to."""
    import ipaddress

    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            if HOST_NAME.fullmatch(value):
                return value
    raise ConfigError(
        f'{key}: expected an IP address or host name like "127.0.0.1", got {show(value)}',
        key=key,
    )


def inline_table(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a table, got {show(value)}", key=key)
    return value


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_name(value: Any, key: str) -> str:
    if not isinstance(value, str) or not ENV_NAME.fullmatch(value):
        raise ConfigError(
            f"{key}: expected the name of an environment variable, got {show(value)}", key=key
        )
    return value


def env_names(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{key}: expected a list of environment variable names", key=key)
    return tuple(env_name(item, f"{key}[{index}]") for index, item in enumerate(value))


def http_url(value: Any, key: str) -> str:
    text = nonempty_text(value, key).strip()
    if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", text):
        raise ConfigError(
            f"{key}: expected an http:// or https:// URL without query, got {show(value)}",
            key=key,
        )
    return text.rstrip("/")
