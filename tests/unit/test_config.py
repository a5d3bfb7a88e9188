"""awa.toml parsing, resolution and `awa config check` (no database)."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import AwaRunner, ROOT

from awa_cli.config import (
    AppConfig,
    Config,
    ConfigError,
    DatabaseConfig,
    DeadLetterConfig,
    MaintenanceConfig,
    MetricsConfig,
    PeriodicConfig,
    QueueConfig,
    ServeConfig,
    TelemetryConfig,
    WorkerConfig,
    format_duration,
    load_config,
    parse_duration,
    resolve_config_path,
)

EXAMPLE = ROOT / "awa.toml.example"
SECTIONS: dict[str, type] = {
    "database": DatabaseConfig,
    "app": AppConfig,
    "worker": WorkerConfig,
    "queues.*": QueueConfig,
    "dead_letter": DeadLetterConfig,
    "maintenance": MaintenanceConfig,
    "metrics": MetricsConfig,
    "periodic.*": PeriodicConfig,
    "serve": ServeConfig,
    "telemetry": TelemetryConfig,
}


def write(tmp_path: Path, text: str, name: str = "awa.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str) -> Config:
    return load_config(write(tmp_path, text), explicit=True)


def config_error(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'awa.toml'}: ")
    return info.value


# --- defaults --------------------------------------------------------------------------------


def test_no_file_gives_every_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, explicit=False)
    assert config.path is None
    assert config.base_dir == tmp_path
    assert config.database == DatabaseConfig(url=None, embedded_dir=tmp_path / ".awa")
    assert config.app == AppConfig(modules=(), plugins=())
    assert config.worker == WorkerConfig(processes=1, shutdown_timeout=30.0)
    assert config.queues == {"default": QueueConfig(concurrency=10, deadline=0.0)}
    assert config.maintenance == MaintenanceConfig(
        heartbeat_interval=5.0,
        heartbeat_staleness=15.0,
        rescue_interval=5.0,
        leader_election_interval=5.0,
        completed_retention=86400.0,
        failed_retention=259200.0,
        dead_letter_retention=30 * 86400.0,
    )
    assert config.dead_letter == DeadLetterConfig(default=False)
    assert config.metrics == MetricsConfig(prometheus_port=None)
    assert config.metrics.host == "127.0.0.1"  # loopback unless configured


def test_empty_file_gives_defaults_beside_it(tmp_path: Path) -> None:
    config = load_text(tmp_path, "")
    assert config.path == tmp_path / "awa.toml"
    assert config.base_dir == tmp_path
    assert config.database.embedded_dir == tmp_path / ".awa"
    assert config.queues == {"default": QueueConfig()}


def test_dataclasses_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        WorkerConfig().processes = 2  # type: ignore[misc]


def test_values_are_read(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        """
        [database]
        url = "postgresql://awa@db/awa"
        [app]
        modules = ["myapp.jobs", "other:app"]
        plugins = ["myapp.hooks"]
        [worker]
        processes = 4
        shutdown_timeout = "1m"
        [queues.email]
        concurrency = 3
        deadline = "5m"
        [queues."bulk.import"]
        [maintenance]
        heartbeat_interval = 2
        heartbeat_staleness = "10s"
        completed_retention = 0
        vacuum_dead_tuples = 0
        [metrics]
        prometheus_port = 9464
        """,
    )
    assert config.database.url == "postgresql://awa@db/awa"
    assert config.app == AppConfig(modules=("myapp.jobs", "other:app"), plugins=("myapp.hooks",))
    assert config.worker == WorkerConfig(processes=4, shutdown_timeout=60.0)
    # Declaring any queue replaces the implicit "default" queue.
    assert config.queues == {
        "email": QueueConfig(concurrency=3, deadline=300.0),
        "bulk.import": QueueConfig(),
    }
    assert config.maintenance.heartbeat_interval == 2.0
    assert config.maintenance.heartbeat_staleness == 10.0
    assert config.maintenance.completed_retention == 0.0
    assert config.maintenance.failed_retention == 259200.0
    assert config.maintenance.vacuum_dead_tuples == 0  # off; 50,000 by default
    assert MaintenanceConfig().vacuum_dead_tuples == 50_000
    assert config.metrics.prometheus_port == 9464


# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (0, 0.0),
        (30, 30.0),
        (1.5, 1.5),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("24h", 86400.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("45", 45.0),
        ("0s", 0.0),
    ],
)
def test_parse_duration_accepts(text: Any, seconds: float) -> None:
    assert parse_duration(text, "[worker] shutdown_timeout") == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "  ",
        "-1s",
        "-5",
        -1,
        -0.5,
        "5x",
        "5 parsecs",
        "s",
        "1h30",
        "h5",
        "1e3s",
        "5S",
        "1,5s",
        float("nan"),
        float("inf"),
        1.7976931348623157e308,  # finite, but overflowed the display of `awa config check`
        "36501d",
        36500 * 86400 + 1,
        True,
        None,
        [],
        {},
    ],
)
def test_parse_duration_rejects(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(value, "[queues.email] deadline")
    assert str(info.value).startswith("[queues.email] deadline: ")
    assert info.value.key == "[queues.email] deadline"


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@given(
    st.lists(
        st.tuples(st.integers(0, 9_000), st.integers(0, 999), st.sampled_from(sorted(_UNITS))),
        min_size=1,
        max_size=4,
    )
)
def test_parse_duration_sums_number_unit_parts(parts: list[tuple[int, int, str]]) -> None:
    text = "".join(f"{whole}.{frac:03d}{unit}" for whole, frac, unit in parts)
    expected = sum((whole + frac / 1000) * _UNITS[unit] for whole, frac, unit in parts)
    assert parse_duration(text, "k") == pytest.approx(expected)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_parse_duration_numbers_are_seconds(value: float) -> None:
    assert parse_duration(value, "k") == value
    text = f"{value:.6f}"
    assert parse_duration(text, "k") == float(text)
    assert parse_duration(text + "s", "k") == float(text)


@given(st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False))
def test_parse_duration_rejects_negative_numbers(value: float) -> None:
    with pytest.raises(ConfigError):
        parse_duration(value, "k")


@given(st.integers(0, 10**8))
def test_format_duration_round_trips_whole_seconds(seconds: int) -> None:
    assert parse_duration(format_duration(seconds), "k") == seconds


def test_format_duration_is_short() -> None:
    assert [format_duration(s) for s in (0, 0.5, 1.5, 30, 300, 5400, 86400, 259200)] == [
        "0s",
        "500ms",
        "1.5s",
        "30s",
        "5m",
        "1h30m",
        "1d",
        "3d",
    ]


# --- errors name their key -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ("[wroker]\nprocesses = 2", "[wroker]", "unknown table [wroker]"),
        ("processes = 2", "[processes]", "unknown table [processes]"),
        ("[worker]\nprocesess = 2", "[worker] procesess", "unknown key [worker] procesess"),
        ("[queues.email]\nconcurency = 2", "[queues.email] concurency", "unknown key"),
        (
            '[queues.email]\nconcurrency = "ten"',
            "[queues.email] concurrency",
            '[queues.email] concurrency: expected a positive integer, got "ten"',
        ),
        ("[queues.email]\nconcurrency = 0", "[queues.email] concurrency", "positive integer"),
        (
            "[queues.email]\nconcurrency = 10001",
            "[queues.email] concurrency",
            "between 1 and 10000",
        ),
        ("[queues.email]\nconcurrency = 2.0", "[queues.email] concurrency", "positive integer"),
        ("[queues.email]\nconcurrency = true", "[queues.email] concurrency", "got true"),
        (
            '[queues.email]\ndeadline = "5 minutes"',
            "[queues.email] deadline",
            "expected a duration",
        ),
        ('[queues.email]\ndeadline = "-5m"', "[queues.email] deadline", "non-negative"),
        ("[queues]\nemail = 5", "[queues.email]", "expected a table"),
        ('[queues.""]\nconcurrency = 1', '[queues.""]', "1 to 200 characters"),
        (f"[queues.{'q' * 201}]", f"[queues.{'q' * 201}]", "1 to 200 characters"),
        ('[queues."a\\u0000b"]', '[queues."a\\u0000b"]', "contains a NUL character"),
        ("queues = 3", "[queues]", "expected a table"),
        ("[worker]\nprocesses = 0", "[worker] processes", "positive integer"),
        ("[worker]\nprocesses = -2", "[worker] processes", "positive integer"),
        ('[worker]\nshutdown_timeout = "soon"', "[worker] shutdown_timeout", "expected a duration"),
        ("[metrics]\nprometheus_port = 0", "[metrics] prometheus_port", "positive integer"),
        ("[metrics]\nprometheus_port = 70000", "[metrics] prometheus_port", "between 1 and 65535"),
        ('[metrics]\nprometheus_port = "9464"', "[metrics] prometheus_port", "positive integer"),
        ('[metrics]\nhost = "not a host!"', "[metrics] host", "expected an IP address or host"),
        ("[metrics]\nhost = 127", "[metrics] host", "expected an IP address or host"),
        ('[metrics]\nhost = ""', "[metrics] host", "expected an IP address or host"),
        (
            "[maintenance]\nrescue_interval = 0",
            "[maintenance] rescue_interval",
            "greater than zero",
        ),
        (
            '[maintenance]\nheartbeat_interval = "0s"',
            "[maintenance] heartbeat_interval",
            "greater than zero",
        ),
        (
            '[maintenance]\nleader_election_interval = "0ms"',
            "[maintenance] leader_election_interval",
            "greater than zero",
        ),
        ("[maintenance]\nfailed_retention = -1", "[maintenance] failed_retention", "non-negative"),
        ("[maintenance]\nvacuum_dead_tuples = -1", "[maintenance] vacuum_dead_tuples", "0 or more"),
        (
            '[maintenance]\nvacuum_dead_tuples = "50k"',
            "[maintenance] vacuum_dead_tuples",
            'whole number (0 or more), got "50k"',
        ),
        (
            "[maintenance]\nvacuum_dead_tuples = 3000000000",
            "[maintenance] vacuum_dead_tuples",
            "between 0 and 2000000000",
        ),
        (
            '[maintenance]\nheartbeat_interval = "20s"',
            "[maintenance] heartbeat_staleness",
            "longer than heartbeat_interval",
        ),
        ("[database]\nurl = 5", "[database] url", "expected a non-empty string"),
        ('[database]\nurl = ""', "[database] url", "expected a non-empty string"),
        ("[database]\nembedded_dir = []", "[database] embedded_dir", "non-empty string"),
        ('[app]\nmodules = "myapp.jobs"', "[app] modules", "expected a list of strings"),
        ("[app]\nplugins = [1]", "[app] plugins[0]", "non-empty string"),
        ("app = 1", "[app]", "expected a table"),
        # [periodic.NAME] schedules
        (
            '[periodic.n]\ncron = "61 * * * *"\nkind = "k"',
            "[periodic.n] cron",
            "[periodic.n] cron: '61 * * * *'",
        ),
        ('[periodic.n]\ncron = "* * *"\nkind = "k"', "[periodic.n] cron", "expected 5 fields"),
        ('[periodic.n]\ncron = "@sometimes"\nkind = "k"', "[periodic.n] cron", "unknown alias"),
        ('[periodic.n]\ncron = 5\nkind = "k"', "[periodic.n] cron", "expected a non-empty string"),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "k"\ntimezone = "Europe/Atlantis"',
            "[periodic.n] timezone",
            "unknown time zone 'Europe/Atlantis'",
        ),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "k"\ncatch_up = "most"',
            "[periodic.n] catch_up",
            "expected one of latest, all, none",
        ),
        ('[periodic."a b"]\ncron = "@daily"\nkind = "k"', '[periodic."a b"]', "characters"),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "k"\npriority = 5',
            "[periodic.n] priority",
            "between 1 and 4",
        ),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "k"\nargs = 3',
            "[periodic.n] args",
            "expected a table",
        ),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "k"\ntags = '
            + json.dumps(list("abcdefghijklmnopqrstu")),
            "[periodic.n] tags",
            "more than 20 tags",
        ),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "k"\ndeadline_duration = "soon"',
            "[periodic.n] deadline_duration",
            "expected a duration",
        ),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "k"\nrun_at = 1',
            "[periodic.n] run_at",
            "unknown key [periodic.n] run_at",
        ),
        ("[periodic]\nn = 1", "[periodic.n]", "expected a table"),
        ("periodic = 1", "[periodic]", "expected a table"),
        # dead-letter keys (the rest of them: test_config_dead_letter.py)
        (
            '[queues.email]\ndead_letter = "yes"',
            "[queues.email] dead_letter",
            '[queues.email] dead_letter: expected true or false, got "yes"',
        ),
        ("[queues.email]\ndead_letter = 1", "[queues.email] dead_letter", "got 1"),
        ("[dead_letter]\ndefault = 0", "[dead_letter] default", "expected true or false"),
        ("[dead_letter]\nenabled = true", "[dead_letter] enabled", "known keys: default"),
        ("dead_letter = true", "[dead_letter]", "expected a table"),
        (
            '[maintenance]\ndead_letter_retention = "a month"',
            "[maintenance] dead_letter_retention",
            "expected a duration",
        ),
        (
            "[maintenance]\ndead_letter_retention = -1",
            "[maintenance] dead_letter_retention",
            "non-negative",
        ),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    error = config_error(tmp_path, text)
    assert error.key == key
    assert key in str(error)
    assert fragment in str(error)


def test_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[worker]\nprocesess = 2")
    assert str(error) == (
        f"{tmp_path / 'awa.toml'}: unknown key [worker] procesess "
        "(known keys: processes, shutdown_timeout)"
    )


def test_invalid_toml_gives_the_line(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[worker]\nprocesses = 1\nshutdown_timeout = \n")
    assert "invalid TOML" in str(error)
    assert "line 3" in str(error)
    assert error.key is None


def test_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "awa.toml"
    path.write_bytes(b"[worker]\n# \xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config(path, explicit=True)


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path, explicit=True)
    assert str(info.value) == f"{path}: config file not found"


def test_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="directory"):
        load_config(tmp_path, explicit=True)


def test_missing_implicit_file_gives_defaults(tmp_path: Path) -> None:
    assert load_config(tmp_path / "gone.toml", explicit=False).path is None


# --- resolution ------------------------------------------------------------------------------


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = {"AWA_CONFIG": "from-env.toml"}
    assert resolve_config_path(None, {}) == (None, False)
    write(tmp_path, "")
    assert resolve_config_path(None, {}) == (Path("awa.toml"), False)
    assert resolve_config_path(None, {"AWA_CONFIG": ""}) == (Path("awa.toml"), False)
    assert resolve_config_path(None, env) == (Path("from-env.toml"), True)
    assert resolve_config_path("option.toml", env) == (Path("option.toml"), True)


def test_awa_toml_directory_is_not_picked_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "awa.toml").mkdir()
    assert resolve_config_path(None, {}) == (None, False)


def test_embedded_dir_is_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = write(project, '[database]\nembedded_dir = "var/pg"')
    config = load_config(Path("..") / "project" / "awa.toml", explicit=True)
    assert config.path == path
    assert config.base_dir == project
    assert config.database.embedded_dir == project / "var" / "pg"
    assert load_text(project, "").database.embedded_dir == project / ".awa"
    absolute = tmp_path / "abs"
    assert (
        load_text(
            project, f"[database]\nembedded_dir = {json.dumps(str(absolute))}"
        ).database.embedded_dir
        == absolute
    )


# --- the example file ------------------------------------------------------------------------


def test_example_loads() -> None:
    config = load_config(EXAMPLE, explicit=True)
    assert config.database.url is None
    assert config.app.modules == ("examples.jobs",)
    assert set(config.queues) == {"default", "email"}
    assert config.metrics.prometheus_port is None
    assert config.periodic == {}  # the example schedule is commented out


def test_example_documents_every_key(tmp_path: Path) -> None:
    # Uncommenting the commented-out keys must give a valid file naming every dataclass field.
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    uncommented = "\n".join(re.sub(r"^# (\w+ = |\[)", r"\1", line) for line in lines)
    raw = tomllib.loads(uncommented)
    for section, cls in SECTIONS.items():
        if section.endswith(".*"):
            tables = list(raw[section[:-2]].values())
        else:
            tables = [raw[section]]
        assert tables, section
        for table in tables:
            assert set(table) == {f.name for f in dataclasses.fields(cls)}, section
    assert set(raw) == {section.removesuffix(".*") for section in SECTIONS} | {"limits"}
    for name, table in raw["limits"].items():  # every key, across the example's limits
        assert set(table) <= {"kind", "queue", "key", "max_running", "rate"}, name
    assert set().union(*raw["limits"].values()) == {"kind", "queue", "key", "max_running", "rate"}
    full = load_text(tmp_path, uncommented)
    assert full.limits["per_tenant"].rate_count == 100
    assert full.database.url is not None
    assert full.metrics.prometheus_port is not None
    assert full.periodic["nightly_report"].kind == "generate_report"
    assert full.telemetry.otlp_endpoint == "http://127.0.0.1:4318"
    assert {t.role for t in full.serve.tokens} == {"viewer", "operator"}
    assert full.serve.callback_base_url == "https://jobs.example.com/callbacks"
    # ... and the schedule fits the example app: its kind and args are registered there.
    from awa_cli.loading import load_apps
    from awa_cli.config import register_schedules

    app = load_apps(full.app.modules, EXAMPLE.parent)
    register_schedules(app, full)
    assert app.schedules["nightly_report"].args == {"report_id": 7}
    # ... and so do its limits (what `awa config check` and the worker's start check)
    from awa_cli.limits import validate_limits

    assert validate_limits(full.limits.values(), app, full.queues) == []


@pytest.mark.parametrize(
    "value", ['"127.0.0.1:4318"', '"ftp://collector"', '"http://"', "4318", '""']
)
def test_telemetry_endpoint_must_be_an_http_url(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match=r"\[telemetry\] otlp_endpoint"):
        load_text(tmp_path, f"[telemetry]\notlp_endpoint = {value}")
    assert load_text(tmp_path, "").telemetry.otlp_endpoint is None


# --- display ---------------------------------------------------------------------------------


def test_display_dict_redacts_the_password(tmp_path: Path) -> None:
    config = load_text(tmp_path, '[database]\nurl = "postgresql://awa:hunter2@db:5432/awa"')
    display = config.to_display_dict()
    assert "hunter2" not in json.dumps(display)
    assert display["database"]["url"] == "postgresql://awa:***@db:5432/awa"
    assert display["database"]["embedded_dir"] == str(tmp_path / ".awa")
    assert display["worker"] == {"processes": 1, "shutdown_timeout": 30.0}
    assert display["app"] == {"modules": [], "plugins": []}
    assert display["queues"] == {
        "default": {
            "concurrency": 10,
            "deadline": 0.0,
            "dead_letter": None,
            "priority_aging": 0.0,
            "claim_ahead": True,
        }
    }
    assert display["dead_letter"] == {"default": False}
    assert json.loads(json.dumps(display)) == display


def test_display_dict_human_durations(tmp_path: Path) -> None:
    display = load_text(tmp_path, "").to_display_dict(human_durations=True)
    assert display["worker"]["shutdown_timeout"] == "30s"
    assert display["maintenance"]["failed_retention"] == "3d"
    assert display["queues"]["default"] == {
        "concurrency": 10,
        "deadline": "0s",
        "dead_letter": None,
        "priority_aging": "0s",
        "claim_ahead": True,
    }
    assert display["maintenance"]["dead_letter_retention"] == "30d"


# --- awa config check ------------------------------------------------------------------------


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Any:
    from awa_cli.cli import cli

    runner = AwaRunner()
    return runner.invoke(
        cli,
        list(args),
        env=env,
        terminal_width=100,
    )


def test_check_json(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[database]\nurl = "postgresql://awa:hunter2@db/awa"\n[queues.email]\ndeadline = "5m"',
    )
    for args in (
        ["--config", str(path), "config", "check", "--json"],
        ["--json", "--config", str(path), "config", "check"],
    ):
        result = invoke(*args)
        assert result.exit_code == 0, result.stderr
        assert "hunter2" not in result.stdout + result.stderr
        data = json.loads(result.stdout)
        assert data["database"]["url"] == "postgresql://awa:***@db/awa"
        assert data["database"]["url_source"] == "[database] url"
        assert data["queues"] == {
            "email": {
                "concurrency": 10,
                "deadline": 300.0,
                "dead_letter": None,
                "priority_aging": 0.0,
                "claim_ahead": True,
            }
        }
        assert "config OK" in result.stderr


def test_check_url_precedence(tmp_path: Path) -> None:
    path = write(tmp_path, '[database]\nurl = "postgresql://file@db/awa"')
    result = invoke(
        "--config",
        str(path),
        "config",
        "check",
        "--json",
        env={"AWA_DATABASE_URL": "postgresql://env:pw@db/awa"},
    )
    assert json.loads(result.stdout)["database"]["url"] == "postgresql://env:***@db/awa"
    result = invoke(
        "--config",
        str(path),
        "--database-url",
        "postgresql://opt@db/awa",
        "config",
        "check",
        "--json",
        env={"AWA_DATABASE_URL": "postgresql://env:pw@db/awa"},
    )
    assert json.loads(result.stdout)["database"]["url_source"] == "--database-url"


def test_check_text_shows_embedded(tmp_path: Path) -> None:
    path = write(tmp_path, "[worker]\nprocesses = 3")
    result = invoke("--config", str(path), "config", "check")
    assert result.exit_code == 0, result.stderr
    assert f'url = "embedded ({tmp_path / ".awa"})"' in result.stdout
    assert "processes = 3" in result.stdout
    assert 'shutdown_timeout = "30s"' in result.stdout
    assert "[queues.default]" in result.stdout
    assert "config OK" in result.stderr


def test_check_uses_awa_config_env(tmp_path: Path) -> None:
    path = write(tmp_path, "[worker]\nprocesses = 7", name="custom.toml")
    result = invoke("config", "check", "--json", env={"AWA_CONFIG": str(path)})
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["worker"]["processes"] == 7


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            '[queues.email]\nconcurrency = "ten"',
            '[queues.email] concurrency: expected a positive integer, got "ten"',
        ),
        ("[worker]\nprocesess = 2", "unknown key [worker] procesess"),
        ("[worker\n", "invalid TOML"),
        (
            '[app]\nmodules = ["my-app.jobs"]',
            '[app] modules[0]: expected "module" or "module:attr"',
        ),
        ('[app]\nmodules = ["myapp.jobs:"]', "[app] modules[0]"),
        ('[app]\nmodules = ["myapp.class"]', "[app] modules[0]"),
        ('[app]\nplugins = ["a b"]', "[app] plugins[0]"),
    ],
)
def test_check_invalid_exits_2_with_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, text)
    result = invoke("--config", str(path), "config", "check")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"Error: {path}: ")
    assert fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_check_missing_explicit_file_exits_2(tmp_path: Path) -> None:
    result = invoke("--config", str(tmp_path / "missing.toml"), "config", "check")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"Error: {tmp_path / 'missing.toml'}: config file not found"


def test_check_accepts_module_specs(tmp_path: Path) -> None:
    # `config check` imports them (as the worker does): they must exist
    package = tmp_path / "cfgspec_app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    app_code = "import awa_cli as awa\napp = awa.App()\nregistry = awa.App()\n"
    (package / "jobs.py").write_text(app_code)
    (tmp_path / "cfgspec_single.py").write_text(app_code)
    path = write(
        tmp_path,
        '[app]\nmodules = ["cfgspec_app.jobs", "cfgspec_app.jobs:registry", "cfgspec_single"]',
    )
    result = invoke("--config", str(path), "config", "check", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["app"]["modules"] == [
        "cfgspec_app.jobs",
        "cfgspec_app.jobs:registry",
        "cfgspec_single",
    ]


# --- [periodic.NAME] -------------------------------------------------------------------------

PERIODIC_APP = """
from dataclasses import dataclass
import awa_cli as awa

