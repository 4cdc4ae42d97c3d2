"""Position policy: moving cached KV blocks to new positions without recomputing them.

Qwen2-VL / Qwen2.5-VL use 3-D M-RoPE: every rotary frequency is driven by one of the temporal, height or width
position components. Keys in the cache are stored after rotation. Shifting all three components of a block by the
same Δ rotates every frequency i by Δ·inv_freq[i], whichever axis drives it, so a block moves to new positions
by one more rotation of its cached keys; values do not depend on positions.

Over an unbounded stream positions would grow without bound; `rebase` moves the window's blocks back so they
start right after the sinks. Answer contexts are laid out contiguously by `layout`: sinks, retrieved blocks in
time order, then the recent window, so retrieved memory sits before the window at consistent positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from streamvid.adapters.base import Context
from streamvid.kv_window import Block


def rotate_keys(keys: torch.Tensor, delta: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """keys (1, kv_heads, n, head_dim), rotated by RoPE at position p, -> the same keys at position p + delta."""
    if delta == 0:
        return keys
    angle = float(delta) * inv_freq.double()  # (head_dim / 2,)
    cos = torch.cat([angle.cos(), angle.cos()]).to(keys.device, torch.float32)
    sin = torch.cat([angle.sin(), angle.sin()]).to(keys.device, torch.float32)
    k = keys.float()
    half = k.shape[-1] // 2
    rotated_half = torch.cat([-k[..., half:], k[..., :half]], dim=-1)
    return (k * cos + rotated_half * sin).to(keys.dtype)


def move_block(block: Block, pos_start: int, inv_freq: torch.Tensor) -> Block:
    """The same block with its keys re-rotated so it starts at `pos_start`."""
    delta = pos_start - block.pos_start
    if delta == 0:
        return block
    keys = tuple(rotate_keys(k, delta, inv_freq) for k in block.keys)
    return block.replace(keys=keys, pos_start=pos_start)


def layout(sinks: Block, retrieved: Sequence[Block], window: Sequence[Block], inv_freq: torch.Tensor) -> Context:
    """Concatenate sinks, retrieved blocks (time order) and window blocks at contiguous positions."""
    pos = sinks.pos_start + sinks.pos_span
    placed = [sinks]
    for block in [*sorted(retrieved, key=lambda b: b.t_start_s), *window]:
        placed.append(move_block(block, pos, inv_freq))
        pos += block.pos_span
    return concat(placed, pos)


def concat(blocks: Sequence[Block], next_pos: int) -> Context:
    n_layers = len(blocks[0].keys)
    keys = tuple(torch.cat([b.keys[i] for b in blocks], dim=2) for i in range(n_layers))
    values = tuple(torch.cat([b.values[i] for b in blocks], dim=2) for i in range(n_layers))
    return Context(keys, values, next_pos)
