"""The gateway of ``awa.batches`` (architecture §16): open, fill, seal and read batches.

Every surface (the clients, ``awa.insert_batch`` on the caller's connection, ``awa batch``,
the admin API, the dashboard, a handler's ``job.batch``) calls these functions. Counting the
members and enqueueing the callbacks is not here: the triggers of ``sql/0012_batches.sql``
do it inside whatever statement moves a member, so it is atomic with every transition and a
stale attempt (whose guarded UPDATE changes nothing) never counts.

Each function comes in an async form and, for ``awa.insert_batch(conn, ...)`` in a caller's
synchronous transaction, a ``_sync`` twin taking a ``psycopg.Connection``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from awa_cli.batches import BatchRow, member_metadata, spec_of
from awa_cli.db.params import insert_each_params
from awa_cli.db.statements import SQL, head_and_rows
from awa_cli.errors import BatchNotFound, BatchSealed, UniqueConflict
from awa_cli.jobs import JobRow, PreparedJob

__all__ = [
    "create",
    "create_sync",
    "get",
    "get_sync",
    "insert_member",
    "insert_members",
    "insert_members_sync",
    "list_",
    "members",
    "seal",
    "seal_sync",
]


def _create_params(
    callbacks: dict[str, PreparedJob], metadata: dict[str, Any], shards: int
) -> dict[str, Any]:
    params: dict[str, Any] = {
        name: spec_of(callbacks[name]) if name in callbacks else None
        for name in ("on_success", "on_complete", "on_death")
    }
    params.update(shards=shards, metadata=Jsonb(metadata))
    return params


def _members_params(batch_id: int, jobs: Sequence[PreparedJob]) -> dict[str, Any]:
    params = insert_each_params([member_metadata(job, batch_id) for job in jobs])
    params["batch_id"] = batch_id
    return params


SEALED = "AWB01"  # the SQLSTATEs awa.batch_add raises (sql/0012_batches.sql)
MISSING = "AWB02"


def _why_nothing(record: Any, batch_id: int) -> Exception:
    if record is None:
        return BatchNotFound(f"batch {batch_id} not found")
    return BatchSealed(f"batch {batch_id} is sealed: no member can be added")


def _refused(exc: psycopg.Error, batch_id: int) -> Exception | None:
    """The awa error for a refusal of awa.batch_add, or None for any other error."""
    if exc.sqlstate == MISSING:
        return _why_nothing(None, batch_id)
    if exc.sqlstate == SEALED:
        return _why_nothing(True, batch_id)
    return None


async def create(
    conn: psycopg.AsyncConnection[Any],
    callbacks: dict[str, PreparedJob],
    metadata: dict[str, Any],
    shards: int,
) -> int:
    """A new open batch; its id."""
    cur = await conn.execute(SQL["batch_create"], _create_params(callbacks, metadata, shards))
    record = await cur.fetchone()
    assert record is not None
    return int(record[0])


async def insert_members(
    conn: psycopg.AsyncConnection[Any], batch_id: int, jobs: Sequence[PreparedJob]
) -> list[int | None]:
    """Insert ``jobs`` into the open batch; each one's id (None: its unique key was held).
    ``BatchSealed`` / ``BatchNotFound`` when it cannot take members."""
    if not jobs:
        await _check_open(conn, batch_id)
        return []
    try:
        cur = await conn.execute(SQL["batch_insert_members"], _members_params(batch_id, jobs))
    except psycopg.Error as exc:
        refusal = _refused(exc, batch_id)
        if refusal is None:
            raise
        raise refusal from None
    return [row[1] for row in await cur.fetchall()]


async def insert_member(
    conn: psycopg.AsyncConnection[Any], batch_id: int, job: PreparedJob
) -> JobRow:
    """Insert one member into the open batch and return its row (``UniqueConflict`` if its
    unique key is held, ``BatchSealed`` / ``BatchNotFound`` as for :func:`insert_members`)."""
    async with conn.transaction():
        [job_id] = await insert_members(conn, batch_id, [job])
    if job_id is None:
        raise UniqueConflict(job.kind)
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["get_job"], {"id": job_id})
        record = await cur.fetchone()
    assert record is not None
    return JobRow.from_record(record)


async def _check_open(conn: psycopg.AsyncConnection[Any], batch_id: int) -> None:
    sealed = await (await conn.execute(SQL["batch_is_sealed"], {"id": batch_id})).fetchone()
    if sealed is None or sealed[0]:
        raise _why_nothing(sealed, batch_id)


async def seal(conn: psycopg.AsyncConnection[Any], batch_id: int) -> bool:
    """Seal the batch (and enqueue what is already due); False if it was sealed before."""
    cur = await conn.execute(SQL["batch_seal"], {"id": batch_id})
    record = await cur.fetchone()
    if record is None or record[0] is None:
        raise BatchNotFound(f"batch {batch_id} not found")
    return bool(record[0])


async def get(conn: psycopg.AsyncConnection[Any], batch_id: int) -> BatchRow:
    """The batch with its counts and its members' states; ``BatchNotFound`` if none."""
    missing = BatchNotFound(f"batch {batch_id} not found")
    params = {"id": batch_id}
    record, states = await head_and_rows(conn, "batch_get", "batch_member_states", params, missing)
    by_state = {r["state"]: int(r["n"]) for r in states}
    row = BatchRow.from_record(record)
    return BatchRow(**{**row.__dict__, "by_state": by_state})


