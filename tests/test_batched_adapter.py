"""The adapter's batched operations across streams (`encode_chunks`, `probe_rows`, `start_decoding` + `decode`)
give, row for row, what the single-row calls give (`encode_chunk`, `probe`, `generate_ids` / `generate`), for the
bundled model (SDPA and eager attention) and a tiny random checkpoint of every family, with one language-model
forward per batch.

The streams differ in everything a scheduler mixes: position (one starts at 500), window fill (no block: the sinks
alone; one block; three blocks), an empty context, chunk size (2 or 4 frames, 56 or 112 px) and stream time.
Tolerances (float32): 1e-4 absolute on K/V and logits (measured differences ~1e-7); probes 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import random_frames

from streamvid.adapters import batching
from streamvid.adapters.base import load_adapter
from streamvid.config import BUNDLED_MODEL
from streamvid.kv.positions import concat
from streamvid.kv.window import Block
from streamvid.types import ChunkJob, Context, Encoded

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "llava-onevision", "llava-next-video", "smolvlm2", "internvl3.5")
MODELS = ("bundled", "bundled-eager", *FAMILIES)
TOL = 1e-4


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    return {"root": tmp_path_factory.mktemp("batched")}


@pytest.fixture(params=MODELS)
def model(request, loaded):
    name = request.param
    if name not in loaded:
        if name.startswith("bundled"):
            loaded[name] = load_adapter(str(BUNDLED_MODEL), dtype="float32",
                                        attn="eager" if name.endswith("eager") else "sdpa")
        else:
            from streamvid.checkpoints.families import make_tiny

            loaded[name] = load_adapter(str(make_tiny(name, loaded["root"] / name, seed=0)), dtype="float32")
    return loaded[name]


def _context(adapter, offset: int, n_blocks: int, seed: int) -> Context:
    """Sinks at `offset` and `n_blocks` chunks after them, encoded one by one (the single-row path)."""
    sinks = adapter.encode_text(adapter.sink_text, Context((), (), offset))
    blocks = [Block(-1, 0, 0, sinks.keys, sinks.values, offset, sinks.pos_span)]
    k = max(2, adapter.frames_per_chunk_multiple)
    for i in range(n_blocks):
        past = concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)
        enc = adapter.encode_chunk(random_frames(k, seed=seed + i), past, 1.0, t_start_s=float(i))
        blocks.append(Block(i, i, i + 1, enc.keys, enc.values, past.next_pos, enc.pos_span, enc.vector))
    return concat(blocks, blocks[-1].pos_start + blocks[-1].pos_span)


def _streams(adapter) -> list[Context]:
    """Three streams' windows: the sinks alone, three blocks, one block far along the positions."""
    return [_context(adapter, 0, 0, 1), _context(adapter, 0, 3, 10), _context(adapter, 500, 1, 20)]


def _extend(past: Context, enc: Encoded) -> Context:
    if not past.n_tokens:
        return Context(enc.keys, enc.values, past.next_pos + enc.pos_span)
    return Context(tuple(torch.cat([a, b], 2) for a, b in zip(past.keys, enc.keys)),
                   tuple(torch.cat([a, b], 2) for a, b in zip(past.values, enc.values)), past.next_pos + enc.pos_span)


def _next_logits(adapter, context: Context) -> torch.Tensor:
    ids = adapter.token_ids(adapter.prompt("What do you see?"))
    with torch.inference_mode():
        return adapter.forward(ids, adapter.text_positions(context.next_pos, ids.shape[1]), context)[0][0, -1]


class _Count:
    def __init__(self):
        self.n = 0

    def __call__(self, *_args, **_kwargs):
        self.n += 1


