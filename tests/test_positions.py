"""Moving cached blocks by rotating their keys equals encoding them at the new positions.

Tolerance: 1e-4 absolute on keys and logits (float32 on CPU; measured differences are ~1e-6).
"""

from __future__ import annotations

import pytest
import torch
from conftest import random_frames

from streamvid.types import Context
from streamvid.kv_window import Block
from streamvid.positions import concat, layout, move_block, rotate_keys

TOL = 1e-4


def test_rotations_compose(adapter):
    k = torch.randn(1, 2, 7, 16)
    inv = adapter.rope_inv_freq
    assert torch.allclose(rotate_keys(rotate_keys(k, 300, inv), -120, inv), rotate_keys(k, 180, inv), atol=1e-5)
    assert torch.allclose(rotate_keys(rotate_keys(k, 5000, inv), -5000, inv), k, atol=1e-5)


def _encode_stream(adapter, offset: int, n_chunks: int = 3) -> list[Block]:
    """Sinks and chunks encoded one after another, everything starting at position `offset`."""
    sinks = adapter.encode_text(adapter.sink_text, Context((), (), offset))
    blocks = [Block(-1, 0, 0, sinks.keys, sinks.values, offset, sinks.pos_span)]
    for i in range(n_chunks):
        past = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
        enc = adapter.encode_chunk(random_frames(2, seed=i), past, 1.0)
        blocks.append(Block(i, i, i + 1, enc.keys, enc.values, past.next_pos, enc.pos_span, enc.vector))
    return blocks


def _question_logits(adapter, ctx: Context) -> torch.Tensor:
    ids = adapter.token_ids(adapter.prompt("What colour is the circle?"))
    return adapter.forward(ids, adapter.text_positions(ctx.next_pos, ids.shape[1]), ctx)[0][0, -1]


def test_shifted_stream_moved_back_equals_fresh_encoding(adapter):
    fresh = _encode_stream(adapter, offset=0)
    far = _encode_stream(adapter, offset=4000)  # same content, every position + 4000
    inv = adapter.rope_inv_freq
    moved = [move_block(b, b.pos_start - 4000, inv) for b in far]
    for a, b in zip(fresh, moved):
        assert a.pos_start == b.pos_start
        for ka, kb in zip(a.keys, b.keys):
            assert torch.allclose(ka, kb, atol=TOL)
    ctx_fresh = concat(fresh, fresh[-1].pos_start + fresh[-1].pos_span)
    ctx_moved = concat(moved, moved[-1].pos_start + moved[-1].pos_span)
    assert torch.allclose(_question_logits(adapter, ctx_fresh), _question_logits(adapter, ctx_moved), atol=TOL)


def test_layout_places_blocks_contiguously_in_time_order(adapter):
    blocks = _encode_stream(adapter, offset=0, n_chunks=4)
    sinks, old, *window = blocks
    inv = adapter.rope_inv_freq
    # window blocks far away (as after a long stream), the retrieved block wherever it was
    window = [move_block(b, b.pos_start + 900, inv) for b in window[1:]]
    ctx = layout(sinks, [blocks[2], old], window, inv)
    assert ctx.n_tokens == sum(b.n_tokens for b in (sinks, old, blocks[2], *window))
    span = sum(b.pos_span for b in (sinks, old, blocks[2], *window))
    assert ctx.next_pos == window[-1].pos_start + window[-1].pos_span, "the window stays where it is"
    # sinks and retrieved blocks (time order) just before it: contiguous positions ending at next_pos
    expected = move_block(old, ctx.next_pos - span + sinks.pos_span, inv)
    assert torch.allclose(ctx.keys[0][:, :, sinks.n_tokens:sinks.n_tokens + old.n_tokens], expected.keys[0],
                          atol=TOL)
    offset = sinks.n_tokens + old.n_tokens + blocks[2].n_tokens
    assert torch.equal(ctx.keys[0][:, :, offset:offset + window[0].n_tokens], window[0].keys[0]), "window not moved"


def test_layout_before_the_window_answers_as_the_contiguous_layout_from_zero(adapter):
    """Moving sinks and retrieved blocks to just before the window (the window untouched) gives the same question
    logits as laying everything out from position 0 (the window moved back): a uniform shift of all positions."""
    blocks = _encode_stream(adapter, offset=0, n_chunks=5)
    sinks, a, b, *window = blocks
    inv = adapter.rope_inv_freq
    window = [move_block(w, w.pos_start + 3000, inv) for w in window]
    ctx = layout(sinks, [b, a], window, inv)
    pos, placed = sinks.pos_span, [sinks]
    for block in (a, b, *window):  # the reference: everything contiguous from the sinks, window moved
        placed.append(move_block(block, pos, inv))
        pos += block.pos_span
    reference = concat(placed, pos)
    assert ctx.next_pos == window[-1].pos_start + window[-1].pos_span != reference.next_pos
    assert torch.allclose(_question_logits(adapter, ctx), _question_logits(adapter, reference), atol=TOL)
    # no room before the window (it starts right after the sinks): everything is laid out from the sinks
    tight = [move_block(w, w.pos_start - window[0].pos_start + sinks.pos_span, inv) for w in window]
    ctx2 = layout(sinks, [b, a], tight, inv)
    assert ctx2.next_pos == reference.next_pos
    assert torch.allclose(_question_logits(adapter, ctx2), _question_logits(adapter, reference), atol=TOL)


@pytest.mark.parametrize("moves", [1, 10, 200])
def test_bfloat16_keys_stay_within_tolerance_after_many_rebases(adapter, moves):
    """A bfloat16 block moved n times (as by rebases: forward past the threshold, then back), each move rounding
    its keys to bfloat16, against the same keys moved once in float64. Stated tolerance: RMS error within
    2^-8 * sqrt(n) of the keys' RMS (one move rounds to half a bfloat16 step, 2^-9 relative; the roundings of n
    moves add up as a random walk; measured: 0.2% after 1, 0.5% after 10, 2.6% after 200). In the engine a
    block is moved by at most one or two rebases while it is in the window (rebase_after_pos 16,384 positions
    against a window of a few thousand), and once more when it is laid out after retrieval."""
    inv = adapter.rope_inv_freq
    torch.manual_seed(0)
    k = torch.randn(1, 2, 50, inv.shape[0] * 2).to(torch.bfloat16)
    block = Block(0, 0.0, 1.0, (k,), (k,), 100, 50)
    pos = 100
    for i in range(moves):
        pos = 100 + 16384 + 977 * i if i % 2 == 0 else 100 + (i % 7)
        block = move_block(block, pos, inv)
    assert block.keys[0].dtype == torch.bfloat16 and block.pos_start == pos
    angle = (pos - 100) * inv.double()  # the one exact move from 100 to the final position
    cos, sin = torch.cat([angle.cos(), angle.cos()]), torch.cat([angle.sin(), angle.sin()])
    k64, half = k.double(), k.shape[-1] // 2
    exact = k64 * cos + torch.cat([-k64[..., half:], k64[..., :half]], dim=-1) * sin
    rms = (block.keys[0].double() - exact).pow(2).mean().sqrt() / exact.pow(2).mean().sqrt()
    assert rms < 2**-8 * moves**0.5, f"RMS error {rms:.4f} after {moves} bfloat16 moves"
