"""The audit seam: every action taken through ``awa serve`` is reported here, once.

For now it writes one structured log line (logger ``awa.audit``, ``action=audit``). When the
``awa.audit_log`` table arrives (migration 0003) this is the one function to point at it
(DESIGN §12 and §15.4: at, actor, action, target, result), through a client method.
"""

from __future__ import annotations

import logging

log = logging.getLogger("awa.audit")


def audit(actor: str, action: str, target: str, result: str) -> None:
    """Record that ``actor`` (``serve:<token name>``, ``serve:anonymous``, ``callback``) did
    ``action`` (``job.cancel``, ``job.retry``, ``callback.complete``, ``login``...) to ``target``
    (``job:42``, ``callback:<id>``) with ``result`` (``ok`` or ``error: <one line>``)."""
    log.info(
        "action=audit actor=%s verb=%s target=%s result=%s",
        actor,
        action,
        target,
        result,
        extra={"action": "audit", "actor": actor, "verb": action, "target": target},
    )
