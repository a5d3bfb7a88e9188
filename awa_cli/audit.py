"""The audit log's model (architecture §15.4): one entry of ``awa.audit_log`` and the actor a CLI
command records. Pure: nothing here does I/O beyond asking who the OS user is.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class AuditEntry:
    """One row of ``awa.audit_log``: who did what to which target, and how it ended."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str | None
    result: str
    detail: dict[str, Any]

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> AuditEntry:
        return cls(
            id=record["id"],
            at=record["at"],
            actor=record["actor"],
            action=record["action"],
            target=record["target"],
            result=record["result"],
            detail=dict(record["detail"] or {}),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "result": self.result,
            "detail": dict(self.detail),
        }


def cli_actor() -> str:
    """The audit actor of a CLI command: ``cli:<os user>`` (architecture §15.4)."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name, no passwd entry (a bare container)
        user = "unknown"
    return f"cli:{user}"


__all__ = ["AuditEntry", "cli_actor"]
