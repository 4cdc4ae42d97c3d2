"""Many streams on one engine: batched work equals one forward per stream, fairness, idle release, caps, errors.

The model is the tiny random Qwen2.5-VL (tests/conftest.py): what is checked is the scheduler's machinery against
independent references (each stream alone on an engine of its own, one forward per stream), not what a trained
model sees.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from conftest import random_frames
from streamvid.config import EngineConfig
from streamvid.engine import Engine, EngineFull
from streamvid.types import Frame


def _cfg(**kw) -> EngineConfig:
    return EngineConfig.from_settings(**{"model": "unused", "fps": 2.0, "window_tokens": 60, "max_new_tokens": 4,
                           "memory_top_k": 2, "gate_min_novelty": 0.0, **kw})


def _frames(seed: int, n: int, px: int = 56) -> list[Frame]:
    return [Frame(img, i / 2, i) for i, img in enumerate(random_frames(n, seed=seed, px=px))]


# three streams that differ in where they are: stream lengths (positions and window fill), window budgets,
# frame sizes (chunk sizes), and the triggers and questions they carry
PLANS = [
    {"cfg": {"window_tokens": 60}, "seed": 1, "n": 12, "px": 56, "watch": "a red circle", "ask": "What is there?"},
    {"cfg": {"window_tokens": 200}, "seed": 2, "n": 6, "px": 84, "watch": None, "ask": "How many shapes?"},
    {"cfg": {"window_tokens": 40, "memory_top_k": 0}, "seed": 3, "n": 9, "px": 56, "watch": "a blue star",
     "ask": "What colour is the star?"},
]


def _run(engine: Engine, plans, interleave: bool):
    """Feed each plan's frames into its stream (all streams in turns when `interleave`, else one after the
    other), stepping the engine until idle after each turn; then each stream's question; returns the streams."""
    streams = [engine.open(_cfg(**p["cfg"])) for p in plans]
    for s, p in zip(streams, plans):
        if p["watch"]:
            s.watch(p["watch"], 0.0)
    feeds = [_frames(p["seed"], p["n"], p["px"]) for p in plans]
    turns = max(len(f) for f in feeds)
    for i in range(turns):  # a frame for every stream, then the engine: their chunks complete together
        for k in range(len(plans)):
            if i < len(feeds[k]):
                streams[k].insert(feeds[k][i])
                if not interleave:
                    engine.run_until_idle()
        engine.run_until_idle()
    for s, p in zip(streams, plans):
        s.ask(p["ask"])
    engine.run_until_idle()
    return streams


def _outputs(stream):
    out = []
    while not stream.outputs.empty():
        out.append(stream.outputs.get_nowait())
    return [o for o in out if o.kind != "token"]


