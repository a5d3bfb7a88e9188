"""Durable follow-up specs: the ``App.on_<outcome>_enqueue[_with]`` registrars, written out.

Pure: no I/O. A spec is a plain function the outcome core calls inside the transition's
transaction with ``(args, job, *context)``; what the context is depends on the outcome
(:data:`SPEC_PARAMETERS`, the table in the README's "Durable follow-ups"). A function that
cannot take those arguments is refused when it is registered, at import time, rather than
failing at run time (for rescue: on every sweep).

:class:`FollowUpRegistrars` is a mixin of :class:`awa_cli.app.App`; it keeps the twelve
registrars out of ``app.py`` so that each can carry its own signature and docstring.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias, overload

from awa_cli.enqueue import EnqueueRequest
from awa_cli.errors import RegistrationError
from awa_cli.events import Outcome, RescueReason
from awa_cli.jobs import JobRow

# What each outcome passes after (args, job): the names of the spec's parameters.
SPEC_PARAMETERS: dict[Outcome, tuple[str, ...]] = {
    Outcome.COMPLETED: ("args", "job"),
    Outcome.CANCELLED: ("args", "job", "reason"),
    Outcome.RETRIED: ("args", "job", "error", "attempt", "next_run_at"),
    Outcome.EXHAUSTED: ("args", "job", "error", "attempt"),
    Outcome.WAITING_FOR_CALLBACK: ("args", "job"),
    Outcome.RESCUED: ("args", "job", "reason"),
}

Trigger: TypeAlias = type | str  # the trigger's args type, or its kind

# The plain form returns the follow-up's args; the ``_with`` form an EnqueueRequest or None.
CompletedSpec: TypeAlias = Callable[[Any, JobRow], Any]
CompletedSpecWith: TypeAlias = Callable[[Any, JobRow], EnqueueRequest | None]
CancelledSpec: TypeAlias = Callable[[Any, JobRow, str], Any]
CancelledSpecWith: TypeAlias = Callable[[Any, JobRow, str], EnqueueRequest | None]
RetriedSpec: TypeAlias = Callable[[Any, JobRow, str, int, datetime | None], Any]
RetriedSpecWith: TypeAlias = Callable[
    [Any, JobRow, str, int, datetime | None], EnqueueRequest | None
]
ExhaustedSpec: TypeAlias = Callable[[Any, JobRow, str, int], Any]
ExhaustedSpecWith: TypeAlias = Callable[[Any, JobRow, str, int], EnqueueRequest | None]
WaitingSpec: TypeAlias = Callable[[Any, JobRow], Any]
WaitingSpecWith: TypeAlias = Callable[[Any, JobRow], EnqueueRequest | None]
RescuedSpec: TypeAlias = Callable[[Any, JobRow, RescueReason], Any]
RescuedSpecWith: TypeAlias = Callable[[Any, JobRow, RescueReason], EnqueueRequest | None]


def expected_signature(outcome: Outcome) -> str:
    """``fn(args, job, reason)``: how a spec for ``outcome`` is called."""
    return f"fn({', '.join(SPEC_PARAMETERS[outcome])})"


def check_spec_signature(outcome: Outcome, fn: Callable[..., Any], name: str) -> None:
    """Raise :class:`RegistrationError` unless ``fn`` can be called the way ``outcome``
    calls a spec (extra parameters with defaults and ``*args`` are fine)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: trust it
        return
    try:
        signature.bind(*SPEC_PARAMETERS[outcome])
    except TypeError as exc:
        registrar = f"on_{outcome.value}_enqueue"
        raise RegistrationError(
            f"follow-up spec {name} for {registrar} must take {expected_signature(outcome)}, "
            f"but its signature is {name}{signature} ({exc})"
        ) from None


@dataclass(frozen=True)
class FollowUpSpec:
    """A registered ``on_<outcome>_enqueue[_with]``: builds follow-ups from (args, job, context)."""

    outcome: Outcome
    trigger_name: str  # the trigger's kind, or its args type's name (the kind is resolved late)
    trigger_type: type | None
    follow_up_type: type | None
    fn: Callable[..., Any]
    returns_request: bool  # the ``_with`` form

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def build(self, args: Any, job: Any, context: tuple[Any, ...]) -> EnqueueRequest | None:
        """Call the closure; None means enqueue nothing."""
        result = self.fn(args, job, *context)
        if inspect.isawaitable(result):
            raise RegistrationError(
                f"follow-up spec {self.name} must be a plain function, not async"
            )
        if self.returns_request:
            if result is None or isinstance(result, EnqueueRequest):
                return result
            raise RegistrationError(
                f"follow-up spec {self.name} must return EnqueueRequest or None, got {type(result).__name__}"
            )
        if result is None:
            raise RegistrationError(
                f"follow-up spec {self.name} returned None; use the _with form to skip"
            )
        return EnqueueRequest(result)


def _key_name(key: Trigger) -> str:
    return key if isinstance(key, str) else f"{getattr(key, '__name__', key)}"


