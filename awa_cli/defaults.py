"""The default timings and sizes, defined once.

Pure constants. ``awa.toml`` ([maintenance], [worker], [queues.*]), ``awa.Worker(**timings)``
and the outcome core's rescue all take their defaults from here, so the documented default
and the running one cannot drift apart (awa.toml.example and awa.toml(5) show the same
values; tests/unit/test_config.py checks the example).
"""

from __future__ import annotations

HEARTBEAT_INTERVAL = 5.0
"""Seconds between a worker's heartbeats of its running jobs."""

HEARTBEAT_STALENESS = 15.0
"""Seconds without a heartbeat after which a running job is rescued."""

RESCUE_INTERVAL = 5.0
"""Seconds between the leader's rescue sweeps."""

LEADER_ELECTION_INTERVAL = 5.0
"""Seconds between a worker's attempts to become (or stay) the maintenance leader."""

POLL_INTERVAL = 1.0
"""Seconds a queue runner waits for a notification before it polls anyway."""

WAIT_POLL = 5.0
"""Seconds between ``wait_for_job``'s backstop reads of the jobs it waits for (it is woken by a
notification from the finishing transaction; the read only covers a lost one)."""

SHUTDOWN_TIMEOUT = 30.0
"""Seconds a stopping worker waits for its running handlers."""

COMPLETED_RETENTION = 86400.0
"""Seconds a completed job is kept before the sweep prunes it (1 day)."""

FAILED_RETENTION = 259200.0
"""Seconds a failed or cancelled job is kept before the sweep prunes it (3 days)."""

QUEUE_CONCURRENCY = 10
"""Handlers one worker runs at once per queue."""

DEAD_LETTER_RETENTION = 2592000.0
"""Seconds a dead letter is kept before the sweep prunes it (30 days)."""

AUDIT_RETENTION = 7776000.0
"""Seconds an audit log entry is kept before the sweep prunes it (90 days)."""

VACUUM_DEAD_TUPLES = 50_000
"""Dead row versions in awa.jobs at which the leader vacuums it (0: never, autovacuum alone)."""

PERIODIC_PRUNE_INTERVAL = 600.0
"""Seconds between the leader's pruning of old recorded periodic fires."""

WORKER_STALENESS = 30.0
"""Seconds after its last heartbeat that a worker's ``awa.workers`` row counts as gone: the
dashboard stops showing it and the maintenance leader deletes it."""

QUEUE_FORGET_AFTER = 86400.0
"""Seconds a queue stays on the lists (``awa queue list``, the dashboard) after it was last
seen, once nothing else keeps it there: not paused, not configured, no unfinished job, no
dead letter, no live worker serving it (24 hours)."""

LOOP_BACKOFF_MIN = 0.1
"""Seconds a worker loop (claim, finalise, heartbeat, listener, maintenance) first waits after
a database error; the wait doubles on each further error."""

LOOP_BACKOFF_MAX = 30.0
"""The cap of a worker loop's backoff after repeated database errors."""
