"""``acting_as`` yields the Trail of what the core recorded, so ``awa serve`` writes its own
audit entry only when the core wrote none (one entry per action)."""

from __future__ import annotations

import asyncio

from awa_cli.outcomes.audit import Trail, _TRAIL, acting_as, current_actor


class _Core:
    actor = "cli:someone"


def test_acting_as_sets_and_resets_the_actor_and_the_trail() -> None:
    core = _Core()
    assert current_actor(core) == "cli:someone"  # type: ignore[arg-type]
    with acting_as("serve:otto") as trail:
        assert current_actor(core) == "serve:otto"  # type: ignore[arg-type]
        assert _TRAIL.get() is trail and trail == Trail()
    assert current_actor(core) == "cli:someone"  # type: ignore[arg-type]
    assert _TRAIL.get() is None


def test_a_task_started_inside_shares_the_trail() -> None:
    async def main() -> Trail:
        with acting_as("serve:otto") as trail:

            async def child() -> None:
                found = _TRAIL.get()
                assert found is not None
                found.alone += 1

            await asyncio.create_task(child())
            return trail

    assert asyncio.run(main()).alone == 1


def test_recorded_counts_in_action_entries_only_when_the_action_succeeded() -> None:
    assert not Trail().recorded(succeeded=True)
    assert Trail(in_action=1).recorded(succeeded=True)
    assert not Trail(in_action=1).recorded(succeeded=False)  # rolled back with the action
    assert Trail(alone=1).recorded(succeeded=False)
