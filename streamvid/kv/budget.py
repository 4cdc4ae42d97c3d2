"""Budgets that follow the model: the KV window and long-term memory in seconds of video and bytes.

A model's KV cache costs `layers x 2 (K, V) x kv_heads x head_dim x dtype bytes` per token (Qwen2.5-VL-7B in
bfloat16: 28 x 2 x 4 x 128 x 2 = 57,344 B), and its processor turns a chunk of frames into a known number of
tokens (Qwen2.5-VL: one token per 28 x 28 px per temporal patch of 2 frames, plus the vision start/end tokens;
a 640 x 480 chunk is 393 tokens, 22 MB). `Budgets` converts between seconds, tokens and bytes with those two
numbers and says what a configuration means for the loaded model, in one line:

    window 8 s = 144 tokens = 0.3 MB; memory (int8): RAM 8.0 GB ≈ 4,480 h, disk 64.0 GB ≈ 35,800 h

Long-term blocks are stored compact (memory.py): `stored_block_bytes` is what one block costs there, exactly as
memory.py counts it. Not counted: each block's retrieval rows in the FAISS index, held in RAM for every block (at
most 16 float32 vectors of kv_heads x head_dim: 32 KB for Qwen2.5-VL-7B, under 1% of an int4 block). Pure
arithmetic: no torch, no weights; a checkpoint's config.json is enough.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SCALE_BYTES = 2  # int8 and int4 scales (and int4 minima) are float16 (compact.py)
MEMORY_KINDS = ("int8", "int4", "float")  # how long-term memory may store a block's K and V (compact.py)
INT4_GROUP = 32  # int4: tokens per key scale group, channels per value scale group


@dataclass(frozen=True)
class KVShape:
    """What one token's KV looks like: per layer, K and V of (kv_heads, head_dim) each."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @classmethod
    def from_config(cls, config: dict, dtype: str = "bfloat16") -> KVShape:
        """From a checkpoint's config.json (the language model's part: `text_config`, or the top level as older
        Qwen2-VL / Qwen2.5-VL configs write it) and the dtype the model runs in; `layers` counts the layers with
        K/V (a hybrid model's attention layers)."""
        text = config.get("text_config") or config
        if "num_hidden_layers" not in text:
            text = {**config, **text}
        heads = text["num_attention_heads"]
        head_dim = text.get("head_dim") or text["hidden_size"] // heads
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
        kinds = text.get("layer_types") or ()  # a hybrid model (Qwen3.5): its linear-attention layers keep no K/V
        layers = sum(kind != "linear_attention" for kind in kinds) if kinds else text["num_hidden_layers"]
        return cls(layers, text.get("num_key_value_heads") or heads, head_dim, DTYPE_BYTES[dtype])


