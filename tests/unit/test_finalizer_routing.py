"""The finalizer's two flush loops never share a batch counter shard (architecture §16).

A batch member's result goes to the loop of its shard (runs of 16 ids, ``awa.batch_shard``),
so two loops never update one ``awa.batch_shards`` row at once; other results go to the
shorter queue.
"""

from __future__ import annotations

from typing import Any

from awa_cli.attempts import AttemptResult
from awa_cli.worker.finalizer import Finalizer
from tests.unit.test_attempts import row


def result(job_id: int, **metadata: Any) -> AttemptResult:
    return AttemptResult(row(id=job_id, metadata=metadata), "complete")


def test_batch_members_of_one_shard_share_a_loop_and_others_balance() -> None:
    finalizer = Finalizer(core=None, on_done=lambda *_: None)  # type: ignore[arg-type]
    for job_id in range(64):  # members: ids 0-15 -> loop 0, 16-31 -> loop 1, ...
        finalizer.submit(result(job_id, **{"awa.batch_id": 7}))
    first, second = (q.qsize() for q in finalizer._queues)
    assert (first, second) == (32, 32)
    assert [taken(finalizer, 0) for _ in range(16)] == list(range(16))
    assert taken(finalizer, 1) == 16
    for job_id in range(100, 110):  # not members: to the shorter queue (16 against 31)
        finalizer.submit(result(job_id))
    assert [q.qsize() for q in finalizer._queues] == [26, 31]
    assert finalizer.in_flight == 74


def taken(finalizer: Finalizer, loop: int) -> int:
    item = finalizer._queues[loop].get_nowait()
    assert item is not None
    return item.job.id
