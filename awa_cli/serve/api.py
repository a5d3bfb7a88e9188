"""The admin API under ``/api/``: JSON for every page and every action (architecture §12).

Same client methods as the CLI and the pages; errors are ``{"error": "<one line>"}`` with
404 (unknown job), 409 (not in a state the action applies to), 422 (bad input), 503 (no
database). Auth and CSRF are the guard's (``auth.Guard``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awa_cli.errors import ValidationError
from awa_cli.serve.chart import throughput_json
from awa_cli.serve.common import client_of, int_param
from awa_cli.serve.pages import STATES, overview_table
from awa_cli.serve.routing import RouteTable, json_read

if TYPE_CHECKING:
    from starlette.requests import Request

MAX_LIMIT = 1000
PAGE_BYTES = 4 * 1024 * 1024  # a list page stops early (next_before set) past this many bytes
CHUNK = 100  # rows fetched per query while a page is assembled
RELATIVES = 1000  # parents and children listed by GET /api/jobs/{id} (the counts say the rest)
ROUTES = RouteTable()


@ROUTES.get("/api/stats")
@json_read
async def stats(request: Request) -> dict[str, Any]:
    """``{"total", "totals": {state: n}, "oldest_available_age_seconds", "queues": [{"queue",
    "counts": {state: n}, "oldest_available_age_seconds"}], "estimated": [state...],
    "throughput": [{"minute", "completed", "failed"}], "paused_queues": [name...],
    "dead_letters": {"total", "queues": {name: n}}}`` (estimated: states counted from a
    sample of a large table; throughput: the last hour, minutes with none left out)."""
    client = client_of(request)
    table = overview_table(await client.job_counts())
    throughput = await client.throughput()
    paused = await client.paused_queues()
    depth = await client.dlq_depth()
    return {
        "total": table["total"],
        "totals": table["totals"],
        "oldest_available_age_seconds": table["oldest_available_seconds"],
        "queues": [
            {
                "queue": q["queue"],
                "counts": q["counts"],
                "oldest_available_age_seconds": q["oldest"],
            }
            for q in table["queues"]
        ],
        "states": STATES,
        "estimated": table["estimated"],
        "throughput": throughput_json(throughput),
        "paused_queues": paused,
        "dead_letters": depth.to_json(),
    }


@ROUTES.get("/api/jobs")
@json_read
async def list_jobs(request: Request) -> dict[str, Any]:
    """``{"jobs": [...], "next_before": id | null}``: newest first; pass ``before=next_before``
    for the next page. ``limit`` is 1 to 1000 (100 by default); a page also stops once it
    holds about 4 MiB of JSON (jobs with big args), so one request's memory stays bounded."""
    q = request.query_params
    limit = int_param(request, "limit") or 100
    if limit > MAX_LIMIT:
        raise ValidationError("limit", f"must be at most {MAX_LIMIT}")
    filters = {
        "state": q.get("state") or None,
        "kind": q.get("kind") or None,
        "queue": q.get("queue") or None,
        "tag": q.get("tag") or None,
    }
    jobs, next_before = await _bounded_page(request, filters, int_param(request, "before"), limit)
    return {"jobs": jobs, "next_before": next_before}


async def _bounded_page(
    request: Request, filters: dict[str, str | None], before: int | None, limit: int
) -> tuple[list[dict[str, object]], int | None]:
    """Up to ``limit`` rows older than ``before``, fetched ``CHUNK`` at a time and cut at
    ``PAGE_BYTES``; the ``next_before`` cursor when more rows remain."""
    import json

    client = client_of(request)
    jobs: list[dict[str, object]] = []
    size = 0
    while True:
        want = min(CHUNK, limit - len(jobs))
        rows = await client.list_jobs_page(**filters, before_id=before, limit=want + 1)
        for index, row in enumerate(rows[:want]):
            data = row.to_json()
            jobs.append(data)
            before = row.id
            size += len(json.dumps(data))
            if size >= PAGE_BYTES:
                return jobs, before if index + 1 < len(rows) else None
        if len(rows) <= want:
            return jobs, None
        if len(jobs) >= limit:
            return jobs, before


@ROUTES.get("/api/jobs/{job_id:int}")
@json_read
async def get_job(request: Request) -> dict[str, Any]:
    """The row plus ``concurrency_key``, ``why_not_running``, ``limit``, ``timeline`` and
    the job's ``parents`` and ``children`` (the first 1,000 of each: id, kind, state, step;
    ``parent_count``, ``child_count``), ``workflow`` and ``batch`` (those six only for a job
    with parents, children, a workflow or a batch), as ``awa job show --json`` prints it."""
    from awa_cli.history import show_json

    client = client_of(request)
    job_id = int(request.path_params["job_id"])
    history = await client.job_history(job_id)
    status = await client.limit_status(job_id)
    relations = await client.job_relations(job_id, limit=RELATIVES)
    return show_json(history, status, relations)
