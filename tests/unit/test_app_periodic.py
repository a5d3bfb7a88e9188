"""App.periodic: schedules validated at registration (architecture §9). No database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

import awa_cli as awa
from awa_cli.periodic import Schedule, ScheduleError


@dataclass
class Report:
    day: str


@dataclass
class Unregistered:
    x: int


def make_app() -> awa.App:
    app = awa.App()

    @app.task(Report, queue="reports")
    def report(job: awa.Job) -> None: ...

    @app.task(kind="untyped")
    def untyped(job: awa.Job) -> None: ...

    return app


def test_periodic_registers_a_validated_schedule() -> None:
    app = make_app()
    schedule = app.periodic(
        "nightly_report",
        "0 3 * * *",
        Report(day="yesterday"),
        timezone="Europe/Berlin",
        catch_up="all",
        priority=1,
        tags=["nightly"],
        deadline_duration=timedelta(minutes=10),
    )
    assert app.schedules["nightly_report"] is schedule
    assert schedule == Schedule(
        "nightly_report",
        "0 3 * * *",
        "report",
        {"day": "yesterday"},
        "Europe/Berlin",
        "all",
        {"queue": "reports", "priority": 1, "tags": ["nightly"], "deadline_duration": 600.0},
    )
    opts = schedule.insert_opts(datetime(2026, 5, 5, 1, tzinfo=UTC))
    assert opts.queue == "reports"  # the kind's registered queue, resolved at registration


def test_dict_args_with_kind_and_queue_override() -> None:
    app = make_app()
    schedule = app.periodic("u", "@hourly", {"a": 1}, kind="untyped", queue="other")
    assert (schedule.kind, schedule.args, schedule.options) == (
        "untyped",
        {"a": 1},
        {"queue": "other"},
    )
    assert schedule.timezone == "UTC" and schedule.catch_up == "latest"


def test_schedules_is_read_only_and_ordered() -> None:
    app = make_app()
    app.periodic("b", "@daily", Report("x"))
    app.periodic("a", "@daily", Report("y"))
    assert list(app.schedules) == ["b", "a"]
    with pytest.raises(TypeError):
        app.schedules["c"] = app.schedules["a"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("call", "attribute", "fragment"),
    [
        (lambda app: app.periodic("n", "0 3 * *", Report("x")), "cron", "expected 5 fields"),
        (
            lambda app: app.periodic("n", "@daily", Report("x"), timezone="Nowhere/City"),
            "timezone",
            "unknown time zone",
        ),
        (
            lambda app: app.periodic("n", "@daily", Report("x"), catch_up="every"),
            "catch_up",
            "expected one of",
        ),
        (lambda app: app.periodic("bad name", "@daily", Report("x")), "name", "characters"),
        (
            lambda app: app.periodic("n", "@daily", Unregistered(1)),
            "kind",
            "'unregistered' is not registered",
        ),
        (
            lambda app: app.periodic("n", "@daily", {"a": 1}, kind="nope"),
            "kind",
            "'nope' is not registered",
        ),
        (lambda app: app.periodic("n", "@daily", {"a": 1}), "kind", "required when args is a dict"),
        (
            lambda app: app.periodic("n", "@daily", {"nope": 1}, kind="report"),
            "args",
            "do not fit Report",
        ),
        (
            lambda app: app.periodic("n", "@daily", Report("x"), priority=9),
            "priority",
            "between 1 and 4",
        ),
        (lambda app: app.periodic("n", "@daily", Report("x"), tags="a"), "tags", "list of strings"),
        (
            lambda app: app.periodic("n", "@daily", Report("x"), queue=""),
            "queue",
            "must not be empty",
        ),
        (
            lambda app: app.periodic("n", "@daily", Report("x"), colour="red"),
            "colour",
            "unknown insert option",
        ),
        (
            lambda app: app.periodic("n", "@daily", Report("x"), run_at=datetime.now(UTC)),
            "run_at",
            "fire time",
        ),
        (
            lambda app: app.periodic("n", "@daily", Report("x"), unique_opts={"by_x": 1}),
            "unique_opts",
            "unknown option",
        ),
    ],
)
def test_validation_at_registration_names_the_schedule(
    call: object, attribute: str, fragment: str
) -> None:
    app = make_app()
    with pytest.raises(awa.ValidationError) as info:
        call(app)  # type: ignore[operator]
    error = info.value
    assert isinstance(error, ScheduleError)
    assert error.attribute == attribute
    assert fragment in str(error)
    assert "\n" not in str(error)
    if attribute != "name":
        assert str(error).startswith(f"periodic 'n' {attribute}: ")
    assert not app.schedules  # nothing registered


def test_duplicate_name_is_refused() -> None:
    app = make_app()
    app.periodic("n", "@daily", Report("x"))
    with pytest.raises(ScheduleError, match="registered twice"):
        app.periodic("n", "@daily", Report("x"))
    assert app.schedules["n"].args == {"day": "x"}


def test_merge_carries_schedules_and_refuses_a_clash() -> None:
    one = make_app()
    one.periodic("n", "@daily", Report("x"))
    merged = awa.App().merge(one)
    assert merged.schedules["n"] == one.schedules["n"]
    merged.merge(one)  # the same app again: the same schedule, harmless
    assert len(merged.schedules) == 1
    other = awa.App()
    other.task(kind="other")(lambda job: None)
    other.periodic("n", "@hourly", {}, kind="other")
    with pytest.raises(ScheduleError, match="registered twice"):
        merged.merge(other)
