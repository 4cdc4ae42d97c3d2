"""Value objects passed between stages. Immutable once built; safe to hand from one thread to another."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Frame:
    """One decoded RGB frame and where it sits in the stream."""

    image: np.ndarray  # (H, W, 3) uint8, RGB
    t_s: float  # stream time in seconds (0 = start of the stream)
    index: int  # running count of frames emitted by the source, from 0


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    t_s: float  # stream time at which it was asked
    asked_s: float = field(default_factory=time.perf_counter)  # wall clock (perf_counter) when it arrived: TTFT's 0


@dataclass(frozen=True)
class Output:
    """One item on the outputs queue.

    kind: "token" (a piece of an answer being streamed), "answer" (the finished answer), "probe", "status",
    "alert" (a trigger fired; `id` is the trigger id) or "say" (a narration remark; no id).
    """

    kind: str
    id: str
    text: str
    data: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        if self.kind == "alert":  # {"type", "trigger_id", "condition", "t_s", "score", "evidence_t_s", "text"}
            return {"type": "alert", "trigger_id": self.id, **self.data, "text": self.text}
        if self.kind == "say":  # {"type", "t_s", "text"}
            return {"type": "say", **self.data, "text": self.text}
        if self.kind == "status":  # {"type", "event", "t_s", ...}: e.g. a live source lost and back
            return {"type": "status", **self.data}
        return {"type": self.kind, "id": self.id, "text": self.text, **self.data}
