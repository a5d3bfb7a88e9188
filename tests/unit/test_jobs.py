"""The job model (awa_cli.jobs): kind names, validation, unique keys, options. No database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, UTC
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import awa_cli
from tests.helpers import JOB_STATES
from awa_cli.jobs import (
    DEFAULT_UNIQUE_STATES,
    EnqueueRequest,
    InsertOpts,
    JobState,
    UniqueOpts,
    kind_for,
    prepare,
)


@dataclass
class SendEmail:
    to: str
    subject: str = "hi"


class SendEmailModel(pydantic.BaseModel):
    to: str
    subject: str = "hi"


def _prep(args: Any = None, **options: Any):
    if args is None:
        args = {"x": 1}
    options.setdefault("kind", "k")
    return prepare(args, InsertOpts(**options))


def _field_of(args: Any = None, *, now: float | None = None, **options: Any) -> str:
    if args is None:
        args = {"x": 1}
    options.setdefault("kind", "k")
    with pytest.raises(awa_cli.ValidationError) as info:
        prepare(args, InsertOpts(**options), now=now)
    return info.value.field


# -- kind names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("SendEmail", "send_email"),
        ("SMTPEmail", "smtp_email"),
        ("ProcessV2Import", "process_v2_import"),
        ("HTMLToPDF", "html_to_pdf"),
        ("Job", "job"),
    ],
)
def test_kind_derivation_golden_cases(name: str, kind: str) -> None:
    assert kind_for(type(name, (), {})) == kind


def test_prepare_derives_the_kind_from_the_args_class() -> None:
    assert prepare(SendEmail("a@b"), InsertOpts()).kind == "send_email"
    assert prepare(SendEmailModel(to="a@b"), InsertOpts()).kind == "send_email_model"
    assert prepare(SendEmail("a@b"), InsertOpts(kind="custom")).kind == "custom"


def test_dict_args_need_a_kind() -> None:
    with pytest.raises(awa_cli.ValidationError) as info:
        prepare({"x": 1}, InsertOpts())
    assert info.value.field == "kind"


# -- defaults ------------------------------------------------------------------------------


def test_prepare_defaults() -> None:
    job = _prep()
    assert (job.queue, job.priority, job.max_attempts) == ("default", 2, 25)
    assert job.run_at is None and job.state == "available"
    assert job.unique_key is None and job.unique_states is None
    assert job.tags == [] and json.loads(job.metadata_json) == {}


def test_default_queue_is_used_when_queue_unset_and_overridden_when_set() -> None:
    assert prepare({}, InsertOpts(kind="k"), default_queue="email").queue == "email"
    assert prepare({}, InsertOpts(kind="k", queue="q"), default_queue="email").queue == "q"


# -- validation: every limit names its field ------------------------------------------------


@pytest.mark.parametrize("value", [0, 5, -1, True, "2", 2.0])
def test_priority_out_of_range_or_wrong_type(value: Any) -> None:
    assert _field_of(priority=value) == "priority"


@pytest.mark.parametrize("value", [0, 1001, -5, True, "3"])
def test_max_attempts_out_of_range_or_wrong_type(value: Any) -> None:
    assert _field_of(max_attempts=value) == "max_attempts"


@pytest.mark.parametrize("field", ["kind", "queue"])
@pytest.mark.parametrize("value", ["", "x" * 201, "a\x00b", 7])
def test_kind_and_queue_names(field: str, value: Any) -> None:
    assert _field_of(**{field: value}) == field


def test_ordering_key_is_validated_like_a_name() -> None:
    assert _field_of(ordering_key="a\x00") == "ordering_key"
    assert _field_of(ordering_key="x" * 201) == "ordering_key"
    assert _prep(ordering_key="acct-1").ordering_key == "acct-1"


def test_tags_limits() -> None:
    assert _prep(tags=[f"t{i}" for i in range(20)]).tags == [f"t{i}" for i in range(20)]
    assert _field_of(tags=[f"t{i}" for i in range(21)]) == "tags"
    assert _field_of(tags=["ok", "b\x00d"]) == "tags"
    assert _field_of(tags="notalist") == "tags"
    assert _field_of(tags=[1]) == "tags"


@pytest.mark.parametrize(
    "args",
    [
        {"a": "x\x00y"},
        {"a\x00": 1},
        {"nested": {"deep": ["ok", "n\x00l"]}},
        {"nested": {"k\x00": 1}},
    ],
)
def test_nul_in_args_keys_or_values(args: dict[str, Any]) -> None:
    assert _field_of(args) == "args"


@pytest.mark.parametrize("metadata", [{"a": "\x00"}, {"\x00": 1}, {"a": [{"b": "c\x00"}]}])
def test_nul_in_metadata(metadata: dict[str, Any]) -> None:
    assert _field_of(metadata=metadata) == "metadata"


def test_a_literal_backslash_u0000_is_not_a_nul() -> None:
    # The six characters \u0000 in a string are data, not a NUL (PostgreSQL stores them).
    job = _prep({"path": "C:\\u0000x", "list": ["\\\\u0000"]}, metadata={"m": "\\u0000"})
    assert json.loads(job.args_json) == {"path": "C:\\u0000x", "list": ["\\\\u0000"]}
    assert json.loads(job.metadata_json) == {"m": "\\u0000"}


@pytest.mark.parametrize(
    "run_at",
    [
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
        datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),
        "2024-01-01T00:00:00Z",
        1700000000,
    ],
)
def test_run_at_outside_years_1_to_9999_in_utc(run_at: Any) -> None:
    assert _field_of(run_at=run_at) == "run_at"


def test_run_at_edges_inside_the_range_and_naive_is_utc() -> None:
    assert _prep(
        run_at=datetime(1, 1, 1, 5, tzinfo=timezone(timedelta(hours=5)))
    ).run_at == datetime(1, 1, 1, tzinfo=UTC)
    assert _prep(run_at=datetime(9999, 12, 31, 23, 59, tzinfo=UTC)).run_at.year == 9999
    naive = _prep(run_at=datetime(2030, 1, 2, 3, 4)).run_at
    assert naive == datetime(2030, 1, 2, 3, 4, tzinfo=UTC)
    offset = _prep(run_at=datetime(2030, 1, 2, 3, tzinfo=timezone(timedelta(hours=2)))).run_at
    assert offset.utcoffset() == timedelta(0) and offset.hour == 1


@pytest.mark.parametrize(
    "args",
    [
        {"when": object()},
        {"x": {1, 2}},
        {"nan": float("nan")},
        {"b": b"bytes"},
        [1, 2],
        "text",
        42,
    ],
)
def test_args_that_do_not_serialise(args: Any) -> None:
    assert _field_of(args) == "args"


def test_non_serialisable_metadata() -> None:
    assert _field_of(metadata={"x": object()}) == "metadata"
    assert _field_of(metadata=["not", "a", "dict"]) == "metadata"


def test_deadline_duration() -> None:
    assert _prep(deadline_duration=timedelta(minutes=2)).deadline_duration == 120.0
    assert _prep(deadline_duration=0).deadline_duration == 0.0
    assert _field_of(deadline_duration=-1) == "deadline_duration"
    assert _field_of(deadline_duration="5m") == "deadline_duration"


@pytest.mark.parametrize(
    ("unique_opts", "field"),
    [
        ({"by_kind": True}, "unique_opts"),
        ({"states": []}, "unique_opts.states"),
        ({"states": set()}, "unique_opts.states"),
        ({"states": ["available", "bogus"]}, "unique_opts.states"),
        ({"states": "available"}, "unique_opts.states"),
        ({"by_period": 0}, "unique_opts.by_period"),
        ({"by_period": -5}, "unique_opts.by_period"),
        ({"by_period": timedelta(0)}, "unique_opts.by_period"),
        ("yes", "unique_opts"),
        (UniqueOpts(states=frozenset()), "unique_opts.states"),
    ],
)
def test_bad_unique_opts(unique_opts: Any, field: str) -> None:
    assert _field_of(unique_opts=unique_opts) == field


def test_unknown_insert_option_names_the_option() -> None:
    with pytest.raises(awa_cli.ValidationError) as info:
        InsertOpts.from_kwargs({"queue": "q", "prioritty": 1})
    assert info.value.field == "prioritty"


def test_enqueue_request_is_not_accepted_as_args() -> None:
    assert _field_of(EnqueueRequest({"a": 1})) == "args"


# -- hypothesis: numeric and length limits ------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=-10_000, max_value=10_000))
def test_priority_range_property(value: int) -> None:
    if 1 <= value <= 4:
        assert _prep(priority=value).priority == value
    else:
        assert _field_of(priority=value) == "priority"


@settings(max_examples=80, deadline=None)
@given(
    st.one_of(
        st.integers(min_value=-100_000, max_value=100_000), st.sampled_from([0, 1, 1000, 1001])
    )
)
def test_max_attempts_range_property(value: int) -> None:
    if 1 <= value <= 1000:
        assert _prep(max_attempts=value).max_attempts == value
    else:
        assert _field_of(max_attempts=value) == "max_attempts"


_NAME_CHARS = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["kind", "queue"]), st.integers(min_value=0, max_value=400), _NAME_CHARS)
def test_name_length_property(field: str, length: int, char: str) -> None:
    value = char * length
    if 1 <= length <= 200:
        job = _prep(**{field: value})
        assert getattr(job, field) == value
    else:
        assert _field_of(**{field: value}) == field


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=60))
def test_tag_count_property(count: int) -> None:
    tags = [f"tag{i}" for i in range(count)]
    if count <= 20:
        assert _prep(tags=tags).tags == tags
    else:
        assert _field_of(tags=tags) == "tags"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=_NAME_CHARS, max_size=20), st.text(alphabet=_NAME_CHARS, max_size=20))
def test_strings_without_nul_round_trip(key: str, value: str) -> None:
    job = _prep({key: value}, metadata={key: value}, tags=[value])
    assert json.loads(job.args_json) == {key: value}
    assert json.loads(job.metadata_json) == {key: value}


# -- unique keys --------------------------------------------------------------------------


def _key(args: Any = None, now: float = 1_000_000.0, **options: Any) -> bytes:
    if args is None:
        args = {"a": 1, "b": 2}
    options.setdefault("kind", "k")
    options.setdefault("unique_opts", {})
    key = prepare(args, InsertOpts(**options), now=now).unique_key
    assert key is not None
    return key


def test_unique_key_ignores_args_key_order() -> None:
    assert _key({"a": 1, "b": {"x": 1, "y": 2}}) == _key({"b": {"y": 2, "x": 1}, "a": 1})


def test_unique_key_covers_kind_and_args() -> None:
    assert _key({"a": 1}) != _key({"a": 2})
    assert _key(kind="k1") != _key(kind="k2")


def test_unique_key_by_args_false_ignores_args() -> None:
    opts = UniqueOpts(by_args=False)
    assert _key({"a": 1}, unique_opts=opts) == _key({"a": 2}, unique_opts=opts)
    assert _key({"a": 1}, unique_opts=opts) != _key({"a": 1})
    assert _key(kind="k1", unique_opts=opts) != _key(kind="k2", unique_opts=opts)


def test_unique_key_by_queue() -> None:
    assert _key(queue="q1") == _key(queue="q2")
    by_queue = {"by_queue": True}
    assert _key(queue="q1", unique_opts=by_queue) != _key(queue="q2", unique_opts=by_queue)
    assert _key(queue="q1", unique_opts=by_queue) == _key(queue="q1", unique_opts=by_queue)


def test_unique_key_by_period_buckets() -> None:
    hour = {"by_period": 3600}
    start = 3600.0 * 480_000  # a bucket boundary
    same = {_key(now=start + offset, unique_opts=hour) for offset in (0, 1, 1800, 3599.9)}
    assert len(same) == 1
    assert _key(now=start + 3600, unique_opts=hour) not in same
    assert _key(now=start - 0.1, unique_opts=hour) not in same
    # without by_period the time does not matter
    assert _key(now=start) == _key(now=start + 10 * 3600)
    # seconds and a timedelta mean the same period
    assert _key(now=start + 5, unique_opts={"by_period": timedelta(hours=1)}) in same


def test_unique_states_are_stored_sorted_names() -> None:
    job = _prep(unique_opts={"states": {JobState.AVAILABLE, "running"}})
    assert job.unique_states == ["available", "running"]
    assert _prep(unique_opts={}).unique_states == sorted(str(s) for s in DEFAULT_UNIQUE_STATES)


def test_args_as_dataclass_pydantic_or_dict_serialise_the_same() -> None:
    texts = {
        prepare(args, InsertOpts(kind="send_email")).args_json
        for args in (
            SendEmail("a@b", "s"),
            SendEmailModel(to="a@b", subject="s"),
            {"to": "a@b", "subject": "s"},
        )
    }
    assert len(texts) == 1
    assert json.loads(texts.pop()) == {"to": "a@b", "subject": "s"}
    keys = {
        _key(args, kind="send_email")
        for args in (
            SendEmail("a@b", "s"),
            SendEmailModel(to="a@b", subject="s"),
            {"subject": "s", "to": "a@b"},
        )
    }
    assert len(keys) == 1


# -- UniqueOpts and EnqueueRequest --------------------------------------------------------


def test_unique_opts_coerce() -> None:
    assert UniqueOpts.coerce({}) == UniqueOpts()
    defaults = UniqueOpts.coerce({})
    assert defaults is not None
    assert (defaults.by_args, defaults.by_queue, defaults.by_period) == (True, False, None)
    assert defaults.state_set() == DEFAULT_UNIQUE_STATES
    assert UniqueOpts.coerce(None) is None
    opts = UniqueOpts(by_queue=True)
    assert UniqueOpts.coerce(opts) is opts
    assert UniqueOpts.coerce({"by_period": 60}) == UniqueOpts(by_period=60)


def test_default_unique_states() -> None:
    assert set(DEFAULT_UNIQUE_STATES) == {
        JobState.SCHEDULED,
        JobState.AVAILABLE,
        JobState.RUNNING,
        JobState.RETRYABLE,
        JobState.COMPLETED,
    }
    assert awa_cli.DEFAULT_UNIQUE_STATES is DEFAULT_UNIQUE_STATES


def test_job_state_order_matches_the_enum() -> None:
    assert [s.value for s in JobState] == JOB_STATES


def test_enqueue_request_chain() -> None:
    req = EnqueueRequest({"a": 1})
    same = (
        req.queue("email").priority(1).max_attempts(3).unique({"by_queue": True}).metadata({"m": 1})
    )
    assert same is req
    assert req.opts == InsertOpts(
        queue="email", priority=1, max_attempts=3, unique_opts={"by_queue": True}, metadata={"m": 1}
    )
    assert EnqueueRequest({}).unique().opts.unique_opts == UniqueOpts()
    # a later setter overrides an earlier one
    assert EnqueueRequest({}).priority(1).priority(4).opts.priority == 4


def test_enqueue_request_with_opts_replaces_every_option() -> None:
    req = EnqueueRequest({"a": 1}).queue("email").priority(1).unique().metadata({"m": 1})
    req.with_opts(InsertOpts(max_attempts=7))
    assert req.opts == InsertOpts(max_attempts=7)
    assert req.opts.queue is None and req.opts.priority is None
    assert req.opts.unique_opts is None and req.opts.metadata is None
    # setters after with_opts build on it
    req.queue("later")
    assert req.opts == InsertOpts(max_attempts=7, queue="later")
    assert req.args == {"a": 1}