class FollowUpRegistrars:
    """The ``on_<outcome>_enqueue`` / ``on_<outcome>_enqueue_with`` registrars of the App.

    Each registers a durable follow-up for that outcome of ``trigger`` jobs (an args type or
    a kind), inserted in the same transaction as the transition. Each is usable directly,
    ``app.on_completed_enqueue(Signup, Welcome, fn)``, or as a decorator,
    ``@app.on_completed_enqueue(Signup, Welcome)``; both return ``fn`` unchanged. The plain
    form's ``fn`` returns the follow-up's args (enqueued with default options); the ``_with``
    form's returns an :class:`~awa_cli.EnqueueRequest`, or None to enqueue nothing.
    """

    _specs: list[tuple[str | type, FollowUpSpec]]
    _index: Any

    def _register_follow_up(
        self,
        outcome: Outcome,
        returns_request: bool,
        trigger: Trigger,
        follow_up: type | None,
        fn: Callable[..., Any] | None,
    ) -> Any:
        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            self._add_follow_up(outcome, trigger, follow_up, f, returns_request)
            return f

        return add if fn is None else add(fn)

    def _add_follow_up(
        self,
        outcome: Outcome,
        trigger: Trigger,
        follow_up: type | None,
        fn: Callable[..., Any],
        returns_request: bool,
    ) -> None:
        if not callable(fn):
            raise RegistrationError(f"follow-up spec for {trigger!r} is not callable: {fn!r}")
        spec = FollowUpSpec(
            outcome,
            _key_name(trigger),
            None if isinstance(trigger, str) else trigger,
            follow_up,
            fn,
            returns_request,
        )
        check_spec_signature(outcome, fn, spec.name)
        self._specs.append((trigger, spec))
        self._index = None

    # -- completed: fn(args, job) ----------------------------------------------------------
    @overload
    def on_completed_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[CompletedSpec], CompletedSpec]: ...
    @overload
    def on_completed_enqueue(
        self, trigger: Trigger, follow_up: type | None, fn: CompletedSpec
    ) -> CompletedSpec: ...
    def on_completed_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: CompletedSpec | None = None
    ) -> Any:
        """When a ``trigger`` job completes, enqueue what ``fn(args, job)`` returns."""
        return self._register_follow_up(Outcome.COMPLETED, False, trigger, follow_up, fn)

    @overload
    def on_completed_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[CompletedSpecWith], CompletedSpecWith]: ...
    @overload
    def on_completed_enqueue_with(
        self, trigger: Trigger, follow_up: type | None, fn: CompletedSpecWith
    ) -> CompletedSpecWith: ...
    def on_completed_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: CompletedSpecWith | None = None
    ) -> Any:
        """When a ``trigger`` job completes, enqueue the request ``fn(args, job)`` returns
        (None: nothing)."""
        return self._register_follow_up(Outcome.COMPLETED, True, trigger, follow_up, fn)

    # -- cancelled: fn(args, job, reason) --------------------------------------------------
    @overload
    def on_cancelled_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[CancelledSpec], CancelledSpec]: ...
    @overload
    def on_cancelled_enqueue(
        self, trigger: Trigger, follow_up: type | None, fn: CancelledSpec
    ) -> CancelledSpec: ...
    def on_cancelled_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: CancelledSpec | None = None
    ) -> Any:
        """When a ``trigger`` job is cancelled, enqueue what ``fn(args, job, reason)``
        returns (``reason``: the cancel reason, a str)."""
        return self._register_follow_up(Outcome.CANCELLED, False, trigger, follow_up, fn)

    @overload
    def on_cancelled_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[CancelledSpecWith], CancelledSpecWith]: ...
    @overload
    def on_cancelled_enqueue_with(
        self, trigger: Trigger, follow_up: type | None, fn: CancelledSpecWith
    ) -> CancelledSpecWith: ...
    def on_cancelled_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: CancelledSpecWith | None = None
    ) -> Any:
        """When a ``trigger`` job is cancelled, enqueue the request
        ``fn(args, job, reason)`` returns (None: nothing)."""
        return self._register_follow_up(Outcome.CANCELLED, True, trigger, follow_up, fn)

    # -- retried: fn(args, job, error, attempt, next_run_at) -------------------------------
    @overload
    def on_retried_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[RetriedSpec], RetriedSpec]: ...
    @overload
    def on_retried_enqueue(
        self, trigger: Trigger, follow_up: type | None, fn: RetriedSpec
    ) -> RetriedSpec: ...
    def on_retried_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: RetriedSpec | None = None
    ) -> Any:
        """When a ``trigger`` job is retried, enqueue what
        ``fn(args, job, error, attempt, next_run_at)`` returns (``error`` a str, ``attempt``
        the failed attempt's number, ``next_run_at`` a datetime)."""
        return self._register_follow_up(Outcome.RETRIED, False, trigger, follow_up, fn)

    @overload
    def on_retried_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[RetriedSpecWith], RetriedSpecWith]: ...
    @overload
    def on_retried_enqueue_with(
        self, trigger: Trigger, follow_up: type | None, fn: RetriedSpecWith
    ) -> RetriedSpecWith: ...
    def on_retried_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: RetriedSpecWith | None = None
    ) -> Any:
        """When a ``trigger`` job is retried, enqueue the request
        ``fn(args, job, error, attempt, next_run_at)`` returns (None: nothing)."""
        return self._register_follow_up(Outcome.RETRIED, True, trigger, follow_up, fn)

    # -- exhausted: fn(args, job, error, attempt) ------------------------------------------
    @overload
    def on_exhausted_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[ExhaustedSpec], ExhaustedSpec]: ...
    @overload
    def on_exhausted_enqueue(
        self, trigger: Trigger, follow_up: type | None, fn: ExhaustedSpec
    ) -> ExhaustedSpec: ...
    def on_exhausted_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: ExhaustedSpec | None = None
    ) -> Any:
        """When a ``trigger`` job fails for good, enqueue what
        ``fn(args, job, error, attempt)`` returns (``error`` a str, ``attempt`` the last
        attempt's number)."""
        return self._register_follow_up(Outcome.EXHAUSTED, False, trigger, follow_up, fn)

    @overload
    def on_exhausted_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[ExhaustedSpecWith], ExhaustedSpecWith]: ...
    @overload
    def on_exhausted_enqueue_with(
        self, trigger: Trigger, follow_up: type | None, fn: ExhaustedSpecWith
    ) -> ExhaustedSpecWith: ...
    def on_exhausted_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: ExhaustedSpecWith | None = None
    ) -> Any:
        """When a ``trigger`` job fails for good, enqueue the request
        ``fn(args, job, error, attempt)`` returns (None: nothing)."""
        return self._register_follow_up(Outcome.EXHAUSTED, True, trigger, follow_up, fn)

    # -- waiting for a callback: fn(args, job) ---------------------------------------------
    @overload
    def on_waiting_for_callback_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[WaitingSpec], WaitingSpec]: ...
    @overload
    def on_waiting_for_callback_enqueue(
        self, trigger: Trigger, follow_up: type | None, fn: WaitingSpec
    ) -> WaitingSpec: ...
    def on_waiting_for_callback_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: WaitingSpec | None = None
    ) -> Any:
        """When a ``trigger`` job parks waiting for a callback, enqueue what
        ``fn(args, job)`` returns."""
        return self._register_follow_up(Outcome.WAITING_FOR_CALLBACK, False, trigger, follow_up, fn)

    @overload
    def on_waiting_for_callback_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[WaitingSpecWith], WaitingSpecWith]: ...
    @overload
    def on_waiting_for_callback_enqueue_with(
        self, trigger: Trigger, follow_up: type | None, fn: WaitingSpecWith
    ) -> WaitingSpecWith: ...
    def on_waiting_for_callback_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: WaitingSpecWith | None = None
    ) -> Any:
        """When a ``trigger`` job parks waiting for a callback, enqueue the request
        ``fn(args, job)`` returns (None: nothing)."""
        return self._register_follow_up(Outcome.WAITING_FOR_CALLBACK, True, trigger, follow_up, fn)

    # -- rescued: fn(args, job, reason) ----------------------------------------------------
    @overload
    def on_rescued_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[RescuedSpec], RescuedSpec]: ...
    @overload
    def on_rescued_enqueue(
        self, trigger: Trigger, follow_up: type | None, fn: RescuedSpec
    ) -> RescuedSpec: ...
    def on_rescued_enqueue(
        self, trigger: Trigger, follow_up: type | None = None, fn: RescuedSpec | None = None
    ) -> Any:
        """When a ``trigger`` job is rescued, enqueue what ``fn(args, job, reason)`` returns
        (``reason`` an :class:`~awa_cli.RescueReason`). Runs in a second transaction after
        the rescue commits."""
        return self._register_follow_up(Outcome.RESCUED, False, trigger, follow_up, fn)

    @overload
    def on_rescued_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: None = None
    ) -> Callable[[RescuedSpecWith], RescuedSpecWith]: ...
    @overload
    def on_rescued_enqueue_with(
        self, trigger: Trigger, follow_up: type | None, fn: RescuedSpecWith
    ) -> RescuedSpecWith: ...
    def on_rescued_enqueue_with(
        self, trigger: Trigger, follow_up: type | None = None, fn: RescuedSpecWith | None = None
    ) -> Any:
        """When a ``trigger`` job is rescued, enqueue the request ``fn(args, job, reason)``
        returns (None: nothing)."""
        return self._register_follow_up(Outcome.RESCUED, True, trigger, follow_up, fn)


__all__ = [
    "SPEC_PARAMETERS",
    "FollowUpRegistrars",
    "FollowUpSpec",
    "check_spec_signature",
    "expected_signature",
]
