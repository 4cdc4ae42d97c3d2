"""One chunk of frames as a transformers video-LLM takes it (HFVideoAdapter.chunk_inputs makes it, its forward and
batching.encode_chunks run it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class ChunkInputs:
    """One chunk as the model takes it: token ids, positions relative to the chunk's first position, the vision
    inputs of the forward, and which tokens carry video features."""

    ids: torch.Tensor  # (1, n) token ids
    positions: torch.Tensor  # (3, 1, n) for M-RoPE or (1, n) for 1-D RoPE, starting at 0
    pos_span: int  # positions the chunk occupies: the next segment starts at pos_start + pos_span
    vision: dict = field(default_factory=dict)  # extra forward kwargs (pixel values, grids), on the model's device
    video_mask: torch.Tensor | None = None  # (n,) bool: the video-feature tokens (the block's retrieval vector)
    grid: tuple[int, int, int] | None = None  # (frames, rows, columns) of the video tokens, when they form one
