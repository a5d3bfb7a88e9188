"""Parameters for the periodic statements of ``db/sql/periodic.sql`` (no I/O here).

The leader's sweep (DESIGN §9) runs, in one transaction: ``periodic_due`` → for each row
:func:`awa_cli.periodic.due_fires` → ``periodic_fire`` with :func:`fire_params` →
``periodic_advance`` with :func:`sweep_advance_params` (:func:`awa_cli.periodic.plan_sweep`
makes the plan of the whole sweep).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from awa_cli.jobs import prepare
from awa_cli.periodic import Schedule, SweepPlan


def upsert_params(
    schedules: Iterable[Schedule], next_fire_ats: Mapping[str, datetime | None] | None = None
) -> dict[str, Any]:
    """``periodic_upsert`` for a worker's schedules. ``next_fire_ats`` by name; a name left
    out (or None) lets the leader compute the first fire time (the row is due at once)."""
    ordered = sorted(schedules, key=lambda s: s.name)
    chosen = next_fire_ats or {}
    return {
        "names": [s.name for s in ordered],
        "definitions": [s.definition_json() for s in ordered],
        "next_fire_ats": [chosen.get(s.name) for s in ordered],
    }


def fire_params(fires: Sequence[tuple[Schedule, datetime]]) -> dict[str, Any]:
    """``periodic_fire`` for (schedule, fire time) pairs: each job validated as an insert is
    (``run_at`` = the fire time, the ``awa.periodic``/``awa.fire_at`` metadata). A unique key
    with ``by_period`` buckets the fire time, not the moment of the sweep."""
    jobs = [
        prepare(schedule.args, schedule.insert_opts(fire_at), now=fire_at.timestamp())
        for schedule, fire_at in fires
    ]
    return {
        "names": [schedule.name for schedule, _ in fires],
        "fire_ats": [fire_at for _, fire_at in fires],
        "kinds": [j.kind for j in jobs],
        "queues": [j.queue for j in jobs],
        "args": [j.args_json for j in jobs],
        "priorities": [j.priority for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "deadline_durations": [j.deadline_duration for j in jobs],
        "metadata": [j.metadata_json for j in jobs],
        "tags": [json.dumps(j.tags) for j in jobs],
        "unique_keys": [j.unique_key for j in jobs],
        "unique_states": [
            None if j.unique_states is None else json.dumps(j.unique_states) for j in jobs
        ],
        "ordering_keys": [j.ordering_key for j in jobs],
    }


def advance_params(
    rows: Sequence[tuple[str, datetime | None, datetime | None, int | None]],
) -> dict[str, Any]:
    """``periodic_advance`` for (name, last_fire_at, next_fire_at, last_job_id) per swept
    schedule; None for last_fire_at / last_job_id keeps the stored value."""
    return {
        "names": [row[0] for row in rows],
        "last_fire_ats": [row[1] for row in rows],
        "next_fire_ats": [row[2] for row in rows],
        "last_job_ids": [row[3] for row in rows],
    }


def sweep_advance_params(plan: SweepPlan, fired: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``periodic_advance`` after ``periodic_fire`` returned ``fired`` for ``plan.fires``: each
    schedule's last job is the one inserted for its last fire time (none: the stored id stays,
    as when that fire was already taken or its unique key held)."""
    job_of = {(r["name"], r["fire_at"]): r["job_id"] for r in fired}
    return advance_params(
        [
            (name, last, following, None if last is None else job_of.get((name, last)))
            for name, (last, following) in plan.advances.items()
        ]
    )
