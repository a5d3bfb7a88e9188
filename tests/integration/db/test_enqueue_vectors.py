"""tests/vectors/enqueue.json against both producers: the Python insert and the SQL function
(``awa.enqueue`` one by one, ``awa.enqueue_many`` in one call). Each valid case stores the
vectors' row; each invalid one raises the error the case names (ValidationError naming the
field in Python; SQLSTATE 22023, the field as the message's start and as the error's COLUMN
in SQL) and writes nothing. The file is the contract both sides (and clients in other
languages) are held to, so the Python insert and the SQL function cannot drift apart."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import awa_cli as awa
from awa_cli.enqueue import InsertOpts, prepare
from tests.integration.db.enqueue_vectors import (
    AFTER_CASES,
    CASES,
    VECTORS,
    after_cases,
    cases,
    dependency_facts,
    flagged_parents,
    job_count,
    python_insert,
    python_options,
    resolved_case,
    sql_call,
    sql_enqueue,
    stored_row,
)

pytestmark = [pytest.mark.integration]


def expected_row(case: dict[str, Any], *, with_key: bool = True) -> dict[str, Any]:
    row = dict(case["row"])
    if not with_key:
        row.pop("unique_key")
    return row


def test_the_vectors_file_is_well_formed() -> None:
    assert VECTORS["version"] == 1
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
    for case in CASES:
        assert ("row" in case) != ("error" in case), case["name"]
        assert case.get("only") in (None, "python", "sql"), case["name"]
        if "row" in case:
            assert set(case["row"]) - {"run_at"} == set(VECTORS["columns"]), case["name"]
        else:
            assert case["error"]["sqlstate"] == "22023"
            assert (
                case["error"]
                .get("message", case["error"]["field"])
                .startswith(case["error"]["field"])
            )


@pytest.mark.parametrize("case", cases("python", "row"))
def test_python_insert_stores_the_vector_row(db: psycopg.Connection, case: dict[str, Any]) -> None:
    job_id = python_insert(db, case)
    timed = "at" in case  # the key depends on the time: checked at the case's time below
    assert stored_row(db, job_id, case["row"]) | (
        {"unique_key": case["row"]["unique_key"]} if timed else {}
    ) == expected_row(case)
    if timed:
        args, options = python_options(case)
        at = datetime.fromisoformat(case["at"]).timestamp()
        prepared = prepare(args, InsertOpts.from_kwargs(options), now=at)
        assert prepared.unique_key is not None
        assert prepared.unique_key.hex() == case["row"]["unique_key"]


@pytest.mark.parametrize("case", cases("sql", "row"))
def test_sql_function_stores_the_vector_row(db: psycopg.Connection, case: dict[str, Any]) -> None:
    job_id = sql_enqueue(db, case)
    assert job_id is not None
    row = stored_row(db, job_id, case["row"])
    if "at" in case:
        # The stored key is the one for the transaction's time; the vector's for its own.
        inputs = case["input"]
        opts = inputs["unique_opts"]
        key_at = "SELECT encode(awa.unique_key_for(%s, %s, %s, %s, %s, %s, {}), 'hex')"
        params = [
            inputs["kind"],
            Jsonb(inputs.get("args", {})),
            inputs.get("queue", "default"),
            opts.get("by_args", True),
            opts.get("by_queue", False),
            opts.get("by_period"),
        ]
        now_key = db.execute(key_at.format("now()"), params).fetchone()
        assert now_key is not None and row["unique_key"] == now_key[0]
        at_key = db.execute(key_at.format("%s::timestamptz"), [*params, case["at"]]).fetchone()
        assert at_key is not None and at_key[0] == case["row"]["unique_key"]
        row["unique_key"] = at_key[0]
    assert row == expected_row(case)


def check_python_insert_refuses(db: psycopg.Connection, case: dict[str, Any]) -> None:
    """awa.insert refuses the case's input: a ValidationError naming the case's field, with the
    case's message where it gives one."""
    with pytest.raises(awa.ValidationError) as caught:
        python_insert(db, case)
    assert caught.value.field == case["error"]["field"]
    if "message" in case["error"]:
        assert str(caught.value) == case["error"]["message"]


def check_sql_function_refuses(db: psycopg.Connection, case: dict[str, Any]) -> None:
    """awa.enqueue refuses the case's input: SQLSTATE 22023 naming the case's field as the
    column and at the start of the message, the case's message where it gives one."""
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        sql_enqueue(db, case)
    error = caught.value
    assert error.sqlstate == "22023"
    assert error.diag.column_name == case["error"]["field"]
    assert error.diag.message_primary is not None
    assert error.diag.message_primary.startswith(case["error"]["field"] + ": ")
    if "message" in case["error"]:
        assert error.diag.message_primary == case["error"]["message"]


