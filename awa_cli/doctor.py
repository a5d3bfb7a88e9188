"""`awa doctor`'s checks: what is wrong with a deployment, each with a one-line fix (architecture §14).

:func:`diagnose` connects to the database and runs every check in order; each returns a
:class:`Check` whose ``status`` is ``ok``, ``warn`` or ``fail``. A failed check means awa is
not working as it should (the schema is missing, notifications never arrive, jobs sit
unrescued, vacuum is held back); a warning means it works but something will hurt (no
leader right now, a backlog, bloat). The CLI renders them; nothing here prints.

Decisions:

- ``leader``: no session holding the maintenance lock is a *warning*, since a database with
  no worker running right now is not broken by itself; jobs that a leader should have rescued
  and did not (``stuck_rescues``) are the *failure*.
- ``max_connections``: what the configured workers need is computed from the worker's pool
  sizes (:func:`connections_per_worker`), times ``[worker] processes``.
- ``table_bloat``: a warning from 1,000 dead tuples and 20 % of the live ones, a failure
  from 10,000 dead tuples outnumbering the live ones (claims then wade through garbage).
- ``long_transactions``: a transaction in awa's database open longer than the threshold
  (default 5 minutes) that holds back vacuum's horizon fails; one that holds no snapshot
  warns.
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_cli import defaults
from awa_cli.db import doctor as reads
from awa_cli.db.dsn import redact
from awa_cli.db.migrations import available
from awa_cli.db.roundtrip import notify_round_trip
from awa_cli.maintenance import LEADER_LOCK_KEY

CONNECT_TIMEOUT = 5
MIN_SERVER_VERSION = 140000

DEAD_WARN, DEAD_WARN_RATIO = 1_000, 0.2
DEAD_FAIL = 10_000


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One check's verdict; ``fix`` is one line saying what to do (None when ok)."""

    name: str
    status: Status
    detail: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": str(self.status),
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class DoctorOptions:
    """What the checks compare against; the CLI fills it from the config."""

    heartbeat_staleness: float = 15.0
    processes: int = 1
    queues: int = 1
    long_transaction_threshold: float = 300.0
    oldest_available_warn: float = 300.0
    oldest_available_fail: float = 3600.0
    notify_timeout: float = 2.0
    listen_url: str | None = None  # [database] listen_url: where workers LISTEN


def connections_per_worker(queues: int) -> int:
    """Connections one worker process opens at most: its pool (10 + one per queue), the claim
    pool (one per queue + 1), the listener and the maintenance lock (mirrors worker/runtime)."""
    return (10 + queues) + (queues + 1) + 1 + 1


def failed(checks: list[Check]) -> bool:
    return any(c.status is Status.FAIL for c in checks)


async def diagnose(dsn: str, options: DoctorOptions | None = None) -> list[Check]:
    """Run every check against ``dsn``; an unreachable database is one failed check."""
    options = options or DoctorOptions()
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT, row_factory=dict_row
        )
    except (psycopg.Error, OSError) as exc:
        return [
            Check(
                "database",
                Status.FAIL,
                f"cannot connect: {_one_line(exc)}",
                "check --database-url / $AWA_DATABASE_URL / [database] url and that PostgreSQL is up",
            )
        ]
    async with conn:
        await reads.limit_statements(conn)
        checks = [Check("database", Status.OK, "connected")]
        schema, has_jobs = await check_schema(conn)
        checks.append(schema)
        checks.extend(await check_server(conn, options))
        steps: list[tuple[str, Callable[[], Awaitable[Check]]]] = [
            (
                "listen_notify",
                lambda: check_listen_notify(
                    conn, dsn, options.notify_timeout, listen_url=options.listen_url
                ),
            ),
            ("leader", lambda: check_leader(conn)),
            ("limits", lambda: check_limits_agree(conn)),
        ]
        if has_jobs:
            stale = options.heartbeat_staleness * 3
            staleness = options.heartbeat_staleness
            steps.append(("claims", lambda: check_claims(conn)))
            steps.append(("dead_workers", lambda: check_dead_workers(conn, staleness)))
            steps.append(("stuck_rescues", lambda: check_stuck_rescues(conn, stale)))
            steps.append(("oldest_available", lambda: check_oldest_available(conn, options)))
        steps.append(("table_bloat", lambda: check_table_bloat(conn)))
        long_tx = options.long_transaction_threshold
        steps.append(("long_transactions", lambda: check_long_transactions(conn, long_tx)))
        for name, step in steps:
            checks.append(await guarded(name, step))
        return checks


