"""Dependencies and workflows as values (architecture §16): ``after=`` parents, the
``Workflow`` graph a caller builds in Python, its validation, and what reads return.

Pure: no I/O. The insert lives in ``awa_cli/db/dependencies.py``, the transitions that
unblock or cancel children in ``awa_cli/outcomes/dependencies.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from awa_cli.errors import ValidationError
from awa_cli.jobs import JobRow, JobState

MAX_PARENTS = 10_000  # parents of one job
MAX_STEPS = 100_000  # steps of one workflow
PARENT_FAILURE_POLICIES = ("cancel", "run")
ParentFailure = Literal["cancel", "run"]
WORKFLOW_STATES = ("running", "completed", "failed", "cancelled")
WORKFLOW_ID_KEY = "awa.workflow_id"
STEP_KEY = "awa.step"
AFTER_KEY = "awa.after"  # metadata of a job with parents: how many (the handler loads them)


def parent_failure(value: Any) -> ParentFailure:
    """Validate ``on_parent_failure``."""
    if value not in PARENT_FAILURE_POLICIES:
        raise ValidationError("on_parent_failure", f"must be 'cancel' or 'run', not {value!r}")
    return "run" if value == "run" else "cancel"


def parent_ids(after: Iterable[Any] | None, field_name: str = "after") -> tuple[int, ...]:
    """The parent ids of ``after=`` (ids or ``JobRow``s), deduplicated in order."""
    if after is None:
        return ()
    if isinstance(after, (int, JobRow, str)):
        after = [after]
    ids: dict[int, None] = {}
    for item in after:
        value = item.id if isinstance(item, JobRow) else item
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValidationError(
                field_name, f"a parent must be a job id or a JobRow, not {item!r}"
            )
        ids[value] = None
    if len(ids) > MAX_PARENTS:
        raise ValidationError(field_name, f"{len(ids)} parents: at most {MAX_PARENTS} per job")
    return tuple(ids)


@dataclass(frozen=True)
class Step:
    """A step of a :class:`Workflow`: the handle ``wf.add`` returns, usable in ``after=``."""

    name: str
    args: Any = field(repr=False)
    after: tuple[Step | str | int | JobRow, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)
    on_parent_failure: ParentFailure = "cancel"


class Workflow:
    """A static graph of jobs, inserted at once by ``insert_workflow`` (validated there)."""

    def __init__(self, name: str, *, metadata: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.steps: list[Step] = []

    def add(
        self,
        step: str,
        job: Any,
        after: Iterable[Step | str | int | JobRow] | None = None,
        *,
        on_parent_failure: ParentFailure = "cancel",
        **insert_options: Any,
    ) -> Step:
        """Add step ``step`` running ``job`` (args) after the given steps or job ids, with any
        insert option; returns the step's handle."""
        handle = Step(step, job, tuple(after or ()), dict(insert_options), on_parent_failure)
        self.steps.append(handle)
        return handle

    def __len__(self) -> int:
        return len(self.steps)


@dataclass(frozen=True)
class PlannedStep:
    """A validated step: its in-workflow parents (indexes) and outside parents (job ids)."""

    index: int
    step: Step
    parents: tuple[int, ...]
    outside: tuple[int, ...]


def validate(wf: Workflow) -> list[PlannedStep]:
    """The steps with their parents resolved, or one ``ValidationError`` naming the step:
    a bad or duplicate name, an unknown parent step, a self-dependency, a cycle
    (``a -> b -> a``), too many parents, too many steps."""
    if not isinstance(wf.name, str) or not 1 <= len(wf.name) <= 200 or "\x00" in wf.name:
        raise ValidationError("workflow", "name must be 1-200 characters without NUL")
    if not wf.steps:
        raise ValidationError(f"workflow {wf.name!r}", "has no steps")
    if len(wf.steps) > MAX_STEPS:
        raise ValidationError(
            f"workflow {wf.name!r}", f"{len(wf.steps)} steps: at most {MAX_STEPS}"
        )
    index: dict[str, int] = {}
    for i, step in enumerate(wf.steps):
        if not isinstance(step.name, str) or not 1 <= len(step.name) <= 200 or "\x00" in step.name:
            raise ValidationError(f"step {step.name!r}", "name must be 1-200 characters")
        if step.name in index:
            raise ValidationError(f"step {step.name!r}", "duplicate step name")
        parent_failure(step.on_parent_failure)
        index[step.name] = i
    planned = [_plan_step(i, step, index, wf) for i, step in enumerate(wf.steps)]
    cycle = find_cycle([p.parents for p in planned])
    if cycle:
        names = " -> ".join(wf.steps[i].name for i in cycle)
        raise ValidationError(f"step {wf.steps[cycle[0]].name!r}", f"cycle {names}")
    return planned


