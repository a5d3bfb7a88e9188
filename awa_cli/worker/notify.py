"""Telling the service manager how the worker is doing: the systemd notify protocol.

Exactly one process speaks to systemd: the single worker process, or the ``--processes``
supervisor. A supervised worker speaks the same ``KEY=VALUE`` lines to its supervisor over an
inherited socket instead (``AWA_SUPERVISOR_FD``); the supervisor removes ``NOTIFY_SOCKET`` and
``WATCHDOG_*`` from its children's environment. That socket is also the child's lifeline: when
the supervisor goes away (even by SIGKILL) the child sees end-of-file and drains.

The protocol is a datagram of newline-separated ``KEY=VALUE`` assignments sent to the
``AF_UNIX`` socket named by ``$NOTIFY_SOCKET`` (a leading ``@`` means the abstract namespace);
see sd_notify(3). It is implemented here, without libsystemd.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from awa_cli.worker.runtime import Worker

log = logging.getLogger("awa.worker")

SUPERVISOR_FD_ENV = "AWA_SUPERVISOR_FD"
# What a supervised child must not inherit: it would otherwise talk to systemd itself.
SYSTEMD_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier(Protocol):
    def send(self, **fields: str | int) -> None:
        """Send one message of ``KEY=VALUE`` fields; never raises."""


def format_message(fields: Mapping[str, str | int]) -> bytes:
    """``READY=1\\nSTATUS=...``; a value never spans lines (a newline would end it)."""
    return "\n".join(
        f"{key}={' '.join(str(value).splitlines())}" for key, value in fields.items()
    ).encode()


def parse_message(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in data.decode(errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


class SystemdNotifier:
    """Datagrams to ``$NOTIFY_SOCKET``. A failed send is logged once and otherwise ignored:
    the service manager going away must not take the worker down."""

    def __init__(self, address: str) -> None:
        self.address = "\0" + address[1:] if address.startswith("@") else address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._warned = False

    def send(self, **fields: str | int) -> None:
        try:
            self._sock.sendto(format_message(fields), self.address)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot notify the service manager at %s: %s",
                    self.address.lstrip("\0"),
                    exc,
                    extra={"action": "notify_failed"},
                )

    def close(self) -> None:
        self._sock.close()


class SupervisorLink:
    """A supervised worker's end of the socket it shares with its supervisor."""

    def __init__(self, fd: int) -> None:
        self._sock = socket.socket(fileno=fd)
        self._sock.setblocking(False)

    def send(self, **fields: str | int) -> None:
        try:
            self._sock.send(format_message(fields) + b"\n\n")
        except OSError:
            pass  # the supervisor is gone; wait_closed() tells the worker

    async def wait_closed(self) -> None:
        """Return when the supervisor has closed its end (it exited or was killed)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                if not await loop.sock_recv(self._sock, 4096):
                    return
            except OSError:
                return

    def close(self) -> None:
        self._sock.close()


def systemd_notifier(env: Mapping[str, str]) -> SystemdNotifier | None:
    """The notifier for ``$NOTIFY_SOCKET``, or None when not run by systemd (or by a
    manager whose socket is not a unix path, such as ``vsock:``)."""
    address = env.get("NOTIFY_SOCKET", "")
    if address.startswith(("/", "@")) and len(address) > 1:
        return SystemdNotifier(address)
    return None


def supervisor_link(env: Mapping[str, str]) -> SupervisorLink | None:
    fd = env.get(SUPERVISOR_FD_ENV, "")
    if fd.isdigit():
        try:
            return SupervisorLink(int(fd))
        except OSError as exc:
            log.warning(
                "%s=%s is not a usable socket: %s",
                SUPERVISOR_FD_ENV,
                fd,
                exc,
                extra={"action": "notify_failed"},
            )
    return None


def watchdog_interval(env: Mapping[str, str], pid: int | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``$WATCHDOG_USEC``), or None when the
    watchdog is off or meant for another process (``$WATCHDOG_PID``)."""
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    watchdog_pid = env.get("WATCHDOG_PID", "")
    if watchdog_pid and watchdog_pid != str(os.getpid() if pid is None else pid):
        return None
    return int(usec) / 2 / 1_000_000


