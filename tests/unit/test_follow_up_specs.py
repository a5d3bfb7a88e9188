"""Follow-up spec signatures are checked when they are registered (no database)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

import awa_cli as awa
from awa_cli.events import Outcome
from awa_cli.follow_up_specs import SPEC_PARAMETERS, expected_signature
from tests.helpers import ROOT

GUIDE = ROOT / "docs" / "follow-ups.md"  # the follow-ups page of the guide


@dataclass
class Trigger:
    n: int


@dataclass
class FollowUp:
    n: int


REGISTRARS = [(outcome, f"on_{outcome.value}_enqueue") for outcome in Outcome] + [
    (outcome, f"on_{outcome.value}_enqueue_with") for outcome in Outcome
]


def _fn_taking(count: int) -> Any:
    names = ", ".join(f"a{i}" for i in range(count))
    namespace: dict[str, Any] = {}
    exec(f"def spec({names}):\n    return None", namespace)
    return namespace["spec"]


@pytest.mark.parametrize(("outcome", "registrar"), REGISTRARS)
def test_a_spec_of_the_right_arity_registers(outcome: Outcome, registrar: str) -> None:
    app = awa.App()
    fn = _fn_taking(len(SPEC_PARAMETERS[outcome]))
    assert getattr(app, registrar)(Trigger, FollowUp, fn) is fn
    assert [s.fn for s in app.specs_for("trigger", outcome)] == [fn]


@pytest.mark.parametrize(("outcome", "registrar"), REGISTRARS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_spec_of_the_wrong_arity_is_refused_at_registration(
    outcome: Outcome, registrar: str, delta: int
) -> None:
    app = awa.App()
    fn = _fn_taking(len(SPEC_PARAMETERS[outcome]) + delta)
    with pytest.raises(awa.RegistrationError) as info:
        getattr(app, registrar)(Trigger, FollowUp, fn)
    message = str(info.value)
    assert "follow-up spec spec" in message  # names the spec
    assert expected_signature(outcome) in message  # and the signature it must have
    assert f"on_{outcome.value}_enqueue" in message
    assert app.specs_for("trigger", outcome) == []  # nothing registered


def test_the_decorator_form_is_checked_too() -> None:
    app = awa.App()
    with pytest.raises(awa.RegistrationError, match=r"fn\(args, job, reason\)"):

        @app.on_rescued_enqueue(Trigger, FollowUp)
        def after_rescue(args: Trigger, job: awa.JobRow) -> FollowUp:  # the README's D8 case
            return FollowUp(args.n)

    assert app.specs_for("trigger", Outcome.RESCUED) == []


def test_defaults_star_args_and_keyword_defaults_are_accepted() -> None:
    app = awa.App()
    app.on_completed_enqueue(Trigger, FollowUp, lambda a, j, note="x": FollowUp(a.n))
    app.on_retried_enqueue(Trigger, FollowUp, lambda a, j, *rest: FollowUp(len(rest)))
    app.on_exhausted_enqueue(Trigger, FollowUp, lambda *all_args: FollowUp(1))
    app.on_cancelled_enqueue(Trigger, FollowUp, lambda a, j, r, *, k=1: FollowUp(k))
    assert len(app.follow_ups) == 4


def test_a_required_keyword_only_parameter_is_refused() -> None:
    app = awa.App()
    with pytest.raises(awa.RegistrationError, match="must take"):
        app.on_completed_enqueue(Trigger, FollowUp, lambda a, j, *, extra: FollowUp(1))


def test_the_expected_signatures_are_the_design_ones() -> None:
    assert {o.value: expected_signature(o) for o in Outcome} == {
        "completed": "fn(args, job)",
        "cancelled": "fn(args, job, reason)",
        "retried": "fn(args, job, error, attempt, next_run_at)",
        "exhausted": "fn(args, job, error, attempt)",
        "waiting_for_callback": "fn(args, job)",
        "rescued": "fn(args, job, reason)",
    }


def test_the_guide_table_lists_every_signature() -> None:
    text = GUIDE.read_text(encoding="utf-8")
    for outcome in Outcome:
        row = re.search(rf"^\| `on_{outcome.value}_enqueue`.*$", text, re.MULTILINE)
        assert row is not None, outcome
        assert f"`{expected_signature(outcome)}`" in row.group(0), outcome


def test_registrar_docstrings_name_the_signature() -> None:
    for outcome, registrar in REGISTRARS:
        doc = getattr(awa.App, registrar).__doc__ or ""
        assert f"fn({', '.join(SPEC_PARAMETERS[outcome])})" in doc, registrar
