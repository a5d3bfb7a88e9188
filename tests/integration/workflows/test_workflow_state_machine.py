"""A hypothesis state machine over workflows (architecture §16): random graphs with random
policies, random outcomes of the steps that run (complete, fail, retry, cancel), crashes
rescued by the real sweep, operator cancels and workflow retries, against PostgreSQL and the
real outcome core. After every step it checks:

* a step never starts before all its parents completed (every parent terminal with
  on_parent_failure = "run"), as its handler saw them at start;
* a step runs at most once per attempt (job id, run lease);
* a workflow's state matches its steps (running while one is unfinished; then completed,
  failed or cancelled), and no step is blocked without an unfinished parent (nothing lost).

The default run is short (CI draws the same examples: tests/conftest.py); the slow set runs
more.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import awa_cli as awa
from awa_cli.events import RescueReason
from awa_cli.testing import AwaTestClient

pytestmark = [pytest.mark.integration]

TERMINAL = {"completed", "failed", "cancelled"}
RESET = "TRUNCATE awa.jobs, awa.job_dependencies, awa.workflows, awa.dead_letters, awa.audit_log"


@dataclass
class S:
    step: str


OUTCOME: dict[str, str] = {"next": "complete"}
RUNS: list[tuple[int, int, str, list[tuple[int, str]]]] = []


def machine_app() -> awa.App:
    app = awa.App()

    @app.task(S)
    async def step(job: awa.Job) -> awa.JobResult | None:
        RUNS.append(
            (
                job.id,
                job.run_lease,
                job.metadata.get("policy", "cancel"),
                [(p.id, str(p.state)) for p in job.parents],
            )
        )
        match OUTCOME["next"]:
            case "fail":
                raise awa.TerminalError("failed on purpose")
            case "retry":
                raise RuntimeError("try again")
            case "cancel":
                return awa.Cancel("cancelled on purpose")
        job.set_output(job.args.step)
        return None

    return app


graphs = st.integers(min_value=1, max_value=7).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(  # each step's parents: steps before it (a DAG by construction)
            st.tuples(st.sets(st.integers(0, max(0, n - 1)), max_size=3), st.booleans()),
            min_size=n,
            max_size=n,
        ),
    )
)


class WorkflowMachine(RuleBasedStateMachine):
    dsn: str = ""

    def __init__(self) -> None:
        super().__init__()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(RESET)
        RUNS.clear()
        self.app = machine_app()
        self.tc = AwaTestClient(self.dsn, self.app)
        self.workflows: list[int] = []
        self.cancelled: set[int] = set()

    def teardown(self) -> None:
        self.tc.close()

    @rule(graph=graphs)
    def insert(self, graph: tuple[int, list[tuple[set[int], bool]]]) -> None:
        _n, shape = graph
        wf = awa.Workflow(f"wf{len(self.workflows)}")
        for i, (parents, run_policy) in enumerate(shape):
            after = [f"s{p}" for p in sorted(parents) if p < i]
            policy = "run" if run_policy else "cancel"
            wf.add(
                f"s{i}",
                S(f"s{i}"),
                after=after,
                on_parent_failure=policy,
                metadata={"policy": policy},
                max_attempts=2,
            )
        run = self.tc.client.insert_workflow(wf)
        self.workflows.append(run.id)

    @precondition(lambda self: self.workflows)
    @rule(outcome=st.sampled_from(["complete", "complete", "complete", "fail", "retry", "cancel"]))
    def work(self, outcome: str) -> None:
        OUTCOME["next"] = outcome
        self.tc.work_one(S)

    @precondition(lambda self: self.workflows)
    @rule()
    def crash_and_rescue(self) -> None:
        """A worker claims a job and dies: the real rescue sweep makes it retryable (or
        failed on its last attempt), fencing the lost attempt."""
        job = self.tc.client.call(self.tc.aio.claim("s"))
        if job is None:
            return
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = %s",
                (job.id,),
            )
        core = self.tc.client.async_client.core
        self.tc.client.call(core.rescue(RescueReason.STALE_HEARTBEAT, staleness=60))

    @precondition(lambda self: self.workflows)
    @rule()
    def retries_fall_due(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("UPDATE awa.jobs SET run_at = now() WHERE state = 'retryable'")

    @precondition(lambda self: self.workflows)
    @rule(data=st.data())
    def operator(self, data: st.DataObject) -> None:
        wf_id = data.draw(st.sampled_from(self.workflows))
        action = data.draw(st.sampled_from(["retry_workflow", "cancel_workflow", "cancel_step"]))
        if action == "retry_workflow":
            self.tc.client.retry_workflow(wf_id)
            self.cancelled.discard(wf_id)
        elif action == "cancel_workflow":
            self.tc.client.cancel_workflow(wf_id)
            self.cancelled.add(wf_id)
        else:
            pick = data.draw(st.integers(0, 50))  # drawn whatever the database holds
            steps = [
                r
                for r in self.tc.client.get_workflow(wf_id).steps.values()
                if r.state not in TERMINAL
            ]
            if steps:
                self.tc.client.cancel(steps[pick % len(steps)].id)

    @invariant()
    def children_never_start_before_their_parents(self) -> None:
        for job_id, _, policy, parents in RUNS:
            done = TERMINAL if policy == "run" else {"completed"}
            assert all(state in done for _, state in parents), (job_id, policy, parents)

    @invariant()
    def each_attempt_runs_at_most_once(self) -> None:
        twice = [k for k, n in Counter((j, lease) for j, lease, _, _ in RUNS).items() if n > 1]
        assert not twice, twice

    @invariant()
    def workflow_state_matches_its_steps(self) -> None:
        for wf_id in self.workflows:
            run = self.tc.client.get_workflow(wf_id)
            states = {name: str(r.state) for name, r in run.steps.items()}
            if any(s not in TERMINAL for s in states.values()):
                assert run.state == "running", (run.state, states)
            elif wf_id in self.cancelled:
                assert run.state == "cancelled", (run.state, states)
            elif "failed" in states.values():
                assert run.state == "failed", (run.state, states)
            elif "cancelled" in states.values():
                assert run.state == "cancelled", (run.state, states)
            else:
                assert run.state == "completed", (run.state, states)
            self._nothing_stuck(run)

    def _nothing_stuck(self, run: awa.WorkflowRun) -> None:
        """A blocked step has a parent that can still finish (no lost unblocking)."""
        for name, row in run.steps.items():
            if row.state != "blocked":
                continue
            parents = self.tc.client.job_parents(row.id)
            assert any(p["state"] not in TERMINAL for p in parents), (name, parents)
            if row.metadata.get("policy") == "cancel":
                assert all(p["state"] not in ("failed", "cancelled") for p in parents), (
                    name,
                    parents,
                )


def test_workflow_state_machine(dsn: str) -> None:
    """The short default run: a few graphs, no shrinking (a failure prints its steps)."""
    WorkflowMachine.dsn = dsn
    WorkflowMachine.TestCase.settings = settings(
        max_examples=10,
        stateful_step_count=25,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    WorkflowMachine.TestCase().runTest()


def test_workflow_state_machine_every_child_wide(dsn: str) -> None:
    """The short run again with every child counted on shard rows (a wide fan-in,
    sql/0015_dependency_shards.sql): the same invariants hold on both paths."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{name}" SET awa.dependency_shard_min = 1')
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT awa.dependency_shard_min()").fetchone() == (1,)
    test_workflow_state_machine(dsn)


@pytest.mark.slow
def test_workflow_state_machine_long(dsn: str) -> None:
    WorkflowMachine.dsn = dsn
    WorkflowMachine.TestCase.settings = settings(
        max_examples=100,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    WorkflowMachine.TestCase().runTest()