async def guarded(name: str, step: Callable[[], Awaitable[Check]]) -> Check:
    """Run one check; one whose own query failed (a timeout, a refused second connection)
    is a failed check, not a crashed doctor, and the others still report."""
    try:
        return await step()
    except (psycopg.Error, OSError) as exc:
        return Check(
            name,
            Status.FAIL,
            f"the check itself failed: {_one_line(exc)}",
            "resolve the error shown, then run `awa doctor` again",
        )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return redact(text.splitlines()[0] if text else type(exc).__name__)


async def check_schema(conn: psycopg.AsyncConnection[Any]) -> tuple[Check, bool]:
    """The applied migrations against those this awa ships; and whether awa.jobs exists."""
    found = await reads.schema_presence(conn)
    shipped = [m.version for m in available()]
    latest = shipped[-1]
    if not found["has_ledger"]:
        return Check(
            "schema", Status.FAIL, "awa's schema is not installed", "run `awa migrate`"
        ), bool(found["has_jobs"])
    if not found["can_read_ledger"]:
        # The README's least-privilege role may not read the ledger: say so, check the rest.
        return Check(
            "schema",
            Status.WARN,
            "cannot verify: this role may not read awa.schema_migrations "
            "(the README's least-privilege role)",
            "run `awa doctor` (or `awa migrate --status`) as the schema's owner to check migrations",
        ), bool(found["has_jobs"])
    applied = await reads.applied_versions(conn)
    missing = [v for v in shipped if v not in applied]
    unknown = [v for v in applied if v not in shipped]
    current = max(applied, default=0)
    if missing:
        names = ", ".join(f"{v:04d}" for v in missing)
        check = Check(
            "schema",
            Status.FAIL,
            f"version {current:04d}, this awa ships {latest:04d}: pending {names}",
            "run `awa migrate`",
        )
    elif unknown:
        check = Check(
            "schema",
            Status.WARN,
            f"version {current:04d} is newer than this awa knows ({latest:04d})",
            "upgrade awa-worker on this host to the version that migrated the database",
        )
    else:
        check = Check("schema", Status.OK, f"version {current:04d} (current)")
    return check, bool(found["has_jobs"])


async def check_server(conn: psycopg.AsyncConnection[Any], options: DoctorOptions) -> list[Check]:
    """Server version, durability settings, and connections against what the workers need."""
    s = await reads.server(conn)
    checks = []
    if s["version_num"] < MIN_SERVER_VERSION:
        checks.append(
            Check(
                "server",
                Status.WARN,
                f"PostgreSQL {s['version']} is past its end of life",
                "upgrade PostgreSQL to a supported major version (14 or later)",
            )
        )
    else:
        checks.append(Check("server", Status.OK, f"PostgreSQL {s['version']}"))
    durable = s["synchronous_commit"] != "off" and s["fsync"] == "on"
    checks.append(
        Check(
            "synchronous_commit",
            Status.OK if durable else Status.WARN,
            f"synchronous_commit = {s['synchronous_commit']}, fsync = {s['fsync']}",
            None
            if durable
            else "a crash can lose committed jobs and outcomes: set synchronous_commit = on and fsync = on",
        )
    )
    checks.append(_connections_check(s, options))
    return checks


