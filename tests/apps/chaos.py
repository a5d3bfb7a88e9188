"""A test app for the chaos runs (tests/reliability): real `awa worker` processes record
every execution by job id and run lease in ``awa_test.executions``; triggers have durable
follow-ups on completion and on exhaustion; some fail terminally by design, some fail once
and retry, and some park on an external callback that a separate process resolves.

``python -m tests.apps.chaos resolve`` (``$AWA_DATABASE_URL``) is that separate process: a
loop completing the callbacks of waiting jobs (those with ``id % 4 == 0`` are left to the
test's `awa callback complete` loop for their first 20 s) through a Client bound to this app (so the
follow-ups commit with the resolution), surviving dropped connections and server restarts,
until SIGTERM. It prints ``resolved=<n> not_found=<n> errors=<n>`` on exit.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import psycopg

import awa_cli as awa
from tests.apps.base import side_table
from tests.apps.side_pool import SidePool

app = awa.App()

SIDE_TABLE = side_table(
    "executions",
    "job_id bigint NOT NULL, run_lease bigint NOT NULL, attempt int NOT NULL, kind text NOT NULL,"
    " pid int NOT NULL",
)

MODES = ("ok", "fail", "flaky", "park")

_pool = SidePool(application_name="awa-test-recorder", checked=True)


@dataclass
class ChaosJob:
    n: int
    mode: str = "ok"  # ok | fail (TerminalError) | flaky (fails its first attempt) | park
    sleep: float = 0.0


@dataclass
class ChaosDone:
    trigger_id: int


@dataclass
class ChaosLost:
    trigger_id: int
    error: str


async def record(job: awa.Job) -> None:
    await _pool.execute(
        "INSERT INTO awa_test.executions (job_id, run_lease, attempt, kind, pid) "
        "VALUES (%s, %s, %s, %s, %s)",
        (job.id, job.run_lease, job.attempt, job.kind, os.getpid()),
    )


@app.task(ChaosJob)
async def chaos_job(job: awa.Job) -> awa.JobResult | None:
    await record(job)
    if job.args.sleep:
        await asyncio.sleep(job.args.sleep)
    match job.args.mode:
        case "fail":
            raise awa.TerminalError(f"job {job.args.n} fails by design")
        case "flaky" if not any("by design" in str(e.get("error")) for e in job.errors):
            raise RuntimeError(f"job {job.args.n} fails its first attempt by design")
        case "park":
            token = await job.register_callback(timeout=600)
            return awa.WaitForCallback(token)
    return None


@app.task(ChaosDone)
async def chaos_done(job: awa.Job) -> None:
    await record(job)


@app.task(ChaosLost)
async def chaos_lost(job: awa.Job) -> None:
    await record(job)


@app.on_completed_enqueue(ChaosJob, ChaosDone)
def _done(args: ChaosJob, job: awa.JobRow) -> ChaosDone:
    return ChaosDone(trigger_id=job.id)


@app.on_exhausted_enqueue(ChaosJob, ChaosLost)
def _lost(args: ChaosJob, job: awa.JobRow, error: str, attempt: int) -> ChaosLost:
    return ChaosLost(trigger_id=job.id, error=error[:200])


# --------------------------------------------------------------------------- the resolver


def resolve_loop(dsn: str) -> int:
    stop = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    resolved = not_found = errors = 0
    client: awa.Client | None = None
    while not stop:
        try:
            if client is None:
                client = awa.Client(dsn, app=app)
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT callback_id FROM awa.jobs WHERE state = 'waiting_external' "
                        "AND callback_id IS NOT NULL AND (id % 4 <> 0 OR callback_timeout_at < "
                        "now() + interval '580 seconds') ORDER BY random() LIMIT 50"
                    ).fetchall()
                ]
            for callback_id in ids:
                try:
                    client.complete_external(callback_id, {"by": "resolver"})
                    resolved += 1
                except awa.CallbackNotFound:
                    not_found += 1  # rescued, or resolved by the CLI loop first
            if not ids:
                time.sleep(0.1)
        except (psycopg.Error, OSError, awa.AwaError) as exc:
            errors += 1
            print(
                f"resolver: {type(exc).__name__}: {str(exc).strip()[:200]}",
                file=sys.stderr,
                flush=True,
            )
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
                client = None
            time.sleep(0.3)
    if client is not None:
        client.close()
    print(f"resolved={resolved} not_found={not_found} errors={errors}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["resolve"]:
        raise SystemExit(resolve_loop(os.environ["AWA_DATABASE_URL"]))
    raise SystemExit("usage: python -m tests.apps.chaos resolve")
