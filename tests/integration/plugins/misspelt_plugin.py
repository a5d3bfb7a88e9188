"""A plugin whose hook names are wrong: a typo (marked and unmarked) and a missing marker."""

from __future__ import annotations

from typing import Any

import awa_cli


@awa_cli.hookimpl
def awa_job_evnt(event: Any) -> None:  # the typo of D7: pluggy would never call it
    raise AssertionError("never called")


def awa_worker_started(worker: Any) -> None:  # a hook's name, but no @hookimpl marker
    raise AssertionError("never called")


@awa_cli.hookimpl
def awa_worker_stopping(worker: Any) -> None:
    pass
