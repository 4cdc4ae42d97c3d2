"""ShapesWorld: procedural video streams with exact ground truth.

A `Timeline` is planned up front, one object ("track") at a time, in order of entry. Each track's whole life is
fixed when it enters: entry and leave frame, start position, drift velocity (bouncing off the frame edges),
size, and at most one colour change. A newcomer is accepted only if, at every frame it shares with the tracks
already on screen, its shape and colour differ from theirs and the shapes do not overlap. So at any moment the
visible objects have distinct shapes AND distinct colours, and never occlude each other.

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


@dataclass
class Event:
    t_s: float
    kind: str  # "enter" | "leave" | "recolour"
    obj_id: int
    shape: str
    colour: str  # colour at the event (the new colour for "recolour")
    old_colour: str | None = None


@dataclass(frozen=True)
class Track:
    """One object's whole life: visible on frames with enter_s <= t < leave_s."""

    id: int
    shape: str
    colours: tuple[tuple[float, str], ...]  # (from_s, colour), first entry at enter_s
    enter_s: float
    leave_s: float
    x0: float
    y0: float
    vx: float  # frame fractions per second
    vy: float
    size: float

    def visible_at(self, t: float) -> bool:
        return self.enter_s - EPS <= t < self.leave_s - EPS

    def colour_at(self, t: float) -> str:
        return next((c for s, c in reversed(self.colours) if s <= t + EPS), self.colours[0][1])

    def pos_at(self, t: float) -> tuple[float, float]:
        lo, dt = 1.1 * self.size / 2, t - self.enter_s  # centre stays lo from the edges: the whole shape shows
        return _bounce(self.x0 + self.vx * dt, lo), _bounce(self.y0 + self.vy * dt, lo)


def _bounce(p: float, lo: float) -> float:
    span = 1.0 - 2 * lo
    u = (p - lo) % (2 * span)
    return lo + (u if u <= span else 2 * span - u)


@dataclass
class Timeline:
    seed: int
    duration_s: float
    fps: float
    tracks: list[Track]
    backgrounds: list[tuple[float, tuple[int, int, int]]]  # (from_s, rgb), first at 0
    events: list[Event]

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
        return [Obj(tr.id, tr.shape, tr.colour_at(tf), *tr.pos_at(tf), tr.size)
                for tr in self.tracks if tr.visible_at(tf)]

    def background_at(self, t_s: float) -> tuple[int, int, int]:
        tf = self.frame_time(t_s)
        return [rgb for s, rgb in self.backgrounds if s <= tf + EPS][-1]

    def to_json(self) -> dict:
        """Everything needed to rebuild the timeline (`from_json`), plus object states at every whole second."""
        states = [{"t": float(s), "objects": [asdict(o) for o in self.objects_at(s)]}
                  for s in range(int(self.duration_s) + 1) if s < self.duration_s]
        return {"schema": "shapesworld-timeline/1", "seed": self.seed, "duration_s": self.duration_s, "fps": self.fps,
                "backgrounds": [[s, list(rgb)] for s, rgb in self.backgrounds],
                "tracks": [asdict(tr) for tr in self.tracks], "events": [asdict(e) for e in self.events],
                "states": states}

    @classmethod
    def from_json(cls, d: dict) -> Timeline:
        tracks = [Track(**{**t, "colours": tuple((s, c) for s, c in t["colours"])}) for t in d["tracks"]]
        return cls(d["seed"], d["duration_s"], d["fps"], tracks,
                   [(s, tuple(rgb)) for s, rgb in d["backgrounds"]], [Event(**e) for e in d["events"]])


def _collide(a: Track, b: Track, times: list[float]) -> bool:
    gap = 1.1 * (a.size + b.size) / 2 + 0.02
    return any(math.dist(a.pos_at(t), b.pos_at(t)) < gap for t in times)


def _compatible(new: Track, others: list[Track], fps: float) -> bool:
    for o in others:
        times = [k / fps for k in range(round(new.enter_s * fps), round(min(new.leave_s, o.leave_s) * fps))]
        if o.shape == new.shape or any(o.colour_at(t) == new.colour_at(t) for t in times) or _collide(new, o, times):
            return False
    return True


