"""ShapesWorld: procedural video streams with exact ground truth.

The world is a grid of cells, one cell per merged vision token of the model (patch x spatial merge: 28 px, so a
112-px frame is 4 x 4 cells; `cell_grid` derives it from a processor config). Every object sits inside one
cell, centred with a small fixed jitter, and fills most of it; it moves by hopping to another cell (a "move"
event), to a neighbouring cell or a distant one. A vision tower with non-overlapping patches then sees each
shape at one of a few pixel offsets, which it learns in a few hundred steps (freely moving shapes took thousands).

A `Timeline` is planned up front, one object ("track") at a time, in order of entry. Each track's whole life is
fixed when it enters: entry and leave frame, its cells over time, size, jitter, and at most one colour change. A
newcomer is accepted only if, at every frame it shares with the tracks already on screen, its shape and colour
differ from theirs and it stands in another cell. So at any moment the visible objects have distinct shapes AND
distinct colours, and never occlude each other.

All times lie on the frame grid k / fps. `objects_at(t)` and `render(t)` show the frame k = floor(t * fps).

One-off appearances (for memory questions). Each timeline reserves two shapes and one colour as "rare": each is
shown by exactly one object in the whole stream (rare objects never change colour, common objects never use a
rare shape or colour), entering between 5% and 70% of the duration. So "what colour was the <rare shape>?" has
a single answer once that object has left, for the rest of the stream. The question generator does not rely
on this: it recomputes uniqueness from the tracks (`questions.backward_colour`), so early in a stream a common
shape seen once so far qualifies too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from streamvid.media.clip_encoding import h264_encoder

SHAPES = ("circle", "square", "triangle", "star", "hexagon", "diamond")
COLOURS = {
    "red": (255, 0, 0),
    "orange": (255, 140, 0),
    "yellow": (255, 255, 0),
    "green": (0, 200, 0),
    "blue": (0, 80, 255),
    "purple": (170, 0, 255),
}
# Dull, dark or grey tones: low saturation and at most 130 per channel, far from every shape colour.
BACKGROUNDS = ((40, 40, 40), (70, 70, 70), (105, 105, 105), (30, 38, 58), (60, 48, 38), (45, 60, 45),
               (75, 65, 85), (120, 115, 105))
MIN_STAY_S = 4.0
EPS = 1e-6
CELL_PX = 28  # one merged vision token of the bundled model: patch 14 x spatial merge 2
FRAME_PX = 112  # 4 x 4 cells
SIZE_RANGE = (0.74, 0.84)  # the circle that holds a shape, as a fraction of the cell
JITTER_PX = 1.5  # largest offset of a shape's centre from its cell's centre, in pixels of a FRAME_PX frame
HOP_S = (3.0, 12.0)  # how long an object that moves stays in one cell
_N_RARE_SHAPES, _N_RARE_COLOURS = 2, 1
_TARGET_P = (0.1, 0.3, 0.35, 0.25)  # how many objects the scene aims for, 0..3


@dataclass(frozen=True)
class Obj:
    id: int
    shape: str
    colour: str
    x: float  # centre, fraction of the frame width (0 = left)
    y: float  # centre, fraction of the frame height (0 = top)
    size: float  # diameter of the circle that holds the shape, fraction of the frame
    cell: tuple[int, int] = (0, 0)  # (column, row) in the timeline's grid


@dataclass
class Event:
    t_s: float
    kind: str  # "enter" | "leave" | "recolour" | "move"
    obj_id: int
    shape: str
    colour: str  # colour at the event (the new colour for "recolour")
    old_colour: str | None = None
    cell: tuple[int, int] | None = None  # (column, row) after the event ("enter" and "move")
    old_cell: tuple[int, int] | None = None  # ("move")


@dataclass(frozen=True)
class Speech:
    """A spoken line of the stream's sound track (`synth.speech`), voiced from t_s to t_end_s (seconds)."""

    t_s: float
    t_end_s: float
    text: str  # lowercase words, no punctuation
    voice: str = ""  # "backend:variant" that spoke it


