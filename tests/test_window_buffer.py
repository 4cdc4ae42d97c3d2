"""The window's device buffer (kv/window.py): encoding each chunk on the buffer's in-place context gives the K/V that
encoding it on the concatenated sinks + window gives (the reference: positions.concat, as ingest did before), through
evictions and a rebase, with the chunk written into the buffer by the forward itself; the live part is copied into a
new buffer only now and then; and blocks a snapshot holds never change."""

from __future__ import annotations

import torch

from conftest import random_frames
from streamvid.kv.positions import concat
from streamvid.kv.window import Block, KVWindow, WindowBuffer


def _sinks(adapter) -> Block:
    enc = adapter.encode_text(adapter.sink_text)
    return Block(-1, 0.0, 0.0, enc.keys, enc.values, 0, enc.pos_span)


def _same(a, b):
    for x, y in zip(a.keys + a.values, b.keys + b.values, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_in_place_chunks_equal_the_concatenated_context_through_evictions_and_a_rebase(adapter):
    """The window keeps its own buffer: each block appended is in the next context, whatever left the window."""
    window = KVWindow(_sinks(adapter), budget_tokens=3 * 20)  # three chunks of 56-px frames (20 tokens each)
    room, chunks, in_place, first_kept = 0, 24, 0, None
    for c in range(chunks):
        snap = window.snapshot()
        ctx = window.encoding_context(room)
        ref_ctx = concat([snap.sinks, *snap.blocks], snap.next_pos)
        for x, y in zip(ctx.keys + ctx.values, ref_ctx.keys + ref_ctx.values, strict=True):
            assert torch.equal(x, y)
        assert ctx.next_pos == ref_ctx.next_pos and ctx.room >= room
        frames = random_frames(2, seed=c)
        enc = adapter.encode_chunk(frames, ctx, seconds_per_chunk=1.0)
        ref = adapter.encode_chunk(frames, ref_ctx, seconds_per_chunk=1.0)
        _same(enc, ref)
        assert enc.pos_span == ref.pos_span
        n = int(enc.keys[0].shape[2])
        if room >= n:  # the forward wrote the chunk into the buffer's room itself
            end = ctx.keys[0].shape[2]
            written = ctx.keys[0].as_strided((*ctx.keys[0].shape[:2], end + n, ctx.keys[0].shape[3]),
                                             ctx.keys[0].stride(), ctx.keys[0].storage_offset())[:, :, end:]
            assert torch.equal(written, enc.keys[0])
            in_place += 1
        block = Block(c, float(c), c + 1.0, enc.keys, enc.values, snap.next_pos, enc.pos_span, enc.vector)
        if c == 4:
            first_kept = (block, [k.clone() for k in block.keys])
        window.append(block)
        room = n
        if c == 15:  # a rebase moves every window block to new positions: the buffer must follow
            window.rebase(adapter.positions.move, room=0)
    assert in_place == chunks - 1, "every chunk after the first is written in place"
    buf = window.buffer
    per_token = adapter.kv_shape.bytes_per_token
    assert buf.nbytes == buf.capacity * per_token
    live = window.snapshot().sinks.n_tokens + window.tokens
    assert live < buf.capacity <= 2 * (live + room), "the buffer holds at most about twice the live part"
    assert buf.rebuilds <= 1 + chunks // 3, f"the window is copied now and then, not per chunk ({buf.rebuilds})"
    block, keys = first_kept  # evicted long ago, its region of the buffer written over since
    assert all(torch.equal(a, b) for a, b in zip(block.keys, keys))


def test_out_of_room_or_another_window_rebuilds(adapter):
    sinks = _sinks(adapter)
    window = KVWindow(sinks, budget_tokens=1000)
    buf = WindowBuffer()
    ctx = buf.context(window.snapshot(), room=0)
    assert ctx.keys[0].shape[2] == sinks.n_tokens and buf.rebuilds == 1
    for c in range(6):  # no room asked for: every block still lands in the buffer (appended by copy)
        snap = window.snapshot()
        ctx = buf.context(snap, room=0)
        enc = adapter.encode_chunk(random_frames(2, seed=c), ctx, seconds_per_chunk=1.0)
        block = Block(c, float(c), c + 1.0, enc.keys, enc.values, snap.next_pos, enc.pos_span, enc.vector)
        buf.append(block)
        window.append(block)
    snap = window.snapshot()
    ref = concat([snap.sinks, *snap.blocks], snap.next_pos)
    ctx = buf.context(snap, room=0)
    assert all(torch.equal(x, y) for x, y in zip(ctx.keys + ctx.values, ref.keys + ref.values))
    later = KVWindow(sinks, budget_tokens=1000)  # the same blocks after the first five left: no copy but the sinks'
    later.append(snap.blocks[-1])
    before = buf.rebuilds
    ctx = buf.context(later.snapshot(), room=0)
    ref = concat([sinks, snap.blocks[-1]], later.snapshot().next_pos)
    assert buf.rebuilds == before
    assert all(torch.equal(x, y) for x, y in zip(ctx.keys + ctx.values, ref.keys + ref.values))
    other = KVWindow(sinks, budget_tokens=1000)  # the last block moved (as a rebase does): not what the buffer holds
    other.append(adapter.positions.move(snap.blocks[-1], sinks.pos_span))
    ctx = buf.context(other.snapshot(), room=0)
    ref = concat([sinks, *other.snapshot().blocks], other.snapshot().next_pos)
    assert buf.rebuilds == before + 1
    assert all(torch.equal(x, y) for x, y in zip(ctx.keys + ctx.values, ref.keys + ref.values))
