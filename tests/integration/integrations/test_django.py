"""``awa_cli.integrations.django.insert``: the job commits with ``transaction.atomic()`` and is
gone when the block raises, on Django's own psycopg 3 connection to the real PostgreSQL.

Django is configured in the test itself (no project): ``settings.configure`` with the test
database, then ``django.setup()``. Settings can be configured once per process, so every
database this module uses is an alias added to ``DATABASES`` as the test runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

pytest.importorskip("django")

import django
from django.conf import settings
from django.db import connections, transaction

import awa_cli as awa
from awa_cli.integrations.django import insert

pytestmark = pytest.mark.integration


@dataclass
class SendReceipt:
    order_id: int


def django_database(dsn: str) -> dict[str, object]:
    info = conninfo_to_dict(dsn)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": info["dbname"],
        "USER": info.get("user", ""),
        "HOST": info.get("host", ""),
        "PORT": info.get("port", ""),
    }


def use_database(alias: str, dsn: str) -> None:
    if not settings.configured:
        settings.configure(DATABASES={}, USE_TZ=True, INSTALLED_APPS=[])
        django.setup()
    database = django_database(dsn)
    connections.settings[alias] = connections.configure_settings(
        {"default": database, alias: database}
    )[alias]


def job_ids(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM awa.jobs ORDER BY id").fetchall()]


def test_insert_commits_and_rolls_back_with_atomic(dsn: str) -> None:
    alias = "awa_test"
    use_database(alias, dsn)
    try:
        with transaction.atomic(using=alias):
            with connections[alias].cursor() as cur:
                cur.execute("CREATE TABLE orders (id int)")
                cur.execute("INSERT INTO orders VALUES (1)")
            row = insert(SendReceipt(1), using=alias, queue="email", metadata={"order": 1})
            assert isinstance(row, awa.JobRow)
            assert (row.kind, row.queue, row.metadata) == ("send_receipt", "email", {"order": 1})
            assert job_ids(dsn) == []  # visible only once the atomic block commits
        assert job_ids(dsn) == [row.id]

        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            insert(SendReceipt(2), using=alias)
            raise RuntimeError("the view failed")
        assert job_ids(dsn) == [row.id]

        with transaction.atomic(using=alias):  # a savepoint rolled back, the outer block commits
            kept = insert(SendReceipt(3), using=alias)
            with pytest.raises(RuntimeError), transaction.atomic(using=alias):
                insert(SendReceipt(4), using=alias)
                raise RuntimeError("inner block only")
        assert job_ids(dsn) == [row.id, kept.id]

        with pytest.raises(awa.ValidationError, match="max_attempts"):
            insert(SendReceipt(5), using=alias, max_attempts=0)
        assert job_ids(dsn) == [row.id, kept.id]
    finally:
        connections[alias].close()


def test_default_alias_and_autocommit_outside_atomic(dsn: str) -> None:
    use_database("default", dsn)
    try:
        row = insert(SendReceipt(6))  # no atomic(): Django autocommits, so does the insert
        assert job_ids(dsn) == [row.id]
    finally:
        connections["default"].close()
