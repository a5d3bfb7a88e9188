"""Callback resolution from a client or the CLI: complete, fail, retry, resume, heartbeat,
and looking up the job waiting on a callback."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal
from uuid import UUID

from psycopg.rows import DictRow

from awa_cli.attempts import error_entry
from awa_cli.db.channels import CALLBACK_CHANNEL
from awa_cli.db.statements import SQL
from awa_cli.dead_letters import DeadReason
from awa_cli.events import AnyEvent, JobEvent
from awa_cli.jobs import JobRow, JobState, parse_callback_id, to_json
from awa_cli.outcomes.audit import audited
from awa_cli.outcomes.dead_letters import then_move
from awa_cli.outcomes.transaction import (
    CoreState,
    Cursor,
    Missing,
    Transition,
    notify_queue,
    transition,
)
from awa_cli.results import CallbackNotFound, ValidationError

ResolveAction = Literal["complete", "fail", "retry"]

_RESOLVE: dict[ResolveAction, Literal["resolve_complete", "resolve_fail", "resolve_retry"]] = {
    "complete": "resolve_complete",
    "fail": "resolve_fail",
    "retry": "resolve_retry",
}


def callback_params(callback_id: Any, run_lease: int | None) -> dict[str, Any]:
    if run_lease is not None and (isinstance(run_lease, bool) or not isinstance(run_lease, int)):
        raise ValidationError("run_lease", "expected an integer")
    return {"callback_id": parse_callback_id(callback_id), "lease": run_lease}


def _not_waiting(callback_id: UUID) -> Missing:
    async def raise_not_found(cur: Cursor) -> None:
        raise CallbackNotFound(f"no job is waiting on callback {callback_id}")

    return raise_not_found


def _resolution_event(action: ResolveAction, error: str) -> Callable[[JobRow, DictRow], AnyEvent]:
    def event(row: JobRow, record: DictRow) -> AnyEvent:
        parked_attempt = int(record["parked_attempt"])
        match action:
            case "complete":
                return JobEvent.Completed(row, row.args, 0.0, row.output)
            case "fail":
                return JobEvent.Exhausted(row, row.args, error, parked_attempt)
            case _:
                return JobEvent.Retried(row, row.args, "", parked_attempt, row.run_at)

    return event


async def resolve_external(
    core: CoreState,
    callback_id: Any,
    action: ResolveAction,
    *,
    payload: Any = None,
    error: str = "",
    run_lease: int | None = None,
) -> JobRow:
    """Resolve a waiting callback: one transaction with the app's follow-up specs.

    A spec that raises rolls the resolution back (the job keeps waiting under the same
    callback id) and raises :class:`FollowUpError` to the caller.
    """
    params = callback_params(callback_id, run_lease)
    if "\x00" in error:  # PostgreSQL text cannot hold it: refuse before any statement
        raise ValidationError("error", "contains a NUL character")
    params.update(
        payload=to_json(payload, "payload"),
        error=error,
        entry=json.dumps(error_entry(error, 0, terminal=True)),
    )
    row = await transition(
        core,
        Transition(
            _RESOLVE[action],
            params,
            _not_waiting(params["callback_id"]),
            event=_resolution_event(action, error),
            then=audited(
                core, f"callback.{action}", _then(core, action), _callback_detail(params, error)
            ),
        ),
    )
    assert row is not None  # missing raised
    return row


def _then(core: CoreState, action: ResolveAction) -> Any:
    """What runs after a resolution and its specs: a retry wakes the queue, a fail moves the
    job to the DLQ where its queue dead-letters (a raising spec rolls the move back too)."""
    if action == "retry":
        return notify_queue
    if action == "fail":
        return then_move(core, DeadReason.CALLBACK_FAILED)
    return None


def _callback_detail(params: dict[str, Any], error: str = "") -> Any:
    """The audit detail of a callback action: the callback id (and a failure's error)."""
    callback_id = str(params["callback_id"])

    def detail(row: JobRow) -> dict[str, Any]:
        return {"callback_id": callback_id, **({"error": error[:500]} if error else {})}

    return detail


async def _wake(cur: Cursor, row: JobRow, event: AnyEvent | None) -> None:
    if row.state == JobState.AVAILABLE:
        await notify_queue(cur, row)
    else:
        await cur.execute(
            SQL["notify_callback_waiter"], {"channel": CALLBACK_CHANNEL, "id": str(row.id)}
        )


async def resume_external(core: CoreState, callback_id: Any, payload: Any = None) -> JobRow:
    """Hand ``payload`` to the job: a handler waiting inside ``wait_for_callback`` continues;
    a job parked by ``WaitForCallback`` becomes claimable again. No event of its own."""
    params = callback_params(callback_id, None)
    params["payload"] = to_json(payload, "payload")
    row = await transition(
        core,
        Transition(
            "resume",
            params,
            _not_waiting(params["callback_id"]),
            then=audited(core, "callback.resume", _wake, _callback_detail(params)),
        ),
    )
    assert row is not None  # missing raised
    return row


async def waiting_job(core: CoreState, callback_id: Any, run_lease: int | None = None) -> JobRow:
    """The job waiting on ``callback_id`` (unchanged), or CallbackNotFound."""
    params = callback_params(callback_id, run_lease)
    row = await transition(
        core,
        Transition(
            "waiting_job", params, _not_waiting(params["callback_id"]), atomic=False, settles=False
        ),
    )
    assert row is not None  # missing raised
    return row


async def heartbeat_callback(core: CoreState, callback_id: Any, timeout: float) -> JobRow:
    """Extend a waiting callback's timeout to now + ``timeout`` seconds."""
    params = callback_params(callback_id, None)
    params["timeout"] = timeout
    row = await transition(
        core,
        Transition(
            "heartbeat_callback",
            params,
            _not_waiting(params["callback_id"]),
            atomic=False,
            settles=False,
        ),
    )
    assert row is not None  # missing raised
    return row
