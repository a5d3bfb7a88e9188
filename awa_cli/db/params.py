"""Parameters for the named statements of ``db/sql/``: one function per statement shape."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from awa_cli.attempts import AttemptResult
from awa_cli.jobs import PreparedJob


def insert_params(job: PreparedJob) -> dict[str, Any]:
    """Parameters for ``insert_one``."""
    return {
        "kind": job.kind,
        "queue": job.queue,
        "args": job.args_json,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "run_at": job.run_at,
        "deadline_duration": job.deadline_duration,
        "metadata": job.metadata_json,
        "tags": job.tags,
        "unique_key": job.unique_key,
        "unique_states": job.unique_states,
        "ordering_key": job.ordering_key,
        "concurrency_key": job.concurrency_key,
    }


def insert_many_params(jobs: Sequence[PreparedJob]) -> dict[str, Any]:
    """Parameters for ``insert_many``; the shared options come from the first job."""
    first = jobs[0]
    params = insert_params(first)
    params.update(
        kinds=[j.kind for j in jobs],
        queues=[j.queue for j in jobs],
        args=[j.args_json for j in jobs],
        unique_keys=[j.unique_key for j in jobs],
    )
    return params


def insert_each_params(jobs: Sequence[PreparedJob]) -> dict[str, Any]:
    """Parameters for ``insert_each``: one array element per job for every column."""
    return {
        "kinds": [j.kind for j in jobs],
        "queues": [j.queue for j in jobs],
        "args": [j.args_json for j in jobs],
        "priorities": [j.priority for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "run_ats": [j.run_at for j in jobs],
        "deadline_durations": [j.deadline_duration for j in jobs],
        "metadata": [j.metadata_json for j in jobs],
        "tags": [json.dumps(j.tags) for j in jobs],
        "unique_keys": [j.unique_key for j in jobs],
        "unique_states": [
            None if j.unique_states is None else json.dumps(j.unique_states) for j in jobs
        ],
        "ordering_keys": [j.ordering_key for j in jobs],
        "concurrency_keys": [j.concurrency_key for j in jobs],
    }


def finalize_params(results: Sequence[AttemptResult]) -> dict[str, Any]:
    """Parameters for ``finalize_changed``: one array element per attempt result, in id
    order (the order the heartbeat locks rows in too: outcomes/running.py)."""
    results = sorted(results, key=lambda r: r.job.id)
    return {
        "ids": [r.job.id for r in results],
        "leases": [r.job.run_lease for r in results],
        "states": [str(r.state) for r in results],
        "delays": [r.delay for r in results],
        "errors": [
            json.dumps(r.error_entry) if r.error_entry is not None else None for r in results
        ],
        "outputs": [
            json.dumps(r.output) if r.has_output and r.action == "complete" else None
            for r in results
        ],
        "refunds": [1 if r.action in ("snooze", "interrupt") else 0 for r in results],
        "callback_ids": [r.callback_id for r in results],
        "progress": [r.progress for r in results],
    }
