"""Property test of a batch's counting (architecture §16): random members moved by random
statements (several members per statement, any terminal state, retries back to available),
members added while open, the seal at a random point. After every statement the counters
match the members, and each callback has been enqueued exactly when, and only once, its
condition held after the seal."""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_cli.batches import Batch, prepare_members
from awa_cli.db import batches as gateway

pytestmark = [pytest.mark.integration]

TERMINAL = ("completed", "failed", "cancelled")
MOVES = st.sampled_from([*TERMINAL, "available", "running"])

steps = st.lists(
    st.one_of(
        st.tuples(st.just("move"), st.lists(st.integers(0, 30), max_size=5), MOVES),
        st.tuples(st.just("add"), st.integers(1, 4), st.just("")),
        st.tuples(st.just("seal"), st.just(0), st.just("")),
        st.tuples(st.just("remove"), st.lists(st.integers(0, 30), max_size=3), st.just("")),
    ),
    max_size=25,
)


@dataclass
class Model:
    members: list[int] = field(default_factory=list)
    state: dict[int, str] = field(default_factory=dict)
    removed: set[int] = field(default_factory=set)  # dead-lettered, or pruned once terminal
    sealed: bool = False
    failed_once: bool = False
    fired: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("s", "c", "d"), 0))

    def settle(self) -> None:
        """What must have fired by now (each at most once)."""
        if not self.sealed:
            return
        states = [self.state[m] for m in self.members]
        if self.failed_once:
            self.fired["d"] = 1
        if all(s in TERMINAL for s in states):
            self.fired["c"] = 1
            if all(s == "completed" for s in states):
                self.fired["s"] = 1


def _callbacks(conn: psycopg.Connection, batch_id: int) -> dict[str, int]:
    rows = conn.execute(
        "SELECT args ->> 'label', count(*) FROM awa.jobs WHERE batch_id IS NULL"
        " AND metadata ->> 'awa.batch_id' = %s GROUP BY 1",
        (str(batch_id),),
    ).fetchall()
    found = dict.fromkeys(("s", "c", "d"), 0)
    found.update({label: int(n) for label, n in rows})
    return found


def _check(conn: psycopg.Connection, batch_id: int, model: Model) -> None:
    counts = gateway.get_sync(conn, batch_id).counts
    states = [model.state[m] for m in model.members]
    assert counts.pending == sum(s not in TERMINAL for s in states)
    for name in TERMINAL:
        assert getattr(counts, name) == states.count(name), name
    model.settle()
    assert _callbacks(conn, batch_id) == model.fired


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=steps, initial=st.integers(0, 6), shards=st.sampled_from([1, 2, 16]))
def test_counts_and_callbacks_follow_the_members(
    dsn: str, steps: list[tuple[str, object, str]], initial: int, shards: int
) -> None:
    batch = Batch(on_success={"label": "s"}, on_complete={"label": "c"}, on_death={"label": "d"})
    callbacks = {
        name: prepare_members(None, [job_args], {"kind": "cb"})[0]
        for name, job_args in batch.callbacks().items()
    }
    model = Model()
    with psycopg.connect(dsn, autocommit=True) as conn:
        batch_id = gateway.create_sync(conn, callbacks, {}, shards)

        def add(n: int) -> None:
            jobs = prepare_members(None, [{"i": i} for i in range(n)], {"kind": "member"})
            ids = gateway.insert_members_sync(conn, batch_id, jobs)
            for job_id in ids:
                assert job_id is not None
                model.members.append(job_id)
                model.state[job_id] = "available"

        add(initial)
        _check(conn, batch_id, model)
        for kind, arg, target in steps:
            if kind == "seal":
                gateway.seal_sync(conn, batch_id)
                model.sealed = True
            elif kind == "add":
                if model.sealed:
                    continue
                add(int(arg))  # type: ignore[call-overload]
            else:
                live = [m for m in model.members if m not in model.removed]
                chosen = sorted({live[i % len(live)] for i in arg}) if live else []  # type: ignore[attr-defined]
                if not chosen:
                    continue
                if kind == "remove":  # a DLQ move straight from running, or retention
                    conn.execute("DELETE FROM awa.jobs WHERE id = ANY (%s)", (chosen,))
                    for member in chosen:
                        if model.state[member] not in TERMINAL:
                            model.state[member] = "failed"
                            model.failed_once = True
                        model.removed.add(member)
                else:  # one statement moves them all, as a batched finalise does
                    conn.execute(
                        "UPDATE awa.jobs SET state = %s::awa.job_state WHERE id = ANY (%s)",
                        (target, chosen),
                    )
                    for member in chosen:
                        if target == "failed" and model.state[member] != "failed":
                            model.failed_once = True
                        model.state[member] = target
            _check(conn, batch_id, model)


def test_one_statement_moving_members_of_several_batches_counts_each(dsn: str) -> None:
    """A finalising statement may hold members of many batches: each batch's counter rows
    and callbacks follow its own members, and two such statements racing on the same
    batches from opposite ends both commit (the counter rows, then the batch rows, each in
    id order: no deadlock)."""
    import threading

    batch = Batch(on_success={"label": "s"}, on_complete={"label": "c"}, on_death={"label": "d"})
    callbacks = {
        name: prepare_members(None, [job_args], {"kind": "cb"})[0]
        for name, job_args in batch.callbacks().items()
    }
    members: dict[int, list[int]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3):
            batch_id = gateway.create_sync(conn, callbacks, {}, 16)
            jobs = prepare_members(None, [{"i": i} for i in range(80)], {"kind": "member"})
            members[batch_id] = [int(i) for i in gateway.insert_members_sync(conn, batch_id, jobs)]
            gateway.seal_sync(conn, batch_id)
    everyone = sorted(m for ids in members.values() for m in ids)
    halves = [everyone[::2], everyone[1::2][::-1]]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def finish(ids: list[int]) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                barrier.wait()
                for chunk in range(0, len(ids), 30):  # statements of members of all batches
                    conn.execute(
                        "UPDATE awa.jobs SET state = 'completed' WHERE id = ANY (%s)",
                        (ids[chunk : chunk + 30],),
                    )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(half,)) for half in halves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    with psycopg.connect(dsn, autocommit=True) as conn:
        for batch_id, ids in members.items():
            counts = gateway.get_sync(conn, batch_id).counts
            assert (counts.pending, counts.completed) == (0, len(ids))
            assert _callbacks(conn, batch_id) == {"s": 1, "c": 1, "d": 0}