def queues_summary(queues: Mapping[str, int]) -> str:
    return ", ".join(f"{name}={n}" for name, n in queues.items())


async def watchdog_pings(
    notifier: Notifier, interval: float, healthy: Callable[[], bool] = lambda: True
) -> None:
    """``WATCHDOG=1`` every ``interval`` seconds until cancelled, but only while ``healthy()``
    (the worker's claim loops work, ``Worker.healthy``). The pings come from the event loop,
    so a blocked loop stops them too; either way systemd restarts the service once
    ``WatchdogSec`` passes without one (architecture §15.7)."""
    while True:
        if healthy():
            notifier.send(WATCHDOG=1)
        await asyncio.sleep(interval)


async def notify_worker_lifecycle(
    worker: Worker, stop_requested: asyncio.Event, env: Mapping[str, str]
) -> None:
    """For the single-process ``awa worker``: READY once the worker can claim (it listens and
    every queue finished a successful claim round), STATUS, WATCHDOG pings while its claim
    loops are healthy, STOPPING when the drain begins. Supervised, the same messages go to the supervisor,
    and the supervisor closing the link requests a drain. Runs until cancelled."""
    link = supervisor_link(env)
    notifier: Notifier | None = link or systemd_notifier(env)
    if notifier is None:
        return
    tasks: list[asyncio.Task[Any]] = []
    if link is not None:
        tasks.append(asyncio.create_task(_drain_when_orphaned(link, stop_requested)))
        claims_work = lambda: worker.stopping or worker.healthy()  # noqa: E731
        tasks.append(asyncio.create_task(report_health(link, claims_work)))
    interval = None if link is not None else watchdog_interval(env)
    if interval:
        tasks.append(
            asyncio.create_task(watchdog_pings(notifier, interval, _while_claiming(worker)))
        )
    try:
        status = queues_summary(worker.stats().queues)
        connected = asyncio.create_task(worker.wait_ready())
        stopping = asyncio.create_task(stop_requested.wait())
        await asyncio.wait({connected, stopping}, return_when=asyncio.FIRST_COMPLETED)
        connected.cancel()
        if not stop_requested.is_set():
            notifier.send(READY=1, STATUS=f"running 1 worker: {status}")
        await stopping
        timeout = worker.timings.shutdown_timeout
        notifier.send(
            STOPPING=1,
            STATUS=f"draining (up to {timeout:g}s)",
            EXTEND_TIMEOUT_USEC=int((timeout + 15) * 1_000_000),
        )
        await asyncio.Event().wait()  # keep the watchdog going through the drain
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _while_claiming(worker: Worker) -> Callable[[], bool]:
    """Ping once ready (READY sent) and while the claim loops work; during the drain (no
    claims) the pings go on. Before READY systemd's start timeout applies, not the watchdog.
    Once ready, a listener that lost the database does not stop the pings (an outage: a
    restart would kill the live handlers, architecture §18); ``Worker.healthy`` decides."""
    seen_ready = False

    def ping() -> bool:
        nonlocal seen_ready
        seen_ready = seen_ready or worker.is_ready()
        return worker.stopping or (seen_ready and worker.healthy())

    return ping


HEALTH_KEY = "AWA_HEALTHY"
"""A supervised child's report to its supervisor: ``AWA_HEALTHY=0`` while its claims fail,
``1`` again once they work; the supervisor pings systemd's watchdog only while every child
reports healthy."""


async def report_health(
    notifier: Notifier, healthy: Callable[[], bool], interval: float = 0.5
) -> None:
    """Send ``AWA_HEALTHY`` each time ``healthy()`` changes (checked every ``interval``)."""
    last = True
    while True:
        now = healthy()
        if now != last:
            notifier.send(**{HEALTH_KEY: int(now)})
            last = now
        await asyncio.sleep(interval)


async def _drain_when_orphaned(link: SupervisorLink, stop_requested: asyncio.Event) -> None:
    await link.wait_closed()
    if not stop_requested.is_set():
        log.warning("supervisor gone: draining", extra={"action": "worker_orphaned"})
        stop_requested.set()
