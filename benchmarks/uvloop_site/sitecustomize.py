"""Imported at start-up by every Python process that has this folder on PYTHONPATH (the
benchmarks put it there for ``--loop uvloop``): asyncio runs on uvloop from then on, in the
``awa worker`` and in the children its ``--processes`` supervisor starts, without any change
to awa itself."""

from __future__ import annotations

import asyncio

import uvloop

asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