@pytest.mark.parametrize("case", cases("python", "error"))
def test_python_insert_refuses_the_vector_input(
    db: psycopg.Connection, case: dict[str, Any]
) -> None:
    check_python_insert_refuses(db, case)
    assert job_count(db) == 0


@pytest.mark.parametrize("case", cases("sql", "error"))
def test_sql_function_refuses_the_vector_input(
    db: psycopg.Connection, case: dict[str, Any]
) -> None:
    check_sql_function_refuses(db, case)
    db.rollback()
    assert job_count(db) == 0


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c["name"]) for c in CASES if c.get("only") == "python"]
)
def test_inputs_sql_cannot_express_are_refused_before_the_function(
    db: psycopg.Connection, case: dict[str, Any]
) -> None:
    """NUL cannot be held by PostgreSQL text or jsonb: the driver or the server refuses it."""
    with pytest.raises(psycopg.Error):
        sql_enqueue(db, case)
    db.rollback()
    assert job_count(db) == 0


def test_enqueue_many_stores_every_vector_row_in_order(db: psycopg.Connection) -> None:
    valid = [c for c in CASES if c.get("only", "sql") == "sql" and "row" in c]
    ids = [
        r[0]
        for r in db.execute("SELECT awa.enqueue_many(%s)", [Jsonb([c["input"] for c in valid])])
    ]
    assert len(ids) == len(valid) and None not in ids
    assert ids == sorted(ids)
    for job_id, case in zip(ids, valid, strict=True):
        row = stored_row(db, job_id, case["row"])
        if "at" in case:  # the key depends on the time (test_sql_function_stores_the_vector_row)
            row["unique_key"] = case["row"]["unique_key"]
        assert row == expected_row(case), case["name"]


@pytest.mark.parametrize("case", cases("sql", "error"))
def test_enqueue_many_refuses_the_vector_input_and_writes_nothing(
    db: psycopg.Connection, case: dict[str, Any]
) -> None:
    jobs = [{"kind": "fine", "args": {"n": 1}}, case["input"]]
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        db.execute("SELECT awa.enqueue_many(%s)", [Jsonb(jobs)]).fetchall()
    error = caught.value
    assert error.diag.column_name == case["error"]["field"]
    message = error.diag.message_primary or ""
    assert message.startswith(case["error"]["field"] + ": ") and message.endswith("(jobs[1])")
    if "message" in case["error"]:
        assert message == case["error"]["message"] + " (jobs[1])"
    db.rollback()
    assert job_count(db) == 0


def test_python_and_sql_compute_the_same_unique_keys(db: psycopg.Connection) -> None:
    """Beyond the vectors: many args shapes, keyed by Python and by awa.unique_key_for."""
    from awa_cli.enqueue import UniqueOpts, unique_key

    samples: list[dict[str, Any]] = [
        {},
        {"a": 1, "B": 2, "é": 3, "😀": [1, {"z": None, "y": False}]},
        {"s": 'quote " backslash \\ slash / tab \t newline \n bell \x07 del \x7f'},
        # (floats from 1e16 on are whole numbers that jsonb stores without a fraction: the
        # documented exception, docs/enqueue-from-anywhere.md)
        {"f": [0.1, 1e-4, 1e-5, 1e15, 123.456, -0.5, 5e-324, 2.5e-300, 9999999999999998.0]},
        {"n": [0, -1, 10**30, 2**53 + 1]},
        {"u": "\u2028\u2029\ufeff\U0010ffff\U0001d11e"},
        {"nested": [[[[]]], {}, [{}]], "b": True},
    ]
    for args in samples:
        for opts in (UniqueOpts(), UniqueOpts(by_args=False, by_queue=True)):
            python = unique_key("kind_é", json.loads(json.dumps(args)), "q", opts, 0).hex()
            record = db.execute(
                "SELECT encode(awa.unique_key_for(%s, %s, %s, %s, %s, NULL, now()), 'hex')",
                ["kind_é", Jsonb(args), "q", opts.by_args, opts.by_queue],
            ).fetchone()
            assert record is not None and record[0] == python, args


def test_explicit_unique_key_is_sha256_of_its_own_shape(db: psycopg.Connection) -> None:
    statement, values = sql_call({"kind": "receipt", "unique_key": "order-42"})
    db.execute(statement, values)
    record = db.execute("SELECT encode(unique_key, 'hex') FROM awa.jobs").fetchone()
    assert record is not None
    assert record[0] == hashlib.sha256(b'{"key":"order-42","kind":"receipt"}').hexdigest()


