"""A workflow run's steps laid out as a DAG (issue 42), and a batch's counts as
a stacked bar. Numbers only: the templates draw them as inline SVG (no
script, so the strict CSP holds) and write every text (step and workflow
names are user text) through autoescaping.

The layout: a step's layer is its dependency depth (0 for a step that waits
for nothing, else one more than its deepest dependency); layers are columns
from left to right, the steps of a layer stacked in the order they were
added. Each edge is a curve from the right side of the upstream's box to the
left side of the step's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ..display import STATE_ORDER
from ..model import JobState
from ..store.flows import StepInfo

__all__ = ["BOX_H", "BOX_W", "MAX_DRAWN", "Bar", "Box", "Dag", "Edge", "Segment", "dag", "stacked"]

#: drawing units of the SVG's viewBox
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 34, 56, 14, 6
#: the most characters of a step's name written in its box (the whole name is its tooltip)
LABEL_CHARS = 20
#: larger workflows get the table only: a drawing of thousands of boxes helps nobody
MAX_DRAWN = 400
#: the batch bar's width in drawing units
BAR_W, BAR_H = 600, 22


@dataclass(frozen=True, slots=True)
class Box:
    step: StepInfo
    state: str  # the job's state, or "deleted"
    layer: int
    x: int
    y: int
    label: str


@dataclass(frozen=True, slots=True)
class Edge:
    upstream: str
    step: str
    path: str  # the SVG path's d attribute (numbers and letters only)


@dataclass(frozen=True, slots=True)
class Dag:
    boxes: list[Box]
    edges: list[Edge]
    width: int
    height: int
    box_w: int
    box_h: int
    drawn: bool  # False: too many steps to draw (MAX_DRAWN)


def _layers(steps: Sequence[StepInfo]) -> list[int]:
    """Each step's dependency depth (Kahn's order; a step naming no known step is a root)."""
    index = {s.name: i for i, s in enumerate(steps)}
    ups = [[index[a] for a in s.after if a in index] for s in steps]
    downs: list[list[int]] = [[] for _ in steps]
    pending = [len(u) for u in ups]
    for i, u in enumerate(ups):
        for j in u:
            downs[j].append(i)
    depth = [0] * len(steps)
    ready = deque(i for i, n in enumerate(pending) if n == 0)
    while ready:
        i = ready.popleft()
        for d in downs[i]:
            depth[d] = max(depth[d], depth[i] + 1)
            pending[d] -= 1
            if pending[d] == 0:
                ready.append(d)
    return depth  # a cycle (refused at enqueue) would leave its steps at the depth reached


def dag(steps: Sequence[StepInfo]) -> Dag:
    """The drawing of a run's ``steps`` (``WorkflowInfo.steps``)."""
    if len(steps) > MAX_DRAWN or not steps:
        return Dag(boxes=[], edges=[], width=0, height=0, box_w=BOX_W, box_h=BOX_H, drawn=False)
    depth = _layers(steps)
    rows: dict[int, int] = {}
    boxes: list[Box] = []
    for s, layer in zip(steps, depth, strict=True):
        row = rows.get(layer, 0)
        rows[layer] = row + 1
        label = s.name if len(s.name) <= LABEL_CHARS else s.name[:LABEL_CHARS - 1] + "…"
        boxes.append(Box(step=s, state="deleted" if s.state is None else str(s.state), layer=layer,
                         x=PAD + layer * (BOX_W + GAP_X), y=PAD + row * (BOX_H + GAP_Y), label=label))
    at = {b.step.name: b for b in boxes}
    edges = []
    for b in boxes:
        for up in b.step.after:
            u = at.get(up)
            if u is None:
                continue
            x1, y1, x2, y2 = u.x + BOX_W, u.y + BOX_H // 2, b.x, b.y + BOX_H // 2
            mid = (x1 + x2) / 2
            edges.append(Edge(upstream=up, step=b.step.name, path=f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"))
    width = 2 * PAD + (max(depth) + 1) * (BOX_W + GAP_X) - GAP_X
    height = 2 * PAD + max(rows.values()) * (BOX_H + GAP_Y) - GAP_Y
    return Dag(boxes=boxes, edges=edges, width=width, height=height, box_w=BOX_W, box_h=BOX_H, drawn=True)


@dataclass(frozen=True, slots=True)
class Segment:
    state: str
    count: int
    x: float
    w: float


@dataclass(frozen=True, slots=True)
class Bar:
    segments: list[Segment]
    done: int  # members that have ended
    total: int
    width: int
    height: int


def stacked(counts: dict[JobState, int]) -> Bar:
    """A batch's members as one bar, a segment per state (in the dashboard's state order)."""
    total = sum(counts.values())
    segments, x = [], 0.0
    for state in STATE_ORDER:
        n = counts.get(JobState(state), 0)
        if n and total:
            w = BAR_W * n / total
            segments.append(Segment(state=str(state), count=n, x=round(x, 2), w=round(w, 2)))
            x += w
    done = sum(n for s, n in counts.items() if s.terminal)
    return Bar(segments=segments, done=done, total=total, width=BAR_W, height=BAR_H)
