"""A module whose app registers no task (issue 16 item 3): a worker must refuse it."""

from __future__ import annotations

import awa_cli as awa

app = awa.App()
