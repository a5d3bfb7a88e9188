"""Durations: ``seconds()`` for values given to the Python API, and the text form
(``"30s"``, ``"5m"``, ``"1h30m"``) that ``awa.toml`` and the CLI parse and print.

Pure. The API takes seconds (int or float) or a :class:`~datetime.timedelta` and raises
:class:`~awa_cli.errors.ValidationError`; the config and CLI take text or numbers and raise
:class:`~awa_cli.errors.ConfigError` naming the key or option.
"""

from __future__ import annotations

import json
import math
import re
from datetime import timedelta
from typing import Any

from awa_cli.errors import ConfigError, ValidationError


def seconds(value: float | int | timedelta, field: str) -> float:
    """Normalise a duration given as seconds or a timedelta; negative values are rejected."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, f"expected seconds or a timedelta, got {type(value).__name__}")
    else:
        result = float(value)
    if result != result or result < 0 or result == float("inf"):
        raise ValidationError(field, f"must be a finite, non-negative duration, got {value!r}")
    return result


def show_value(value: Any) -> str:
    """A value the way TOML would spell it, for error messages: on one line, whatever it holds
    (a character that is not printable, such as U+0085 or U+2028, which end a line for
    ``str.splitlines``, is shown escaped)."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


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
        raise ConfigError(
            f'{key}: expected a duration like "30s", got {show_value(value)}', key=key
        )
    if isinstance(value, str):
        seconds = _parse_duration_text(value, key)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ConfigError(
            f"{key}: expected a non-negative duration, got {show_value(value)}", key=key
        )
    if seconds > MAX_DURATION_SECONDS:
        raise ConfigError(
            f"{key}: expected a duration of at most 36500d, got {show_value(value)}", key=key
        )
    return seconds


def _parse_duration_text(text: str, key: str) -> float:
    bad = ConfigError(
        f'{key}: expected a duration like "30s", "5m" or "1h30m" (units ms, s, m, h, d), '
        f"got {show_value(text)}",
        key=key,
    )
    if _BARE_NUMBER.fullmatch(text):
        return float(text)
    if text.strip().startswith("-"):
        raise ConfigError(
            f"{key}: expected a non-negative duration, got {show_value(text)}", key=key
        )
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


__all__ = ["MAX_DURATION_SECONDS", "format_duration", "parse_duration", "seconds", "show_value"]