@dataclass(frozen=True)
class Track:
    """One object's whole life: visible on frames with enter_s <= t < leave_s."""

    id: int
    shape: str
    colours: tuple[tuple[float, str], ...]  # (from_s, colour), first entry at enter_s
    enter_s: float
    leave_s: float
    cells: tuple[tuple[float, int, int], ...]  # (from_s, column, row), first entry at enter_s
    jitter: tuple[float, float]  # the centre's offset from its cell's centre, fraction of the frame
    size: float  # fraction of the frame
    grid: int = 4  # cells per side

    def visible_at(self, t: float) -> bool:
        return self.enter_s - EPS <= t < self.leave_s - EPS

    def colour_at(self, t: float) -> str:
        return next((c for s, c in reversed(self.colours) if s <= t + EPS), self.colours[0][1])

    def cell_at(self, t: float) -> tuple[int, int]:
        return next(((c, r) for s, c, r in reversed(self.cells) if s <= t + EPS), self.cells[0][1:])

    def pos_at(self, t: float) -> tuple[float, float]:
        c, r = self.cell_at(t)
        return (c + 0.5) / self.grid + self.jitter[0], (r + 0.5) / self.grid + self.jitter[1]


def cell_grid(processor_config: dict, frame_px: int = FRAME_PX) -> int:
    """Cells per side of a frame_px frame: one cell per merged vision token of a Qwen-VL video processor config
    (`processor_config.json`'s "video_processor", or the dict itself)."""
    vp = processor_config.get("video_processor", processor_config)
    cell = int(vp["patch_size"]) * int(vp["merge_size"])
    if frame_px % cell:
        raise ValueError(f"frame_px must be a multiple of the {cell}-px token cell, got {frame_px}")
    return frame_px // cell


@dataclass
class Timeline:
    seed: int
    duration_s: float
    fps: float
    tracks: list[Track]
    backgrounds: list[tuple[float, tuple[int, int, int]]]  # (from_s, rgb), first at 0
    events: list[Event]
    grid: int = 4
    speech: list[Speech] | None = None  # the gold speech track in time order; None: a stream without one

    @property
    def n_frames(self) -> int:
        return max(1, math.ceil(self.duration_s * self.fps - EPS))

    def frame_index(self, t_s: float) -> int:
        if not -EPS <= t_s <= self.duration_s + EPS:
            raise ValueError(f"t_s must lie in [0, {self.duration_s}], got {t_s}")
        return min(self.n_frames - 1, math.floor(t_s * self.fps + EPS))

    def frame_time(self, t_s: float) -> float:
        return self.frame_index(t_s) / self.fps

    def objects_at(self, t_s: float) -> list[Obj]:
        tf = self.frame_time(t_s)
        return [Obj(tr.id, tr.shape, tr.colour_at(tf), *tr.pos_at(tf), tr.size, tr.cell_at(tf))
                for tr in self.tracks if tr.visible_at(tf)]

    def background_at(self, t_s: float) -> tuple[int, int, int]:
        tf = self.frame_time(t_s)
        return [rgb for s, rgb in self.backgrounds if s <= tf + EPS][-1]

    def to_json(self) -> dict:
        """Everything needed to rebuild the timeline (`from_json`), plus object states at every whole second; a
        "speech" list of {"t_s", "t_end_s", "text", "voice"} only when the stream has a speech track."""
        states = [{"t": float(s), "objects": [asdict(o) for o in self.objects_at(s)]}
                  for s in range(int(self.duration_s) + 1) if s < self.duration_s]
        return {"schema": "shapesworld-timeline/2", "seed": self.seed, "duration_s": self.duration_s, "fps": self.fps,
                "grid": self.grid,
                "backgrounds": [[s, list(rgb)] for s, rgb in self.backgrounds],
                "tracks": [asdict(tr) for tr in self.tracks], "events": [asdict(e) for e in self.events],
                **({} if self.speech is None else {"speech": [asdict(u) for u in self.speech]}),
                "states": states}

    @classmethod
    def from_json(cls, d: dict) -> Timeline:
        if d.get("schema") != "shapesworld-timeline/2":
            raise ValueError(f"expected schema shapesworld-timeline/2, got {d.get('schema')!r}")
        tracks = [Track(**{**t, "colours": tuple((s, c) for s, c in t["colours"]),
                           "cells": tuple((s, c, r) for s, c, r in t["cells"]), "jitter": tuple(t["jitter"])})
                  for t in d["tracks"]]
        events = [Event(**{**e, "cell": e["cell"] and tuple(e["cell"]), "old_cell": e["old_cell"] and tuple(e["old_cell"])})
                  for e in d["events"]]
        speech = None if d.get("speech") is None else [Speech(**u) for u in d["speech"]]
        return cls(d["seed"], d["duration_s"], d["fps"], tracks,
                   [(s, tuple(rgb)) for s, rgb in d["backgrounds"]], events, d["grid"], speech)


