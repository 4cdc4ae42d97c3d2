"""Many streams on one engine: batched work equals one forward per stream, fairness, idle release, caps, errors.

The model is the tiny random Qwen2.5-VL (tests/conftest.py): what is checked is the scheduler's machinery against
independent references (each stream alone on an engine of its own, one forward per stream), not what a trained
model sees. The random model answers every stream alike, so the answers' rows are checked with the bundled model,
whose answers differ from stream to stream; a finished input's short last chunk is checked on a real file.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from conftest import random_frames
from streamvid.config import EngineConfig
from streamvid.engine.admission import EngineFull
from streamvid.engine.engine import Engine
from streamvid.errors import Busy
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
    assert shared.batch_fallbacks == 0, "a batched forward raised and was redone one stream at a time"
    # (the random checkpoint answers every stream alike: the bundled model's test below shows the answers' rows)
    answers = [[o.text for o in _outputs(s) if o.kind == "answer"] for s in together]
    for k, plan in enumerate(PLANS):
        alone_engine = Engine(_cfg(max_batch=1), adapter)
        alone = _run(alone_engine, [plan], interleave=False)[0]
        a, b = together[k].window.snapshot(), alone.window.snapshot()
        assert [x.id for x in a.blocks] == [x.id for x in b.blocks] and a.blocks
        for x, y in zip(a.blocks, b.blocks):
            assert (x.pos_start, x.pos_span, x.t_start_s) == (y.pos_start, y.pos_span, y.t_start_s)
            for layer in range(len(x.keys)):
                torch.testing.assert_close(x.keys[layer], y.keys[layer], atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(x.values[layer], y.values[layer], atol=1e-4, rtol=1e-4)
        answers_b = [o.text for o in _outputs(alone) if o.kind == "answer"]
        assert answers[k] == answers_b and len(answers_b) == 1
        if plan["watch"]:
            ra, rb = together[k].reasoning, alone.reasoning
            assert ra.probes_run == rb.probes_run > 0
            sa, sb = ra.triggers.active()[0].score, rb.triggers.active()[0].score
            assert sa == pytest.approx(sb, abs=1e-4)
        alone_engine.close()
    shared.close()


@pytest.fixture(scope="module")
def bundled():
    from streamvid.adapters.base import load_adapter
    from streamvid.config import BUNDLED_MODEL

    return load_adapter(str(BUNDLED_MODEL))


def _clip_frames(clip: str, until_s: float) -> list[Frame]:
    from streamvid.assets import demo_clip
    from streamvid.media.file_source import FileSource

    return [f for f in iter(FileSource(demo_clip(clip), fps=2.0).read, None) if f.t_s < until_s]


# three demo clips, different lengths (positions) and different questions: the bundled model answers each differently
BUNDLED_PLANS = [("shapes_7", 8.0, "How many shapes are on screen?"), ("shapes_8", 6.0, "What colour is the circle?"),
                 ("shapes_9", 10.0, "What shape is blue?")]


def _bundled_answers(bundled, plans, max_batch: int | None = None) -> tuple[Engine, list]:
    """Each plan's clip into a stream of one engine, a frame of every stream per round, then each its question."""
    cfg = EngineConfig.from_settings(max_new_tokens=8, **({} if max_batch is None else {"max_batch": max_batch}))
    engine = Engine(cfg, bundled)
    streams = [engine.open() for _ in plans]
    feeds = [_clip_frames(clip, until) for clip, until, _ in plans]
    for i in range(max(len(f) for f in feeds)):
        for s, feed in zip(streams, feeds):
            if i < len(feed):
                s.insert(feed[i])
        engine.run_until_idle()
    for s, (_, _, question) in zip(streams, plans):
        s.ask(question)
    engine.run_until_idle()
    answers = [next(o for o in _outputs(s) if o.kind == "answer") for s in streams]
    engine.close()
    return engine, [(a.text, a.data["evidence_t_s"], a.data["retrieved_blocks"]) for a in answers]


