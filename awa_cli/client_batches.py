"""The batch methods of :class:`~awa_cli.client.AsyncClient` (architecture §16): functions
taking the client first, bound as its methods in ``client.py``; the batch writer
``client.batch(...)`` returns, and ``awa.insert_batch`` on the caller's connection.

A batch is opened (a row of ``awa.batches``), filled (each insert its own short transaction,
so members start running while the batch is still open), and sealed when the ``async with``
block exits normally; the callbacks are enqueued by the database in the transaction that
makes their condition true (``sql/0012_batches.sql``). ``insert_batch`` does all three in one
transaction. Every statement is behind the gateway ``awa_cli/db/batches.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from awa_cli.batches import Batch, BatchRow, prepare_batch, prepare_members
from awa_cli.db import batches as batches_table
from awa_cli.enqueue import positive_limit
from awa_cli.errors import ValidationError
from awa_cli.jobs import JobRow

if TYPE_CHECKING:
    from awa_cli.app import App
    from awa_cli.client import AsyncClient
    from awa_cli.jobs import PreparedJob

log = logging.getLogger("awa.client")

T = TypeVar("T")

BATCH_STATES = ("open", "running", "completed")


def _batch_of(
    on_success: Any,
    on_complete: Any,
    on_death: Any,
    metadata: Mapping[str, Any] | None,
    shards: int,
) -> Batch:
    return Batch(on_success, on_complete, on_death, dict(metadata or {}), shards)


def insert_batch(
    conn: psycopg.Connection[Any],
    jobs: Iterable[Any],
    *,
    on_success: Any = None,
    on_complete: Any = None,
    on_death: Any = None,
    metadata: Mapping[str, Any] | None = None,
    shards: int = 16,
    app: App | None = None,
    **insert_options: Any,
) -> BatchRow:
    """Open, fill and seal a batch inside the caller's transaction (visible on commit, gone
    on rollback): the one-shot form of ``client.batch`` for ``awa.insert(conn, ...)`` users."""
    batch = _batch_of(on_success, on_complete, on_death, metadata, shards)
    callbacks = prepare_batch(app, batch)
    members = prepare_members(app, jobs, insert_options)
    batch_id = batches_table.create_sync(conn, callbacks, dict(batch.metadata), batch.shards)
    batches_table.insert_members_sync(conn, batch_id, members)
    batches_table.seal_sync(conn, batch_id)
    return batches_table.get_sync(conn, batch_id)


async def insert_batch_async(
    conn: psycopg.AsyncConnection[Any],
    jobs: Iterable[Any],
    *,
    on_success: Any = None,
    on_complete: Any = None,
    on_death: Any = None,
    metadata: Mapping[str, Any] | None = None,
    shards: int = 16,
    app: App | None = None,
    **insert_options: Any,
) -> BatchRow:
    """``insert_batch`` for an async psycopg connection, inside its transaction."""
    batch = _batch_of(on_success, on_complete, on_death, metadata, shards)
    callbacks = prepare_batch(app, batch)
    members = prepare_members(app, jobs, insert_options)
    return await batches_table.get(conn, await _fill(conn, batch, callbacks, members))


async def insert_on_pool(
    client: AsyncClient, jobs: Iterable[Any], batch: Batch, insert_options: Mapping[str, Any]
) -> BatchRow:
    """:meth:`AsyncClient.insert_batch`: prepared before the pool is opened, then opened,
    filled and sealed in one transaction on a connection of the client's pool."""
    callbacks = prepare_batch(client.app, batch)
    members = prepare_members(client.app, jobs, insert_options)
    pool = await client.ensure_open()
    async with pool.connection() as conn:
        async with conn.transaction():
            batch_id = await _fill(conn, batch, callbacks, members)
        return await batches_table.get(conn, batch_id)


async def _fill(
    conn: psycopg.AsyncConnection[Any],
    batch: Batch,
    callbacks: dict[str, PreparedJob],
    members: list[PreparedJob],
) -> int:
    """Open the batch, add its members and seal it (the caller holds the transaction)."""
    batch_id = await batches_table.create(conn, callbacks, dict(batch.metadata), batch.shards)
    await batches_table.insert_members(conn, batch_id, members)
    await batches_table.seal(conn, batch_id)
    return batch_id


