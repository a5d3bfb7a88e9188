"""`awa cron list|pause|resume|trigger|delete` against the real database: --json and tables,
exit 4 for an unknown name, the audit log, and trigger leaving the schedule unchanged."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from tests.helpers import AwaRunner, audit_rows

import awa_cli as awa
from awa_cli.audit import cli_actor
from awa_cli.periodic import next_fire_after
from tests.integration.db.test_periodic_sql import HOURLY, NIGHTLY  # the SQL tests' schedules

pytestmark = pytest.mark.integration


def store(dsn: str) -> None:
    async def main() -> None:
        async with awa.AsyncClient(dsn) as client:
            await client.core.register_schedules([NIGHTLY, HOURLY])
            await client.core.fire_periodic()  # computes the first fire times

    asyncio.run(main())


def cron(dsn: str, *args: str) -> Any:
    return AwaRunner().awa("--database-url", dsn, "cron", *args)


def schedule_row(dsn: str, name: str) -> tuple[Any, ...] | None:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT paused, updated_at, active_since, last_fire_at, next_fire_at, last_job_id"
            " FROM awa.periodic_jobs WHERE name = %s",
            (name,),
        ).fetchone()


def test_list_json_and_table(dsn: str) -> None:
    store(dsn)
    result = cron(dsn, "list", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [job["name"] for job in listed] == ["hourly", "nightly"]
    nightly = listed[1]
    assert (nightly["cron"], nightly["timezone"], nightly["paused"]) == (
        "0 3 * * *",
        "Europe/Berlin",
        False,
    )
    assert nightly["next_fire_at"].endswith("Z") and nightly["last_fire_at"] is None
    assert nightly["last_job_id"] is None and nightly["last_job_state"] is None
    assert nightly["kind"] == "report" and nightly["options"]["queue"] == "reports"
    table = cron(dsn, "list")
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split("\t") == [
        "name",
        "cron",
        "timezone",
        "paused",
        "last_fire_at",
        "next_fire_at",
        "last_job_id",
        "last_job_state",
    ]
    assert lines[2].split("\t")[:4] == ["nightly", "0 3 * * *", "Europe/Berlin", "no"]


def test_pause_resume_and_the_audit_log(dsn: str) -> None:
    store(dsn)
    paused = cron(dsn, "pause", "nightly", "--json")
    assert paused.exit_code == 0, paused.output
    shown = json.loads(paused.stdout)
    assert shown["paused"] is True and shown["next_fire_at"] is None
    row = schedule_row(dsn, "nightly")
    assert row is not None and row[0] is True
    table = cron(dsn, "pause", "nightly")  # again: a no-op that still answers
    assert table.exit_code == 0 and "periodic job nightly paused" in table.stderr
    resumed = cron(dsn, "resume", "nightly", "--json")
    assert resumed.exit_code == 0 and json.loads(resumed.stdout)["paused"] is False
    again = schedule_row(dsn, "nightly")
    assert again is not None and again[0] is False and again[2] > row[2]  # active_since moved
    actor = cli_actor()
    assert [entry[:4] for entry in audit_rows(dsn)] == [
        (actor, "cron.pause", "periodic:nightly", "ok"),
        (actor, "cron.pause", "periodic:nightly", "ok"),
        (actor, "cron.resume", "periodic:nightly", "ok"),
    ]


def test_trigger_enqueues_now_and_leaves_the_schedule_unchanged(dsn: str) -> None:
    store(dsn)
    before = schedule_row(dsn, "nightly")
    started = datetime.now(UTC)
    result = cron(dsn, "trigger", "nightly", "--json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert (job["kind"], job["queue"], job["priority"], job["state"]) == (
        "report",
        "reports",
        1,  # the schedule's (the default is 2)
        "available",
    )
    assert job["args"] == {"day": "yesterday"}
    assert job["metadata"]["awa.periodic"] == "nightly"
    fire_at = datetime.fromisoformat(job["metadata"]["awa.fire_at"].replace("Z", "+00:00"))
    assert started - timedelta(seconds=1) <= fire_at <= datetime.now(UTC)
    assert schedule_row(dsn, "nightly") == before  # fire state, next fire, last job: as before
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.periodic_fires").fetchone() == (0,)
    [entry] = audit_rows(dsn)
    assert entry[1:4] == ("cron.trigger", "periodic:nightly", "ok")
    assert entry[4] == {"job_id": job["id"]}
    shown = cron(dsn, "trigger", "hourly")
    assert shown.exit_code == 0 and "enqueued for periodic job hourly" in shown.stderr
    assert shown.stdout.splitlines()[0].split("\t")[:3] == ["id", "kind", "queue"]


def test_delete_then_it_is_gone(dsn: str) -> None:
    store(dsn)
    result = cron(dsn, "delete", "hourly", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "hourly"
    assert schedule_row(dsn, "hourly") is None
    listed = json.loads(cron(dsn, "list", "--json").stdout)
    assert [job["name"] for job in listed] == ["nightly"]
    assert [entry[1:3] for entry in audit_rows(dsn)] == [("cron.delete", "periodic:hourly")]


@pytest.mark.parametrize("verb", ["pause", "resume", "trigger", "delete"])
def test_an_unknown_name_exits_4_and_changes_nothing(dsn: str, verb: str) -> None:
    store(dsn)
    result = cron(dsn, verb, "nope")
    assert result.exit_code == 4, result.output
    assert result.stderr.strip() == "Error: periodic job 'nope' not found"
    assert audit_rows(dsn) == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM awa.periodic_jobs").fetchone() == (2,)


def test_the_client_raises_periodic_not_found(dsn: str) -> None:
    with awa.Client(dsn) as client:
        assert client.list_periodic() == []
        for call in (
            client.pause_periodic,
            client.resume_periodic,
            client.trigger_periodic,
            client.delete_periodic,
        ):
            with pytest.raises(awa.PeriodicNotFound) as caught:
                call("nope")
            assert isinstance(caught.value, LookupError)


def test_resume_shows_the_real_next_fire_time_not_now(dsn: str) -> None:
    """D16: `awa cron resume` printed next_fire_at = the moment of the resume (the marker
    that makes the leader pick the schedule up), not the schedule's next fire time."""
    store(dsn)
    assert cron(dsn, "pause", "nightly").exit_code == 0
    resumed = cron(dsn, "resume", "nightly", "--json")
    assert resumed.exit_code == 0, resumed.output
    shown = datetime.fromisoformat(
        json.loads(resumed.stdout)["next_fire_at"].replace("Z", "+00:00")
    )
    row = schedule_row(dsn, "nightly")
    assert row is not None and row[4] == row[2]  # stored: due at once, for the leader
    assert shown == next_fire_after(NIGHTLY, row[2]) and shown > row[2]
    assert shown.astimezone(NIGHTLY.zone).hour == 3  # 03:00 Europe/Berlin
    listed = {j["name"]: j for j in json.loads(cron(dsn, "list", "--json").stdout)}
    assert listed["nightly"]["next_fire_at"] == json.loads(resumed.stdout)["next_fire_at"]