def _compatible(new: Track, others: list[Track], fps: float) -> bool:
    for o in others:
        times = [k / fps for k in range(round(new.enter_s * fps), round(min(new.leave_s, o.leave_s) * fps))]
        if o.shape == new.shape or any(o.colour_at(t) == new.colour_at(t) or o.cell_at(t) == new.cell_at(t)
                                       for t in times):
            return False
    return True


def _hops(rng, grid: int, k: int, leave: int, fps: float) -> tuple[tuple[float, int, int], ...]:
    """A random cell schedule from frame k to leave: still (a third of the objects) or hopping every HOP_S seconds,
    mostly to a neighbouring cell, sometimes anywhere."""
    col, row = (int(v) for v in rng.integers(grid, size=2))
    cells = [(k / fps, col, row)]
    if rng.random() < 1 / 3:
        return tuple(cells)
    f = k + round(rng.uniform(*HOP_S) * fps)
    while f < leave:
        near = [(col + dc, row + dr) for dc, dr in ((1, 0), (-1, 0), (0, 1), (0, -1))
                if 0 <= col + dc < grid and 0 <= row + dr < grid]
        far = [(c, r) for c in range(grid) for r in range(grid) if (c, r) != (col, row)]
        options = near if rng.random() < 0.7 else far
        col, row = options[int(rng.integers(len(options)))]
        cells.append((f / fps, col, row))
        f += round(rng.uniform(*HOP_S) * fps)
    return tuple(cells)


def _plan(rng, tid, k, n, fps, grid, shape, colour, others, recolour_to, rare) -> Track | None:
    """Try a few random lives for a new object entering at frame k; None if none fits beside `others`."""
    cell = 1.0 / grid
    for _ in range(12):
        size = rng.uniform(*SIZE_RANGE) * cell
        jitter = tuple(float(v) for v in rng.uniform(-JITTER_PX, JITTER_PX, 2) * cell / CELL_PX)
        stay = max(math.ceil(MIN_STAY_S * fps), round(rng.uniform(MIN_STAY_S, 10 if rare else 20) * fps))
        leave = min(n, k + stay)
        colours = [(k / fps, colour)]
        if recolour_to and leave - k >= 8 * fps and rng.random() < 0.3:
            kr = int(rng.integers(k + round(3 * fps), leave - round(3 * fps) + 1))
            colours.append((kr / fps, recolour_to[int(rng.integers(len(recolour_to)))]))
        tr = Track(tid, shape, tuple(colours), k / fps, leave / fps, _hops(rng, grid, k, leave, fps), jitter,
                   float(size), grid)
        if _compatible(tr, others, fps):
            return tr
    return None