async def list_(
    conn: psycopg.AsyncConnection[Any], state: str | None = None, limit: int = 100
) -> list[BatchRow]:
    """Batches newest first (``state``: open, running, completed, or None for any)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(SQL["batch_list"], {"state": state, "limit": limit})
        return [BatchRow.from_record(r) for r in await cur.fetchall()]


async def members(
    conn: psycopg.AsyncConnection[Any], batch_id: int, limit: int = 50
) -> list[tuple[int, str, str]]:
    """A page of the batch's members still in ``awa.jobs``: (id, kind, state), newest first."""
    cur = await conn.execute(SQL["batch_members"], {"id": batch_id, "limit": limit})
    return [(int(r[0]), str(r[1]), str(r[2])) for r in await cur.fetchall()]


# -- the synchronous twins, for awa.insert_batch(conn, ...) ---------------------------------
def create_sync(
    conn: psycopg.Connection[Any],
    callbacks: dict[str, PreparedJob],
    metadata: dict[str, Any],
    shards: int,
) -> int:
    record = conn.execute(
        SQL["batch_create"], _create_params(callbacks, metadata, shards)
    ).fetchone()
    assert record is not None
    return int(record[0])


def insert_members_sync(
    conn: psycopg.Connection[Any], batch_id: int, jobs: Sequence[PreparedJob]
) -> list[int | None]:
    if not jobs:
        sealed = conn.execute(SQL["batch_is_sealed"], {"id": batch_id}).fetchone()
        if sealed is None or sealed[0]:
            raise _why_nothing(sealed, batch_id)
        return []
    try:
        cur = conn.execute(SQL["batch_insert_members"], _members_params(batch_id, jobs))
    except psycopg.Error as exc:
        refusal = _refused(exc, batch_id)
        if refusal is None:
            raise
        raise refusal from None
    return [row[1] for row in cur.fetchall()]


def seal_sync(conn: psycopg.Connection[Any], batch_id: int) -> bool:
    record = conn.execute(SQL["batch_seal"], {"id": batch_id}).fetchone()
    if record is None or record[0] is None:
        raise BatchNotFound(f"batch {batch_id} not found")
    return bool(record[0])


def get_sync(conn: psycopg.Connection[Any], batch_id: int) -> BatchRow:
    with conn.cursor(row_factory=dict_row) as cur:
        record = cur.execute(SQL["batch_get"], {"id": batch_id}).fetchone()
        if record is None:
            raise BatchNotFound(f"batch {batch_id} not found")
        return BatchRow.from_record(record)
