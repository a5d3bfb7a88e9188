"""Plugins: the manager factory (built-ins, entry points, ``[app] plugins``; failures reported
by name), the call order and semantics of pluggy implementations, the worker hooks against a
real Worker and PostgreSQL, and ``awa plugins``."""

from __future__ import annotations

import asyncio
import json
import logging
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import pluggy
import pytest

import awa_cli as awa
from awa_cli.dispatch import Dispatcher
from awa_cli.jobs import JobRow
from awa_cli.plugins.manager import ENTRY_POINT_GROUP, build_plugin_host
from tests.helpers import AwaRunner, ROOT, job_row, memory_row, running_worker, wait_until
from tests.integration.plugins import ep_plugin, raising_plugin, sample_plugin, sync_plugin

BUILTIN = "awa_cli.plugins.builtin_logging"
SAMPLE = "tests.integration.plugins.sample_plugin"
SYNC = "tests.integration.plugins.sync_plugin"
RAISING = "tests.integration.plugins.raising_plugin"
BROKEN = "tests.integration.plugins.broken_plugin"
MISSPELT = "tests.integration.plugins.misspelt_plugin"
ALL_HOOKS = ("awa_job_event", "awa_worker_started", "awa_worker_stopping")


@pytest.fixture(autouse=True)
def _clean_plugins() -> Iterator[None]:
    for module in (sample_plugin, sync_plugin):
        module.reset()
    raising_plugin.CALLS.clear()
    ep_plugin.EVENTS.clear()
    yield
    for module in (sample_plugin, sync_plugin):
        module.reset()