class BatchWriter:
    """An open batch (``async with client.batch(awa.Batch(...)) as b``): ``await
    b.insert(args, **options)`` adds a member at once (it may run while the batch is open);
    the batch is sealed when the block exits normally. If the block raises, the batch stays
    open (its members still run, no callback fires) until ``client.seal_batch(b.id)``."""

    def __init__(self, client: AsyncClient, batch: Batch) -> None:
        self._client = client
        self._batch = batch
        self._id: int | None = None

    @property
    def id(self) -> int:
        """The batch's id (once the block is entered)."""
        if self._id is None:
            raise ValidationError("batch", "not open: use it as `async with client.batch(...)`")
        return self._id

    async def __aenter__(self) -> BatchWriter:
        callbacks = prepare_batch(self._client.app, self._batch)
        pool = await self._client.ensure_open()
        async with pool.connection() as conn:
            self._id = await batches_table.create(
                conn, callbacks, dict(self._batch.metadata), self._batch.shards
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._id is None:
            return
        if exc_type is None:
            await self._client.seal_batch(self.id)
        else:
            log.warning(
                "batch %s left open: the block raised %s (seal it with seal_batch)",
                self.id,
                exc_type.__name__,
                extra={"action": "batch_left_open", "batch_id": self.id},
            )

    async def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Add one member; ``UniqueConflict`` if its unique key is held, ``BatchSealed``
        once the batch is sealed, ``BatchNotFound`` if it is gone."""
        batch_id = self.id
        [prepared] = prepare_members(self._client.app, [args], insert_options)
        pool = await self._client.ensure_open()
        async with pool.connection() as conn:
            return await batches_table.insert_member(conn, batch_id, prepared)

    async def insert_many(self, jobs: Iterable[Any], **insert_options: Any) -> int:
        """Add many members in one statement; those whose unique key is held are skipped.
        Returns the number added."""
        batch_id = self.id
        prepared = prepare_members(self._client.app, jobs, insert_options)
        pool = await self._client.ensure_open()
        async with pool.connection() as conn, conn.transaction():
            ids = await batches_table.insert_members(conn, batch_id, prepared)
        return sum(1 for job_id in ids if job_id is not None)


class SyncBatchWriter:
    """The synchronous twin of :class:`BatchWriter` (``with client.batch(...) as b``)."""

    def __init__(self, run: Callable[[Coroutine[Any, Any, Any]], Any], writer: BatchWriter) -> None:
        self._run = run
        self._writer = writer

    @property
    def id(self) -> int:
        return self._writer.id

    def __enter__(self) -> SyncBatchWriter:
        self._run(self._writer.__aenter__())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self._writer.__aexit__(exc_type, exc, tb))

    def insert(self, args: Any, **insert_options: Any) -> JobRow:
        """Add one member; ``UniqueConflict`` if its unique key is held."""
        row: JobRow = self._run(self._writer.insert(args, **insert_options))
        return row

    def insert_many(self, jobs: Iterable[Any], **insert_options: Any) -> int:
        """Add many members in one statement; returns the number added."""
        count: int = self._run(self._writer.insert_many(jobs, **insert_options))
        return count


def batch(self: AsyncClient, batch: Batch | None = None) -> BatchWriter:
    """An open batch to fill: ``async with client.batch(awa.Batch(on_success=...)) as b:
    await b.insert(...)``; sealed when the block exits."""
    return BatchWriter(self, batch if batch is not None else Batch())


async def seal_batch(self: AsyncClient, batch_id: int) -> BatchRow:
    """Seal the batch: no member can be added any more; callbacks whose condition already
    holds are enqueued in this transaction. Sealing twice changes nothing."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        async with conn.transaction():
            await batches_table.seal(conn, int(batch_id))
        return await batches_table.get(conn, int(batch_id))


async def get_batch(self: AsyncClient, batch_id: int) -> BatchRow:
    """The batch with its counts (``BatchNotFound`` if there is none)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return await batches_table.get(conn, int(batch_id))


async def list_batches(
    self: AsyncClient, state: str | None = None, limit: int = 100
) -> list[BatchRow]:
    """Batches, newest first; ``state``: open, running, completed (None: any)."""
    if state is not None and state not in BATCH_STATES:
        raise ValidationError("state", f"expected one of {', '.join(BATCH_STATES)}")
    positive_limit(limit)
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return await batches_table.list_(conn, state, limit)


async def batch_members(
    self: AsyncClient, batch_id: int, limit: int = 50
) -> list[tuple[int, str, str]]:
    """A page of the batch's members still in ``awa.jobs``: (id, kind, state)."""
    pool = await self.ensure_open()
    async with pool.connection() as conn:
        return await batches_table.members(conn, int(batch_id), limit)


__all__ = [
    "BatchWriter",
    "SyncBatchWriter",
    "insert_batch",
    "insert_batch_async",
]
