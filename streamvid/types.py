"""Value objects passed between stages: frames, questions and outputs; the KV segments an adapter encodes and the
contexts it runs on. Immutable once built; safe to hand from one thread to another.

A KV segment is one (keys, values) pair per decoder layer, each shaped (1, kv_heads, n_tokens, head_dim), keys
stored after RoPE at the positions the segment was encoded at.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


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
    # earlier (question, answer) turns to answer with instead of the stream's own dialogue (an API client's
    # conversation); None: the stream's
    dialogue: tuple[tuple[str, str], ...] | None = None


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


@dataclass(frozen=True)
class Encoded:
    """KV of one encoded segment (system prompt, video chunk) and its retrieval vector."""

    keys: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim), post-RoPE
    values: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim)
    pos_span: int  # positions occupied: the next segment starts at pos_start + pos_span
    vector: np.ndarray | None  # (index_dim,) float32, L2-normalised; None for text segments
    scene: np.ndarray | None = None  # (n_video_tokens, hidden) float16: the vision tokens the decoder received
    regions: np.ndarray | None = None  # (n_regions, index_dim) float32, L2-normalised rows: `vector`, per region

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[2])


@dataclass(frozen=True)
class Context:
    """A cache to run on: concatenated segments and the first free position after them. With `room`, the K/V
    are views into buffers the caller owns (window_buffer.py) with that many free tokens after them in each
    head's row, which a forward may fill in place instead of copying the context."""

    keys: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim)
    values: tuple[torch.Tensor, ...]
    next_pos: int
    room: int = 0

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0


@dataclass(frozen=True)
class ChunkJob:
    """One chunk to encode on top of a context (one stream's window)."""

    frames: tuple[np.ndarray, ...]  # RGB uint8 frames, a multiple of the model's temporal patch
    past: Context
    seconds_per_chunk: float
    t_start_s: float = 0.0  # stream time of the first frame (adapters whose tokens carry time use it)
