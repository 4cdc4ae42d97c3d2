"""Pure decision logic for speaking up: when a standing trigger fires, when the scene changed enough to look
again (chunks compared by `scene_features`), when narration speaks. No model, no threads and no clock of its own:
every call passes the stream time of the chunk it decides on, so a test drives it with any sequence of times (a fake
clock).

Thread contract: every object here is single-threaded; the engine's scheduler thread owns them (docs/architecture.md,
docs/speaking-up.md).
"""

from __future__ import annotations

import re

import numpy as np

from streamvid.config import Thresholds
from streamvid.kv.window import Block


class FiringRule:
    """Hysteresis over one score per decided chunk.

    Fires on the k-th positive score in a row (score >= fire) while armed and out of cooldown, then disarms;
    it re-arms once a score drops below `reset`. So one event that keeps the score high gives one alert, a
    flicker between reset and fire gives none, and the event coming back after the score fell gives another.
    A trigger still in cooldown when its streak reaches k fires at the first chunk after the cooldown (if the
    streak holds).
    """

    def __init__(self, thresholds: Thresholds):
        self.thresholds = thresholds
        self.armed = True
        self.streak = 0  # positive chunks in a row, up to now
        self.last_fire_s: float | None = None
        self._last_t_s: float | None = None

    def update(self, score: float, t_s: float) -> bool:
        """Feed the score of the chunk at stream time t_s; True when this chunk fires an alert."""
        if self._last_t_s is not None and t_s < self._last_t_s:
            raise ValueError(f"stream time went back: {t_s} after {self._last_t_s}")
        self._last_t_s = t_s
        th = self.thresholds
        if score < th.reset:
            self.armed = True
        self.streak = self.streak + 1 if score >= th.fire else 0
        cooled = self.last_fire_s is None or t_s - self.last_fire_s >= th.cooldown_s
        if self.armed and self.streak >= th.k and cooled:
            self.armed = False
            self.last_fire_s = t_s
            return True
        return False


def novelty(scene: np.ndarray | None, reference: np.ndarray | None) -> float:
    """How far a chunk's scene is from a reference scene; 1.0 when either is missing (always novel).

    Vectors (d,): the cosine distance 1 - cos. Token features (n, d), one row per token of the chunk: the
    symmetric Hausdorff distance under cosine distance, the largest distance from any token of one scene to its
    nearest token in the other. It ignores where a token sits (an object that moved to another cell has a near
    twin in the reference) but sees one token unlike any before (an object that came, went or changed)."""
    if scene is None or reference is None:
        return 1.0
    a, b = np.asarray(scene, np.float64), np.asarray(reference, np.float64)
    if a.shape[-1] != b.shape[-1] or a.ndim != b.ndim:
        return 1.0
    if a.ndim == 1:
        denom = float(np.linalg.norm(a) * np.linalg.norm(b))
        return 1.0 - float(a @ b) / denom if denom > 0 else 1.0
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    dist = 1.0 - a @ b.T  # (n_a, n_b)
    return float(max(dist.min(axis=1).max(), dist.min(axis=0).max()))


class ChangeGate:
    """Skips work on unchanged scenes: look again only when the chunk's scene (a vector or token features, see
    `novelty`) moved at least `min_novelty` from the scene at the last look, or `max_skip_s` of stream passed
    since that look, or it is one of the `follow_up` chunks right after a change. `min_novelty=0` looks at every
    chunk. Counts what it let through and what it skipped.

    The follow-up looks are there because a model's answer about a change may need the change in more than one
    chunk of its context: on ShapesWorld the bundled model often says no to an object in the first chunk that shows
    it and yes in the next, which is the same scene to the gate."""

    def __init__(self, min_novelty: float, max_skip_s: float, follow_up: int = 1):
        if min_novelty < 0:
            raise ValueError(f"min_novelty must be >= 0, got {min_novelty}")
        if max_skip_s <= 0:
            raise ValueError(f"max_skip_s must be positive, got {max_skip_s}")
        if follow_up < 0:
            raise ValueError(f"follow_up must be >= 0, got {follow_up}")
        self.min_novelty = min_novelty
        self.max_skip_s = max_skip_s
        self.follow_up = follow_up
        self.reference: np.ndarray | None = None
        self.reference_t_s: float | None = None
        self.looked = 0
        self.skipped = 0
        self._follow_ups = 0  # looks still due after the last change

    def should_look(self, scene: np.ndarray | None, t_s: float) -> bool:
        if self.reference_t_s is None or self.min_novelty == 0 or t_s - self.reference_t_s >= self.max_skip_s:
            return True
        return self._follow_ups > 0 or novelty(scene, self.reference) >= self.min_novelty

    def look(self, scene: np.ndarray | None, t_s: float) -> None:
        """Record that the scene was looked at now (the new reference)."""
        changed = self.reference_t_s is not None and novelty(scene, self.reference) >= self.min_novelty
        self._follow_ups = self.follow_up if changed else max(0, self._follow_ups - 1)
        self.reference, self.reference_t_s = scene, t_s
        self.looked += 1

    def skip(self) -> None:
        self.skipped += 1