def _connections_check(s: dict[str, Any], options: DoctorOptions) -> Check:
    usable = s["max_connections"] - s["reserved_connections"]
    needed = options.processes * connections_per_worker(options.queues)
    detail = (
        f"max_connections = {s['max_connections']} ({usable} usable), "
        f"{s['connections_in_use']} in use; one awa worker host needs up to {needed}"
    )
    fix = (
        f"raise max_connections above {needed + s['reserved_connections']}, "
        "lower [worker] processes, or put a session-mode pooler in front"
    )
    if needed > usable:
        return Check("max_connections", Status.FAIL, detail, fix)
    if needed + s["connections_in_use"] > usable:
        return Check("max_connections", Status.WARN, detail, fix)
    return Check("max_connections", Status.OK, detail)


async def check_listen_notify(
    conn: psycopg.AsyncConnection[Any], dsn: str, timeout: float, listen_url: str | None = None
) -> Check:
    """A notification sent from a second connection (on ``dsn``, as the jobs' inserts are)
    must reach a listener within ``timeout``: on ``listen_url`` when given (where workers
    LISTEN), else on ``conn``."""
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT, prepare_threshold=None
    ) as sender:
        if listen_url is None:
            elapsed = await notify_round_trip(conn, sender=sender, timeout=timeout)
            return judge_round_trip(elapsed, timeout)
        async with await psycopg.AsyncConnection.connect(
            listen_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT, prepare_threshold=None
        ) as listener:
            elapsed = await notify_round_trip(listener, sender=sender, timeout=timeout)
    return judge_round_trip(elapsed, timeout, listen_url is not None)


def judge_round_trip(elapsed: float | None, timeout: float, on_listen_url: bool = False) -> Check:
    """The ``listen_notify`` verdict for a round trip that took ``elapsed`` s (None: lost)."""
    if elapsed is None:
        where = "[database] listen_url" if on_listen_url else "this URL"
        return Check(
            "listen_notify",
            Status.FAIL,
            f"a NOTIFY did not reach its listener on {where} within {timeout:g}s: NOTIFY does "
            "not cross a transaction-mode pooler; workers poll, and their leader election "
            "needs a session too",
            "set [database] listen_url to a direct (or session-mode pooler) URL of the same "
            "database, used only for LISTEN and the leader's lock; or use a session-mode pooler",
        )
    via = " (on [database] listen_url)" if on_listen_url else ""
    return Check("listen_notify", Status.OK, f"round trip in {elapsed * 1000:.1f} ms{via}")


async def check_leader(conn: psycopg.AsyncConnection[Any]) -> Check:
    """Some session holds the maintenance leader's advisory lock."""
    rows = await reads.leader(conn, LEADER_LOCK_KEY, defaults.WORKER_STALENESS)
    if not rows:
        return Check(
            "leader",
            Status.WARN,
            "no maintenance leader: no worker is running on this database",
            "start `awa worker` (or run `awa rescue run` from a timer); rescue and retention wait for one",
        )
    leader = rows[0]
    where = leader["client_addr"] or "local socket"
    app_name = leader["application_name"] or "?"
    if leader["worker_host"] is not None:  # the leader's own row names it (migration 0013)
        who = f"{leader['worker_host']}:{leader['worker_pid']}"
        return Check(
            "leader", Status.OK, f"held by worker {who} ({app_name}, backend pid {leader['pid']})"
        )
    return Check(
        "leader",
        Status.OK,
        f"held by backend pid {leader['pid']} ({app_name}, {where}; no live worker row names it)",
    )