def _plan(rng, tid, k, n, fps, shape, colour, others, recolour_to, rare) -> Track | None:
    """Try a few random lives for a new object entering at frame k; None if none fits beside `others`."""
    for _ in range(8):
        size = rng.uniform(0.2, 0.3 if len(others) >= 2 else 0.4)
        reach = 1.1 * size / 2
        x0, y0 = rng.uniform(reach, 1 - reach, 2)
        speed = 0.0 if rng.random() < 0.2 else rng.uniform(0.02, 0.1)
        angle = rng.uniform(0, 2 * math.pi)
        stay = max(math.ceil(MIN_STAY_S * fps), round(rng.uniform(MIN_STAY_S, 10 if rare else 20) * fps))
        leave = min(n, k + stay)
        colours = [(k / fps, colour)]
        if recolour_to and leave - k >= 8 * fps and rng.random() < 0.3:
            kr = int(rng.integers(k + round(3 * fps), leave - round(3 * fps) + 1))
            colours.append((kr / fps, recolour_to[int(rng.integers(len(recolour_to)))]))
        tr = Track(tid, shape, tuple(colours), k / fps, leave / fps, float(x0), float(y0),
                   float(speed * math.cos(angle)), float(speed * math.sin(angle)), float(size))
        if _compatible(tr, others, fps):
            return tr
    return None


def generate(seed: int, duration_s: float, fps: float = 2.0) -> Timeline:
    """Plan a whole stream; the same (seed, duration_s, fps) always gives the same timeline."""
    if seed < 0 or duration_s <= 0 or fps <= 0:
        raise ValueError(f"expected seed >= 0, duration_s > 0, fps > 0; got {seed}, {duration_s}, {fps}")
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
        tr = _plan(rng, len(tracks), k, n, fps, shape, colour, on, recolour_to, is_rare)
        if tr is not None:
            tracks.append(tr)
            last_entry = k
            if is_rare:
                rare.pop(0)
    return Timeline(seed, float(duration_s), float(fps), tracks, bgs, _events(tracks, n / fps))


def _events(tracks: list[Track], end_s: float) -> list[Event]:
    ev = []
    for tr in tracks:
        ev.append(Event(tr.enter_s, "enter", tr.id, tr.shape, tr.colours[0][1]))
        ev += [Event(s, "recolour", tr.id, tr.shape, c, old) for (_, old), (s, c) in zip(tr.colours, tr.colours[1:])]
        if tr.leave_s < end_s - EPS:
            ev.append(Event(tr.leave_s, "leave", tr.id, tr.shape, tr.colours[-1][1]))
    order = {"leave": 0, "recolour": 1, "enter": 2}
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


def render(timeline: Timeline, t_s: float, size: int = 112) -> np.ndarray:
    """(size, size, 3) uint8 RGB frame at t_s; a pure function of (timeline, frame index, size)."""
    k = timeline.frame_index(t_s)
    noise = np.random.default_rng([timeline.seed, k])
    img = np.empty((size, size, 3), np.int16)
    img[:] = np.array(timeline.background_at(t_s)) + int(noise.integers(-10, 11))  # per-frame brightness jitter
    for obj in timeline.objects_at(t_s):
        img[shape_mask(obj, size)] = COLOURS[obj.colour]
    img += noise.integers(-4, 5, (size, size, 1), dtype=np.int16)  # mild pixel noise
    return np.clip(img, 0, 255).astype(np.uint8)


def h264_encoder() -> str:
    """The first H.264 encoder this PyAV build has ("libx264" here); "mpeg4" (MPEG-4 part 2) when none is."""
    import av

    for name in ("libx264", "h264", "libopenh264"):
        try:
            av.codec.Codec(name, "w")
            return name
        except ValueError:  # av.codec.codec.UnknownCodecError
            continue
    return "mpeg4"


def write_mp4(timeline: Timeline, path: str | Path, size: int = 112, fps: float | None = None) -> Path:
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
