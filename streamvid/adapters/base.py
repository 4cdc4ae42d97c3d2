"""The adapter protocol: what the engine needs from a video-LLM, and the registry that loads one by name.

Only `streamvid/adapters/` imports transformers. Tensors cross this boundary as plain torch tensors:
a KV segment is one (keys, values) pair per decoder layer, each shaped (1, kv_heads, n_tokens, head_dim), keys
stored after RoPE at the positions the segment was encoded at.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch


@dataclass(frozen=True)
class Encoded:
    """KV of one encoded segment (system prompt, video chunk) and its retrieval vector."""

    keys: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim), post-RoPE
    values: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim)
    pos_span: int  # positions occupied: the next segment starts at pos_start + pos_span
    vector: np.ndarray | None  # (index_dim,) float32, L2-normalised; None for text segments

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[2])


@dataclass(frozen=True)
class Context:
    """A cache to run on: concatenated segments and the first free position after them."""

    keys: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim)
    values: tuple[torch.Tensor, ...]
    next_pos: int

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[2]) if self.keys else 0


class VideoLLMAdapter(Protocol):
    """A video-LLM as the engine uses it. Every method may be called from any thread: implementations hold
    `lock` around each forward and keep no per-call state on the model between calls."""

    lock: threading.RLock
    rope_inv_freq: torch.Tensor  # (head_dim / 2,) float32: RoPE frequencies shared by all three M-RoPE axes
    index_dim: int
    frames_per_chunk_multiple: int  # chunks must hold a multiple of this many frames (the temporal patch)

    def encode_text(self, text: str, past: Context | None) -> Encoded: ...

    def encode_chunk(self, frames: Sequence[np.ndarray], past: Context, seconds_per_chunk: float) -> Encoded: ...

    def question_vector(self, text: str) -> np.ndarray: ...

    def prompt(self, question: str, dialogue: Sequence[tuple[str, str]] = ()) -> str: ...

    def generate(self, context: Context, prompt: str, max_new_tokens: int,
                 stop: threading.Event | None = None) -> Iterator[str]: ...

    def probe(self, context: Context, question: str) -> float: ...

    def probe_many(self, context: Context, questions: Sequence[str]) -> list[float]: ...


def load_adapter(model: str, device: str = "cpu", dtype: str = "auto", index_layer: int = 0) -> VideoLLMAdapter:
    """Load a checkpoint (HF id or local directory) behind the adapter that supports its architecture."""
    from streamvid.adapters.qwen2_5_vl import QwenVLAdapter

    return QwenVLAdapter(model, device=device, dtype=dtype, index_layer=index_layer)
