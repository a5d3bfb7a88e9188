"""The runtime's protocol with a running job, without a database: ``Job.finish()``, the
runtime-owned ``JobControl`` and the one fencing path ``RunningJobs.fence``."""

from __future__ import annotations

import pytest

import awa_cli as awa
from awa_cli.attempts import AttemptRecord
from awa_cli.worker.job import Job
from awa_cli.worker.services import JobControl, RunningJobs
from tests.unit.test_attempts import row


def job(job_id: int = 7, run_lease: int = 3, queue: str = "default") -> Job:
    return Job(row(id=job_id, run_lease=run_lease, queue=queue), {"n": 1})


def test_finish_seals_staging_and_returns_what_the_attempt_recorded() -> None:
    j = job()
    j.set_output({"done": True})
    j.enqueue_on_completion({"x": 1}, kind="next")
    record = j.finish()
    assert isinstance(record, AttemptRecord)
    assert (record.output, record.has_output, record.staging_failure) == (
        {"done": True},
        True,
        None,
    )
    assert [p.kind for p in record.staged] == ["next"]
    with pytest.raises(awa.StagingError, match="sealed"):
        j.enqueue_on_completion({"x": 2}, kind="next")
    assert j.finish() == record  # idempotent; the sealed stage after it is not recorded


def test_a_failed_stage_is_recorded_even_when_swallowed() -> None:
    j = job()
    with pytest.raises(awa.StagingError):
        j.enqueue_on_completion({"x": 1}, kind="next", priority=9)
    record = j.finish()
    assert record.staged == () and isinstance(record.staging_failure, awa.StagingError)


def test_fence_cancels_only_the_attempt_it_names() -> None:
    running = RunningJobs()
    a, b = job(1, run_lease=3), job(2, run_lease=5)
    running.add(a)
    running.add(b)
    assert running.fence(1, 2) is False and not a.is_cancelled()  # an older attempt: not ours
    assert running.fence(9, 1) is False  # not running here
    assert running.fence(1, 3) is True and a.is_cancelled() and not b.is_cancelled()
    running.fence_rows([row(id=2, run_lease=5)])
    assert b.is_cancelled()


def test_the_heartbeat_skips_handlers_waiting_for_a_callback_and_counts_by_queue() -> None:
    running = RunningJobs()
    a, b, c = job(1, queue="q1"), job(2, queue="q1"), job(3, queue="q2")
    for j in (a, b, c):
        running.add(j)
    b.control.waiting = True
    assert [j.id for j in running.beating()] == [1, 3]
    assert running.by_queue() == {"q1": 2, "q2": 1}
    running.discard(1)
    running.discard(1)  # twice is fine
    assert sorted(running) == [2, 3] and len(running) == 2 and 2 in running


def test_a_job_control_belongs_to_the_runtime() -> None:
    control = JobControl()
    j = Job(row(), {}, control=control)
    assert j.control is control and not j.is_cancelled()
    control.cancel()
    assert j.is_cancelled()
