"""The audit seam: every action taken through ``awa serve`` is recorded here, once.

Each entry goes to ``awa.audit_log`` (architecture §12 and §15.4: at, actor, action, target, result,
detail) through :meth:`AsyncClient.record_audit`, the table the CLI's admin commands write
too, and to one structured log line (logger ``awa.audit``). ``result`` is ``ok``, ``refused``
(the request was turned away: no role, read-only, not found, wrong state, bad input) or
``failed`` (the action broke: database, a follow-up spec); the reason is in ``detail``.
Writing the entry is best-effort: a database that cannot take it is logged, and the answer
to the caller is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awa_cli.client import AsyncClient

log = logging.getLogger("awa.audit")

Audit = Callable[..., Awaitable[None]]  # (actor, action, target, result, detail=None)
"""``(actor, action, target, result)``: what the callback routes and the guard are given."""


def result_of(status: int) -> str:
    """The audit result of an answered request: ``ok``, ``refused`` (4xx) or ``failed``."""
    if status < 400:
        return "ok"
    return "refused" if status < 500 else "failed"


async def audit(
    client: AsyncClient,
    actor: str,
    action: str,
    target: str,
    result: str,
    detail: dict[str, Any] | None = None,
) -> None:
    """Record that ``actor`` (``serve:<token name>``, ``serve:anonymous``, ``callback``) did
    ``action`` (``job.cancel``, ``job.retry``, ``callback.complete``, ``login``...) to ``target``
    (``job:42``, ``callback:<id>``) with ``result`` (``ok``, ``refused`` or ``failed``)."""
    log_entry(actor, action, target, result)
    try:
        await client.record_audit(actor, action, target, result, detail)
    except Exception as exc:
        log.warning(
            "audit entry not written: %s", type(exc).__name__, extra={"action": "audit_failed"}
        )


def log_entry(actor: str, action: str, target: str, result: str) -> None:
    """The ``awa.audit`` log line of an entry (also for one the outcome core wrote)."""
    log.info(
        "action=audit actor=%s verb=%s target=%s result=%s",
        actor,
        action,
        target,
        result,
        extra={"action": "audit", "actor": actor, "verb": action, "target": target},
    )


def auditor(client: AsyncClient) -> Audit:
    """:func:`audit` bound to ``client``, for the callback routes (result text
    ``ok`` or ``error: <status>``) and the guard."""

    async def record(
        actor: str, action: str, target: str, result: str, extra: dict[str, Any] | None = None
    ) -> None:
        detail: dict[str, Any] = dict(extra or {})
        if result.startswith("error: "):
            reason = result.removeprefix("error: ")
            status = int(reason) if reason.isdigit() else 500
            detail.update({"status": status} if reason.isdigit() else {"error": reason})
            result = result_of(status)
        await audit(client, actor, action, target, result, detail)

    return record
