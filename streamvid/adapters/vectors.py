"""A block's retrieval vectors from its video tokens' pre-RoPE keys: the mean (`unit`), and the same per region of
the frame (`region_keys`, `region_pool`: the tokens pooled onto at most REGION_SIDE x REGION_SIDE regions). Used by
the adapters, their batched forwards and train-tiny alike."""

from __future__ import annotations

import math

import numpy as np
import torch

REGION_SIDE = 4  # a block's region vectors: its video tokens pooled onto at most 4 x 4 regions of the frame


def region_keys(keys: torch.Tensor, grid: tuple[int, int, int] | None, side: int = REGION_SIDE) -> np.ndarray:
    """(n_regions, dim) float32 unit rows: `region_pool` of a chunk's (n_video, dim) pre-RoPE keys."""
    regions = region_pool(keys.float(), grid, side).cpu().numpy().astype(np.float32)
    return regions / np.linalg.norm(regions, axis=1, keepdims=True).clip(1e-12)


def region_pool(keys: torch.Tensor, grid: tuple[int, int, int] | None, side: int = REGION_SIDE) -> torch.Tensor:
    """(n_regions, dim) from a chunk's (n_video, dim) keys: averaged over the chunk's frames and pooled onto at
    most `side` x `side` regions of the token grid (the grid itself when it is that small: one row per token);
    without a grid, over at most side**2 runs of consecutive tokens. Differentiable (training uses it too)."""
    if grid is not None and math.prod(grid) == keys.shape[0]:
        frames, rows, cols = grid
        cells = keys.reshape(frames, rows, cols, -1).mean(0).permute(2, 0, 1)  # (dim, rows, cols)
        pooled = torch.nn.functional.adaptive_avg_pool2d(cells, (min(rows, side), min(cols, side)))
        return pooled.flatten(1).T
    return torch.stack([run.mean(0) for run in torch.tensor_split(keys, min(len(keys), side * side))])


def unit(v: torch.Tensor) -> np.ndarray:
    v = v.float().cpu().numpy().astype(np.float32)
    return v / max(float(np.linalg.norm(v)), 1e-12)
