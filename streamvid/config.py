"""Engine configuration: one frozen dataclass, units in the names, validated on construction."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from streamvid.assets import BUNDLED_MODEL
from streamvid.budget import MEMORY_KINDS
from streamvid.retrieval import MEMORY_ENCODINGS
from streamvid.embedders import check_spec as check_embedder
from streamvid.proactive import Thresholds


@dataclass(frozen=True)
class EngineConfig:
    model: str = str(BUNDLED_MODEL)  # HF id or local checkpoint directory
    device: str = "auto"  # "auto": CUDA when there is a GPU, else the CPU; or "cpu", "cuda", "cuda:1", ...
    dtype: str = "auto"  # "auto": bfloat16 on CUDA (float16 where bf16 is unsupported), float32 on CPU
    device_map: str | None = None  # "auto": accelerate spreads a checkpoint that does not fit one device
    attn: str = "auto"  # attention kernel: "auto" (flash-attention 2 on CUDA when installed, else SDPA), "sdpa", ...
    fps: float = 2.0  # frames sampled per second of stream
    frames_per_chunk: int = 2  # frames per encoded block (a multiple of the model's temporal patch)
    frame_px: int | None = None  # resize frames to frame_px x frame_px before the processor; None: native size
    # The KV window (sinks not counted) is set by one of: seconds of video (the default), tokens, or megabytes of
    # KV (converted with the model's bytes per token). budget.Budgets says what each means for the loaded model.
    window_s: float = 8.0  # the bundled model: 8 chunks of 18 tokens; Qwen2.5-VL-7B at 448 px: 2,064 tokens, 113 MB
    window_tokens: int | None = None  # when set, the window's budget in tokens (window_s is then not used)
    window_mb: float | None = None  # when set, the window's budget in MB of KV (window_s is then not used)
    memory_top_k: int = 4  # blocks retrieved from long-term memory per question; 0 turns retrieval off
    retrieve_for_now: bool = False  # also search memory for questions about the present moment (scope.about_now)
    memory_ram_mb: float = 8192.0  # long-term blocks in host RAM; beyond it they spill to disk
    memory_disk_mb: float = 65536.0  # spilled blocks on disk; beyond it the oldest are dropped
    memory_dir: str | None = None  # where spilled blocks go; None: a temporary directory
    memory_kv: str = "int8"  # long-term blocks: "int8" or "int4" (quantised K and V, kv_compact.py), or "float"
    memory_keep: float = 1.0  # share of a block's tokens kept in long-term memory (lowest key norm first kept)
    index_layer: int | None = None  # decoder layer of the retrieval vectors; None: retrieval.default_index_layer
    # what memory keeps of a block: "window", its KV as encoded on the window; "sinks", the chunk encoded again
    # after the sinks alone (one more chunk forward per block); None: retrieval.default_memory_encoding
    memory_encoding: str | None = None
    embedder: str = "model"  # retrieval vectors: the model's own ("model") or "clip:<HF id or dir>" (embedders.py)
    rebase_after_pos: int = 16384  # rebase window positions once the next position passes this
    max_new_tokens: int = 32
    question_queue_size: int = 8
    dialogue_turns: int = 2  # earlier question/answer pairs kept as text context
    read_timeout_s: float = 0.5  # how long one ingest step waits for a frame
    # speaking up (docs/speaking-up.md): standing triggers and narration, decided on each new chunk
    decision_hz: float | None = None  # at most this many decisions per second of stream; None: every chunk
    probe_batch: int = 8  # trigger probes per batched forward (questions are served between batches)
    # the firing rule and gate defaults were chosen on ShapesWorld dev seeds 2001-2003 with the bundled model
    # (benchmarks/trigger_sweep.py; benchmarks/RESULTS.md has the held-out numbers)
    trigger_fire: float = 0.6  # default firing rule of a trigger (proactive.Thresholds); watch() may override
    trigger_reset: float = 0.4
    trigger_k: int = 2
    trigger_cooldown_s: float = 10.0
    gate_min_novelty: float = 0.01  # re-probe when the chunk's vision tokens moved this far from the last probe's
    gate_max_skip_s: float = 5.0  # ... or this long after it anyway (proactive.ChangeGate); 0 novelty: always
    gate_follow_up: int = 1  # chunks probed again right after a change (the model may need it in two chunks)
    narrate: bool = False  # comment on the scene without being asked ({"type": "say"} outputs)
    narrate_prompt: str = "What do you see?"  # "{mmss}" in it becomes the chunk's stream time, e.g. "01:05"
    narrate_min_gap_s: float = 3.0  # stream seconds between two looks
    narrate_max_silence_s: float = 30.0  # look again after this long without a remark, changed scene or not
    narrate_min_novelty: float = 0.02  # scene change (proactive.novelty of chunk tokens) that makes a look due
    join_timeout_s: float = 2.0
    # the engine (engine.py): streams it serves, and the work of how many streams one batched forward takes
    max_streams: int = 64
    max_batch: int = 8
    idle_release_s: float | None = None  # a stream without frames this long moves its window KV to host memory
    engine_kv_mb: float | None = None  # device KV of all streams' windows together (their budgets); None: no cap
    engine_memory_mb: float | None = None  # host RAM of all streams' long-term memories (memory_ram_mb); None: no cap

    def __post_init__(self):
        _check_types(self)  # each field: the right kind of value (finite numbers), before the ranges below
        positive = ("fps", "frames_per_chunk", "window_s", "max_new_tokens", "question_queue_size",
                    "read_timeout_s", "join_timeout_s", "rebase_after_pos", "memory_ram_mb", "memory_disk_mb",
                    "probe_batch", "gate_max_skip_s", "max_streams", "max_batch", "narrate_min_gap_s",
                    "narrate_max_silence_s")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("window_tokens", "window_mb", "idle_release_s", "engine_kv_mb", "engine_memory_mb"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive or None, got {getattr(self, name)}")
        if self.window_tokens is not None and self.window_mb is not None:
            raise ValueError(f"set the window in tokens or in MB, not both: got window_tokens={self.window_tokens}, "
                             f"window_mb={self.window_mb}")
        if self.memory_encoding is not None and self.memory_encoding not in MEMORY_ENCODINGS:
            raise ValueError(f"memory_encoding must be one of {', '.join(MEMORY_ENCODINGS)}, "
                             f"got {self.memory_encoding!r}")
        if self.memory_kv not in MEMORY_KINDS:
            raise ValueError(f"memory_kv must be one of {', '.join(MEMORY_KINDS)}, got {self.memory_kv!r}")
        if not 0 < self.memory_keep <= 1:
            raise ValueError(f"memory_keep must be in (0, 1], got {self.memory_keep}")
        check_embedder(self.embedder)
        if self.index_layer is not None and self.index_layer < 0:
            raise ValueError(f"index_layer must be >= 0 or None, got {self.index_layer}")
        for name in ("memory_top_k", "dialogue_turns", "gate_min_novelty", "gate_follow_up", "narrate_min_novelty"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.decision_hz is not None and self.decision_hz <= 0:
            raise ValueError(f"decision_hz must be positive or None, got {self.decision_hz}")
        if self.narrate_min_gap_s > self.narrate_max_silence_s:
            raise ValueError(f"narrate_min_gap_s must be <= narrate_max_silence_s, got {self.narrate_min_gap_s} > "
                             f"{self.narrate_max_silence_s}")
        try:
            self.trigger_thresholds()
        except ValueError as e:
            raise ValueError(f"trigger_fire, trigger_reset, trigger_k, trigger_cooldown_s: {e}") from None
        if self.frame_px is not None and self.frame_px < 28:
            raise ValueError(f"frame_px must be >= 28 (two merged patches), got {self.frame_px}")

    def trigger_thresholds(self) -> Thresholds:
        return Thresholds(self.trigger_fire, self.trigger_reset, self.trigger_k, self.trigger_cooldown_s)

    def replace(self, **changes) -> EngineConfig:
        return dataclasses.replace(self, **changes)


def _check_types(config: EngineConfig) -> None:
    """ValueError naming the field when a value is not of its declared kind: a finite int or float (bool is not a
    number), a str, a bool, or None where the field allows it."""
    for f in dataclasses.fields(config):
        value, kinds = getattr(config, f.name), {k.strip() for k in str(f.type).split("|")}
        if value is None:
            if "None" not in kinds:
                raise ValueError(f"{f.name}: expected a value ({f.type}), got None")
        elif kinds & {"int", "float"}:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    "float" not in kinds and not isinstance(value, int)):
                raise ValueError(f"{f.name}: expected {'an integer' if 'float' not in kinds else 'a number'}, "
                                 f"got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{f.name}: expected a finite number, got {value}")
        elif "str" in kinds and not isinstance(value, str):
            raise ValueError(f"{f.name}: expected text, got {value!r}")
        elif "bool" in kinds and not isinstance(value, bool):
            raise ValueError(f"{f.name}: expected true or false, got {value!r}")
