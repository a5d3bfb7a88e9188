"""A workflow's steps as a server-rendered SVG graph (architecture §16): one column per
depth (the longest path from a step without parents), each step a box coloured by its state
and linked to its job, an arrow per edge. No script, no CDN; the page scrolls the graph, not
itself. At most :data:`MAX_NODES` steps are drawn (the rest are listed by the page)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from awa_cli.jobs import JobRow

MAX_NODES = 400
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 38, 60, 14, 10

# fill, text colour per state (the dashboard's palette)
COLOURS: Mapping[str, tuple[str, str]] = {
    "completed": ("#dcf2e3", "#1b6b3a"),
    "failed": ("#f9e0de", "#a3261b"),
    "cancelled": ("#f9e0de", "#a3261b"),
    "running": ("#dde7fa", "#2456b3"),
    "available": ("#dde7fa", "#2456b3"),
    "waiting_external": ("#fbefd5", "#8a5a00"),
    "retryable": ("#fbefd5", "#8a5a00"),
    "scheduled": ("#fbefd5", "#8a5a00"),
    "blocked": ("#e8ebf0", "#3d4350"),
}


def depths(ids: Sequence[int], edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Each step's column: 0 without parents, else one more than its deepest parent."""
    parents: dict[int, list[int]] = {i: [] for i in ids}
    for parent, child in edges:
        if child in parents and parent in parents:
            parents[child].append(parent)
    depth: dict[int, int] = {}
    for start in ids:
        stack = [start]
        while stack:
            node = stack[-1]
            if node in depth:
                stack.pop()
                continue
            pending = [p for p in parents[node] if p not in depth]
            if pending:
                stack.extend(pending)
                continue
            depth[node] = 1 + max((depth[p] for p in parents[node]), default=-1)
            stack.pop()
    return depth


def svg(steps: Mapping[str, JobRow], edges: Sequence[tuple[int, int]]) -> str:
    """The graph of ``steps`` (name -> job) and ``edges`` (parent id, child id) as SVG."""
    shown = list(steps.items())[:MAX_NODES]
    ids = [row.id for _, row in shown]
    depth = depths(ids, edges)
    columns: dict[int, int] = {}
    where: dict[int, tuple[int, int]] = {}
    for _, row in shown:
        col = depth[row.id]
        slot = columns.get(col, 0)
        columns[col] = slot + 1
        where[row.id] = (PAD + col * (BOX_W + GAP_X), PAD + slot * (BOX_H + GAP_Y))
    width = PAD * 2 + max(columns, default=0) * (BOX_W + GAP_X) + BOX_W
    height = PAD * 2 + max(columns.values(), default=1) * (BOX_H + GAP_Y)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="workflow graph">',
        '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" '
        'markerHeight="6" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#8a90a0"/></marker></defs>',
    ]
    for parent, child in edges:
        if parent in where and child in where:
            (px, py), (cx, cy) = where[parent], where[child]
            out.append(
                f'<line x1="{px + BOX_W}" y1="{py + BOX_H // 2}" x2="{cx}" y2="{cy + BOX_H // 2}" '
                'stroke="#8a90a0" stroke-width="1.2" marker-end="url(#arrow)"/>'
            )
    for name, row in shown:
        x, y = where[row.id]
        state = str(row.state)
        fill, ink = COLOURS.get(state, ("#e8ebf0", "#3d4350"))
        label = escape(name if len(name) <= 20 else name[:19] + "…")
        out.append(
            f'<a href="/jobs/{row.id}" class="wf-step state-{escape(state)}">'
            f"<title>{escape(name)}: job {row.id}, {escape(state)}</title>"
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="5" fill="{fill}" '
            f'stroke="{ink}" stroke-width="1"/>'
            f'<text x="{x + 8}" y="{y + 15}" font-size="12" font-weight="600" fill="{ink}">{label}</text>'
            f'<text x="{x + 8}" y="{y + 30}" font-size="11" fill="{ink}">{escape(state)} · {row.id}</text>'
            "</a>"
        )
    out.append("</svg>")
    return "".join(out)
