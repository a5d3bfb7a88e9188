"""``awa worker --processes N``: keep N worker processes running, stop them gracefully.

The supervisor runs no jobs and no plugin hooks. Each child is a real ``awa worker
--processes 1`` (``python -m awa_cli``), started in its own session so that the terminal's
Ctrl-C reaches only the supervisor, which forwards one SIGTERM. A child that exits while the
supervisor is not stopping is restarted after a backoff (0.5 s doubling to 30 s, back to
0.5 s once a child has stayed up for a minute). A child that exits with the usage/config exit
status (2) before it was ever ready stops the whole supervisor: restarting cannot fix it.

Each child shares a socket with the supervisor (``AWA_SUPERVISOR_FD``, see notify.py): the
child reports READY/STOPPING on it, and sees end-of-file on it when the supervisor dies, so
no child outlives its supervisor. The supervisor alone speaks to systemd: READY once every
child has reported ready, STATUS on every change, STOPPING on the drain, WATCHDOG pings while
no child reports its claims failing (``AWA_HEALTHY=0``).

Signals: the first SIGTERM/SIGINT forwards SIGTERM to every child and waits for them
(exit 0 when all drained cleanly, 1 otherwise); a second SIGKILLs them and exits 1.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from awa_cli.worker.notify import (
    HEALTH_KEY,
    SUPERVISOR_FD_ENV,
    SYSTEMD_ENV,
    Notifier,
    parse_message,
    queues_summary,
    systemd_notifier,
    watchdog_interval,
    watchdog_pings,
)

log = logging.getLogger("awa.supervisor")

# The CLI's exit statuses (cli.py; this layer does not import the CLI).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# Beyond the children's own drain bound (shutdown_timeout, plus their claim and cancel grace)
# the supervisor stops waiting and kills them.
KILL_GRACE = 30.0
# Each child's slot number (1..N); the Prometheus plugin serves on prometheus_port + slot - 1.
WORKER_SLOT_ENV = "AWA_WORKER_SLOT"


@dataclass
class Backoff:
    """Restart delays: ``initial`` doubling up to ``maximum``; back to ``initial`` after a
    child ran for ``stable_after`` seconds."""

    initial: float = 0.5
    maximum: float = 30.0
    stable_after: float = 60.0
    current: float = 0.0

    def next_delay(self, uptime: float) -> float:
        if uptime >= self.stable_after or self.current == 0.0:
            self.current = self.initial
        else:
            self.current = min(self.current * 2, self.maximum)
        return self.current


@dataclass(frozen=True)
class SupervisorPlan:
    """What to run: the child's command and environment, and how to describe it."""

    argv: Sequence[str]
    env: Mapping[str, str]
    processes: int
    queues: Mapping[str, int]
    shutdown_timeout: float


@dataclass
class Slot:
    """One of the N places a worker process runs in."""

    number: int
    backoff: Backoff = field(default_factory=Backoff)
    process: asyncio.subprocess.Process | None = None
    ready: bool = False
    ever_ready: bool = False
    healthy: bool = True  # the child's last AWA_HEALTHY report (its claims work)
    started_at: float = 0.0


def child_env(env: Mapping[str, str], fd: int, slot: int | None = None) -> dict[str, str]:
    """The child's environment: no systemd variables (only the supervisor notifies), the link,
    and its slot number (``AWA_WORKER_SLOT``, 1..N: the metrics port is offset by it)."""
    out = {k: v for k, v in env.items() if k not in SYSTEMD_ENV}
    out[SUPERVISOR_FD_ENV] = str(fd)
    if slot is not None:
        out[WORKER_SLOT_ENV] = str(slot)
    return out