def generate(seed: int, duration_s: float, fps: float = 2.0, grid: int = FRAME_PX // CELL_PX) -> Timeline:
    """Plan a whole stream; the same (seed, duration_s, fps, grid) always gives the same timeline."""
    if seed < 0 or duration_s <= 0 or fps <= 0 or grid < 2:
        raise ValueError(f"expected seed >= 0, duration_s > 0, fps > 0, grid >= 2; got {seed}, {duration_s}, {fps}, {grid}")
    rng = np.random.default_rng(seed)
    n = max(1, math.ceil(duration_s * fps - EPS))
    shapes, colours = [str(s) for s in rng.permutation(SHAPES)], [str(c) for c in rng.permutation(list(COLOURS))]
    common_shapes, common_colours = shapes[_N_RARE_SHAPES:], colours[_N_RARE_COLOURS:]
    rare = sorted([(int(rng.integers(int(0.05 * n), int(0.7 * n) + 1)), s, None) for s in shapes[:_N_RARE_SHAPES]]
                  + [(int(rng.integers(int(0.05 * n), int(0.7 * n) + 1)), None, c) for c in colours[:_N_RARE_COLOURS]],
                  key=lambda r: r[0])  # (due frame, rare shape, rare colour)
    targets, bgs, s = [], [], 0.0  # target object count and background, piecewise constant
    while s < duration_s:
        targets.append((s, int(rng.choice(4, p=_TARGET_P))))
        s += rng.uniform(10, 40)
    s = 0.0
    while s < duration_s:
        choices = [b for b in BACKGROUNDS if not bgs or b != bgs[-1][1]]
        bgs.append((round(s * fps) / fps, choices[int(rng.integers(len(choices)))]))
        s = bgs[-1][0] + rng.uniform(20, 60)
    tracks: list[Track] = []
    last_entry = -10**9
    for k in range(n):
        t = k / fps
        on = [tr for tr in tracks if tr.visible_at(t)]
        target = [c for s, c in targets if s <= t + EPS][-1]
        is_rare = bool(rare) and rare[0][0] <= k and len(on) < 3
        if not is_rare and not (len(on) < target and k - last_entry >= 1.5 * fps and rng.random() < 0.25):
            continue
        free_s = [s for s in common_shapes if s not in {o.shape for o in on}]
        used_c = {c for o in on for _, c in o.colours}
        free_c = [c for c in common_colours if c not in used_c]
        if not free_s or not free_c:
            continue
        shape = rare[0][1] if is_rare and rare[0][1] else free_s[int(rng.integers(len(free_s)))]
        colour = rare[0][2] if is_rare and rare[0][2] else free_c[int(rng.integers(len(free_c)))]
        recolour_to = [] if is_rare else [c for c in free_c if c != colour]
        tr = _plan(rng, len(tracks), k, n, fps, grid, shape, colour, on, recolour_to, is_rare)
        if tr is not None:
            tracks.append(tr)
            last_entry = k
            if is_rare:
                rare.pop(0)
    return Timeline(seed, float(duration_s), float(fps), tracks, bgs, _events(tracks, n / fps), grid)


def _events(tracks: list[Track], end_s: float) -> list[Event]:
    ev = []
    for tr in tracks:
        ev.append(Event(tr.enter_s, "enter", tr.id, tr.shape, tr.colours[0][1], cell=tr.cells[0][1:]))
        ev += [Event(s, "recolour", tr.id, tr.shape, c, old) for (_, old), (s, c) in zip(tr.colours, tr.colours[1:])]
        ev += [Event(s, "move", tr.id, tr.shape, tr.colour_at(s), cell=(c, r), old_cell=(oc, or_))
               for (_, oc, or_), (s, c, r) in zip(tr.cells, tr.cells[1:])]
        if tr.leave_s < end_s - EPS:
            ev.append(Event(tr.leave_s, "leave", tr.id, tr.shape, tr.colours[-1][1]))
    order = {"leave": 0, "recolour": 1, "move": 2, "enter": 3}
    return sorted(ev, key=lambda e: (e.t_s, order[e.kind], e.obj_id))


# ---- rendering -------------------------------------------------------------------------------------------

def _star(n: int, inner: float) -> np.ndarray:
    a = -math.pi / 2 + np.arange(2 * n) * math.pi / n
    r = np.where(np.arange(2 * n) % 2 == 0, 1.0, inner)
    return np.stack([r * np.cos(a), r * np.sin(a)], 1)


_POLYS = {"triangle": _star(3, 0.5), "star": _star(5, 0.45),  # triangle: inner points sit on the edges
          "hexagon": np.stack([np.cos(np.arange(6) * math.pi / 3), np.sin(np.arange(6) * math.pi / 3)], 1)}


def _in_poly(dx: np.ndarray, dy: np.ndarray, verts: np.ndarray) -> np.ndarray:
    inside = np.zeros(dx.shape, bool)
    for (x1, y1), (x2, y2) in zip(verts, np.roll(verts, -1, 0)):
        if y1 != y2:
            inside ^= ((y1 > dy) != (y2 > dy)) & (dx < x1 + (dy - y1) * (x2 - x1) / (y2 - y1))
    return inside


def shape_mask(obj: Obj, size: int) -> np.ndarray:
    """(size, size) bool mask of the pixels the object covers."""
    c = (np.arange(size) + 0.5) / size
    r = obj.size / 2
    dx, dy = (c[None, :] - obj.x) / r, (c[:, None] - obj.y) / r
    if obj.shape == "circle":
        return dx * dx + dy * dy <= 1
    if obj.shape == "square":
        return np.maximum(abs(dx), abs(dy)) <= 0.75
    if obj.shape == "diamond":
        return abs(dx) + abs(dy) <= 1
    return _in_poly(np.broadcast_to(dx, (size, size)), np.broadcast_to(dy, (size, size)), _POLYS[obj.shape])


def render(timeline: Timeline, t_s: float, size: int = FRAME_PX) -> np.ndarray:
    """(size, size, 3) uint8 RGB frame at t_s; a pure function of (timeline, frame index, size)."""
    k = timeline.frame_index(t_s)
    return draw(timeline.objects_at(t_s), timeline.background_at(t_s), np.random.default_rng([timeline.seed, k]), size)


def draw(objects: list[Obj], background: tuple[int, int, int], noise: np.random.Generator,
         size: int = FRAME_PX) -> np.ndarray:
    """(size, size, 3) uint8 RGB: the objects on the background, with per-frame brightness jitter and mild pixel
    noise drawn from `noise`."""
    img = np.empty((size, size, 3), np.int16)
    img[:] = np.array(background) + int(noise.integers(-10, 11))  # per-frame brightness jitter
    for obj in objects:
        img[shape_mask(obj, size)] = COLOURS[obj.colour]
    img += noise.integers(-4, 5, (size, size, 1), dtype=np.int16)  # mild pixel noise
    return np.clip(img, 0, 255).astype(np.uint8)


def write_mp4(timeline: Timeline, path: str | Path, size: int = FRAME_PX, fps: float | None = None) -> Path:
    """Encode the whole stream (yuv420p, H.264 crf 28 when available) at `fps` (default: the timeline's)."""
    import av

    fps = fps or timeline.fps
    codec, path = h264_encoder(), Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        st = out.add_stream(codec, rate=Fraction(fps).limit_denominator(1000))
        st.width = st.height = size
        st.pix_fmt = "yuv420p"
        if codec == "mpeg4":
            st.bit_rate = 150_000
        else:
            st.options = {"crf": "28", "preset": "medium", "g": str(max(1, round(10 * fps)))}
        for i in range(math.ceil(timeline.duration_s * fps - EPS)):
            frame = av.VideoFrame.from_ndarray(render(timeline, i / fps, size), format="rgb24")
            out.mux(st.encode(frame))
        out.mux(st.encode(None))
    return path
