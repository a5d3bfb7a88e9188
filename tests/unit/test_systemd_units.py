"""The systemd units under systemd/: the keys the worker's design depends on (checked
everywhere, in Python), and `systemd-analyze verify` where systemd is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from awa_cli.config import WorkerConfig, parse_duration
from tests.helpers import ROOT, run_captured

UNITS = ROOT / "systemd"
WORKER_UNITS = ["awa-worker.service", "awa-worker@.service"]
SERVICES = [*WORKER_UNITS, "awa-rescue.service", "awa-serve.service"]
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
}


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections → key → values (a key may repeat), as systemd reads them (no continuations)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, (
            f"{path.name}:{number}: not KEY=VALUE in a section: {raw!r}"
        )
        assert not value.endswith("\\"), f"{path.name}:{number}: keep values on one line"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = unit[section].get(key, [])
    assert len(values) == 1, f"[{section}] {key}: expected one value, got {values}"
    return values[0]


def seconds(value: str) -> float:
    """A systemd time span as awa parses durations (both take "45", "45s", "5min" aside)."""
    return parse_duration(value.replace("min", "m").replace(" ", ""), "TimeoutStopSec")


def test_all_units_are_there() -> None:
    assert sorted(p.name for p in UNITS.iterdir()) == sorted([*SERVICES, "awa-rescue.timer"])


@pytest.mark.parametrize("name", WORKER_UNITS)
def test_worker_units_speak_notify_and_drain_within_the_stop_timeout(name: str) -> None:
    unit = parse_unit(UNITS / name)
    assert one(unit, "Service", "Type") == "notify"
    assert one(unit, "Service", "NotifyAccess") == "main"  # only the main process notifies
    assert seconds(one(unit, "Service", "WatchdogSec")) > 0
    assert seconds(one(unit, "Service", "TimeoutStopSec")) > WorkerConfig().shutdown_timeout
    assert one(unit, "Service", "KillSignal") == "SIGTERM"
    assert one(unit, "Service", "KillMode") == "mixed"  # the supervisor forwards one SIGTERM
    assert one(unit, "Service", "Restart") == "on-failure"
    # A config error (exit 2) is not restarted forever: restarting cannot fix it.
    assert one(unit, "Service", "RestartPreventExitStatus") == "2"
    exec_start = one(unit, "Service", "ExecStart").split()
    assert exec_start[:2] == ["/usr/bin/env", "awa"] and exec_start[-1] == "worker"
    assert exec_start[2] == "--config"
    assert exec_start[3] == ("/etc/awa/%i.toml" if "@" in name else "/etc/awa/awa.toml")
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


@pytest.mark.parametrize("name", SERVICES)
def test_services_run_as_a_dedicated_user_with_hardening(name: str) -> None:
    unit = parse_unit(UNITS / name)
    assert one(unit, "Service", "User") == "awa" and one(unit, "Service", "Group") == "awa"
    for key, value in HARDENING.items():
        assert one(unit, "Service", key) == value, key
    assert unit["Service"]["ReadWritePaths"]  # the only writable place (embedded data dir)


def test_rescue_runs_one_sweep_every_minute() -> None:
    service = parse_unit(UNITS / "awa-rescue.service")
    assert one(service, "Service", "Type") == "oneshot"
    assert one(service, "Service", "ExecStart").split()[-2:] == ["rescue", "run"]
    timer = parse_unit(UNITS / "awa-rescue.timer")
    assert one(timer, "Timer", "OnCalendar") == "*-*-* *:*:00"
    assert one(timer, "Timer", "Unit") == "awa-rescue.service"
    assert timer["Install"]["WantedBy"] == ["timers.target"]


def test_serve_runs_awa_serve_with_its_secrets_from_an_environment_file() -> None:
    unit = parse_unit(UNITS / "awa-serve.service")
    assert one(unit, "Service", "ExecStart").split() == [
        "/usr/bin/env",
        "awa",
        "--config",
        "/etc/awa/awa.toml",
        "serve",
    ]
    assert one(unit, "Service", "EnvironmentFile") == "-/etc/awa/serve.env"
    assert one(unit, "Service", "KillSignal") == "SIGTERM"  # awa serve exits 0 on it
    assert one(unit, "Service", "Restart") == "on-failure"
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def _systemd_analyze() -> str | None:
    path = shutil.which("systemd-analyze")
    if path is None:
        return None
    probe = subprocess.run(
        [path, "--version"], capture_output=True, text=True, check=False, timeout=20
    )
    return path if probe.returncode == 0 else None


@pytest.mark.skipif(_systemd_analyze() is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    # A template is verified through an instance; copies keep the checkout clean.
    for unit in UNITS.iterdir():
        target = "awa-worker@billing.service" if unit.name == "awa-worker@.service" else unit.name
        shutil.copyfile(unit, tmp_path / target)
    units = sorted(str(p) for p in tmp_path.iterdir())
    # ExecStart's /usr/bin/env must exist; Documentation= man pages are looked up in man/.
    assert Path("/usr/bin/env").is_file()
    env = {"PATH": "/usr/bin:/bin", "MANPATH": str(ROOT / "man"), "SYSTEMD_LOG_LEVEL": "notice"}
    proc = run_captured([str(_systemd_analyze()), "verify", *units], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stdout + proc.stderr
