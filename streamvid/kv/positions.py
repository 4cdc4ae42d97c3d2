"""Position policy: moving cached KV blocks to new positions without recomputing them.

Every supported family rotates keys with RoPE (rotate-half layout) and stores them rotated in the cache. Qwen2-VL /
Qwen2.5-VL / Qwen3-VL use 3-D M-RoPE: every rotary frequency is driven by one of the temporal, height or width
position components (in contiguous sections for Qwen2/2.5, interleaved for Qwen3). Shifting all three components of
a block by the same Δ rotates every frequency i by Δ·inv_freq[i], whichever axis drives it, so a block moves to new
positions by one more rotation of its cached keys; values do not depend on positions. The LLaVA families run a 1-D
RoPE language model (Qwen2, Llama), where the same rotation holds with one position per token. `RopePositions` is
that policy for one adapter: how its position ids look and how its blocks move.

Over an unbounded stream positions would grow without bound; `rebase` moves the window's blocks back so they
start a little after the sinks (room for retrieved blocks). Answer contexts are laid out contiguously by `layout`:
sinks, retrieved blocks in time order, then the recent window, so retrieved memory sits before the window at
consistent positions; the sinks and retrieved blocks are moved to just before the window, which stays put.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from streamvid.kv.window import Block
from streamvid.types import Context


def rotate_keys(keys: torch.Tensor, delta: int, inv_freq: torch.Tensor) -> torch.Tensor:
    """keys (1, kv_heads, n, head_dim), rotated by RoPE at position p, -> the same keys at position p + delta."""
    if delta == 0:
        return keys
    return _rotate(keys, *_rotation(delta, inv_freq))


def _rotation(delta: int, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (head_dim,) float32 of a move by `delta` positions (angles in float64)."""
    angle = float(delta) * inv_freq.double()  # (head_dim / 2,)
    return torch.cat([angle.cos(), angle.cos()]).float(), torch.cat([angle.sin(), angle.sin()]).float()


def _rotate(keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Keys rotated by (cos, sin); with partial RoPE (Qwen3.5: a quarter of each head rotary) only the first
    len(cos) dimensions of each head rotate, the rest pass through as the model leaves them."""
    cos, sin = cos.to(keys.device), sin.to(keys.device)
    rot = cos.shape[-1]
    k = keys.float()
    k, rest = k[..., :rot], k[..., rot:]
    half = rot // 2
    rotated_half = torch.cat([-k[..., half:], k[..., :half]], dim=-1)
    out = k * cos + rotated_half * sin
    return (torch.cat([out, rest], dim=-1) if rest.shape[-1] else out).to(keys.dtype)


@dataclass(frozen=True, eq=False)
class RopePositions:
    """One adapter's position policy. `axes` is 3 for M-RoPE (temporal, height, width; a text token has the same
    value on all three) and 1 for 1-D RoPE; `inv_freq` (head_dim / 2,) float32 are the rotary frequencies of the
    language model. A segment's positions are numbered by the adapter (`Encoded.pos_span`); this policy only
    shifts them."""

    inv_freq: torch.Tensor
    axes: int

    def __post_init__(self):
        if self.axes not in (1, 3):
            raise ValueError(f"axes must be 1 (RoPE) or 3 (M-RoPE), got {self.axes}")

    def text_ids(self, start: int, n: int) -> torch.Tensor:
        """Position ids of n text tokens from `start`: (3, 1, n) for M-RoPE, (1, n) for 1-D RoPE."""
        ids = torch.arange(start, start + n).view(1, n)
        return ids.view(1, 1, n).expand(3, 1, n) if self.axes == 3 else ids

    def move(self, block: Block, pos_start: int) -> Block:
        return move_block(block, pos_start, self.inv_freq)


def _inv_freq(policy: RopePositions | torch.Tensor) -> torch.Tensor:
    return policy.inv_freq if isinstance(policy, RopePositions) else policy


def move_block(block: Block, pos_start: int, inv_freq: RopePositions | torch.Tensor) -> Block:
    """The same block with its keys re-rotated so it starts at `pos_start` (`inv_freq`: an adapter's
    `positions` policy or its bare RoPE frequencies); the keys of its memory encoding (`Block.memory_kv`, encoded
    at the same positions) too."""
    delta = pos_start - block.pos_start
    if delta == 0:
        return block
    cos, sin = _rotation(delta, _inv_freq(inv_freq))  # once for all layers
    keys = tuple(_rotate(k, cos, sin) for k in block.keys)
    alone = block.memory_kv and (tuple(_rotate(k, cos, sin) for k in block.memory_kv[0]), block.memory_kv[1])
    return block.replace(keys=keys, pos_start=pos_start, memory_kv=alone)


def layout(sinks: Block, retrieved: Sequence[Block], window: Sequence[Block],
           inv_freq: RopePositions | torch.Tensor, state=None) -> Context:
    """Concatenate sinks, retrieved blocks (time order) and window blocks at contiguous positions.

    The few are moved, not the many: the window keeps its positions and the sinks and retrieved blocks are placed
    right before it, when there is room (the window starts at or after sinks + retrieved; ingest's rebase leaves
    that room). Otherwise everything is laid out from the sinks' own position, which moves the window. Either way
    the positions are contiguous, and two layouts of the same blocks differ only by a uniform shift of every
    position (the question's too, which starts at `next_pos`), which RoPE attention does not see.

    `state`: a hybrid model's recurrent state for the context (the stream up to now, `WindowSnapshot.state`,
    whichever blocks the attention layers see); None: the sinks' (a model without recurrent layers has none)."""
    state = sinks.state if state is None else state
    ordered = sorted(retrieved, key=lambda b: b.t_start_s)
    before = sinks.pos_span + sum(b.pos_span for b in ordered)
    if window and window[0].pos_start >= before and _contiguous(window):
        pos = window[0].pos_start - before
        placed = []
        for block in [sinks, *ordered]:
            placed.append(move_block(block, pos, inv_freq))
            pos += block.pos_span
        end = window[-1].pos_start + window[-1].pos_span
        return concat([*placed, *window], end, state)
    pos = sinks.pos_start + sinks.pos_span
    placed = [sinks]
    for block in [*ordered, *window]:
        placed.append(move_block(block, pos, inv_freq))
        pos += block.pos_span
    return concat(placed, pos, state)


def _contiguous(blocks: Sequence[Block]) -> bool:
    return all(a.pos_start + a.pos_span == b.pos_start for a, b in zip(blocks, blocks[1:]))


def concat(blocks: Sequence[Block], next_pos: int, state=None) -> Context:
    """The blocks' K/V one after the other; `state` (None: the last block's own) the recurrent state after them."""
    state = blocks[-1].state if state is None else state
    n_layers = len(blocks[0].keys)
    keys = tuple(torch.cat([b.keys[i] for b in blocks], dim=2) for i in range(n_layers))
    values = tuple(torch.cat([b.values[i] for b in blocks], dim=2) for i in range(n_layers))
    return Context(keys, values, next_pos, state=state)
