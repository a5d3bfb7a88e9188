"""`awa serve`'s batch pages and admin API (architecture §16): the same reads as `awa batch`."""

from __future__ import annotations

import re

import psycopg
import pytest

import awa_cli as awa
from tests.integration.serve.helpers import AS_VIEWER, serve

pytestmark = [pytest.mark.integration]


def _seed(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        batch = awa.insert_batch(
            conn,
            [{"n": n} for n in range(4)],
            kind="member",
            on_complete=awa.EnqueueRequest({"r": 1}).with_opts(awa.InsertOpts(kind="report")),
        )
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', finalized_at = now()"
            " WHERE id IN (SELECT id FROM awa.jobs WHERE batch_id = %s ORDER BY id LIMIT 3)",
            (batch.id,),
        )
    return batch.id


def test_api_batch_and_list(dsn: str) -> None:
    batch_id = _seed(dsn)
    with serve(dsn) as http:
        one = http.get(f"/api/batches/{batch_id}", headers=AS_VIEWER)
        listed = http.get("/api/batches?state=running", headers=AS_VIEWER)
        missing = http.get("/api/batches/987654", headers=AS_VIEWER)
        bad = http.get("/api/batches?state=nope", headers=AS_VIEWER)
        anonymous = http.get(f"/api/batches/{batch_id}")
    assert one.status_code == 200
    data = one.json()
    assert data["id"] == batch_id and data["state"] == "running"
    assert data["counts"] == {"pending": 1, "completed": 3, "failed": 0, "cancelled": 0, "total": 4}
    assert data["percent"] == 75.0
    assert data["by_state"] == {"available": 1, "completed": 3}
    assert data["callbacks"] == {"on_complete": {"kind": "report", "job_id": None}}
    assert [b["id"] for b in listed.json()["batches"]] == [batch_id]
    assert missing.status_code == 404 and missing.json() == {"error": "batch 987654 not found"}
    assert bad.status_code == 422 and "state" in bad.json()["error"]
    assert anonymous.status_code == 401


def test_batch_pages_show_the_progress(dsn: str) -> None:
    batch_id = _seed(dsn)
    with serve(dsn) as http:
        listing = http.get("/batches", headers=AS_VIEWER)
        page = http.get(f"/batches/{batch_id}", headers=AS_VIEWER)
        missing = http.get("/batches/987654", headers=AS_VIEWER)
    assert listing.status_code == 200
    assert f'<a href="/batches/{batch_id}">{batch_id}</a>' in listing.text
    assert '<progress max="100" value="75">' in listing.text
    assert page.status_code == 200
    assert re.search(r'<progress max="100" value="75"[^>]*>75%</progress>', page.text)
    assert "3 of 4 done" in page.text
    assert "not enqueued" in page.text  # on_complete waits for the last member
    assert page.text.count('href="/jobs/') == 4  # the members, linked
    assert missing.status_code == 404
