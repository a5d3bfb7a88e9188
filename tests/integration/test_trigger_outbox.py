"""The trigger outbox of docs/enqueue-from-anywhere.md, run as the page writes it: an
``orders`` table whose AFTER INSERT trigger calls ``awa.enqueue``. A rolled-back order leaves
no job; a committed one leaves a job that a real `awa worker` process runs, once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.apps.polyglot import SIDE_TABLE
from tests.helpers import ROOT
from tests.integration.test_enqueue_clients import Worker, wait_for_runs

pytestmark = [pytest.mark.integration]


def outbox_sql() -> str:
    """The first ```sql block of the page's "A trigger outbox" section."""
    page = (ROOT / "docs" / "enqueue-from-anywhere.md").read_text(encoding="utf-8")
    section = page.split("## A trigger outbox", 1)[1]
    return section.split("```sql", 1)[1].split("```", 1)[0]


@pytest.fixture
def orders(dsn: str) -> Iterator[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(outbox_sql())  # type: ignore[arg-type]
        conn.execute(SIDE_TABLE)  # type: ignore[arg-type]
    yield dsn


def test_a_rolled_back_order_leaves_no_job(orders: str) -> None:
    with psycopg.connect(orders) as conn:
        conn.execute(
            "INSERT INTO orders (customer, email, total) VALUES ('ada', 'ada@example.com', 9.5)"
        )
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (1,)  # inside: there
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)


def test_a_committed_order_leaves_a_job_a_worker_runs_once(orders: str, tmp_path: Path) -> None:
    with psycopg.connect(orders) as conn:
        order_id = conn.execute(
            "INSERT INTO orders (customer, email, total) "
            "VALUES ('zoë', 'zoë@example.org', 12.25) RETURNING id"
        ).fetchone()
        conn.commit()
        assert order_id is not None
        jobs = conn.execute("SELECT id, kind, queue, state::text FROM awa.jobs").fetchall()
    assert [(kind, queue, state) for _, kind, queue, state in jobs] == [
        ("send_receipt", "email", "available")
    ]
    worker = Worker(tmp_path, orders)
    try:
        runs = wait_for_runs(orders, [jobs[0][0]], worker)
    finally:
        worker.stop()
    assert runs == {
        jobs[0][0]: [{"order_id": order_id[0], "email": "zoë@example.org", "total": "12.25"}]
    }


def test_one_receipt_per_order_even_when_the_trigger_fires_again(orders: str) -> None:
    """The block's unique_key: a second enqueue for the same order is skipped, not an error."""
    with psycopg.connect(orders) as conn:
        conn.execute(
            "INSERT INTO orders (customer, email, total) VALUES ('ada', 'ada@example.com', 1)"
        )
        conn.commit()
        first = conn.execute("SELECT id FROM orders").fetchone()
        assert first is not None
        again = conn.execute(
            "SELECT awa.enqueue(kind => 'send_receipt', queue => 'email', unique_key => %s)",
            (f"order-{first[0]}",),
        ).fetchone()
        assert again == (None,)
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (1,)


def test_bad_args_in_the_trigger_fail_the_order(orders: str) -> None:
    with psycopg.connect(orders) as conn:
        conn.execute(
            "CREATE OR REPLACE FUNCTION orders_enqueue_receipt() RETURNS trigger LANGUAGE plpgsql "
            "AS $$ BEGIN PERFORM awa.enqueue(kind => 'send_receipt', priority => 0); "
            "RETURN NULL; END $$"
        )
        conn.commit()
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="priority"):
            conn.execute("INSERT INTO orders (customer, email, total) VALUES ('ada', 'a@b', 1)")
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (0,)