def stored_block_bytes(shape: KVShape, n_tokens: int, kind: str = "int8") -> int:
    """Bytes of one block of `n_tokens` in long-term memory. "float": as in the window. "int8": one byte per
    element, plus float16 scales: keys per channel (one per layer, head and channel), values per token (one per
    layer, head and token). "int4": half a byte per element, plus a float16 scale and minimum per group: keys per
    channel and group of INT4_GROUP tokens, values per token and group of INT4_GROUP channels."""
    elements = shape.layers * 2 * shape.kv_heads * shape.head_dim * n_tokens
    if kind == "float":
        return elements * shape.dtype_bytes
    if kind == "int8":
        scales = shape.layers * shape.kv_heads * (shape.head_dim + n_tokens)
        return elements + scales * SCALE_BYTES
    if kind == "int4":
        def groups(m: int) -> int:
            return -(-m // min(INT4_GROUP, m))
        scales = shape.layers * shape.kv_heads * (shape.head_dim * groups(n_tokens) + n_tokens * groups(shape.head_dim))
        return elements // 2 + 2 * scales * SCALE_BYTES
    raise ValueError(f"kind must be one of {', '.join(MEMORY_KINDS)}, got {kind!r}")


@dataclass(frozen=True)
class Budgets:
    """What the configured window and memory mean for one model and one frame size."""

    shape: KVShape
    tokens_per_chunk: int  # tokens of one encoded chunk (the processor's count at this frame size)
    seconds_per_chunk: float  # stream seconds one chunk covers (frames_per_chunk / fps)
    window_tokens: int | None  # the window's budget in tokens, or None when it is set in seconds
    window_s: float | None  # the window's budget in stream seconds, or None when it is set in tokens
    ram_bytes: int
    disk_bytes: int
    memory_kind: str = "int8"
    memory_keep: float = 1.0  # share of a block's tokens kept in memory

    @property
    def window_chunks(self) -> int:
        """Chunks the window holds (at least the newest one, which always stays)."""
        if self.window_tokens is not None:
            return max(1, self.window_tokens // self.tokens_per_chunk)
        return max(1, int(self.window_s / self.seconds_per_chunk + 1e-9))

    @property
    def window_tokens_held(self) -> int:
        return self.window_chunks * self.tokens_per_chunk

    @property
    def window_seconds_held(self) -> float:
        return self.window_chunks * self.seconds_per_chunk

    @property
    def memory_bytes_per_s(self) -> float:
        """Long-term memory growth per second of stream."""
        kept = max(1, round(self.tokens_per_chunk * self.memory_keep))
        return stored_block_bytes(self.shape, kept, self.memory_kind) / self.seconds_per_chunk

    def memory_bytes_per_hour(self) -> float:
        return 3600 * self.memory_bytes_per_s

    def warnings(self) -> list[str]:
        """A block larger than the window: the window then holds only the newest block."""
        if self.window_tokens is not None and self.tokens_per_chunk > self.window_tokens:
            return [f"one chunk is {self.tokens_per_chunk:,} tokens, more than the window's {self.window_tokens:,}: "
                    "the window holds only the newest chunk; raise --window-tokens / --window-mb or lower --frame-px"]
        if self.window_s is not None and self.seconds_per_chunk > self.window_s + 1e-9:
            return [f"one chunk covers {self.seconds_per_chunk:g} s, more than the window's {self.window_s:g} s: "
                    "the window holds only the newest chunk"]
        return []

    def plain(self) -> str:
        """One sentence for someone new to the terms: what an answer looks at, and how much video is remembered."""
        recent = (f"the last {_seconds(self.window_seconds_held)}" if self.window_tokens is None
                  else f"about the last {_seconds(self.window_seconds_held)}")
        rate = self.memory_bytes_per_s
        return (f"Answers look at {recent} of video and what is remembered before it: about "
                f"{_duration(self.ram_bytes / rate, spelled=True)} of video in {_size(self.ram_bytes)} of RAM, then "
                f"{_duration(self.disk_bytes / rate, spelled=True)} on disk (-v for the details).")

    def describe(self) -> str:
        """One line: the window in seconds, tokens and MB; how long RAM and disk hold long-term memory."""
        w_bytes = self.window_tokens_held * self.shape.bytes_per_token
        if self.window_tokens is not None:
            window = (f"window {self.window_tokens:,} tokens ≈ {_seconds(self.window_seconds_held)} = "
                      f"{_size(self.window_tokens * self.shape.bytes_per_token)}")
        else:
            window = f"window {_seconds(self.window_s)} = {self.window_tokens_held:,} tokens = {_size(w_bytes)}"
        rate = self.memory_bytes_per_s
        kept = f", {self.memory_keep:.0%} of tokens" if self.memory_keep < 1 else ""
        return (f"{window} ({self.tokens_per_chunk:,} tokens per {self.seconds_per_chunk:g}-s chunk, "
                f"{_size(self.shape.bytes_per_token, kb=True)} per token); memory ({self.memory_kind}{kept}, "
                f"{_size(self.memory_bytes_per_hour())} per hour): RAM {_size(self.ram_bytes)} ≈ "
                f"{_duration(self.ram_bytes / rate)}, disk {_size(self.disk_bytes)} ≈ "
                f"{_duration(self.disk_bytes / rate)}")


def budgets(shape: KVShape, tokens_per_chunk: int, config) -> Budgets:
    """The budgets an `EngineConfig` sets, for a model of this KV shape and this many tokens per chunk.
    `window_tokens` wins over `window_mb` (converted to whole tokens), which wins over `window_s`."""
    seconds_per_chunk = config.frames_per_chunk / config.fps
    window_tokens = window_tokens_for(config, shape)
    return Budgets(shape, tokens_per_chunk, seconds_per_chunk, window_tokens,
                   None if window_tokens is not None else config.window.seconds,
                   int(config.memory.ram_mb * 2**20), int(config.memory.disk_mb * 2**20),
                   config.memory.kv, config.memory.keep)


def window_tokens_for(config, shape: KVShape) -> int | None:
    """The window's token budget when it is set in tokens or MB; None when it is set in seconds."""
    if config.window.tokens is not None:
        return config.window.tokens
    if config.window.mb is not None:
        return max(1, int(config.window.mb * 2**20) // shape.bytes_per_token)
    return None


def _size(n: float, kb: bool = False) -> str:
    if kb and n < 2**20:
        return f"{n / 2**10:.1f} KB"
    if n >= 2**30:
        return f"{n / 2**30:,.1f} GB"
    return f"{n / 2**20:,.1f} MB" if n >= 0.1 * 2**20 or not kb else f"{n / 2**10:.1f} KB"


def _seconds(s: float) -> str:
    return f"{s:g} s"


def _duration(s: float, spelled: bool = False) -> str:
    """A duration in its largest sensible unit: "238 h", or "238 hours" (`spelled`) for a sentence."""
    s_unit, m_unit, h_unit = ("seconds", "minutes", "hours") if spelled else ("s", "min", "h")
    if s < 120:
        return f"{s:.0f} {s_unit}"
    if s < 3 * 3600:
        return f"{s / 60:,.0f} {m_unit}"
    return f"{s / 3600:,.0f} {h_unit}"