async def check_limits_agree(conn: psycopg.AsyncConnection[Any]) -> Check:
    """The live workers enforce one set of [limits] (the digest each records), and it is
    the announced one (architecture §13)."""
    from awa_cli.db import limits as limits_table
    from awa_cli.limits import limits_digest

    try:
        live = await limits_table.live_digests(conn, defaults.WORKER_STALENESS)
    except psycopg.errors.UndefinedColumn:
        return Check(
            "limits", Status.WARN, "not checked: needs migration 0009", "run `awa migrate`"
        )
    by_digest: dict[str, list[str]] = {}
    for w in live:
        if w["limits_digest"] is not None:
            by_digest.setdefault(w["limits_digest"], []).append(f"{w['host']}:{w['pid']}")
    if len(by_digest) > 1:
        groups = "; ".join(f"{', '.join(ws)} enforce {d}" for d, ws in sorted(by_digest.items()))
        return Check(
            "limits",
            Status.FAIL,
            f"live workers enforce different [limits]: {groups}",
            "restart every worker with the same [limits] tables (awa worker logs the "
            "difference at ERROR)",
        )
    if not by_digest:
        return Check("limits", Status.OK, "no live worker")
    ((digest, workers),) = by_digest.items()
    try:
        async with conn.transaction():
            announced = limits_digest(await limits_table.announced(conn))
    except psycopg.errors.InsufficientPrivilege:
        return Check("limits", Status.OK, f"{len(workers)} live workers agree ({digest})")
    if announced != digest and digest != limits_digest([]):
        return Check(
            "limits",
            Status.FAIL,
            f"the announced limits ({announced}) are not those the live workers enforce "
            f"({digest}): awa job show and the gauge report the wrong ones",
            "restart a worker with the fleet's [limits] (it announces them again)",
        )
    return Check("limits", Status.OK, f"{len(workers)} live workers agree ({digest})")


async def check_claims(conn: psycopg.AsyncConnection[Any]) -> Check:
    """Live workers whose claims fail (each writes since when and why in awa.workers)."""
    rows = await reads.failing_claims(conn, defaults.WORKER_STALENESS)
    if not rows:
        return Check("claims", Status.OK, "no live worker reports failing claims")
    first = rows[0]
    others = f" (and {len(rows) - 1} more worker(s))" if len(rows) > 1 else ""
    return Check(
        "claims",
        Status.FAIL,
        f"worker {first['host']}:{first['pid']} cannot claim for {_age(first['failing_for'])}: "
        f"{first['claim_error']}{others}",
        "fix the error shown (a missing grant: see the README's least-privilege role); "
        "workers recover without a restart",
    )


async def check_dead_workers(conn: psycopg.AsyncConnection[Any], staleness: float) -> Check:
    """Running jobs held by a worker that is gone: its process is not alive (same host), or it
    has no live row in awa.workers and the jobs' heartbeats are older than staleness."""
    rows = await reads.held_jobs(conn, defaults.WORKER_STALENESS)
    dead = [r for r in rows if _held_by_dead_worker(r, staleness)]
    if not dead:
        return Check("dead_workers", Status.OK, "every running job is held by a live worker")
    jobs = sum(r["jobs"] for r in dead)
    holders = ", ".join(f"{r['attempted_by'] or 'unknown'} ({r['jobs']})" for r in dead[:5])
    return Check(
        "dead_workers",
        Status.FAIL,
        f"{jobs} running job(s) held by worker(s) no longer alive: {holders}",
        f"the leader rescues them once their heartbeat is {staleness:g}s old; "
        "or run `awa rescue run` now",
    )


def _held_by_dead_worker(row: Mapping[str, Any], staleness: float) -> bool:
    holder = row["attempted_by"]
    if holder and _local_process_gone(holder):
        return True
    return not row["live_row"] and (row["heartbeat_age"] or 0.0) > staleness


def _local_process_gone(holder: str) -> bool:
    """Whether ``host:pid`` names a process of this host that does not run (or is a zombie)."""
    host, _, pid_text = holder.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