def same_remark(a: str | None, b: str | None) -> bool:
    """Whether two remarks say the same thing: case, punctuation, spacing and the order of list items ignored."""
    if a is None or b is None:
        return False

    def items(s: str) -> list[str]:
        return sorted(" ".join(re.sub(r"[^a-z0-9 ,]+", " ", part).split())
                      for part in s.lower().replace(" and ", ",").split(","))

    return items(a) == items(b)


class NarrationPolicy:
    """When narration looks (generates a remark) and whether what it generated is said.

    A look is due once `min_gap_s` passed since the last look and either the scene moved `min_novelty` from the
    scene at the last look, or `max_silence_s` passed since the last thing said. A generated remark is said
    unless it is empty or the same as the previous remark (`same_remark`): the policy never repeats itself,
    so on a static scene it stays silent after its one remark and looks again every `max_silence_s` at most.
    """

    def __init__(self, min_gap_s: float, max_silence_s: float, min_novelty: float):
        if not 0 < min_gap_s <= max_silence_s:
            raise ValueError(f"expected 0 < min_gap_s <= max_silence_s, got {min_gap_s}, {max_silence_s}")
        if min_novelty < 0:
            raise ValueError(f"min_novelty must be >= 0, got {min_novelty}")
        self.min_gap_s, self.max_silence_s, self.min_novelty = min_gap_s, max_silence_s, min_novelty
        self.last_text: str | None = None
        self.last_said_s: float | None = None
        self.last_look_s: float | None = None
        self._look_scene: np.ndarray | None = None

    def due(self, scene: np.ndarray | None, t_s: float) -> bool:
        if self.last_look_s is None:
            return True
        if t_s - self.last_look_s < self.min_gap_s:
            return False
        silent_s = t_s - (self.last_said_s if self.last_said_s is not None else self.last_look_s)
        return silent_s >= self.max_silence_s or novelty(scene, self._look_scene) >= self.min_novelty

    def offer(self, text: str, scene: np.ndarray | None, t_s: float) -> bool:
        """Record a look at t_s that generated `text`; True when it should be said."""
        self.last_look_s, self._look_scene = t_s, scene
        text = text.strip()
        if not text or same_remark(text, self.last_text):
            return False
        self.last_text, self.last_said_s = text, t_s
        return True


def scene_features(block: Block) -> np.ndarray:
    """(n_tokens, d) float32, one row per token of the chunk: what the change gate and narration compare chunks by
    (proactive.novelty). The vision tokens as the decoder received them when the adapter gave them (`Block.scene`),
    else the block's values at the first decoder layer. Neither carries position, so the same content at another
    time or place gives the same rows.

    The vision tokens see what the model sees: on ShapesWorld (dev seed 2001, gate at 0.01) they let the gate skip
    59% of chunks with one chunk of a changed scene seen late; the first layer's values, a projection of them that
    keeps what that layer needs, hid most entering objects behind a twin of another shape in the same colour (skip
    70% at 0.05 but 141 changed chunks seen late)."""
    if block.scene is not None:
        return np.asarray(block.scene, np.float32)
    v = block.values[0][0].float()  # (kv_heads, n_tokens, head_dim)
    return v.permute(1, 0, 2).reshape(v.shape[1], -1).cpu().numpy()