def test_batched_streams_equal_each_stream_alone(adapter):
    """Chunk encodes, trigger probes and answers of three streams at different positions, window fills and chunk
    sizes, batched in one engine, equal each stream run alone with one forward per stream."""
    shared = Engine(_cfg(), adapter)
    together = _run(shared, PLANS, interleave=True)
    assert shared.forwards["encode"] < sum(s.ingest.blocks_encoded for s in together)  # batches of several streams
    for k, plan in enumerate(PLANS):
        alone_engine = Engine(_cfg(), adapter, max_batch=1)
        alone = _run(alone_engine, [plan], interleave=False)[0]
        a, b = together[k].window.snapshot(), alone.window.snapshot()
        assert [x.id for x in a.blocks] == [x.id for x in b.blocks] and a.blocks
        for x, y in zip(a.blocks, b.blocks):
            assert (x.pos_start, x.pos_span, x.t_start_s) == (y.pos_start, y.pos_span, y.t_start_s)
            for layer in range(len(x.keys)):
                torch.testing.assert_close(x.keys[layer], y.keys[layer], atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(x.values[layer], y.values[layer], atol=1e-4, rtol=1e-4)
        out_a, out_b = _outputs(together[k]), _outputs(alone)
        answers_a = [o.text for o in out_a if o.kind == "answer"]
        assert answers_a == [o.text for o in out_b if o.kind == "answer"] and len(answers_a) == 1
        if plan["watch"]:
            ra, rb = together[k].reasoning, alone.reasoning
            assert ra.probes_run == rb.probes_run > 0
            sa, sb = ra.triggers.active()[0].score, rb.triggers.active()[0].score
            assert sa == pytest.approx(sb, abs=1e-4)
        alone_engine.close()
    shared.close()


def test_a_stream_flooded_with_questions_does_not_hold_up_another_streams_ingest(adapter):
    engine = Engine(_cfg(question_queue_size=8), adapter)
    busy, quiet = engine.open(), engine.open()
    for f in _frames(1, 2):
        busy.insert(f)
    engine.run_until_idle()
    for i in range(8):
        busy.ask(f"Question {i}: what is on screen?")
    for f in _frames(2, 2):
        quiet.insert(f)
    engine.step()  # one step: the flooded stream's first answer starts, and the other stream's chunk is encoded
    assert quiet.ingest.blocks_encoded == 1
    assert busy.questions_waiting == 7
    for chunk in range(3):  # while the questions are answered, every chunk of the quiet stream goes in at once
        for f in _frames(10 + chunk, 2):
            quiet.insert(f)
        engine.step()
        assert quiet.ingest.blocks_encoded == 2 + chunk
    engine.run_until_idle()
    assert sum(o.kind == "answer" for o in _outputs(busy)) == 8
    engine.close()


def test_an_idle_stream_releases_its_kv_and_answers_as_if_it_never_idled(adapter, monkeypatch):
    now = [1000.0]  # the engine's clock, moved by the test
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    engine = Engine(_cfg(), adapter)
    idle = engine.open(_cfg(idle_release_s=30.0))
    never = engine.open()
    frames = _frames(4, 8)
    for f in frames[:6]:
        idle.insert(f)
        never.insert(f)
        engine.run_until_idle()
    assert not idle.released
    before = idle.window.snapshot().blocks
    now[0] += 31.0
    engine.step()
    assert idle.released and not never.released
    after = idle.window.snapshot().blocks
    assert idle.ingest.stats()["window_buffer_mb"] == 0
    assert all(x.keys[0] is not y.keys[0] and torch.equal(x.keys[0], y.keys[0]) for x, y in zip(before, after))
    for f in frames[6:]:  # the next frame brings it back; both streams go on alike
        idle.insert(f)
        never.insert(f)
        engine.run_until_idle()
    assert not idle.released
    idle.ask("What is there?")
    never.ask("What is there?")
    engine.run_until_idle()
    a, b = _outputs(idle), _outputs(never)
    assert [o.text for o in a if o.kind == "answer"] == [o.text for o in b if o.kind == "answer"]
    for x, y in zip(idle.window.snapshot().blocks, never.window.snapshot().blocks):
        assert torch.equal(x.keys[-1], y.keys[-1])
    engine.close()


def test_caps_refuse_one_stream_too_many_with_a_clear_message(adapter):
    engine = Engine(_cfg(max_streams=2), adapter)
    first = engine.open()
    engine.open()
    with pytest.raises(EngineFull, match="2 streams at most"):
        engine.open()
    first.close()
    engine.open()  # a closed stream's slot is free again
    engine.close()
    per_stream = Engine(_cfg(), adapter).window_mb(_cfg())
    kv = Engine(_cfg(engine_kv_mb=2.5 * per_stream), adapter)
    kv.open()
    kv.open()
    with pytest.raises(EngineFull, match="engine-kv-mb"):
        kv.open()
    ram = Engine(_cfg(engine_memory_mb=100.0, memory_ram_mb=60.0), adapter)
    ram.open()
    with pytest.raises(EngineFull, match="engine-memory-mb"):
        ram.open()
    ram.open(_cfg(memory_top_k=0))  # without long-term memory it holds no RAM of that kind


def test_one_streams_bad_input_ends_that_stream_only(adapter):
    engine = Engine(_cfg(), adapter)
    good, bad = engine.open(), engine.open()
    for f in _frames(5, 2):
        good.insert(f)
    bad.insert(Frame(np.zeros((56, 56), np.uint8), 0.0, 0))  # not RGB: its chunk cannot be encoded
    bad.insert(Frame(np.zeros((56, 56), np.uint8), 0.5, 1))
    engine.run_until_idle()
    assert bad.closed and bad.error is not None and bad.ended.is_set()
    assert not good.closed and good.ingest.blocks_encoded == 1
    for f in _frames(6, 2):
        good.insert(f)
    engine.run_until_idle()
    assert good.ingest.blocks_encoded == 2 and engine.streams() == [good]
    engine.close()