def test_batched_answers_of_the_bundled_model_are_each_streams_own(bundled):
    """Three streams whose answers differ (different clips, lengths and questions), batched on one engine with no
    fallback to one forward per stream: each answer equals that stream alone on an engine of its own, so rows that
    were mixed up in a batched forward would give another stream's answer."""
    shared, together = _bundled_answers(bundled, BUNDLED_PLANS)
    assert shared.batch_fallbacks == 0, "a batched forward raised and was redone one stream at a time"
    # 8, 6 and 10 s at 2 fps in chunks of 2 frames: 8 + 6 + 10 blocks, in 10 forwards (a chunk of every stream each)
    assert shared.forwards["encode"] == 10 and shared.forwards["prefill"] == 1, shared.forwards
    texts = [t for t, _, _ in together]
    assert len(set(texts)) == len(texts), f"streams answered alike, a row mix-up would not show: {texts}"
    for plan, got in zip(BUNDLED_PLANS, together):
        assert got == _bundled_answers(bundled, [plan], max_batch=1)[1][0], plan


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
    with pytest.raises(EngineFull, match="2 streams at most") as full:
        engine.open()
    assert isinstance(full.value, Busy)  # the library's one error family: every transport answers it as busy (429)
    first.close()
    engine.open()  # a closed stream's slot is free again
    engine.close()
    per_stream = Engine(_cfg(), adapter).admission.window_mb(_cfg())
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
    assert engine.batch_fallbacks == 1, "the two streams' chunks were one batched forward, redone stream by stream"
    assert not good.closed and good.ingest.blocks_encoded == 1
    for f in _frames(6, 2):
        good.insert(f)
    engine.run_until_idle()
    assert good.ingest.blocks_encoded == 2 and engine.streams() == [good]
    engine.close()


@pytest.fixture(scope="module")
def seven_frame_clip(tmp_path_factory):
    """A 3.5 s, 10 fps, 56x56 clip: at 2 fps, 7 frames (t = 0, 0.5, ..., 3.0)."""
    import av

    path = tmp_path_factory.mktemp("clip") / "seven.mp4"
    rng = np.random.default_rng(7)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=10)
        s.width = s.height = 56
        s.pix_fmt = "yuv420p"
        for _ in range(35):
            for p in s.encode(av.VideoFrame.from_ndarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8),
                                                         format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path


def _spans(blocks) -> list[tuple[float, float]]:
    return [(round(b.t_start_s, 3), round(b.t_end_s, 3)) for b in sorted(blocks, key=lambda b: b.id)]


def test_a_finished_inputs_short_last_chunk_is_encoded(adapter, seven_frame_clip):
    """7 frames in chunks of 4, worked by hand: chunk 0 holds t = 0-1.5 s, chunk 1 the short rest, t = 2, 2.5 and
    3 s, and covers up to 3.5 s (its last frame plus one frame period). A finished input encodes that short chunk:
    stepped by hand (insert, finish), replayed (run_simulated) and read on the assistant's thread (start)."""
    from streamvid.assistant.assistant import StreamingAssistant
    from streamvid.media.file_source import FileSource

    cfg = _cfg(frames_per_chunk=4, window_tokens=10_000)  # every block stays in the window
    expect = [(0.0, 2.0), (2.0, 3.5)]

    engine = Engine(cfg, adapter)
    stream = engine.open()
    for f in _frames(8, 7):
        stream.insert(f)
        engine.run_until_idle()
    assert _spans(stream.window.snapshot().blocks) == expect[:1] and not stream.ended.is_set()
    stream.finish()
    engine.run_until_idle()
    assert stream.ended.is_set()
    assert _spans(stream.window.snapshot().blocks) == expect, "the short last chunk was not encoded"
    assert (stream.ingest.frames_in, stream.ingest.blocks_encoded, stream.ingest.pending_frames) == (7, 2, 0)
    engine.close()

    with StreamingAssistant(cfg, adapter=adapter) as sa:
        sa.run_simulated(FileSource(seven_frame_clip, fps=2.0), [])
        assert _spans(sa.window.snapshot().blocks) == expect, "replay: the short last chunk was not encoded"
        stats = sa.stats()
        assert (stats["frames_in"], stats["blocks_encoded"], stats["blocks_in_window"]) == (7, 2, 2)

    with StreamingAssistant(cfg, adapter=adapter) as sa:
        sa.start(FileSource(seven_frame_clip, fps=2.0))
        assert sa.ingest_done.wait(60), "the input did not end"
        assert _spans(sa.window.snapshot().blocks) == expect, "live: the short last chunk was not encoded"
        stats = sa.stats()
        assert (stats["frames_in"], stats["blocks_encoded"], stats["blocks_in_window"]) == (7, 2, 2)
