"""The overview's throughput chart: an inline SVG drawn on the server (no script, no library).

One bar per minute of the last hour, completed stacked under failed; the tallest minute sets
the scale. ``awa.js`` refreshes it with the rest of the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

MINUTES = 60
WIDTH = 600
HEIGHT = 120


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    completed_y: float
    completed_h: float
    failed_y: float
    failed_h: float
    label: str


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int
    completed: int
    failed: int
    width: int = WIDTH
    height: int = HEIGHT


def throughput_json(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``AsyncClient.throughput()`` points as the API gives them: ``{"minute" (ISO 8601),
    "completed", "failed"}``."""
    return [
        {"minute": p["minute"].isoformat(), "completed": p["completed"], "failed": p["failed"]}
        for p in points
    ]


def throughput_chart(points: list[dict[str, Any]], now: datetime | None = None) -> Chart:
    """Bars for the 60 minutes ending now from ``AsyncClient.throughput()`` points."""
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    by_minute = {p["minute"].astimezone(UTC).replace(second=0, microsecond=0): p for p in points}
    minutes = [now - timedelta(minutes=MINUTES - 1 - i) for i in range(MINUTES)]
    values = [
        (int(by_minute.get(m, {}).get("completed", 0)), int(by_minute.get(m, {}).get("failed", 0)))
        for m in minutes
    ]
    peak = max((c + f for c, f in values), default=0)
    scale = (HEIGHT - 4) / peak if peak else 0.0
    step = WIDTH / MINUTES
    bars = []
    for i, (m, (done, failed)) in enumerate(zip(minutes, values, strict=True)):
        ch, fh = done * scale, failed * scale
        bars.append(
            Bar(
                x=round(i * step + 1, 2),
                width=round(step - 2, 2),
                completed_y=round(HEIGHT - ch, 2),
                completed_h=round(ch, 2),
                failed_y=round(HEIGHT - ch - fh, 2),
                failed_h=round(fh, 2),
                label=f"{m:%H:%M} UTC: {done} completed, {failed} failed",
            )
        )
    return Chart(
        bars=bars,
        peak=peak,
        completed=sum(c for c, _ in values),
        failed=sum(f for _, f in values),
    )