# after_cases: inserts with parents (after=, on_parent_failure=), the parents created first.


def expected_dependencies(case: dict[str, Any]) -> dict[str, Any]:
    deps = dict(case["dependencies"])
    deps["edges"] = sorted(deps["edges"])
    return deps


def test_the_after_vectors_are_well_formed() -> None:
    names = [case["name"] for case in AFTER_CASES]
    assert names and len(names) == len(set(names))
    for case in AFTER_CASES:
        assert ("row" in case) != ("error" in case), case["name"]
        assert ("row" in case) == ("dependencies" in case), case["name"]
        assert isinstance(case["parents"], list), case["name"]
        if "row" in case:
            assert set(case["row"]) - {"run_at"} == set(VECTORS["columns"]), case["name"]
            assert set(case["dependencies"]) == {"pending_parents", "on_parent_failure", "edges"}
        else:
            assert case["error"]["sqlstate"] == "22023"


def check_stored_child(db: psycopg.Connection, job_id: int, case: dict[str, Any]) -> None:
    assert stored_row(db, job_id, case["row"]) == case["row"], case["name"]
    assert dependency_facts(db, job_id) == expected_dependencies(case), case["name"]
    in_jobs = [
        i for i, s in zip(case["parent_ids"], case["parents"], strict=True) if s != "dead_letter"
    ]
    assert set(in_jobs) <= set(flagged_parents(db)), case["name"]


@pytest.fixture(params=after_cases("row"))
def row_case(db: psycopg.Connection, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Each after_case that expects a row, its parents created (resolved_case)."""
    return resolved_case(db, request.param)


@pytest.fixture(params=after_cases("error"))
def error_case(db: psycopg.Connection, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Each after_case that expects an error, its parents created (resolved_case)."""
    return resolved_case(db, request.param)


def test_python_insert_stores_the_after_vector_row(
    db: psycopg.Connection, row_case: dict[str, Any]
) -> None:
    check_stored_child(db, python_insert(db, row_case), row_case)


def test_sql_function_stores_the_after_vector_row(
    db: psycopg.Connection, row_case: dict[str, Any]
) -> None:
    job_id = sql_enqueue(db, row_case)
    assert job_id is not None
    check_stored_child(db, job_id, row_case)


def test_enqueue_many_stores_every_after_vector_row_in_order(db: psycopg.Connection) -> None:
    valid = [resolved_case(db, c) for c in AFTER_CASES if "row" in c]
    ids = [
        r[0]
        for r in db.execute("SELECT awa.enqueue_many(%s)", [Jsonb([c["input"] for c in valid])])
    ]
    assert len(ids) == len(valid) and None not in ids and ids == sorted(ids)
    for job_id, case in zip(ids, valid, strict=True):
        check_stored_child(db, job_id, case)


def nothing_written(db: psycopg.Connection, case: dict[str, Any]) -> None:
    assert job_count(db) == len(case["parent_ids"]) - case["parents"].count("dead_letter")
    assert db.execute("SELECT count(*) FROM awa.job_dependencies").fetchone() == (0,)
    assert flagged_parents(db) == []


def test_python_insert_refuses_the_after_vector_input(
    db: psycopg.Connection, error_case: dict[str, Any]
) -> None:
    check_python_insert_refuses(db, error_case)
    nothing_written(db, error_case)


def test_sql_function_refuses_the_after_vector_input(
    db: psycopg.Connection, error_case: dict[str, Any]
) -> None:
    db.commit()  # the parents stay; the failed call's transaction is rolled back
    check_sql_function_refuses(db, error_case)
    db.rollback()
    nothing_written(db, error_case)


def test_enqueue_many_refuses_the_after_vector_input_and_writes_nothing(
    db: psycopg.Connection, error_case: dict[str, Any]
) -> None:
    db.commit()
    jobs = [{"kind": "fine"}, error_case["input"]]
    with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
        db.execute("SELECT awa.enqueue_many(%s)", [Jsonb(jobs)]).fetchall()
    message = caught.value.diag.message_primary or ""
    assert caught.value.diag.column_name == error_case["error"]["field"]
    assert message.startswith(error_case["error"]["field"] + ": ") and message.endswith("(jobs[1])")
    if "message" in error_case["error"]:
        assert message == error_case["error"]["message"] + " (jobs[1])"
    db.rollback()
    nothing_written(db, error_case)
