"""The queues: the list (``/queues``), one queue's page (``/queues/NAME``) and their API twins.

A queue is known when ``awa.queues`` has a row a reason still keeps (see ``queue_list`` in
``db/sql/queues.sql``), it holds jobs, or the loaded config names it (``[queues.NAME]``).
Each row says whether it is paused (and by whom), its jobs per state, its oldest available
job's age, and how many live workers serve it; a queue with jobs ready and no live worker is
flagged, with the closest name a worker does serve (a misspelt queue, ``emial``).
The pause and resume actions are in :mod:`awa_cli.serve.controls`.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from awa_cli.queues import QueueInfo
from awa_cli.errors import QueueNotFound
from awa_cli.serve.chart import throughput_chart, throughput_json
from awa_cli.serve.common import client_of, configured_queues
from awa_cli.serve.pages import STATES, overview_table
from awa_cli.serve.routing import RouteTable, json_read, page

if TYPE_CHECKING:
    from starlette.requests import Request

    from awa_cli.client import AsyncClient
    from awa_cli.reads import WorkerInfo

RECENT_FAILURES = 10  # the failed jobs the queue page lists
ROUTES = RouteTable()


def _served(workers: list[WorkerInfo]) -> dict[str, list[WorkerInfo]]:
    served: dict[str, list[WorkerInfo]] = {}
    for worker in workers:
        for queue in worker.queues:
            served.setdefault(queue, []).append(worker)
    return served


def did_you_mean(name: str, candidates: set[str]) -> str | None:
    """The closest other queue name (``email`` for ``emial``), if one is close."""
    found = difflib.get_close_matches(name, sorted(candidates - {name}), n=1, cutoff=0.7)
    return found[0] if found else None


async def queue_table(
    client: AsyncClient, configured: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The overview's table (totals, estimates) and every known queue's row: its control
    state (``list_queues``), counts per state and oldest available age (``job_counts``) and
    the live workers serving it, by name."""
    infos = {q.queue: q for q in await client.list_queues(configured)}
    table = overview_table(await client.job_counts())
    counted = {q["queue"]: q for q in table["queues"]}
    served = _served(await client.list_workers())
    names = set(served) | set(configured)
    rows = []
    for name in sorted(set(infos) | set(counted)):
        info = infos.get(name, QueueInfo(name))
        entry = counted.get(name, {"counts": dict.fromkeys(STATES, 0), "oldest": None})
        workers = served.get(name, [])
        unserved = entry["counts"]["available"] > 0 and not workers
        rows.append(
            info.to_json()
            | {
                "counts": entry["counts"],
                "oldest_available_age_seconds": entry["oldest"],
                "workers": len(workers),
                "unserved": unserved,
                "did_you_mean": did_you_mean(name, names) if unserved else None,
            }
        )
    return table, rows


async def queue_rows(client: AsyncClient, configured: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every known queue's row (see :func:`queue_table`)."""
    return (await queue_table(client, configured))[1]


async def one_queue(client: AsyncClient, name: str, configured: tuple[str, ...]) -> dict[str, Any]:
    """The queue page: its row, the last hour's chart, each live worker serving it (its
    concurrency for the queue and the queue's jobs it runs now), its kinds, its dead letters
    and its latest failed jobs. QueueNotFound for a queue nobody knows."""
    found = [r for r in await queue_rows(client, configured) if r["queue"] == name]
    if not found:
        raise QueueNotFound(f"queue {name!r} not found")
    running = await client.running_by_worker(name)
    workers = [
        {
            "id": w.id,
            "host": w.host,
            "pid": w.pid,
            "concurrency": w.queues[name],
            "running": running.get(f"{w.host}:{w.pid}", 0),
            "heartbeat_age_seconds": round(w.heartbeat_age_seconds, 3),
        }
        for w in _served(await client.list_workers()).get(name, [])
    ]
    return {
        "queue": found[0],
        "throughput": await client.throughput(name),
        "workers": workers,
        "kinds": [k for k in await client.list_kinds() if k.queue == name],
        "dead_letters": (await client.dlq_depth(name)).total,
        "failures": await client.list_jobs_page(queue=name, state="failed", limit=RECENT_FAILURES),
    }


@ROUTES.get("/queues")
@page("queues.html")
async def queues_page(request: Request) -> dict[str, Any]:
    rows = await queue_rows(client_of(request), configured_queues(request))
    return {"queues": rows, "states": STATES, "done": request.query_params.get("done") or None}


@ROUTES.get("/queues/{queue}")
@page("queue.html")
async def queue_page(request: Request) -> dict[str, Any]:
    name = str(request.path_params["queue"])
    shown = await one_queue(client_of(request), name, configured_queues(request))
    done = request.query_params.get("done") or None
    return shown | {"chart": throughput_chart(shown["throughput"]), "states": STATES, "done": done}


@ROUTES.get("/api/queues")
@json_read
async def api_queues(request: Request) -> dict[str, Any]:
    """``{"queues": [{"queue", "paused", "paused_at", "paused_by", "dead_letter",
    "updated_at", "counts": {state: n}, "oldest_available_age_seconds", "workers",
    "unserved", "did_you_mean"}]}``."""
    return {"queues": await queue_rows(client_of(request), configured_queues(request))}


@ROUTES.get("/api/queues/{queue}")
@json_read
async def api_queue(request: Request) -> dict[str, Any]:
    """One queue: its row plus ``"throughput": [{"minute", "completed", "failed"}]``,
    ``"workers": [{"id", "host", "pid", "concurrency", "running", "heartbeat_age_seconds"}]``,
    ``"kinds"``, ``"dead_letters"`` and ``"failures"`` (its latest failed jobs)."""
    name = str(request.path_params["queue"])
    shown = await one_queue(client_of(request), name, configured_queues(request))
    row: dict[str, Any] = shown["queue"]
    return row | {
        "throughput": throughput_json(shown["throughput"]),
        "workers": shown["workers"],
        "kinds": [k.to_json() for k in shown["kinds"]],
        "dead_letters": shown["dead_letters"],
        "failures": [j.to_json() for j in shown["failures"]],
    }
