"""Metadata contributors: entries added to every job's metadata at enqueue (pure).

A contributor is ``fn(kind, queue, metadata, trigger) -> Mapping | None``, called once for
each validated insert (a bulk insert calls it once per kind and shares the result) with the
job's kind, queue and its metadata so far, and ``trigger``: the metadata of the job whose
outcome enqueues this one (a follow-up), or None. What it returns is merged in, without
overriding a key the caller set. The OpenTelemetry plugin registers one to store
``awa.traceparent``; nothing is registered by default, so enqueue pays one list check (and
one ``sys.modules`` lookup for the ambient tracing of :mod:`awa_cli.plugins.ambient`).

The outcome core and the worker mark the follow-ups they prepare with :func:`following`.
A contributor that raises is logged and skipped: tracing never stops an enqueue.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

log = logging.getLogger("awa.metadata")

Contributor = Callable[
    [str, str, Mapping[str, Any], Mapping[str, Any] | None], Mapping[str, Any] | None
]
R = TypeVar("R")

_CONTRIBUTORS: list[Contributor] = []
_TRIGGER: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "awa_follow_up_trigger", default=None
)


def register(contributor: Contributor) -> None:
    """Add ``contributor`` (once; registering it again is a no-op)."""
    if contributor not in _CONTRIBUTORS:
        _CONTRIBUTORS.append(contributor)


def unregister(contributor: Contributor) -> None:
    if contributor in _CONTRIBUTORS:
        _CONTRIBUTORS.remove(contributor)


def registered() -> tuple[Contributor, ...]:
    return tuple(_CONTRIBUTORS)


_AMBIENT: list[Callable[[], Contributor | None]] = []


def set_ambient(loader: Callable[[], Contributor | None]) -> None:
    """The ambient tracing contributor's loader (``awa_cli.plugins.ambient``): called only
    once OpenTelemetry's API is imported by the application (``opentelemetry.trace`` in
    ``sys.modules``), it returns the contributor that records ``awa.enqueue`` spans with the
    application's own tracer provider, or None. Not one of :func:`registered`."""
    _AMBIENT[:] = [loader]


def _ambient() -> Contributor | None:
    if not _AMBIENT or "opentelemetry.trace" not in sys.modules:
        return None
    return _AMBIENT[0]()


def contribute(kind: str, queue: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` with every contributor's entries added (the same object when none is
    registered and the application traces with no OpenTelemetry; a new dict otherwise)."""
    ambient = _ambient()
    if not _CONTRIBUTORS and ambient is None:
        return metadata
    trigger = _TRIGGER.get()
    merged = dict(metadata)
    for contributor in [*_CONTRIBUTORS, *([ambient] if ambient is not None else [])]:
        try:
            extra = contributor(kind, queue, merged, trigger)
        except Exception as exc:
            log.warning(
                "metadata contributor %r failed: %s: %s",
                contributor,
                type(exc).__name__,
                exc,
                extra={"action": "metadata_contributor_failed"},
            )
            continue
        for key, value in (extra or {}).items():
            merged.setdefault(key, value)
    return merged


def following(trigger: Mapping[str, Any] | None, prepare: Callable[..., R]) -> Callable[..., R]:
    """``prepare`` (a function validating a follow-up) run with ``trigger`` — the metadata
    of the job that causes the follow-up — visible to the contributors."""

    def prepare_follow_up(*args: Any, **kwargs: Any) -> R:
        token = _TRIGGER.set(trigger)
        try:
            return prepare(*args, **kwargs)
        finally:
            _TRIGGER.reset(token)

    return prepare_follow_up