def _plan_step(i: int, step: Step, index: Mapping[str, int], wf: Workflow) -> PlannedStep:
    inside: dict[int, None] = {}
    outside: dict[int, None] = {}
    for parent in step.after:
        if isinstance(parent, (Step, str)):
            name = parent.name if isinstance(parent, Step) else parent
            if name == step.name:
                raise ValidationError(f"step {step.name!r}", "depends on itself")
            if name not in index or (
                isinstance(parent, Step) and wf.steps[index[name]] is not parent
            ):
                raise ValidationError(f"step {step.name!r}", f"unknown step {name!r} in after")
            inside[index[name]] = None
        else:
            outside.update(dict.fromkeys(parent_ids([parent], f"step {step.name!r}")))
    if len(inside) + len(outside) > MAX_PARENTS:
        raise ValidationError(
            f"step {step.name!r}",
            f"{len(inside) + len(outside)} parents: at most {MAX_PARENTS} per job",
        )
    return PlannedStep(i, step, tuple(inside), tuple(outside))


def find_cycle(parents: Sequence[Sequence[int]]) -> list[int] | None:
    """A cycle in the graph (node -> its parents) as a closed path ``[a, b, ..., a]`` in
    dependency order (a runs after b ... after a), or None. Iterative: deep graphs are fine."""
    white, grey, black = 0, 1, 2
    colour = [white] * len(parents)
    for root in range(len(parents)):
        if colour[root] != white:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[int] = [root]
        colour[root] = grey
        while stack:
            node, at = stack[-1]
            if at < len(parents[node]):
                stack[-1] = (node, at + 1)
                nxt = parents[node][at]
                if colour[nxt] == grey:
                    start = path.index(nxt)
                    return [*path[start:], nxt]
                if colour[nxt] == white:
                    colour[nxt] = grey
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                colour[node] = black
                stack.pop()
                path.pop()
    return None


def workflow_state(counts: Mapping[str, int], cancelled: bool = False) -> str:
    """A workflow's state from its steps' counts: completed when every step is, failed when
    a step failed and nothing can run any more, cancelled when cancelled (or when steps were
    cancelled and none failed), else running."""
    total = sum(counts.values())
    terminal = sum(counts.get(s, 0) for s in ("completed", "failed", "cancelled"))
    if total and terminal < total:
        return "running"
    if cancelled:
        return "cancelled"
    if counts.get("failed", 0):
        return "failed"
    if counts.get("cancelled", 0):
        return "cancelled"
    return "completed"


@dataclass(frozen=True)
class ParentInfo:
    """One parent of a job as its handler sees it (``job.parents``)."""

    id: int
    state: JobState
    step: str | None = None


@dataclass(frozen=True)
class WorkflowRun:
    """A workflow: ``insert_workflow`` returns it, ``get_workflow`` / ``list_workflows`` read
    it. ``steps`` maps each step name to its job (empty from ``list_workflows``); ``counts``
    is the number of steps per state."""

    id: int
    name: str
    state: str
    steps: dict[str, JobRow] = field(default_factory=dict)
    created_at: datetime | None = None
    finished_at: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "state": self.state,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "counts": dict(self.counts),
            "metadata": dict(self.metadata),
            "steps": {
                name: {"id": row.id, "kind": row.kind, "state": str(row.state)}
                for name, row in self.steps.items()
            },
        }


