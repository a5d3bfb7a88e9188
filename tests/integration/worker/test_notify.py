"""The systemd notify protocol against a real unix datagram socket, and real `awa worker`
processes (single and supervised) reporting READY, STATUS, WATCHDOG and STOPPING."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from awa_cli.worker.notify import (
    SystemdNotifier,
    format_message,
    parse_message,
    systemd_notifier,
    watchdog_interval,
)
from tests.helpers import ROOT


class NotifySocket:
    """A bound datagram socket standing in for systemd; records each sender's pid."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.messages: list[tuple[int, dict[str, str]]] = []

    def receive(self, timeout: float) -> tuple[int, dict[str, str]] | None:
        self.sock.settimeout(timeout)
        try:
            data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
        except TimeoutError:
            return None
        pid = 0
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", payload[:12])[0]
        message = (pid, parse_message(data))
        self.messages.append(message)
        return message

    def wait_for(self, key: str, timeout: float = 20.0) -> tuple[int, dict[str, str]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.receive(max(0.01, deadline - time.monotonic()))
            if got and key in got[1]:
                return got
        raise AssertionError(f"no {key} within {timeout}s; got {self.messages}")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify_dir() -> Iterator[Path]:
    # AF_UNIX paths are limited to ~108 bytes: pytest's tmp_path can be longer.
    path = Path(tempfile.mkdtemp(prefix="awa-n-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_format_and_parse_round_trip() -> None:
    data = format_message({"READY": 1, "STATUS": "running\n2 workers"})
    assert data == b"READY=1\nSTATUS=running 2 workers"
    assert parse_message(data) == {"READY": "1", "STATUS": "running 2 workers"}


def test_notifier_sends_datagrams_to_a_path_socket(notify_dir: Path) -> None:
    server = NotifySocket(str(notify_dir / "notify.sock"))
    try:
        notifier = systemd_notifier({"NOTIFY_SOCKET": server.address})
        assert notifier is not None
        notifier.send(READY=1, STATUS="hello")
        pid, fields = server.wait_for("READY", timeout=2)
        assert pid == os.getpid() and fields == {"READY": "1", "STATUS": "hello"}
    finally:
        server.close()


def test_notifier_handles_abstract_sockets() -> None:
    server = NotifySocket(f"@awa-test-{os.getpid()}-{time.monotonic_ns()}")
    try:
        notifier = systemd_notifier({"NOTIFY_SOCKET": server.address})
        assert notifier is not None
        notifier.send(WATCHDOG=1)
        assert server.wait_for("WATCHDOG", timeout=2)[1] == {"WATCHDOG": "1"}
    finally:
        server.close()


def test_a_vanished_socket_is_not_an_error(notify_dir: Path) -> None:
    notifier = SystemdNotifier(str(notify_dir / "nobody-listens.sock"))
    notifier.send(READY=1)  # logged once, never raised
    notifier.send(READY=1)


def test_no_notifier_without_a_unix_socket() -> None:
    assert systemd_notifier({}) is None
    assert systemd_notifier({"NOTIFY_SOCKET": "vsock:2:1234"}) is None


def test_watchdog_interval() -> None:
    assert watchdog_interval({}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": str(os.getpid())}) == 0.25
    assert (
        watchdog_interval({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"}) is None
    )  # another process's


@pytest.mark.integration
@pytest.mark.parametrize("processes", [1, 2])
def test_worker_speaks_the_notify_protocol(
    dsn: str, tmp_path: Path, notify_dir: Path, processes: int
) -> None:
    config = tmp_path / "awa.toml"
    config.write_text(
        '[app]\nmodules = ["tests.apps.recording"]\n'
        "[queues.default]\nconcurrency = 3\n[queues.email]\nconcurrency = 2\n"
        '[worker]\nshutdown_timeout = "5s"\n'
    )
    server = NotifySocket(str(notify_dir / "notify.sock"))
    env = {
        **os.environ,
        "AWA_DATABASE_URL": dsn,
        "PYTHONPATH": str(ROOT),
        "NOTIFY_SOCKET": server.address,
        "WATCHDOG_USEC": "500000",
    }
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "awa_cli",
            "--config",
            str(config),
            "-q",
            "worker",
            "--processes",
            str(processes),
        ],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, ready = server.wait_for("READY")
        assert ready["READY"] == "1"
        assert (
            ready["STATUS"]
            == f"running {processes} worker{'s' if processes > 1 else ''}: default=3, email=2"
        )
        for _ in range(3):
            server.wait_for("WATCHDOG", timeout=2)
        proc.send_signal(signal.SIGTERM)
        stopping = server.wait_for("STOPPING", timeout=10)[1]
        assert stopping["STOPPING"] == "1" and stopping["STATUS"].startswith("draining")
        assert proc.wait(timeout=15) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()
    # Only the main process talks to systemd (NotifyAccess=main): never a supervised child.
    assert {sender for sender, _ in server.messages} == {proc.pid}