def test_batched_chunk_encode_equals_each_streams_encode_chunk(model):
    a = model
    k = max(2, a.frames_per_chunk_multiple)
    ctxs = [*_streams(a), Context((), (), 7)]  # and an empty context
    jobs = [ChunkJob(tuple(random_frames(k, seed=30)), ctxs[0], 1.0, 0.0),
            ChunkJob(tuple(random_frames(2 * k, seed=31)), ctxs[1], 2.0, 3.0),  # twice the frames
            ChunkJob(tuple(random_frames(k, seed=32, px=112)), ctxs[2], 1.0, 250.0),  # larger frames
            ChunkJob(tuple(random_frames(k, seed=33)), ctxs[3], 1.0, 1.0)]
    refs = [a.encode_chunk(list(j.frames), j.past, j.seconds_per_chunk, t_start_s=j.t_start_s) for j in jobs]
    assert len({r.n_tokens for r in refs}) >= 2  # the rows really differ in length

    forwards, towers = _Count(), _Count()
    hooks = [a.language_model.register_forward_pre_hook(forwards)]
    visual = getattr(a.model.model, "visual", None)
    if visual is not None:
        hooks.append(visual.register_forward_pre_hook(towers))
    try:
        got = a.encode_chunks(jobs)
    finally:
        for h in hooks:
            h.remove()
    if a.position_axes == 3:  # Qwen: one vision-tower pass and one forward for all
        assert (forwards.n, towers.n) == (1, 1)
    elif a.model.config.model_type == "internvl":  # one tile per frame, any chunk's frames: one forward for all
        assert forwards.n == 1
    else:  # LLaVA, SmolVLM: one forward per frame count (the processor resizes every frame to one size)
        assert forwards.n == len({len(j.frames) for j in jobs})

    for job, g, r in zip(jobs, got, refs):
        assert g.n_tokens == r.n_tokens and g.pos_span == r.pos_span
        for x, y in zip(g.keys + g.values, r.keys + r.values):
            assert x.shape == y.shape
            assert torch.allclose(x, y, atol=TOL)
        np.testing.assert_allclose(g.vector, r.vector, atol=TOL)
        np.testing.assert_allclose(g.regions, r.regions, atol=TOL)
        assert g.scene is not None and g.scene.shape == r.scene.shape
        np.testing.assert_allclose(g.scene.astype(np.float32), r.scene.astype(np.float32), atol=2e-3, rtol=2e-3)
        # the next token after a prompt on the stream's context with the new block
        assert torch.allclose(_next_logits(a, _extend(job.past, g)), _next_logits(a, _extend(job.past, r)), atol=TOL)


def test_one_job_is_encode_chunk(model):
    ctx = _streams(model)[1]
    frames = random_frames(max(2, model.frames_per_chunk_multiple), seed=40)
    (got,) = model.encode_chunks([ChunkJob(tuple(frames), ctx, 1.0, 2.0)])
    ref = model.encode_chunk(frames, ctx, 1.0, t_start_s=2.0)
    for x, y in zip(got.keys + got.values, ref.keys + ref.values):
        assert torch.equal(x, y)
    assert np.array_equal(got.vector, ref.vector) and got.pos_span == ref.pos_span
    assert model.encode_chunks([]) == []


def test_batched_probes_across_streams_equal_single_probes(model):
    ctxs = _streams(model)
    rows = [(ctxs[0], "Is there a red circle?"), (ctxs[1], "Is there a blue star now? Answer yes or no."),
            (ctxs[2], "Yes?"), (ctxs[1], "Is it green?")]
    forwards = _Count()
    hook = model.language_model.register_forward_pre_hook(forwards)
    try:
        batched = model.probe_rows(rows)
    finally:
        hook.remove()
    assert forwards.n == 1
    single = [model.probe(c, q) for c, q in rows]
    assert np.allclose(batched, single, rtol=0, atol=1e-6)
    assert np.allclose(model.probe_many(ctxs[1], [q for _, q in rows]),
                       [model.probe(ctxs[1], q) for _, q in rows], rtol=0, atol=1e-6)
    assert model.probe_rows([]) == []


