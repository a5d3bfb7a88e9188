"""COPY text encoding for ``insert_many``'s bulk path (statements ``copy_jobs`` /
``copy_jobs_run_at`` in ``db/sql/inserts.sql``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, UTC
from typing import Any, LiteralString

from awa_cli.db.statements import SQL
from awa_cli.jobs import PreparedJob

_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_text(value: Any) -> str:
    """One value in COPY's text format (NULL is ``\\N``; arrays as literals)."""
    if value is None:
        return "\\N"
    if isinstance(value, list):
        items = ",".join(
            '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"' for v in value
        )
        value = "{" + items + "}"
    return str(value).translate(_COPY_ESCAPES)


def _copy_tail(first: PreparedJob) -> tuple[LiteralString, str]:
    """The statement, and the text of the columns after (kind, queue, args) shared by every
    row of a bulk insert (the options, and so these values, are the same for all of them):
    state, priority, max_attempts, deadline_duration, metadata, tags, ordering_key, concurrency_key[, run_at]."""
    shared: list[Any] = [
        first.priority,
        first.max_attempts,
        first.deadline_duration,
        first.metadata_json,
        first.tags,
        first.ordering_key,
        first.concurrency_key,
    ]
    state = "available"
    statement = SQL["copy_jobs"]
    if first.run_at is not None:
        statement = SQL["copy_jobs_run_at"]
        shared.append(first.run_at.isoformat())
        state = "scheduled" if first.run_at > datetime.now(UTC) else "available"
    return statement, "\t".join([state, *(copy_text(v) for v in shared)]) + "\n"


def copy_encoder(first: PreparedJob) -> tuple[LiteralString, Callable[[list[PreparedJob]], bytes]]:
    """The COPY statement for a bulk insert shaped like ``first`` (every row shares its
    options), and a function encoding a chunk of its rows as that COPY's text."""
    statement, tail = _copy_tail(first)
    names: dict[tuple[str, str], str] = {}

    def encode(chunk: list[PreparedJob]) -> bytes:
        lines = []
        for job in chunk:
            head = names.get((job.kind, job.queue))
            if head is None:
                head = names[(job.kind, job.queue)] = (
                    f"{copy_text(job.kind)}\t{copy_text(job.queue)}\t"
                )
            lines.append(head + job.args_json.translate(_COPY_ESCAPES) + "\t" + tail)
        return "".join(lines).encode()

    return statement, encode
