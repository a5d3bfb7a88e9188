"""The App: the registry of tasks, event hooks, follow-up specs and periodic schedules. No I/O.

Importing the ``[app] modules`` of ``awa.toml`` is :mod:`awa_cli.loading`'s job.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from awa_cli.enqueue import InsertOpts, prepare
from awa_cli.errors import RegistrationError, TerminalError, ValidationError
from awa_cli.events import Outcome
from awa_cli.follow_up_specs import FollowUpRegistrars, FollowUpSpec
from awa_cli.jobs import PreparedJob
from awa_cli.jsonvalues import kind_for, rebuild_args
from awa_cli.errors import ScheduleError
from awa_cli.periodic import CatchUp, Schedule, check_name, options_json
from awa_cli.workflows import Workflow

LAUNCH_KIND = "awa_periodic_workflow"  # the job a periodic workflow's fire enqueues


def is_workflow_factory(args: Any) -> bool:
    """Whether ``app.periodic``'s ``args`` is a workflow factory (a plain callable: a
    function, not an args value, class or mapping)."""
    return (
        callable(args)
        and not isinstance(args, (type, Mapping))
        and not dataclasses.is_dataclass(args)
        and not hasattr(args, "model_dump")
    )


@dataclass(frozen=True)
class Task:
    kind: str
    args_type: type | None
    fn: Callable[..., Any]
    queue: str | None
    is_async: bool


@dataclass(frozen=True)
class Hook:
    fn: Callable[..., Any]
    args_type: type | None  # None: untyped (args as a dict)

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


class App(FollowUpRegistrars):
    """Tasks, hooks and follow-up specs, keyed by job kind."""

    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}
        # In registration order. A typed hook or spec is keyed by its args type and its kind
        # is looked up when used, so registering the task (with a kind= override, or from an
        # app merged in later) after the hook still routes it right.
        self._hooks: list[tuple[str | type, Hook]] = []
        self._specs: list[tuple[str | type, FollowUpSpec]] = []
        self._index: (
            tuple[dict[str, list[Hook]], dict[tuple[str, Outcome], list[FollowUpSpec]]] | None
        ) = None
        self._schedules: dict[str, Schedule] = {}  # periodic schedules by name, in order
        # periodic workflows (architecture §16): schedule name -> factory(fire_at) -> Workflow
        self._workflow_factories: dict[str, Callable[[datetime], Any]] = {}

    # -- tasks ---------------------------------------------------------------------------
    def task(
        self, args_type: type | None = None, *, queue: str | None = None, kind: str | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a handler for jobs whose args are ``args_type``; returns it unchanged."""
        if args_type is None and kind is None:
            raise RegistrationError("app.task needs an args type or kind=")
        job_kind = kind if kind is not None else kind_for(args_type)  # type: ignore[arg-type]

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            if not callable(fn):
                raise RegistrationError(f"handler for kind {job_kind!r} is not callable: {fn!r}")
            self._add_task(Task(job_kind, args_type, fn, queue, inspect.iscoroutinefunction(fn)))
            return fn

        return register

    def _add_task(self, task: Task) -> None:
        existing = self.tasks.get(task.kind)
        if existing is not None and existing.fn is not task.fn:
            raise RegistrationError(
                f"kind {task.kind!r} is registered twice: {_name(existing.fn)} and {_name(task.fn)}"
            )
        self.tasks[task.kind] = task
        self._index = None

    def queue_for(self, kind: str) -> str | None:
        task = self.tasks.get(kind)
        return task.queue if task else None

    def kind_of_type(self, args_type: type) -> str:
        for task in self.tasks.values():
            if task.args_type is args_type:
                return task.kind
        return kind_for(args_type)

    def args_type_for(self, kind: str) -> type | None:
        task = self.tasks.get(kind)
        return task.args_type if task else None

    # -- hooks ---------------------------------------------------------------------------
    def on_event(self, args_type: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a typed hook: ``event.args`` is rebuilt as ``args_type``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self._add_hook(args_type, Hook(fn, args_type))
            return fn

        return register

    def on_event_kind(self, kind: str, fn: Callable[..., Any] | None = None) -> Any:
        """Register an untyped hook for ``kind`` (``event.args`` is a dict)."""

        def register(f: Callable[..., Any]) -> Callable[..., Any]:
            self._add_hook(kind, Hook(f, None))
            return f

        return register if fn is None else register(fn)

    def _add_hook(self, key: str | type, hook: Hook) -> None:
        if not callable(hook.fn):
            raise RegistrationError(f"hook for {_key_name(key)} is not callable: {hook.fn!r}")
        self._hooks.append((key, hook))
        self._index = None

    def _kind(self, key: str | type) -> str:
        return key if isinstance(key, str) else self.kind_of_type(key)

    def _indexed(
        self,
    ) -> tuple[dict[str, list[Hook]], dict[tuple[str, Outcome], list[FollowUpSpec]]]:
        if self._index is None:
            hooks: dict[str, list[Hook]] = {}
            for key, hook in self._hooks:
                hooks.setdefault(self._kind(key), []).append(hook)
            specs: dict[tuple[str, Outcome], list[FollowUpSpec]] = {}
            for key, spec in self._specs:
                specs.setdefault((self._kind(key), spec.outcome), []).append(spec)
            self._index = (hooks, specs)
        return self._index

    @property
    def hooks(self) -> dict[str, list[Hook]]:
        """Hooks by kind, in registration order."""
        return self._indexed()[0]

    def hooks_for(self, kind: str) -> list[Hook]:
        return self._indexed()[0].get(kind, [])

    # -- follow-ups (the on_<outcome>_enqueue[_with] registrars: FollowUpRegistrars) ----
    @property
    def follow_ups(self) -> dict[tuple[str, Outcome], list[FollowUpSpec]]:
        """Follow-up specs by (kind, outcome), in registration order."""
        return self._indexed()[1]

    def specs_for(self, kind: str, outcome: Outcome) -> list[FollowUpSpec]:
        return self._indexed()[1].get((kind, outcome), [])

    def has_specs(self, kind: str, outcome: Outcome) -> bool:
        return bool(self._indexed()[1].get((kind, outcome)))

    # -- composition ---------------------------------------------------------------------
    def registrations(
        self,
    ) -> tuple[tuple[tuple[str | type, Hook], ...], tuple[tuple[str | type, FollowUpSpec], ...]]:
        """Every (kind or args type, hook) and (trigger, follow-up spec) pair, in
        registration order: what :meth:`merge` copies."""
        return tuple(self._hooks), tuple(self._specs)

    def merge(self, other: App) -> App:
        """Add another app's registrations to this one (a kind registered twice is an error)."""
        for task in other.tasks.values():
            if task.kind == LAUNCH_KIND:  # each app launches its own workflow factories
                self._launcher()
                continue
            self._add_task(task)
        self._workflow_factories.update(other.workflow_factories)
        hooks, specs = other.registrations()
        self._hooks.extend(hooks)
        self._specs.extend(specs)
        self._index = None
        for schedule in other.schedules.values():
            self._add_schedule(schedule)
        return self

    # -- periodic schedules (architecture §9) --------------------------------------------------------
    def periodic(
        self,
        name: str,
        cron: str,
        args: Any,
        *,
        timezone: str = "UTC",
        catch_up: CatchUp = "latest",
        **insert_options: Any,
    ) -> Schedule:
        """Enqueue a job of ``args`` at every fire time of ``cron`` (5 fields, 6 with leading
        seconds, or ``@hourly``-style) in the IANA ``timezone``, once per fire time across the
        fleet. ``catch_up`` is ``latest``, ``all`` or ``none`` (what happens to fire times
        missed while no worker ran). Insert options as for ``Client.insert`` except
        ``run_at``, which is the fire time; the kind must be registered in this app.

        Everything is checked now: a bad name, expression, time zone, policy, option or an
        unregistered kind raises ``ValidationError`` naming the schedule.
        """
        check_name(name)
        if name in self._schedules:
            raise ScheduleError(name, "name", "is registered twice")
        if is_workflow_factory(args):  # architecture §16: a workflow per fire time
            self._launcher()
            self._workflow_factories[name] = args
            args = {"schedule": name}
            insert_options = {**insert_options, "kind": LAUNCH_KIND}
        if "run_at" in insert_options:
            raise ScheduleError(name, "run_at", "is the fire time; a schedule cannot set it")
        try:
            opts = InsertOpts.from_kwargs(insert_options)
            prepared = prepare_job(self, args, opts)
        except ValidationError as exc:
            raise ScheduleError(name, exc.field, _reason(exc)) from None
        task = self.tasks.get(prepared.kind)
        if task is None:
            raise ScheduleError(
                name, "kind", f"{prepared.kind!r} is not registered as a task in this app"
            )
        data = json.loads(prepared.args_json)
        if task.args_type is not None and isinstance(args, Mapping):
            try:
                rebuild_args(task.args_type, data)
            except Exception as exc:
                raise ScheduleError(
                    name, "args", f"do not fit {task.args_type.__name__}: {exc}"
                ) from None
        options = {**options_json(opts), "queue": prepared.queue}
        schedule = Schedule(name, cron, prepared.kind, data, timezone, catch_up, options)
        self._add_schedule(schedule)
        return schedule

    def _add_schedule(self, schedule: Schedule) -> None:
        # The same definition twice is one schedule (an app merged twice, as tasks are).
        existing = self._schedules.get(schedule.name)
        if existing is not None and existing != schedule:
            raise ScheduleError(schedule.name, "name", "is registered twice")
        self._schedules[schedule.name] = schedule

    @property
    def workflow_factories(self) -> Mapping[str, Callable[[datetime], Any]]:
        """The periodic workflows' factories by schedule name (read-only)."""
        return MappingProxyType(self._workflow_factories)

    def _launcher(self) -> None:
        """Register the task that turns a periodic fire into a workflow (once per app)."""
        if LAUNCH_KIND in self.tasks:
            return
        factories = self._workflow_factories

        async def launch_workflow(job: Any) -> None:
            name = job.args["schedule"]
            factory = factories.get(name)
            if factory is None:
                raise TerminalError(f"schedule {name!r} has no workflow factory in this app")
            fire_at = job.metadata.get("awa.fire_at")
            when = datetime.fromisoformat(fire_at) if fire_at else datetime.now(UTC)
            wf = factory(when)
            if inspect.isawaitable(wf):
                wf = await wf
            if not isinstance(wf, Workflow):
                raise TerminalError(
                    f"the workflow factory of schedule {name!r} returned {type(wf).__name__}, "
                    "not an awa.Workflow"
                )
            wf.metadata.update({"awa.periodic": name, "awa.fire_at": fire_at or when.isoformat()})
            run = await job.insert_workflow(wf)  # None: this fire's workflow exists already
            job.set_output({"workflow_id": None if run is None else run.id})

        self._add_task(Task(LAUNCH_KIND, None, launch_workflow, None, True))

    @property
    def schedules(self) -> Mapping[str, Schedule]:
        """The periodic schedules by name, in registration order (read-only)."""
        return MappingProxyType(self._schedules)


def prepare_job(app: App | None, args: Any, opts: InsertOpts) -> PreparedJob:
    """Validate a job for ``app``: an unset kind is the kind its args type is registered
    with, an unset queue the queue of its kind (architecture §3); without an app, the defaults."""
    if app is not None and opts.kind is None and not isinstance(args, dict):
        opts = dataclasses.replace(opts, kind=app.kind_of_type(type(args)))
    default_queue = app.queue_for(opts.kind) if (app is not None and opts.kind) else None
    return prepare(args, opts, default_queue=default_queue)


def _reason(exc: ValidationError) -> str:
    """The message of a ValidationError without its ``field: `` prefix."""
    text = str(exc)
    prefix = f"{exc.field}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _key_name(key: str | type) -> str:
    return key if isinstance(key, str) else f"{getattr(key, '__name__', key)}"


def _name(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", "?")
    return f"{module}.{getattr(fn, '__qualname__', repr(fn))}"