def test_batched_decode_across_streams_equals_each_generate(model, monkeypatch):
    """Three answers on three streams: two start together, the third joins two steps later (its prompt prefilled
    in the same forward as the others' next tokens), the second stops early (max_new_tokens 4). Each gives the
    tokens and text pieces of its own `generate`; the batched cache is rebuilt exactly when the set changes."""
    a = model
    ctxs = _streams(a)
    asks = [(ctxs[0], a.prompt("What do you see?"), 10), (ctxs[1], a.prompt("What colour is the circle?"), 4),
            (ctxs[2], a.prompt("How many shapes are there?"), 10)]
    refs = [list(a.generate_ids(c, p, m)) for c, p, m in asks]
    if min(len(r) for r in refs) < 2:  # the bundled model answers these noise clips in one word: decode on past it
        monkeypatch.setattr(a, "stop_ids", set())
        refs = [list(a.generate_ids(c, p, m)) for c, p, m in asks]
    ref_pieces = [list(a.generate(c, p, m)) for c, p, m in asks]
    assert all(len(r) >= 2 for r in refs), "the model stops at once: the comparison would say nothing"

    rebuilds, forwards = _Count(), _Count()
    new_batch = batching.new_batch
    monkeypatch.setattr(batching, "new_batch", lambda *args: (rebuilds(), new_batch(*args))[1])
    hook = a.language_model.register_forward_pre_hook(forwards)
    try:
        ds = [a.start_decoding(*asks[0]), a.start_decoding(*asks[1])]
        pieces: list[list[str]] = [[], [], []]
        live_before, calls = None, 0
        while not all(d.done for d in ds) or len(ds) < 3:
            if calls == 2:
                ds.append(a.start_decoding(*asks[2]))
            live = [id(d) for d in ds if not d.done]
            before, n = rebuilds.n, [len(d.tokens) for d in ds]
            a.decode(ds)  # done ones are ignored
            calls += 1
            assert forwards.n == calls  # one forward per call
            assert rebuilds.n - before == (live != live_before)  # the same set keeps its cache
            live_before = live
            for i, d in enumerate(ds):
                if len(d.tokens) > n[i]:
                    pieces[i].append(d.piece())
            assert calls < 40
    finally:
        hook.remove()
    assert [d.tokens for d in ds] == refs
    assert pieces == ref_pieces
    assert len(refs[1]) < len(refs[0]) or len(refs[1]) < len(refs[2])  # one finished while others went on
    forwards_before = forwards.n
    a.decode(ds)  # all done: nothing runs
    assert forwards.n == forwards_before


def test_a_decoding_cancelled_midway_leaves_the_others_exact(model):
    ctxs = _streams(model)
    asks = [(ctxs[1], model.prompt("What do you see?"), 6), (ctxs[2], model.prompt("What shape is it?"), 6)]
    ds = [model.start_decoding(*ask) for ask in asks]
    model.decode(ds)
    ds[1].cancel()
    assert ds[1].done
    while not ds[0].done:
        model.decode(ds)
    assert ds[0].tokens == list(model.generate_ids(*asks[0]))


def test_each_rows_cache_equals_one_forward_over_its_tokens(model, monkeypatch):
    """After steps together, a join (a rebuild from each row's own K/V, a prompt prefilled beside single tokens)
    and a cancel (another rebuild), each running row's K/V are those of one forward over its context, prompt and
    the tokens fed so far: no padding column, no other row's, leaks into a row."""
    monkeypatch.setattr(model, "stop_ids", set())  # rows run their max_new_tokens
    ctxs = _streams(model)
    asks = [(ctxs[0], model.prompt("What do you see?"), 8), (ctxs[1], model.prompt("What colour is it?"), 8),
            (ctxs[2], model.prompt("How many shapes are there now?"), 8)]
    ds = [model.start_decoding(*asks[0]), model.start_decoding(*asks[1])]
    model.decode(ds)
    model.decode(ds)
    ds.append(model.start_decoding(*asks[2]))
    model.decode(ds)
    _check_rows(model, ds)
    ds[0].cancel()
    model.decode(ds)
    model.decode(ds)
    _check_rows(model, ds[1:])


def _check_rows(adapter, ds):
    for d in ds:
        fed = d.prompt_ids + d.tokens[:-1]
        own = d.own_kv()
        with torch.inference_mode():
            cache = adapter.forward(torch.tensor([fed]), adapter.text_positions(d.context.next_pos, len(fed)),
                                    d.context)[1]
        assert own.n_tokens == d.context.n_tokens + len(fed)
        for layer, (k, v) in enumerate(zip(own.keys, own.values)):
            assert torch.allclose(k, cache.layers[layer].keys, atol=TOL)
            assert torch.allclose(v, cache.layers[layer].values, atol=TOL)
