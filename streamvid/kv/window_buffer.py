"""WindowBuffer: ingest's own copy of the context each new chunk is encoded on (the sinks, then the window's
blocks), in preallocated per-layer K/V buffers, so that encoding a chunk neither concatenates the window nor copies
it into the forward's cache: the context handed to the forward is a view of the buffer with free room after it
(`Context.room`), where the forward writes the chunk's K/V in place.

Layout of each layer's buffer, (1, kv_heads, capacity, head_dim) on that layer's device:

    [ dead | sinks | oldest block ... newest block | free ]

A new block is written at the end. When blocks leave the window the live part starts later: the sinks are written
again right before the oldest block that stays (over the evicted blocks, which nothing reads here any more), a
copy of the sinks only. When the free part is too small for the next chunk, or the window no longer holds the
blocks the buffer holds (a rebase moved them to new positions, a session was restored), the live part is copied
once into a new buffer with room for about half a window more. So the window is copied about once per half a
window's worth of chunks, where concatenating it for every chunk copied it twice per chunk; and the buffer holds
about 1.5 windows, less than the two transient copies of the window that concatenating made for every chunk.

Thread contract: its stream's ingest alone uses it, on the engine's scheduler thread (engine/ingest.py). Blocks own
their K/V (adapters clone a new block's K/V out of the forward's cache), so nothing written here changes a block
that a snapshot holds.
"""

from __future__ import annotations

import torch

from streamvid.kv.window import Block, WindowSnapshot
from streamvid.types import Context


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
