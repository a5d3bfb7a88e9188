"""Follow-ups of committed transitions: the registered specs' jobs, inserted in the
transition's transaction (a held unique key skips the insert, not the commit)."""

from __future__ import annotations

import dataclasses
import functools
import json

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli.metadata import following
from awa_cli.app import prepare_job
from awa_cli.attempts import not_an_object
from awa_cli.db.params import insert_each_params
from awa_cli.db.statements import SQL
from awa_cli.events import OUTCOME_OF_EVENT, context_of
from awa_cli.jobs import PreparedJob, rebuild_args
from awa_cli.results import FollowUpError

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.attempts import Finalized
    from awa_cli.events import AnyEvent

log = logging.getLogger("awa.outcomes")

_SKIPPED = object()


def spec_follow_ups(app: App | None, event: AnyEvent) -> list[PreparedJob]:
    """The follow-ups the app's specs ask for on this event (runs user code).

    A typed spec whose trigger type the committed args do not rebuild as (including args that
    are valid JSON but not an object) skips this row with a warning (architecture §5.11), so the
    transition still commits; a spec that raises is a :class:`FollowUpError`.
    """
    if app is None:
        return []
    specs = app.specs_for(event.job.kind, OUTCOME_OF_EVENT[type(event)])
    if not specs:
        return []
    row = event.job.without_output()
    # Contributors (e.g. the OpenTelemetry plugin) see the trigger's metadata while the
    # follow-ups are prepared, so a follow-up joins its trigger's trace.
    prepare = following(event.job.metadata, functools.partial(prepare_job, app))
    follow_ups = []
    for spec in specs:
        args = _args_for(spec.trigger_type, event, spec.name)
        if args is _SKIPPED:
            continue
        try:
            request = spec.build(args, row, context_of(event))
        except Exception as exc:
            raise FollowUpError(f"follow-up spec {spec.name} raised: {exc}") from exc
        if request is not None:
            follow_ups.append(prepare(request.args, request.opts))
    return follow_ups


def _args_for(args_type: type | None, event: AnyEvent, spec_name: str) -> Any:
    """Args as the spec's trigger type, from the committed row (``_SKIPPED``: they do not
    rebuild as that type)."""
    data = event.job.args
    if args_type is None:
        return dict(data) if isinstance(data, dict) else data
    if isinstance(event.args, args_type):
        return event.args
    try:
        if not isinstance(data, dict):
            raise TypeError(not_an_object(data))
        return rebuild_args(args_type, data)
    except Exception as exc:
        log.warning(
            "follow-up spec %s skipped: args of job %s do not rebuild as %s: %s",
            spec_name,
            event.job.id,
            getattr(args_type, "__name__", args_type),
            exc,
            extra={"action": "follow_up_skipped", "job_id": event.job.id, "spec": spec_name},
        )
        return _SKIPPED


TRIGGER_KEY = "awa.trigger_id"
"""Metadata key naming the job whose outcome enqueued a follow-up (architecture §11)."""


def with_trigger(job: PreparedJob, trigger_id: int) -> PreparedJob:
    """``job`` with ``awa.trigger_id`` = ``trigger_id`` in its metadata (the core's, always)."""
    if not trigger_id:
        return job
    metadata = json.loads(job.metadata_json)
    metadata[TRIGGER_KEY] = trigger_id
    return dataclasses.replace(job, metadata_json=json.dumps(metadata, separators=(",", ":")))


async def insert_follow_ups(
    conn: psycopg.AsyncConnection[Any], jobs: Sequence[PreparedJob]
) -> list[int | None]:
    """Insert jobs inside the caller's transaction in one statement: each one's new id, in
    order, or None where its unique key is held (by an existing job or an earlier one here)."""
    async with conn.cursor() as cur:
        await cur.execute(SQL["insert_each"], insert_each_params(jobs))
        return [None if r[0] is None else int(r[0]) for r in await cur.fetchall()]


async def insert_counted(
    conn: psycopg.AsyncConnection[Any],
    pending: Sequence[tuple[Finalized, PreparedJob, bool]],
) -> None:
    """Insert follow-ups (item, job, staged?) in one statement and count them on their items."""
    if not pending:
        return
    jobs = [with_trigger(prepared, item.job_id) for item, prepared, _ in pending]
    ids = await insert_follow_ups(conn, jobs)
    for (item, prepared, staged), new_id in zip(pending, ids, strict=True):
        if new_id is None:
            if staged:
                item.staged_duplicates += 1
            else:
                item.duplicates += 1
            continue
        if staged:
            item.staged_inserted += 1
        item.follow_ups.append(new_id)
        item.queues.add(prepared.queue)
