"""The adapter's cache layer on preallocated buffers (adapters/kv_cache.py `BufferLayer`): appending in place gives what
HF's concatenating DynamicCache gives, and a decode step writes into the same buffer instead of copying the context.
The reference is transformers' own DynamicCache on the same model and inputs."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from conftest import random_frames
from streamvid.adapters.kv_cache import BufferLayer
from streamvid.types import Context


def _context(adapter, n_chunks: int = 2) -> Context:
    sinks = adapter.encode_text(adapter.sink_text)
    ctx = Context(sinks.keys, sinks.values, sinks.pos_span)
    for c in range(n_chunks):
        enc = adapter.encode_chunk(random_frames(2, seed=c), ctx, seconds_per_chunk=1.0)
        ctx = Context(tuple(torch.cat([a, b], 2) for a, b in zip(ctx.keys, enc.keys)),
                      tuple(torch.cat([a, b], 2) for a, b in zip(ctx.values, enc.values)), ctx.next_pos + enc.pos_span)
    return ctx


def _reference(adapter, ctx: Context, ids: torch.Tensor, pos: int, cache=None):
    """One forward on transformers' DynamicCache (concatenating on every update)."""
    if cache is None:
        cache = DynamicCache(ddp_cache_data=list(zip(ctx.keys, ctx.values)), config=adapter.model.config)
    out = adapter.model(input_ids=ids, position_ids=adapter.positions.text_ids(pos, ids.shape[1]), cache=cache,
                        use_cache=True, logits_to_keep=1)
    return out.logits, cache


def test_in_place_appends_equal_the_concatenating_cache(adapter):
    ctx = _context(adapter)
    prompt = adapter.token_ids(adapter.prompt("What colour is the circle?"))
    with torch.inference_mode():
        ref_logits, ref_cache = _reference(adapter, ctx, prompt, ctx.next_pos)
        logits, cache = adapter.forward(prompt, adapter.positions.text_ids(ctx.next_pos, prompt.shape[1]), ctx,
                                         spare=prompt.shape[1] + 3)
        torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-6)
        pos = ctx.next_pos + prompt.shape[1]
        for step in range(6):  # past the spare room of 3: the buffer grows
            token = ref_logits[:, -1].argmax(-1, keepdim=True)
            assert int(token) == int(logits[:, -1].argmax())
            ref_logits, ref_cache = _reference(adapter, ctx, token, pos + step, ref_cache)
            logits, cache = adapter.forward(token, adapter.positions.text_ids(pos + step, 1), None, cache=cache)
            torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-6)
    for mine, ref in zip(cache.layers, ref_cache.layers, strict=True):
        assert isinstance(mine, BufferLayer)
        assert mine.get_seq_length() == ref.get_seq_length() == ctx.n_tokens + prompt.shape[1] + 6
        torch.testing.assert_close(mine.keys, ref.keys, rtol=0, atol=1e-6)
        torch.testing.assert_close(mine.values, ref.values, rtol=0, atol=1e-6)


def test_a_decode_step_writes_into_the_buffer_it_was_given(adapter):
    ctx = _context(adapter, 1)
    prompt = adapter.token_ids(adapter.prompt("How many shapes are there?"))
    pos = ctx.next_pos + prompt.shape[1]
    with torch.inference_mode():
        _, cache = adapter.forward(prompt, adapter.positions.text_ids(ctx.next_pos, prompt.shape[1]), ctx,
                                    spare=prompt.shape[1] + 4)
        base = [layer.keys.data_ptr() for layer in cache.layers]
        filled = cache.layers[-1].keys.clone()
        for step in range(4):  # the room asked for: every step writes into the same storage
            adapter.forward(torch.tensor([[5 + step]]), adapter.positions.text_ids(pos + step, 1), None, cache=cache)
            assert [layer.keys.data_ptr() for layer in cache.layers] == base
        adapter.forward(torch.tensor([[9]]), adapter.positions.text_ids(pos + 4, 1), None, cache=cache)
        assert cache.layers[0].keys.data_ptr() != base[0]  # one more: the buffer grew
    assert cache.get_seq_length() == ctx.n_tokens + prompt.shape[1] + 5
    torch.testing.assert_close(cache.layers[-1].keys[..., :filled.shape[-2], :], filled, rtol=0, atol=0)


def test_crop_drops_the_last_tokens_like_dynamic_layer():
    keys, values = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    mine = BufferLayer(keys, values, spare=2)
    mine.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    ref = DynamicCache(ddp_cache_data=[(mine.keys.clone(), mine.values.clone())]).layers[0]
    for n in (-2, -3):
        mine.crop(n)
        ref.crop(n)
        assert torch.equal(mine.keys, ref.keys) and torch.equal(mine.values, ref.values)
    new = torch.randn(1, 2, 1, 4)
    mine.update(new, new)
    ref.update(new, new)
    assert torch.equal(mine.keys, ref.keys)