class Supervisor:
    def __init__(self, plan: SupervisorPlan, env: Mapping[str, str]) -> None:
        self.plan = plan
        self.notifier: Notifier | None = systemd_notifier(env)
        self.watchdog = watchdog_interval(env) if self.notifier else None
        self.slots = [Slot(n) for n in range(1, plan.processes + 1)]
        self.stop_requested = asyncio.Event()
        self.signals_seen = 0
        self.exit_code = EXIT_OK
        self.announced_ready = False

    # -- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        helpers = []
        if self.notifier and self.watchdog:
            helpers.append(
                loop.create_task(watchdog_pings(self.notifier, self.watchdog, self._healthy))
            )
        self._status()
        log.info(
            "supervising %d worker processes: %s",
            self.plan.processes,
            self._queues(),
            extra={"action": "supervisor_started"},
        )
        slots = [loop.create_task(self._keep_running(slot)) for slot in self.slots]
        await asyncio.gather(*slots)
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        log.info(
            "supervisor stopped (exit %d)", self.exit_code, extra={"action": "supervisor_stopped"}
        )
        return self.exit_code

    def _on_signal(self, signum: int) -> None:
        self.signals_seen += 1
        name = signal.Signals(signum).name
        if self.signals_seen > 1:
            log.warning(
                "received %s again: killing the worker processes",
                name,
                extra={"action": "supervisor_abort"},
            )
            self.exit_code = EXIT_FAILED
            self._signal_children(signal.SIGKILL)
            return
        log.info(
            "received %s: stopping %d worker processes",
            name,
            self._running(),
            extra={"action": "supervisor_signal"},
        )
        self._begin_stop()

    def _begin_stop(self) -> None:
        if self.stop_requested.is_set():
            return
        self.stop_requested.set()
        timeout = self.plan.shutdown_timeout
        self._notify(
            STOPPING=1,
            STATUS=f"draining {self._running()} workers (up to {timeout:g}s)",
            EXTEND_TIMEOUT_USEC=int((timeout + KILL_GRACE) * 1_000_000),
        )
        self._signal_children(signal.SIGTERM)
        asyncio.get_running_loop().call_later(timeout + KILL_GRACE, self._kill_stragglers)

    def _kill_stragglers(self) -> None:
        if self._running():
            log.warning(
                "worker processes still running after %gs: killing them",
                self.plan.shutdown_timeout + KILL_GRACE,
                extra={"action": "supervisor_abort"},
            )
            self.exit_code = EXIT_FAILED
            self._signal_children(signal.SIGKILL)

    def _signal_children(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.returncode is None:
                try:
                    slot.process.send_signal(signum)
                except ProcessLookupError:
                    pass

    # -- one slot ----------------------------------------------------------------------------
    async def _keep_running(self, slot: Slot) -> None:
        while not self.stop_requested.is_set():
            code, uptime = await self._run_child(slot)
            if self.stop_requested.is_set():
                if code not in (0, -signal.SIGTERM) and self.exit_code == EXIT_OK:
                    self.exit_code = EXIT_FAILED
                return
            if code == EXIT_USAGE and not slot.ever_ready:
                log.error(
                    "worker %d exited with status 2 (usage or config error) before it was "
                    "ready: not restarting",
                    slot.number,
                    extra={"action": "supervisor_give_up"},
                )
                self.exit_code = EXIT_USAGE
                self._begin_stop()
                return
            delay = slot.backoff.next_delay(uptime)
            _child_event(logging.WARNING, "child_restarting", slot=slot.number, delay=delay)
            self._status(restarting=slot.number, delay=delay)
            try:
                await asyncio.wait_for(self.stop_requested.wait(), timeout=delay)
            except TimeoutError:
                pass

    async def _run_child(self, slot: Slot) -> tuple[int, float]:
        """Start the slot's child, follow its reports, return its exit status and uptime."""
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                *self.plan.argv,
                env=child_env(self.plan.env, theirs.fileno(), slot.number),
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        slot.process, slot.ready, slot.started_at = process, False, time.monotonic()
        _child_event(logging.INFO, "child_started", slot=slot.number, pid=process.pid)
        if self.stop_requested.is_set():  # a signal came while it was being spawned
            process.send_signal(signal.SIGTERM)
        reports = asyncio.create_task(self._follow_reports(slot, ours))
        code = await process.wait()
        uptime = time.monotonic() - slot.started_at
        reports.cancel()
        await asyncio.gather(reports, return_exceptions=True)
        ours.close()
        slot.process, slot.ready, slot.healthy = None, False, True
        how = {"signal": signal.Signals(-code).name} if code < 0 else {"status": code}
        _child_event(
            logging.INFO if code == 0 else logging.WARNING,
            "child_exited",
            slot=slot.number,
            pid=process.pid,
            **how,
            uptime=round(uptime, 1),
        )
        if not self.stop_requested.is_set():
            self._status()
        return code, uptime

    async def _follow_reports(self, slot: Slot, sock: socket.socket) -> None:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        try:
            while True:
                try:
                    data = await reader.readuntil(b"\n\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                message = parse_message(data)
                if HEALTH_KEY in message:
                    slot.healthy = message[HEALTH_KEY] == "1"
                if message.get("READY") == "1" and not slot.ready:
                    slot.ready = slot.ever_ready = True
                    _child_event(
                        logging.INFO,
                        "child_ready",
                        slot=slot.number,
                        pid=slot.process.pid if slot.process else 0,
                    )
                    self._on_child_ready()
        finally:
            writer.transport.abort()

    def _healthy(self) -> bool:
        """Ping the watchdog once READY was sent and while no child reports failing claims
        (architecture §15.7); through the drain the pings go on."""
        if self.stop_requested.is_set():
            return True
        return self.announced_ready and all(slot.healthy for slot in self.slots)

    def _on_child_ready(self) -> None:
        if self.stop_requested.is_set():
            return
        if not self.announced_ready and all(s.ready for s in self.slots):
            self.announced_ready = True
            log.info(
                "all %d worker processes ready",
                self.plan.processes,
                extra={"action": "supervisor_ready"},
            )
            self._notify(READY=1, STATUS=self._status_text())
        else:
            self._status()

    # -- telling systemd ---------------------------------------------------------------------
    def _notify(self, **fields: Any) -> None:
        if self.notifier is not None:
            self.notifier.send(**fields)

    def _status(self, *, restarting: int | None = None, delay: float = 0.0) -> None:
        text = self._status_text()
        if restarting is not None:
            text += f"; restarting worker {restarting} in {delay:g}s"
        self._notify(STATUS=text)

    def _status_text(self) -> str:
        ready = sum(s.ready for s in self.slots)
        if ready == self.plan.processes:
            return f"running {ready} workers: {self._queues()}"
        return f"{ready}/{self.plan.processes} workers ready: {self._queues()}"

    def _queues(self) -> str:
        return queues_summary(self.plan.queues)

    def _running(self) -> int:
        return sum(1 for s in self.slots if s.process is not None and s.process.returncode is None)


def _child_event(level: int, action: str, **fields: Any) -> None:
    """One logfmt line per child start/ready/exit/restart (``action=child_exited slot=1 ...``),
    the fields attached as ``extra`` too, as the job event lines are."""
    text = " ".join(f"{key}={value}" for key, value in {"action": action, **fields}.items())
    log.log(level, "%s", text, extra={"action": action, **fields})


def supervise(plan: SupervisorPlan, env: Mapping[str, str]) -> int:
    """Run the supervisor until its children are stopped; return the exit status."""

    async def main() -> int:
        return await Supervisor(plan, env).run()

    return asyncio.run(main())
