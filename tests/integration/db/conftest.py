"""Fixtures of the SQL-level tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

# The grants docs/enqueue-from-anywhere.md gives a producer (and a trigger's role).
PRODUCER_GRANTS = (
    "GRANT USAGE ON SCHEMA awa TO {role}",
    "GRANT INSERT ON awa.jobs TO {role}",
    "GRANT USAGE ON SEQUENCE awa.jobs_id_seq TO {role}",
)


@pytest.fixture
def producer_role(db: psycopg.Connection) -> Iterator[str]:
    """A LOGIN role with exactly the producer's grants (committed on ``db``), for the test to
    ``SET ROLE`` to; dropped afterwards with what it was granted."""
    role = f"awa_producer_{uuid.uuid4().hex[:8]}"
    db.execute(f"CREATE ROLE {role} LOGIN")
    for grant in PRODUCER_GRANTS:
        db.execute(grant.format(role=role))
    db.commit()
    try:
        yield role
    finally:
        db.rollback()
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")
        db.commit()
