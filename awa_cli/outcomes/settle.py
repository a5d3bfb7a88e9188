"""THE hook of a transition into the rows it affects besides its own (architecture §16).

Every transition of the outcome core that commits job rows calls :func:`settle` with the
committed rows, inside its transaction, after its guarded statement and before commit:

* the children of a job that became terminal are unblocked or cancelled
  (``outcomes/dependencies.py``), transitively;
* a workflow whose last step became terminal is marked completed, failed or cancelled
  (``outcomes/workflows.py``).

Other consequences of a transition (batch counters and callbacks) are called from here,
beside these, so every transition path reaches all of them through this one door. What it
returns are further transitions (children cancelled by a failed parent) whose events the
caller dispatches after commit with its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from awa_cli.attempts import Finalized
from awa_cli.outcomes import dependencies, workflows

if TYPE_CHECKING:
    from awa_cli.outcomes.transaction import CoreState


def needs_settling(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any committed row has children or belongs to a workflow (else: nothing to do,
    no statement is run)."""
    return any(r.get("has_dependents") or r.get("workflow_id") is not None for r in records)


async def settle(
    core: CoreState, conn: psycopg.AsyncConnection[Any], records: Sequence[Mapping[str, Any]]
) -> list[Finalized]:
    """Run every consequence of the committed ``records`` in the caller's transaction."""
    if not needs_settling(records):
        return []
    items, children = await dependencies.settle(core, conn, records)
    await workflows.settle(conn, [*records, *children])
    return items


async def reopen(conn: psycopg.AsyncConnection[Any], records: Sequence[Mapping[str, Any]]) -> None:
    """The consequences of retried rows (failed or cancelled -> runnable again): descendants
    cancelled by their failure are blocked again, their workflows running again."""
    ids = [r["id"] for r in records if r.get("has_dependents") or _has_parents(r)]
    reopened = await dependencies.reopen(conn, ids)
    await workflows.reopen(conn, [*records, *reopened])


def _has_parents(record: Mapping[str, Any]) -> bool:
    metadata = record.get("metadata") or {}
    return "awa.after" in metadata