app = awa.App()

@dataclass
class Report:
    day: str

@app.task(Report, queue="reports")
def report(job):
    pass
"""


def periodic_module(tmp_path: Path) -> str:
    """A module beside the config with a ``report`` task; a fresh name per test."""
    name = f"periodic_app_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PERIODIC_APP, encoding="utf-8")
    return name


def test_periodic_tables_are_read(tmp_path: Path) -> None:
    config = load_text(
        tmp_path,
        """
        [periodic.nightly_report]
        cron = "0 3 * * *"
        kind = "report"
        args = { day = "yesterday" }
        timezone = "Europe/Berlin"
        catch_up = "all"
        queue = "reports"
        priority = 1
        max_attempts = 3
        tags = ["nightly"]
        metadata = { team = "bi" }
        deadline_duration = "10m"

        [periodic."every.minute"]
        cron = "@hourly"
        kind = "report"
        """.replace("\n        ", "\n"),
    )
    nightly = config.periodic["nightly_report"]
    assert nightly == PeriodicConfig(
        cron="0 3 * * *",
        kind="report",
        args={"day": "yesterday"},
        timezone="Europe/Berlin",
        catch_up="all",
        queue="reports",
        priority=1,
        max_attempts=3,
        tags=("nightly",),
        metadata={"team": "bi"},
        deadline_duration=600.0,
    )
    assert config.periodic["every.minute"] == PeriodicConfig(cron="@hourly", kind="report")
    assert config.periodic["every.minute"].insert_options() == {}
    display = config.to_display_dict(human_durations=True)
    assert display["periodic"]["nightly_report"]["deadline_duration"] == "10m"
    assert display["periodic"]["nightly_report"]["tags"] == ["nightly"]
    assert display["periodic"]["every.minute"]["deadline_duration"] is None
    assert json.loads(json.dumps(config.to_display_dict())) == config.to_display_dict()


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        ('[periodic.n]\nkind = "report"', "[periodic.n] cron", "missing required key cron"),
        ('[periodic.n]\ncron = "@daily"', "[periodic.n] kind", "missing required key kind"),
    ],
)
def test_periodic_missing_keys_are_named(
    tmp_path: Path, text: str, key: str, fragment: str
) -> None:
    # The message says "missing required key cron in [periodic.n]", not the key's label.
    error = config_error(tmp_path, text)
    assert error.key == key
    assert fragment in str(error)


def test_schedules_are_registered_on_the_loaded_app(tmp_path: Path) -> None:
    from awa_cli.commands.context import CliContext
    from awa_cli.terminal import Terminal

    module = periodic_module(tmp_path)
    path = write(
        tmp_path,
        f'[app]\nmodules = ["{module}"]\n'
        '[periodic.nightly]\ncron = "0 3 * * *"\nkind = "report"\nargs = { day = "y" }\n'
        'timezone = "Europe/Berlin"\npriority = 1\n',
    )
    ctx = CliContext(str(path), None, False, 0, Terminal(no_color=True, quiet=True), env={})
    schedule = ctx.app.schedules["nightly"]
    assert (schedule.kind, schedule.args, schedule.timezone) == (
        "report",
        {"day": "y"},
        "Europe/Berlin",
    )
    assert schedule.options == {"queue": "reports", "priority": 1}


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        (
            '[periodic.n]\ncron = "@daily"\nkind = "nope"',
            "[periodic.n] kind: 'nope' is not registered as a task in this app (the app of [app] modules)",
        ),
        (
            '[periodic.n]\ncron = "@daily"\nkind = "report"\nargs = { colour = "red" }',
            "[periodic.n] args: do not fit Report",
        ),
    ],
)
def test_check_reports_a_schedule_the_app_cannot_run(
    tmp_path: Path, table: str, fragment: str
) -> None:
    module = periodic_module(tmp_path)
    path = write(tmp_path, f'[app]\nmodules = ["{module}"]\n{table}')
    result = invoke("--config", str(path), "config", "check")
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0]
    assert lines[0].startswith(f"Error: {path}: ")


def test_check_reports_a_bad_schedule_without_importing(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[app]\nmodules = ["not_there"]\n[periodic.n]\ncron = "0 25 * * *"\nkind = "k"'
    )
    result = invoke("--config", str(path), "config", "check")
    assert result.exit_code == 2
    assert "[periodic.n] cron: '0 25 * * *'" in result.stderr
    assert "not_there" not in result.stderr


def test_check_with_schedules_needs_an_importable_app(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[app]\nmodules = ["not_there"]\n[periodic.n]\ncron = "@daily"\nkind = "k"'
    )
    result = invoke("--config", str(path), "config", "check")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {path}: [app] modules: no module named 'not_there'")


def test_check_shows_valid_schedules(tmp_path: Path) -> None:
    module = periodic_module(tmp_path)
    path = write(
        tmp_path,
        f'[app]\nmodules = ["{module}"]\n[periodic.nightly]\ncron = "0 3 * * *"\nkind = "report"\n'
        'args = { day = "y" }\ndeadline_duration = "90s"',
    )
    result = invoke("--config", str(path), "config", "check")
    assert result.exit_code == 0, result.stderr
    assert "[periodic.nightly]" in result.stdout
    assert 'cron = "0 3 * * *"' in result.stdout
    assert 'deadline_duration = "1m30s"' in result.stdout
    assert 'args = { day = "y" }' in result.stdout
    tomllib.loads(result.stdout.split("[periodic.nightly]")[1])  # the table reads back as TOML
    assert "# priority = (not set)" in result.stdout
    result = invoke("--config", str(path), "config", "check", "--json")
    assert json.loads(result.stdout)["periodic"]["nightly"]["args"] == {"day": "y"}


# --- [serve] ---------------------------------------------------------------------------------


def test_serve_defaults_and_tokens(tmp_path: Path) -> None:
    assert load_text(tmp_path, "").serve == ServeConfig()
    config = load_text(
        tmp_path,
        '[serve]\nport = 9000\ncallback_secrets = ["NEW", "OLD"]\n'
        '[serve.tokens.ops]\ntoken_env = "OPS_TOKEN"\nrole = "operator"\n'
        '[serve.tokens.dash]\ntoken_env = "DASH_TOKEN"\n',
    )
    assert config.serve.port == 9000 and config.serve.callback_secrets == ("NEW", "OLD")
    assert [(t.name, t.token_env, t.role) for t in config.serve.tokens] == [
        ("ops", "OPS_TOKEN", "operator"),
        ("dash", "DASH_TOKEN", "viewer"),  # the safe default
    ]
    assert config.to_display_dict()["serve"]["tokens"]["ops"] == {
        "token_env": "OPS_TOKEN",
        "role": "operator",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[serve]\nport = 70000", "[serve] port: must be between 1 and 65535"),
        ('[serve]\nhost = ""', "[serve] host: expected a non-empty string"),
        ('[serve]\ncallback_secrets = "KEY"', "[serve] callback_secrets: expected a list"),
        (
            '[serve]\ncallback_secrets = ["has space"]',
            "[serve] callback_secrets[0]: expected the name",
        ),
        (
            '[serve]\ncallback_base_url = "jobs.example.com"',
            "[serve] callback_base_url: expected an http",
        ),
        (
            '[serve.tokens.a]\ntoken_env = "A"\nrole = "admin"',
            "[serve.tokens.a] role: expected viewer or operator",
        ),
        ('[serve.tokens.a]\nrole = "viewer"', "[serve.tokens.a] token_env: missing"),
        (
            '[serve.tokens.a]\ntoken_env = "A"\ntoken = "secret"',
            "unknown key [serve.tokens.a] token",
        ),
        ("[serve]\ntokens = 3", "[serve] tokens: expected a table"),
        ("[serve]\nsecret = 1", "unknown key [serve] secret"),
    ],
)
def test_serve_errors_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in config_error(tmp_path, text).message


def test_worker_queue_flag_keeps_the_queue_table_settings(tmp_path: Path) -> None:
    """`awa worker --queue NAME=N` takes the concurrency from the flag and everything else of
    the queue from its [queues.NAME] table (the defaults for a queue without one)."""
    from awa_cli.commands.context import CliContext
    from awa_cli.commands.worker import build_worker
    from awa_cli.terminal import Terminal
    from awa_cli.worker.queues import QueueSpec

    path = write(
        tmp_path,
        '[database]\nurl = "postgresql://awa@localhost/awa"\n'
        '[app]\nmodules = ["tests.apps.periodic_app"]\n'
        '[queues.email]\nconcurrency = 7\ndeadline = "5m"\ndead_letter = true\n'
        'priority_aging = "1m"\nclaim_ahead = false\n',
    )
    ctx = CliContext(str(path), None, False, 0, Terminal(no_color=True, quiet=True), env={})
    flagged = build_worker(ctx, ("email=3", "other=2")).queues
    assert flagged["email"] == QueueSpec("email", 3, 300.0, True, 60.0, claim_ahead=False)
    assert flagged["other"] == QueueSpec("other", 2, 0.0, False, 0.0, claim_ahead=True)
    configured = build_worker(ctx, ()).queues
    assert configured == {"email": QueueSpec("email", 7, 300.0, True, 60.0, claim_ahead=False)}
