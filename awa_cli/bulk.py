"""Bulk operations' model (architecture §10): the batch size, the states each operation acts
on, the filter of a bulk retry, cancel or purge of jobs, and the refusal of an unfiltered one.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from awa_cli.jobs import JobState
from awa_cli.results import ValidationError

# Rows per batch of a bulk operation or a DLQ move/retry/purge: each batch is one short
# transaction, so a large set never holds one long lock (architecture §10, issue 18).
DEFAULT_BATCH = 1000

BulkOperation = Literal["retry", "cancel", "purge"]

# The states each bulk operation accepts (`--state`), as architecture §10 lists them.
BULK_STATES: dict[BulkOperation, frozenset[JobState]] = {
    "retry": frozenset({JobState.FAILED, JobState.CANCELLED}),
    "cancel": frozenset(
        {JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE, JobState.WAITING_EXTERNAL}
    ),
    "purge": frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED}),
}


def bulk_states(operation: BulkOperation, states: Iterable[JobState | str]) -> list[JobState]:
    """The ``--state`` values of a bulk operation, checked against what it accepts.

    Raises :class:`ValidationError` naming ``state`` for an unknown state or one the operation
    does not act on (retrying a running job, purging an available one). Empty: every accepted
    state.
    """
    allowed = BULK_STATES[operation]
    try:
        chosen = [JobState(s) for s in states]
    except ValueError as exc:
        raise ValidationError("state", str(exc)) from None
    for state in chosen:
        if state not in allowed:
            names = ", ".join(sorted(allowed))
            raise ValidationError("state", f"{operation} acts on {names}, not {state}")
    return sorted(set(chosen) or allowed)


@dataclass(frozen=True)
class JobFilter:
    """Which jobs a bulk retry, cancel or purge acts on. ``states`` empty: every state the
    operation accepts; ``older_than`` (seconds since the job finished) applies to purge only;
    ``all`` allows an action with no filter at all; ``ids`` (a filter) keeps the jobs with
    those ids, ``tag`` those carrying the tag."""

    states: tuple[str, ...] = ()
    queue: str | None = None
    kind: str | None = None
    older_than: float | None = None
    all: bool = False
    tag: str | None = None  # jobs carrying this tag (the dashboard's jobs list filter)
    ids: tuple[int, ...] | None = None  # these jobs only (the ones an operator selected)

    @property
    def state(self) -> str | None:
        """The states as the audit log and the refusal name them (``failed,cancelled``)."""
        return ",".join(self.states) or None

    @property
    def id_list(self) -> str | None:
        """The ids as the audit log names them (``12,13,14``; the first 20, then ``…``)."""
        if self.ids is None:
            return None
        shown = ",".join(str(i) for i in self.ids[:20])
        return shown + ("…" if len(self.ids) > 20 else "")


def require_filter(operation: str, *, all_: bool, **filters: Any) -> None:
    """Refuse a bulk operation with no filter unless ``all`` was asked for (architecture §10).

    ``filters`` are the operation's filters by name (``queue=None, kind="k"``); with ``all``
    the given filters still apply.
    """
    if not all_ and all(value is None for value in filters.values()):
        names = ", ".join(f"--{name.replace('_', '-')}" for name in filters)
        refused = ValidationError("all", f"{operation} needs a filter ({names}) or --all")
        # One sentence, not "all: cancel needs ..." (the field stays ``all`` for callers).
        refused.args = (f"{operation} needs a filter ({names}) or --all",)
        raise refused


__all__ = [
    "BULK_STATES",
    "DEFAULT_BATCH",
    "BulkOperation",
    "JobFilter",
    "bulk_states",
    "require_filter",
]
