"""The bounded KV window: sink tokens (system prompt) + the most recent blocks within a token budget.

Thread contract: the engine's scheduler thread is the only writer (`append`, `rebase`: a stream's ingest); readers
take `snapshot()` (answers and probes on the same thread, a session save on another). Both take `lock` for a few
list operations only. Blocks are immutable and their tensors are never modified in place, so a snapshot (a tuple of
block references) stays valid while ingest goes on.

The window owns the device buffer its next block is encoded on (`encoding_context`; WindowBuffer below): a copy of
the sinks and the window's blocks in preallocated per-layer K/V buffers, kept by `append` itself, so that encoding a
chunk neither concatenates the window nor copies it into the forward's cache: the context handed to the forward is a
view of the buffer with free room after it (`Context.room`), where the forward writes the chunk's K/V in place.

Layout of each layer's buffer, (1, kv_heads, capacity, head_dim) on that layer's device:

    [ dead | sinks | oldest block ... newest block | free ]

A new block is written at the end. When blocks leave the window the live part starts later: the sinks are written
again right before the oldest block that stays (over the evicted blocks, which nothing reads here any more), a
copy of the sinks only. When the free part is too small for the next chunk, or the window no longer holds the
blocks the buffer holds (a rebase moved them to new positions, a session was restored), the live part is copied
once into a new buffer with room for about half a window more. So the window is copied about once per half a
window's worth of chunks, where concatenating it for every chunk copied it twice per chunk; and the buffer holds
about 1.5 windows, less than the two transient copies of the window that concatenating made for every chunk.

The buffer is the writer's alone (`encoding_context`, `release_buffer`: the scheduler's thread). Blocks own their K/V
(adapters clone a new block's K/V out of the forward's cache), so nothing written there changes a block that a
snapshot holds.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from streamvid.types import Context

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
        self._buffer = WindowBuffer()  # the context the next block is encoded on (the writer's thread only)

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
        self._buffer.append(block)
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

    def encoding_context(self, room: int) -> Context:
        """The sinks and the window's blocks as one context, views into the window's device buffer with at least
        `room` free tokens after them, where the next block's forward writes its K/V in place (the writer's
        thread)."""
        return self._buffer.context(self.snapshot(), room)

    def release_buffer(self) -> None:
        """Free the device buffer (an idle stream's release); the next `encoding_context` rebuilds it."""
        self._buffer = WindowBuffer()

    @property
    def buffer(self) -> WindowBuffer:
        """The device buffer (its size, how often it was rebuilt)."""
        return self._buffer

    def snapshot(self) -> WindowSnapshot:
        with self.lock:
            return WindowSnapshot(self._sinks, tuple(self._blocks), self._state)

    @property
    def tokens(self) -> int:
        with self.lock:
            return self._tokens


class WindowBuffer:
    def __init__(self) -> None:
        self._k: tuple[torch.Tensor, ...] = ()
        self._v: tuple[torch.Tensor, ...] = ()
        self._start = 0  # the sinks' first token
        self._end = 0  # the first free token
        self._sinks: Block | None = None
        self._blocks: list[Block] = []  # after the sinks, oldest first, up to _end
        self.rebuilds = 0  # times the live part was copied into a new buffer
        self.copied_tokens = 0  # tokens copied by rebuilds and by rewriting the sinks (not counting appends)

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers (the live part, the dead part before it and the free room)."""
        return sum(t.numel() * t.element_size() for t in (*self._k, *self._v))

    @property
    def capacity(self) -> int:
        return int(self._k[0].shape[2]) if self._k else 0

    def context(self, snap: WindowSnapshot, room: int) -> Context:
        """The sinks and window blocks of `snap`, concatenated in this order at snap.next_pos, as views into the
        buffer with at least `room` free tokens after them."""
        if not self._holds(snap) or self._end + room > self.capacity:
            self._rebuild(snap, room)
        elif drop := len(self._blocks) - len(snap.blocks):
            del self._blocks[:drop]
            self._start = self._end - sum(b.n_tokens for b in self._blocks) - self._sinks.n_tokens
            self._write(self._sinks, self._start)
            self.copied_tokens += self._sinks.n_tokens
        span = slice(self._start, self._end)
        return Context(tuple(k[:, :, span] for k in self._k), tuple(v[:, :, span] for v in self._v), snap.next_pos,
                       room=self.capacity - self._end, state=snap.state)

    def append(self, block: Block) -> None:
        """Record the window's new block, encoded on the last `context`, after it: its K/V are written at the end
        (over what the forward wrote there in place, the same values), so the buffer never depends on whether an
        adapter used the room."""
        if not self._k or self._end + block.n_tokens > self.capacity:
            self._sinks = None  # out of room: the next context rebuilds
            return
        self._write(block, self._end)
        self._blocks.append(block)
        self._end += block.n_tokens

    def _holds(self, snap: WindowSnapshot) -> bool:
        """The buffer's blocks end with exactly the window's blocks (the same objects) after the same sinks."""
        n = len(snap.blocks)
        return (self._sinks is snap.sinks and n <= len(self._blocks)
                and all(a is b for a, b in zip(self._blocks[len(self._blocks) - n:], snap.blocks)))

    def _rebuild(self, snap: WindowSnapshot, room: int) -> None:
        parts = [snap.sinks, *snap.blocks]
        live = sum(b.n_tokens for b in parts)
        capacity = live + room + max(live, 4 * room) // 2  # free room for about half a window of chunks
        self._k = tuple(k.new_empty((*k.shape[:2], capacity, k.shape[3])) for k in snap.sinks.keys)
        self._v = tuple(v.new_empty((*v.shape[:2], capacity, v.shape[3])) for v in snap.sinks.values)
        self._sinks, self._blocks = snap.sinks, []
        self._start = self._end = 0
        self._write(snap.sinks, 0)
        self._end = snap.sinks.n_tokens
        for block in snap.blocks:
            self.append(block)
        self.rebuilds += 1
        self.copied_tokens += self._end

    def _write(self, block: Block, at: int) -> None:
        n = block.n_tokens
        for buf, t in zip(self._k + self._v, block.keys + block.values, strict=True):
            buf[:, :, at:at + n].copy_(t)
