"""The bounded KV window: sink tokens (system prompt) + the most recent blocks within a token budget.

Thread contract: the engine's scheduler thread is the only writer (`append`, `rebase`: a stream's ingest); readers
take `snapshot()` (answers and probes on the same thread, a session save on another). Both take `lock` for a few
list operations only. Blocks are immutable and their tensors are never modified in place, so a snapshot (a tuple of
block references) stays valid while ingest goes on.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Block:
    """The KV of one encoded segment: a video chunk, a speech block (an utterance's words, `speech`), or the
    sinks."""

    id: int
    t_start_s: float
    t_end_s: float
    keys: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim), post-RoPE at pos_start
    values: tuple[torch.Tensor, ...]  # per layer (1, kv_heads, n_tokens, head_dim)
    pos_start: int
    pos_span: int
    vector: np.ndarray | None = None  # (index_dim,) or (rows, index_dim) float32: retrieval vector(s), memory.py
    scene: np.ndarray | None = None  # (n_video_tokens, hidden) float16 vision tokens (change gate); not stored
    # (keys, values) that long-term memory stores instead of keys/values (the chunk encoded after the sinks
    # alone, memory_encoding "sinks"); None: memory stores keys/values
    memory_kv: tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None = None
    speech: str | None = None  # a speech block's words (what was heard from t_start_s to t_end_s); None: video
    # a hybrid model's recurrent state after this block (kv/recurrent_state.py), on blocks kept outside the window
    # only (the sinks, an answer's unfinished-chunk block): the window keeps the state of its newest block itself
    state: object | None = None

    @property
    def n_tokens(self) -> int:
        return int(self.keys[0].shape[2])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def replace(self, **changes) -> Block:
        return dataclasses.replace(self, **changes)

    def to(self, devices) -> Block:
        """The block with its K/V (and memory encoding) on `devices` (one per layer), copied even where they are
        there already (`copy`: a release to host memory leaves nothing shared with the device's)."""
        def move(ts):
            return tuple(t.to(d, copy=True) for t, d in zip(ts, devices, strict=True))

        alone = self.memory_kv and (move(self.memory_kv[0]), move(self.memory_kv[1]))
        state = self.state and self.state.to(devices[0])
        return dataclasses.replace(self, keys=move(self.keys), values=move(self.values), memory_kv=alone, state=state)

    def for_memory(self) -> Block:
        """The block as long-term memory stores it: with `memory_kv` for its keys and values when it has one; never
        a recurrent state (memory holds the attention layers' K/V only)."""
        if self.memory_kv is None:
            return self if self.state is None else dataclasses.replace(self, state=None)
        return dataclasses.replace(self, keys=self.memory_kv[0], values=self.memory_kv[1], memory_kv=None, state=None)


@dataclass(frozen=True)
class WindowSnapshot:
    sinks: Block
    blocks: tuple[Block, ...]  # oldest first
    recurrent: object | None = None  # a hybrid model's RecurrentState after the window's newest block

    @property
    def state(self):
        """The recurrent state after the snapshot's last block: that block's own when it carries one (an unfinished
        chunk's block added for an answer), else the window's, else the sinks' (None: a model without recurrent
        layers)."""
        if self.blocks and self.blocks[-1].state is not None:
            return self.blocks[-1].state
        return self.recurrent if self.recurrent is not None else self.sinks.state

    @property
    def next_pos(self) -> int:
        last = self.blocks[-1] if self.blocks else self.sinks
        return last.pos_start + last.pos_span

    @property
    def span_s(self) -> tuple[float, float] | None:
        return (self.blocks[0].t_start_s, self.blocks[-1].t_end_s) if self.blocks else None


class KVWindow:
    """The budget is in tokens or in stream seconds (the span from the oldest block's start to the newest block's
    end); budget.py converts seconds and bytes for a model."""

    def __init__(self, sinks: Block, budget_tokens: int | None = None, budget_s: float | None = None):
        if (budget_tokens is None) == (budget_s is None):
            raise ValueError(f"a window budget is in tokens or in seconds: got budget_tokens={budget_tokens}, "
                             f"budget_s={budget_s}")
        if budget_tokens is not None and budget_tokens <= 0:
            raise ValueError(f"window budget must be positive, got {budget_tokens} tokens")
        if budget_s is not None and budget_s <= 0:
            raise ValueError(f"window budget must be positive, got {budget_s} s")
        self.lock = threading.Lock()
        self.budget_tokens = budget_tokens
        self.budget_s = budget_s
        self.oversized = 0  # blocks that alone exceeded the budget (the window then holds only that block)
        self._sinks = sinks
        self._blocks: list[Block] = []
        self._tokens = 0
        self._state = sinks.state  # a hybrid model's recurrent state after the newest block (the stream up to now)

    def append(self, block: Block, state=None) -> list[Block]:
        """Add the newest block; return the blocks evicted to stay within budget, oldest first.
        The newest block always stays, even when it alone exceeds the budget. `state`: a hybrid model's recurrent
        state after the block (or the block's own `state`, which the window keeps instead of the block)."""
        if block.state is not None:
            state = block.state if state is None else state
            block = block.replace(state=None)
        with self.lock:
            if state is not None:
                self._state = state
            self._blocks.append(block)
            self._tokens += block.n_tokens
            evicted = []
            while self._over() and len(self._blocks) > 1:
                old = self._blocks.pop(0)
                self._tokens -= old.n_tokens
                evicted.append(old)
            if self._over():
                self.oversized += 1
                if self.oversized == 1:
                    log.warning("a block (%d tokens, %.2f s) is larger than the KV window (%s): the window holds "
                                "only the newest block", block.n_tokens, block.t_end_s - block.t_start_s,
                                f"{self.budget_tokens} tokens" if self.budget_tokens else f"{self.budget_s:g} s")
            return evicted

    def _over(self) -> bool:
        if self.budget_tokens is not None:
            return self._tokens > self.budget_tokens
        return self._blocks[-1].t_end_s - self._blocks[0].t_start_s > self.budget_s + 1e-6

    def rebase(self, move: Callable[[Block, int], Block], room: int = 0) -> None:
        """Move all blocks so the oldest starts `room` positions after the sinks (keeps positions bounded; the
        room is where answers place retrieved blocks, positions.layout). The keys are re-rotated outside the lock
        (ingest is the only writer); only the swap is locked."""
        pos = self._sinks.pos_start + self._sinks.pos_span + room
        moved = []
        for block in self._blocks:
            moved.append(move(block, pos))
            pos += block.pos_span
        with self.lock:
            self._blocks = moved

    def map(self, fn: Callable[[Block], Block]) -> None:
        """Replace every block by `fn(block)`, the same block elsewhere (its tensors moved to another device);
        only the swap is locked."""
        moved = [fn(block) for block in self.snapshot().blocks]
        with self.lock:
            self._blocks = moved

    def snapshot(self) -> WindowSnapshot:
        with self.lock:
            return WindowSnapshot(self._sinks, tuple(self._blocks), self._state)

    @property
    def tokens(self) -> int:
        with self.lock:
            return self._tokens