async def check_stuck_rescues(conn: psycopg.AsyncConnection[Any], threshold: float) -> Check:
    """Jobs a working leader would have rescued: overdue by 3 × heartbeat_staleness."""
    r = await reads.stuck_rescues(conn, threshold)
    total = r["overdue"]
    if not total:
        return Check("stuck_rescues", Status.OK, "no job overdue for rescue")
    return Check(
        "stuck_rescues",
        Status.FAIL,
        f"{total} job(s) overdue for rescue by more than {threshold:g}s "
        f"({r['stale_heartbeats']} stale heartbeats, {r['past_deadline']} past deadline, "
        f"{r['expired_callbacks']} expired callbacks; oldest {r['oldest_age']:.0f}s)",
        "no leader is sweeping: start `awa worker`, or run `awa rescue run` now",
    )


async def check_oldest_available(
    conn: psycopg.AsyncConnection[Any], options: DoctorOptions
) -> Check:
    """How long the longest-waiting due job has waited to be claimed."""
    rows = await reads.oldest_available(conn)
    if not rows:
        return Check("oldest_available", Status.OK, "no job waiting to be claimed")
    job = rows[0]
    age = job["age"]
    detail = f"job {job['id']} in queue {job['queue']!r} has waited {_age(age)}"
    fix = f"add workers or concurrency for queue {job['queue']!r}, or check that a worker serves it"
    if age > options.oldest_available_fail:
        return Check("oldest_available", Status.FAIL, detail, fix)
    if age > options.oldest_available_warn:
        return Check("oldest_available", Status.WARN, detail, fix)
    return Check("oldest_available", Status.OK, detail)


async def check_table_bloat(conn: psycopg.AsyncConnection[Any]) -> Check:
    """Dead tuples of awa's tables against their live ones (the worst table decides)."""
    rows = await reads.table_stats(conn)
    if not rows:
        return Check("table_bloat", Status.OK, "no awa tables")
    worst = Status.OK
    notes = []
    for t in rows:
        dead, live = t["dead"], t["live"]
        status = Status.OK
        if dead >= DEAD_FAIL and dead > live:
            status = Status.FAIL
        elif dead >= DEAD_WARN and dead >= DEAD_WARN_RATIO * live:
            status = Status.WARN
        if status is not Status.OK or t["autovacuum_off"]:
            vacuumed = (
                t["last_vacuum"].isoformat(timespec="seconds") if t["last_vacuum"] else "never"
            )
            off = ", autovacuum off" if t["autovacuum_off"] else ""
            notes.append(
                f"awa.{t['table_name']}: {dead} dead / {live} live, vacuumed {vacuumed}{off}"
            )
            worst = max(worst, status, Status.WARN if t["autovacuum_off"] else Status.OK, key=_rank)
    if worst is Status.OK:
        top = rows[0]
        return Check(
            "table_bloat", Status.OK, f"most dead tuples: awa.{top['table_name']} {top['dead']}"
        )
    return Check(
        "table_bloat",
        worst,
        "; ".join(notes),
        "VACUUM (ANALYZE) the table, keep autovacuum on for awa's tables, end long transactions",
    )


def _rank(status: Status) -> int:
    return (Status.OK, Status.WARN, Status.FAIL).index(status)


async def check_long_transactions(conn: psycopg.AsyncConnection[Any], threshold: float) -> Check:
    """Transactions open longer than ``threshold`` in awa's database (they stall vacuum)."""
    rows = await reads.long_transactions(conn, threshold)
    if not rows:
        return Check("long_transactions", Status.OK, f"none open longer than {_age(threshold)}")
    holding = [r for r in rows if r["holds_horizon"]]
    oldest = rows[0]
    detail = (
        f"{len(rows)} transaction(s) open longer than {_age(threshold)}, {len(holding)} holding "
        f"back vacuum; oldest pid {oldest['pid']} ({oldest['state']}, "
        f"{oldest['application_name'] or '?'}) for {_age(oldest['age'])}"
    )
    fix = f"end backend {oldest['pid']} with pg_terminate_backend, or fix the client that leaves it open"
    return Check("long_transactions", Status.FAIL if holding else Status.WARN, detail, fix)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"
