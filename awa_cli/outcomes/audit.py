"""The audit log (architecture §15.4): one row per operator action, written by the outcome core in
the action's transaction where the action is one transaction (pause, resume, a single DLQ
retry), else once the batched action is over, with the count in ``detail``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import psycopg

from awa_cli.db import audit as audit_table
from awa_cli.jobs import JobRow
from awa_cli.outcomes.transaction import CoreState

_ACTOR: ContextVar[str | None] = ContextVar("awa_audit_actor", default=None)


@dataclass
class Trail:
    """What the core recorded inside one :func:`acting_as` block, so a caller that audits
    too (``awa serve``) writes its own entry only when the core wrote none. ``in_action``:
    entries written in an action's transaction (committed only if the action returned);
    ``alone``: entries committed on their own (a refused, failed or batched action)."""

    in_action: int = 0
    alone: int = 0

    def recorded(self, *, succeeded: bool) -> bool:
        """Whether an entry of the action is in the log, given how it ended."""
        return self.alone > 0 or (succeeded and self.in_action > 0)


_TRAIL: ContextVar[Trail | None] = ContextVar("awa_audit_trail", default=None)


@contextlib.contextmanager
def acting_as(actor: str) -> Iterator[Trail]:
    """Record the operator actions made in this context (this task and the tasks it starts)
    as ``actor``, over the core's own: for a server acting for many callers at once (``awa
    serve``: ``serve:<token name>``). Yields the :class:`Trail` of what was recorded."""
    trail = Trail()
    token, trail_token = _ACTOR.set(actor), _TRAIL.set(trail)
    try:
        yield trail
    finally:
        _TRAIL.reset(trail_token)
        _ACTOR.reset(token)


def current_actor(core: CoreState) -> str | None:
    """Who an action is recorded as: the context's actor, else the core's (None: nobody)."""
    return _ACTOR.get() or core.actor


async def record(
    conn: psycopg.AsyncConnection[Any],
    actor: str | None,
    action: str,
    target: str | None,
    result: str = "ok",
    detail: dict[str, Any] | None = None,
) -> None:
    """Write one entry on ``conn`` (inside the caller's transaction); nothing without an actor
    (a library caller that named none)."""
    if actor is None:
        return
    await _write(conn, actor, action, target, result, detail)
    trail = _TRAIL.get()
    if trail is not None:
        trail.in_action += 1


async def _write(
    conn: psycopg.AsyncConnection[Any],
    actor: str,
    action: str,
    target: str | None,
    result: str,
    detail: dict[str, Any] | None,
) -> None:
    await audit_table.insert(
        conn,
        {
            "actor": actor,
            "action": action,
            "target": target,
            "result": result,
            "detail": json.dumps(detail or {}, default=str),
        },
    )


async def record_alone(
    core: CoreState,
    actor: str | None,
    action: str,
    target: str | None,
    result: str = "ok",
    detail: dict[str, Any] | None = None,
) -> None:
    """Write one entry in a statement of its own (a refused action, or a batched one)."""
    if actor is None:
        return
    async with core.pool.connection() as conn:
        await _write(conn, actor, action, target, result, detail)
    trail = _TRAIL.get()
    if trail is not None:
        trail.alone += 1


def audited(
    core: CoreState,
    action: str,
    then: Callable[[Any, JobRow, Any], Awaitable[None]] | None = None,
    detail: Callable[[JobRow], dict[str, Any]] | None = None,
) -> Callable[[Any, JobRow, Any], Awaitable[None]]:
    """A transition's ``then`` that also writes the action's audit entry (target
    ``job:<id>``, as ``awa serve`` names it) in the transition's own transaction, after
    ``then``: a one-job operator action (``awa job cancel ID``, ``awa callback ...``) leaves
    its row exactly when it commits (architecture §15.4). Nothing without an actor."""

    async def then_audited(cur: Any, row: JobRow, event: Any) -> None:
        if then is not None:
            await then(cur, row, event)
        found = detail(row) if detail is not None else None
        await record(cur.connection, current_actor(core), action, f"job:{row.id}", "ok", found)

    return then_audited


def describe(**filters: Any) -> str:
    """An audit target from an action's filters: ``queue=mail kind=send``, or ``all``."""
    parts = [f"{name}={value}" for name, value in filters.items() if value is not None]
    return " ".join(parts) or "all"