def blocked_reason(parents: Sequence[tuple[int, str]]) -> str:
    """``why_not_running`` for a blocked job: "blocked on parents 12 (running), 13 (available)"
    (the parents not yet completed; at most 20 named)."""
    shown = ", ".join(f"{pid} ({state})" for pid, state in parents[:20])
    more = f" and {len(parents) - 20} more" if len(parents) > 20 else ""
    return f"blocked on parents {shown}{more}"


@dataclass(frozen=True)
class Relative:
    """A parent or child of a job: ``state`` is a job state, ``failed (dead letter)`` or
    ``deleted`` (pruned); ``step`` its step name in a workflow."""

    id: int
    kind: str | None
    state: str
    step: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "state": self.state, "step": self.step}

    def label(self) -> str:
        """``job 12: extract, running (step extract)``."""
        step = f" (step {self.step})" if self.step is not None else ""
        return f"job {self.id}: {self.kind or '?'}, {self.state}{step}"


@dataclass(frozen=True)
class JobRelations:
    """A job's place in the graph (architecture §16): its parents and children (the first
    ones by id; ``parent_count`` and ``child_count`` say how many there are), the workflow
    and step it is part of, and the batch it belongs to (``batch_callback`` set when it is
    one of the batch's callback jobs rather than a member)."""

    parents: list[Relative] = field(default_factory=list)
    children: list[Relative] = field(default_factory=list)
    parent_count: int = 0
    child_count: int = 0
    workflow_id: int | None = None
    workflow_name: str | None = None
    step: str | None = None
    batch_id: int | None = None
    batch_callback: str | None = None

    @property
    def empty(self) -> bool:
        """No parents, no children, no workflow, no batch: a plain job."""
        return not (self.parent_count or self.child_count) and (
            self.workflow_id is None and self.batch_id is None
        )

    def to_json(self) -> dict[str, Any]:
        workflow = None
        if self.workflow_id is not None:
            workflow = {"id": self.workflow_id, "name": self.workflow_name, "step": self.step}
        batch = None
        if self.batch_id is not None:
            batch = {"id": self.batch_id, "callback": self.batch_callback}
        return {
            "parents": [p.to_json() for p in self.parents],
            "children": [c.to_json() for c in self.children],
            "parent_count": self.parent_count,
            "child_count": self.child_count,
            "workflow": workflow,
            "batch": batch,
        }

    def lines(self) -> list[str]:
        """The relations as text, one fact a line (``awa job show``); none: no lines."""
        out: list[str] = []
        if self.workflow_id is not None:
            name = f" {self.workflow_name!r}" if self.workflow_name is not None else ""
            out.append(f"workflow: {self.workflow_id}{name}, step {self.step or '?'}")
        if self.batch_id is not None:
            role = f"{self.batch_callback} callback of" if self.batch_callback else "member of"
            out.append(f"batch: {role} batch {self.batch_id}")
        for title, shown, total in (
            ("parents", self.parents, self.parent_count),
            ("children", self.children, self.child_count),
        ):
            if total:
                first = f"first {len(shown)} of " if total > len(shown) else ""
                out.append(f"{title} ({first}{total}):")
                out.extend(f"  {r.label()}" for r in shown)
        return out


def split_after(options: dict[str, Any]) -> tuple[tuple[int, ...], ParentFailure]:
    """Take ``after`` and ``on_parent_failure`` out of insert options: (parent ids, policy)."""
    parents = parent_ids(options.pop("after", None))
    policy = parent_failure(options.pop("on_parent_failure", "cancel"))
    return parents, policy


_STATE_VALUES = frozenset(s.value for s in JobState)


def parent_infos(rows: Sequence[Mapping[str, Any]]) -> tuple[list[ParentInfo], dict[Any, Any]]:
    """``job.parents`` and ``job.parent_outputs`` (keyed by step name, else parent id) from
    :func:`parents_of` rows."""
    infos = []
    outputs: dict[Any, Any] = {}
    for r in rows:
        state = r["state"]
        known = state in _STATE_VALUES
        infos.append(ParentInfo(r["id"], JobState(state) if known else JobState.FAILED, r["step"]))
        if state == "completed":
            outputs[r["step"] if r["step"] is not None else r["id"]] = r["output"]
    return infos, outputs
