"""Value objects passed between stages: frames and outputs; the KV segments an adapter encodes and the
contexts it runs on. Immutable once built; safe to hand from one thread to another.

A KV segment is one (keys, values) pair per decoder layer, each shaped (1, kv_heads, n_tokens, head_dim), keys
stored after RoPE at the positions the segment was encoded at.
"""

from __future__ import annotations

import time
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Frame:
    """One decoded RGB frame and where it sits in the stream."""

    image: np.ndarray  # (H, W, 3) uint8, RGB
    t_s: float  # stream time in seconds (0 = start of the stream)
    index: int  # running count of frames emitted by the source, from 0


class Output:
    """What a stream says, one kind per class below: `kind` names it, `to_json()` is its one serialisation (the
    object `streamvid run` prints and the APIs send: {"type": kind, then the fields in order}), `data` its fields
    besides id and text. `id` and `text` are "" for kinds without them."""

    kind: ClassVar[str] = ""
    _json_names: ClassVar[dict[str, str]] = {}  # field -> JSON key where they differ
    _optional: ClassVar[tuple[str, ...]] = ()  # fields left out of the JSON while None

    def to_json(self) -> dict:
        out = {"type": self.kind}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "info":  # a status event's own fields
                out.update(value)
            elif not (value is None and f.name in self._optional):
                out[self._json_names.get(f.name, f.name)] = value
        return out

    def __getattr__(self, name: str):
        if name in ("id", "text"):  # a kind without them
            return ""
        raise AttributeError(f"{type(self).__name__} has no {name!r}")

    @property
    def data(self) -> dict:
        """The fields besides id and text, as in the JSON."""
        return {k: v for k, v in self.to_json().items()
                if k not in ("type", self._json_names.get("id", "id"), self._json_names.get("text", "text"))}


@dataclass(frozen=True)
class Token(Output):
    """A piece of an answer being decoded (`id`: the question's)."""

    kind: ClassVar[str] = "token"
    id: str
    text: str


@dataclass(frozen=True)
class Utterance:
    """Words heard in a stream's sound and when (stream times of the utterance's start and end)."""

    t_s: float
    t_end_s: float
    text: str
    heard_s: float = field(default_factory=time.perf_counter)  # wall clock (perf_counter) when it was recognised
    question: str | None = None  # the words after the wake word: a question to the assistant, not a speech block


@dataclass(frozen=True)
class Transcript(Output):
    """An utterance heard in the stream's sound."""

    kind: ClassVar[str] = "transcript"
    _optional: ClassVar[tuple[str, ...]] = ("question_id",)
    t_s: float
    t_end_s: float
    text: str
    question_id: str | None = None  # the question it asked (words after the wake word)


@dataclass(frozen=True)
class VoiceActivity(Output):
    """The voice detector's edge in pushed sound, as soon as it is seen: "speech_started" or "speech_stopped" (the
    utterance's transcript comes once it is recognised)."""

    kind: ClassVar[str] = "voice_activity"
    event: str
    t_s: float


@dataclass(frozen=True)
class Answer(Output):
    """A finished answer, or the acknowledgement of a "tell me when" question (with `trigger_id`)."""

    kind: ClassVar[str] = "answer"
    _optional: ClassVar[tuple[str, ...]] = ("trigger_id", "dialogue_turns_dropped", "prompt_tokens", "context_tokens")
    id: str
    text: str
    question: str
    t_s: float  # stream time it was asked at (session clock)
    input_t_s: float  # the same on the input's own clock
    ttft_ms: float  # from the question's arrival to its first token
    tokens: int
    tokens_per_s: float | None
    evidence_t_s: list  # [[start, end], ...] stream spans the answer was given from
    retrieved_blocks: list  # ids of the long-term memory blocks in its context
    trigger_id: str | None = None
    dialogue_turns_dropped: int | None = None  # oldest earlier turns left out (max_dialogue_tokens), when any
    prompt_tokens: int | None = None  # tokens of the prompt fed after the context (the dialogue and the question)
    context_tokens: int | None = None  # tokens of the cached context it read (sinks, memory, window)


@dataclass(frozen=True)
class ProbeResult(Output):
    """A yes/no probe's result (replays): p(yes) on the window."""

    kind: ClassVar[str] = "probe"
    id: str
    text: str  # "yes" or "no"
    question: str
    t_s: float
    p_yes: float


@dataclass(frozen=True)
class Alert(Output):
    """A trigger fired (`id`: the trigger's id, "trigger_id" in the JSON; `text`: its statement; `heard`: the
    words of the utterance a speech trigger fired on; `alert_id`: its id on a stream that keeps alert media, "a0",
    "a1", ..., under which its snapshot and clip are found (alert_media.py))."""

    kind: ClassVar[str] = "alert"
    _json_names: ClassVar[dict[str, str]] = {"id": "trigger_id"}
    _optional: ClassVar[tuple[str, ...]] = ("heard", "alert_id")
    id: str
    condition: str
    t_s: float
    score: float
    evidence_t_s: list
    text: str
    heard: str | None = None
    alert_id: str | None = None


@dataclass(frozen=True)
class Narration(Output):
    """A remark made without being asked ("say" in the JSON)."""

    kind: ClassVar[str] = "say"
    t_s: float
    text: str


@dataclass(frozen=True)
class Status(Output):
    """A status event: e.g. a live source lost and back ("source_lost", "source_back"), with its own fields."""

    kind: ClassVar[str] = "status"
    event: str
    t_s: float
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Encoded:
    """KV of one encoded segment (system prompt, video chunk) and its retrieval vector."""

    keys: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim), post-RoPE
    values: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim)
    pos_span: int  # positions occupied: the next segment starts at pos_start + pos_span
    vector: np.ndarray | None  # (index_dim,) float32, L2-normalised; None for text segments
    scene: np.ndarray | None = None  # (n_video_tokens, hidden) float16: the vision tokens the decoder received
    regions: np.ndarray | None = None  # (n_regions, index_dim) float32, L2-normalised rows: `vector`, per region
    state: Any = None  # a hybrid model's kv/recurrent_state.RecurrentState after the segment; None: no such layers

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[2])


@dataclass(frozen=True)
class Context:
    """A cache to run on: concatenated segments and the first free position after them. With `room`, the K/V
    are views into buffers the caller owns (kv/window.py) with that many free tokens after them in each
    head's row, which a forward may fill in place instead of copying the context."""

    keys: tuple[torch.Tensor, ...]  # per layer with K/V (a hybrid model's attention layers) (1, kv_heads, n, head_dim)
    values: tuple[torch.Tensor, ...]
    next_pos: int
    room: int = 0
    state: Any = None  # a hybrid model's RecurrentState after the context (kv/recurrent_state.py), copied by a forward

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