@pytest.fixture
def fake_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed distribution ``awa-test-plugins`` with two ``awa_cli`` entry points:
    ``ep_sample`` (loads) and ``ep_broken`` (fails at import)."""
    site = tmp_path / "site"
    info = site / "awa_test_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: awa-test-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nep_sample = tests.integration.plugins.ep_plugin\nep_broken = {BROKEN}\n"
    )
    monkeypatch.syspath_prepend(str(site))
    return site


# -- the factory -------------------------------------------------------------------------
def test_factory_builds_a_fresh_manager_with_the_builtin_first() -> None:
    one, two = build_plugin_host(entry_points=False), build_plugin_host(entry_points=False)
    assert one.pm is not two.pm
    assert [p.to_json() for p in one.loaded] == [
        {"name": BUILTIN, "origin": "builtin", "hooks": ["awa_job_event"]}
    ]
    assert one.failed == []


def test_config_plugins_load_after_the_builtins_with_their_hooks() -> None:
    host = build_plugin_host([SAMPLE, SYNC], entry_points=False)
    assert [(p.name, p.origin, p.hooks) for p in host.loaded] == [
        (BUILTIN, "builtin", ("awa_job_event",)),
        (SAMPLE, "config", ALL_HOOKS),
        (SYNC, "config", ("awa_job_event", "awa_worker_stopping")),
    ]


def test_a_plugin_that_fails_to_import_is_reported_by_name_and_the_rest_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reported: list[str] = []
    with caplog.at_level(logging.ERROR, logger="awa.plugins"):
        host = build_plugin_host(
            [BROKEN, SAMPLE, "tests.integration.plugins.no_such_plugin"],
            entry_points=False,
            report=reported.append,
        )
    assert [p.name for p in host.loaded] == [BUILTIN, SAMPLE]
    assert [(f.name, f.origin) for f in host.failed] == [
        (BROKEN, "config"),
        ("tests.integration.plugins.no_such_plugin", "config"),
    ]
    assert host.failed[0].error == "RuntimeError: broken_plugin cannot be imported"
    assert host.failed[1].error.startswith("ModuleNotFoundError")
    assert len(reported) == 2 and BROKEN in reported[0] and "no_such_plugin" in reported[1]
    assert not any(BROKEN in r.getMessage() for r in caplog.records)  # reported once, not twice
    with caplog.at_level(logging.ERROR, logger="awa.plugins"):
        build_plugin_host([BROKEN], entry_points=False)  # no report: logged once instead
    assert sum(BROKEN in r.getMessage() for r in caplog.records) == 1


def test_a_misspelt_or_unmarked_hook_is_reported_naming_the_plugin_and_the_hook() -> None:
    reported: list[str] = []
    host = build_plugin_host([MISSPELT], entry_points=False, report=reported.append)
    assert [(p.name, p.hooks) for p in host.loaded][-1] == (MISSPELT, ("awa_worker_stopping",))
    assert host.warnings == [
        f"plugin '{MISSPELT}' (config): awa_job_evnt is not an awa hook "
        "(did you mean awa_job_event?)",
        f"plugin '{MISSPELT}' (config): awa_worker_started is not marked with "
        "@awa_cli.hookimpl and is never called",
    ]
    assert reported == [f"warning: {w}" for w in host.warnings]  # each reported once
    assert host.failed == []  # it still loads: its other hooks work


def test_entry_points_load_between_builtins_and_config_and_name_their_distribution(
    fake_distribution: Path,
) -> None:
    host = build_plugin_host([SAMPLE])
    assert [(p.name, p.origin) for p in host.loaded] == [
        (BUILTIN, "builtin"),
        ("ep_sample", "entry point awa-test-plugins"),
        (SAMPLE, "config"),
    ]
    assert [(f.name, f.origin) for f in host.failed] == [
        ("ep_broken", "entry point awa-test-plugins")
    ]
    # ep_plugin's implementation is trylast: it is called after the config plugin
    assert [name for name, _ in host.event_hooks()] == [BUILTIN, SAMPLE, "ep_sample"]


def test_entry_points_can_be_left_out(fake_distribution: Path) -> None:
    host = build_plugin_host(entry_points=False)
    assert [p.name for p in host.loaded] == [BUILTIN] and host.failed == []


def test_a_module_listed_twice_loads_once() -> None:
    host = build_plugin_host([SAMPLE, SAMPLE], entry_points=False)
    assert [p.name for p in host.loaded] == [BUILTIN, SAMPLE] and host.failed == []


def test_module_attr_plugins_and_invalid_implementations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "awa_test_object_plugin.py").write_text(
        textwrap.dedent("""
        import awa_cli

        class Metrics:
            @awa_cli.hookimpl(specname="awa_job_event")
            def count(self, event):
                pass

        metrics = Metrics()

        @awa_cli.hookimpl
        def awa_job_event(evnt):  # not an argument of the spec
            pass
    """)
    )
    host = build_plugin_host(
        ["awa_test_object_plugin:metrics", "awa_test_object_plugin"],
        base_dir=tmp_path,
        entry_points=False,
    )
    assert [(p.name, p.origin, p.hooks) for p in host.loaded][1:] == [
        ("awa_test_object_plugin:metrics", "config", ("awa_job_event",))
    ]
    [failed] = host.failed
    assert failed.name == "awa_test_object_plugin" and "evnt" in failed.error


def test_hookimpl_is_the_public_marker() -> None:
    assert isinstance(awa.hookimpl, pluggy.HookimplMarker)
    assert awa.hookimpl.project_name == "awa_cli"


# -- call order and semantics (no database) ----------------------------------------------
def fake_row(kind: str = "thing") -> JobRow:
    return memory_row(
        datetime.now(UTC), id=1, kind=kind, queue="default", args={"n": 1}, state="completed"
    )


@pytest.mark.asyncio
async def test_plugins_run_after_app_hooks_in_load_order_honouring_tryfirst() -> None:
    order: list[str] = []

    class Plain:
        def __init__(self, name: str) -> None:
            self.name = name

        @awa.hookimpl
        async def awa_job_event(self, event: Any) -> None:
            await asyncio.sleep(0.01)
            order.append(self.name)

    class First:
        @awa.hookimpl(tryfirst=True)
        def awa_job_event(self, event: Any) -> None:
            order.append("first")

    class Wrapper:
        @awa.hookimpl(wrapper=True)
        def awa_job_event(self, event: Any) -> Any:
            order.append("wrapper")
            return (yield)

    host = build_plugin_host(entry_points=False)
    host.pm.register(Plain("a"), name="a")
    host.pm.register(First(), name="first")
    host.pm.register(Wrapper(), name="wrapper")
    host.pm.register(Plain("b"), name="b")
    assert [name for name, _ in host.event_hooks()] == ["first", BUILTIN, "a", "b"]
    app = awa.App()
    app.on_event_kind("thing", lambda event: order.append("app"))
    dispatcher = Dispatcher(app, host.event_hooks())
    dispatcher.dispatch(awa.JobEvent.Completed(fake_row(), {"n": 1}, 0.1))
    assert await dispatcher.drain(5)
    assert order == ["app", "first", "a", "b"]


@pytest.mark.asyncio
async def test_plugins_get_events_of_every_kind_even_without_app_hooks() -> None:
    host = build_plugin_host([SAMPLE, SYNC], entry_points=False)
    dispatcher = Dispatcher(awa.App(), host.event_hooks())
    for kind in ("one", "two"):
        dispatcher.dispatch(awa.JobEvent.Started(fake_row(kind), {"n": 1}))
    assert await dispatcher.drain(5)
    assert sorted(e.job.kind for e in sample_plugin.EVENTS) == ["one", "two"]
    assert [(name, args) for (_, name, _, args) in sync_plugin.SEEN] == [("started", {"n": 1})] * 2


@pytest.mark.asyncio
async def test_worker_hook_failures_are_logged_and_the_rest_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = build_plugin_host([RAISING, SAMPLE, SYNC], entry_points=False)
    with caplog.at_level(logging.ERROR, logger="awa.plugins"):
        await host.worker_started("the worker")
        await host.worker_stopping("the worker")
    assert raising_plugin.CALLS == ["worker_started"]
    assert sample_plugin.WORKERS == [("started", "the worker"), ("stopping", "the worker")]
    assert sync_plugin.STOPPING == [True]  # an implementation may take fewer arguments
    [record] = [r for r in caplog.records if getattr(r, "action", None) == "plugin_failed"]
    assert RAISING in record.getMessage() and "awa_worker_started" in record.getMessage()


# -- a real Worker ------------------------------------------------------------------------
@dataclass
class PluginJob:
    n: int = 0


def plugin_app() -> awa.App:
    app = awa.App()

    @app.task(PluginJob)
    async def handle(job: awa.Job) -> None:
        await asyncio.sleep(0.2)  # outlives the Started hooks' database reads

    return app


@pytest.mark.integration
@pytest.mark.asyncio
async def test_worker_calls_worker_started_and_worker_stopping(dsn: str) -> None:
    host = build_plugin_host([RAISING, SAMPLE, SYNC], entry_points=False)
    async with running_worker(plugin_app(), dsn, plugins=host) as worker:
        await wait_until(lambda: bool(sample_plugin.WORKERS))
        assert [("started", worker)] == sample_plugin.WORKERS
        assert raising_plugin.CALLS == ["worker_started"]  # raised; the worker runs on
        with awa.Client(dsn) as client:
            job = client.insert(PluginJob())
        await wait_until(lambda: job_row(dsn, job.id).state == "completed")
    assert [("started", worker), ("stopping", worker)] == sample_plugin.WORKERS
    assert sync_plugin.STOPPING == [True]


@pytest.mark.integration
@pytest.mark.asyncio
async def test_sync_and_async_plugins_see_the_committed_state(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    sample_plugin.CONFIG["dsn"] = dsn
    sync_plugin.CONFIG["dsn"] = dsn
    host = build_plugin_host([RAISING, SAMPLE, SYNC], entry_points=False)
    with awa.Client(dsn) as client:
        job = client.insert(PluginJob(7))
    with caplog.at_level(logging.DEBUG, logger="awa.events"):  # Started is logged at DEBUG
        async with running_worker(plugin_app(), dsn, plugins=host):
            await wait_until(lambda: len(sync_plugin.SEEN) == 2 and len(sample_plugin.EVENTS) == 2)
    assert sorted((name, state) for (_, name, state, _) in sync_plugin.SEEN) == [
        ("completed", "completed"),
        ("started", "running"),
    ]
    assert sorted((name, state) for (_, name, state) in sample_plugin.SEEN_STATES) == [
        ("completed", "completed"),
        ("started", "running"),
    ]
    assert all(args == {"n": 7} for (*_, args) in sync_plugin.SEEN)
    assert sorted(raising_plugin.CALLS) == [
        "completed",
        "started",
        "worker_started",
    ]  # raised each time
    # the built-in plugin logged each event as one structured line
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "awa.events" and f"job_id={job.id} " in r.getMessage()
    ]
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert any(
        line.startswith("action=job_completed ") and "state=completed" in line for line in lines
    )
    levels = {
        r.getMessage().split()[0]: r.levelno for r in caplog.records if r.name == "awa.events"
    }
    assert levels == {"action=job_started": logging.DEBUG, "action=job_completed": logging.INFO}


# -- awa plugins -------------------------------------------------------------------------
def invoke(*args: str) -> Any:
    from awa_cli.cli import cli

    return AwaRunner().invoke(
        cli,
        list(args),
        terminal_width=100,
    )


def write_config(tmp_path: Path, plugins: list[str]) -> Path:
    path = tmp_path / "awa.toml"
    path.write_text(f"[app]\nplugins = {json.dumps(plugins)}\n")
    return path


def without_entry_points(data: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in data if not p["origin"].startswith("entry point")]


def test_awa_plugins_json_lists_builtin_entry_point_and_config_plugins(
    tmp_path: Path, fake_distribution: Path
) -> None:
    config = write_config(tmp_path, [SAMPLE])
    for args in (
        ["--config", str(config), "plugins", "--json"],
        ["--json", "--config", str(config), "plugins"],
    ):
        result = invoke(*args)
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data == [
            {"name": BUILTIN, "origin": "builtin", "hooks": ["awa_job_event"]},
            {
                "name": "ep_sample",
                "origin": "entry point awa-test-plugins",
                "hooks": ["awa_job_event"],
            },
            {"name": SAMPLE, "origin": "config", "hooks": list(ALL_HOOKS)},
        ]
        assert "ep_broken" in result.stderr  # the broken entry point, reported by name


def test_awa_plugins_table(tmp_path: Path) -> None:
    result = invoke("--config", str(write_config(tmp_path, [SYNC])), "plugins")
    assert result.exit_code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "entry point" not in line]
    assert lines == [
        "name\torigin\thooks",
        f"{BUILTIN}\tbuiltin\tawa_job_event",
        f"{SYNC}\tconfig\tawa_job_event, awa_worker_stopping",
    ]


@pytest.mark.parametrize("quiet", [False, True])
def test_awa_plugins_reports_an_import_failure_on_stderr_and_exits_0(
    tmp_path: Path, quiet: bool
) -> None:
    config = write_config(tmp_path, [BROKEN, SAMPLE])
    result = invoke(*(["-q"] if quiet else []), "--config", str(config), "plugins", "--json")
    assert result.exit_code == 0, result.stderr
    assert [p["name"] for p in without_entry_points(json.loads(result.stdout))] == [BUILTIN, SAMPLE]
    # once by name, with its error, even under -q
    assert [line for line in result.stderr.splitlines() if BROKEN in line] == [
        f"warning: plugin '{BROKEN}' (config) failed to load: "
        "RuntimeError: broken_plugin cannot be imported"
    ]
    assert BROKEN not in result.stdout
    table = invoke(*(["-q"] if quiet else []), "--config", str(config), "plugins")
    assert f"{BROKEN}\tconfig\tFAILED: RuntimeError: broken_plugin cannot be imported" in (
        table.stdout.splitlines()
    )


def test_a_real_quiet_worker_reports_a_broken_plugin_once_and_runs(
    dsn: str, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    root = ROOT
    config = tmp_path / "awa.toml"
    config.write_text(
        f'[app]\nmodules = ["tests.apps.recording"]\nplugins = ["{BROKEN}", "{MISSPELT}"]\n'
    )
    env = {**os.environ, "PYTHONPATH": str(root), "NO_COLOR": "1", "AWA_DATABASE_URL": dsn}
    env.pop("NOTIFY_SOCKET", None)
    import psycopg

    from tests.apps.recording import SIDE_TABLE, Record

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SIDE_TABLE)
    with awa.Client(dsn) as producer:
        job = producer.insert(Record(1))
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "awa_cli", "-q", "--config", str(config), "worker"],
            env=env,
            cwd=root,
            stderr=err,
            stdout=subprocess.DEVNULL,
        )
    client = awa.Client(dsn)
    try:
        deadline = time.monotonic() + 30
        # it runs jobs (under -q it logs nothing else to wait for)
        while client.get_job(job.id).state != "completed":
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        client.close()
    text = log.read_text()
    assert code == 0, text
    assert sum(BROKEN in line for line in text.splitlines()) == 1, text
    assert sum("awa_job_evnt" in line for line in text.splitlines()) == 1, text


@pytest.mark.asyncio
async def test_builtin_logging_costs_nothing_when_its_level_is_off(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """At WARNING the built-in logger is skipped by the dispatcher: no task per event."""
    from awa_cli.dispatch import Dispatcher
    from awa_cli.events import JobEvent

    host = build_plugin_host(entry_points=False)
    with awa.Client(dsn) as client:
        job = client.insert(PluginJob(1))
    dispatcher = Dispatcher(None, host.event_hooks())
    with caplog.at_level(logging.WARNING, logger="awa.events"):
        dispatcher.dispatch(JobEvent.Completed(job, job.args, 0.1, None))
        assert dispatcher.pending == 0
    with caplog.at_level(logging.INFO, logger="awa.events"):
        dispatcher.dispatch(JobEvent.Completed(job, job.args, 0.1, None))
        assert dispatcher.pending == 1
        await dispatcher.drain(5)
    assert any("action=job_completed" in r.getMessage() for r in caplog.records)
