"""Retrieval reaches the answer context; snapshots leave the window alone; stream-time references."""

from __future__ import annotations


import pytest
import torch

from conftest import random_frames
from streamvid.adapters.row_by_row import RowByRow
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.language.spoken_times import stream_times
from streamvid.language.asked import Question
from streamvid.types import Frame


class SpyAdapter(RowByRow):
    """The real adapter (one row per forward), recording the context each answer is generated on."""

    def __init__(self, real):
        self._real = real
        self.contexts = []
        self.prompts = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def generate(self, context, prompt, max_new_tokens, stop=None):
        self.contexts.append(context)
        self.prompts.append(prompt)
        return self._real.generate(context, prompt, max_new_tokens, stop)


def fill_chunks(sa: StreamingAssistant, n_chunks: int) -> None:
    sa.feed(sample_frame(i) for i in range(n_chunks * 2))


def sample_frame(i):
    return Frame(random_frames(1, seed=100 + i)[0], i / 2, i)


def holds_block(context, block) -> bool:
    """Whether the block's values (position-free) appear as a contiguous run in the context."""
    ctx, v = context.values[0], block.values[0]
    n = v.shape[2]
    return any(torch.equal(ctx[:, :, s:s + n], v) for s in range(ctx.shape[2] - n + 1))


@pytest.mark.parametrize("top_k", [2, 0])
def test_planted_block_is_retrieved_into_the_answer_context(adapter, top_k):
    spy = SpyAdapter(adapter)
    cfg = EngineConfig.from_settings(model="unused", window_tokens=40, memory_top_k=top_k, max_new_tokens=3)
    sa = StreamingAssistant(cfg, adapter=spy)
    fill_chunks(sa, 12)
    question = "What colour was the star?"
    if top_k:
        assert len(sa.memory) >= 8
        # plant: make block 3 the one whose vector matches the question exactly
        planted = sa.memory.load(3)
        sa.memory.reindex(3, spy.question_vector(question))
    answer = sa.reasoning.answer(Question("q", question, 6.0))
    context = spy.contexts[-1]
    if top_k:
        assert 3 in answer.data["retrieved_blocks"]
        assert holds_block(context, planted)
        assert [3.0, 4.0] in answer.data["evidence_t_s"]
    else:
        assert sa.memory is None and answer.data["retrieved_blocks"] == []
        snap = sa.window.snapshot()
        assert context.n_tokens == snap.sinks.n_tokens + sum(b.n_tokens for b in snap.blocks)


@pytest.mark.parametrize("retrieve_for_now", [False, True])
def test_question_about_now_is_answered_from_the_window(adapter, retrieve_for_now):
    """A present-tense question gets no retrieved blocks, even one planted to match it, unless retrieve_for_now."""
    spy = SpyAdapter(adapter)
    cfg = EngineConfig.from_settings(model="unused", window_tokens=40, memory_top_k=2, max_new_tokens=3,
                       retrieve_for_now=retrieve_for_now)
    sa = StreamingAssistant(cfg, adapter=spy)
    fill_chunks(sa, 12)
    question = "What colour is the star?"
    sa.memory.reindex(3, spy.question_vector(question))
    answer = sa.reasoning.answer(Question("q", question, 6.0))
    snap = sa.window.snapshot()
    if retrieve_for_now:
        assert 3 in answer.data["retrieved_blocks"] and holds_block(spy.contexts[-1], sa.memory.load(3))
    else:
        assert answer.data["retrieved_blocks"] == []
        assert spy.contexts[-1].n_tokens == snap.sinks.n_tokens + sum(b.n_tokens for b in snap.blocks)


def test_question_naming_a_time_is_answered_from_that_moment(adapter):
    spy = SpyAdapter(adapter)
    cfg = EngineConfig.from_settings(model="unused", window_tokens=40, memory_top_k=4, max_new_tokens=2)
    sa = StreamingAssistant(cfg, adapter=spy)
    fill_chunks(sa, 12)
    answer = sa.reasoning.answer(Question("q", "What was on screen at 00:02?", 12.0))
    assert answer.data["retrieved_blocks"] == [1, 2]  # [1, 2) and [2, 3) touch 00:02 +- half a chunk
    assert answer.data["evidence_t_s"] == [[1.0, 2.0], [2.0, 3.0]]  # the recent window is left out
    blocks = [sa.memory.load(1), sa.memory.load(2)]
    assert spy.contexts[-1].n_tokens == sa.window.snapshot().sinks.n_tokens + sum(b.n_tokens for b in blocks)
    assert all(holds_block(spy.contexts[-1], b) for b in blocks)
    answer = sa.reasoning.answer(Question("q", "And 10 seconds ago?", 12.0))
    assert answer.data["retrieved_blocks"] == [1, 2]
    # the dialogue about other moments stays out of a moment's prompt, and in the prompt of a question about now
    assert spy.prompts[-1] == adapter.prompt("And 10 seconds ago?")
    sa.reasoning.answer(Question("q", "How many shapes are there?", 12.0))
    assert "And 10 seconds ago?" in spy.prompts[-1] and "00:02" in spy.prompts[-1]


def test_answering_leaves_the_window_unchanged(adapter):
    sa = StreamingAssistant(EngineConfig.from_settings(model="unused", window_tokens=40, max_new_tokens=4),
                            adapter=adapter)
    fill_chunks(sa, 6)
    before = sa.window.snapshot()
    sa.reasoning.answer(Question("q", "How many shapes are there?", 6.0))
    after = sa.window.snapshot()
    assert [b.id for b in after.blocks] == [b.id for b in before.blocks]
    assert all(a.keys[0] is b.keys[0] and a.pos_start == b.pos_start for a, b in zip(after.blocks, before.blocks))
    assert torch.equal(after.sinks.keys[0], before.sinks.keys[0])


def test_dialogue_keeps_recent_turns(adapter):
    sa = StreamingAssistant(EngineConfig.from_settings(model="unused", dialogue_turns=2, max_new_tokens=2),
                            adapter=adapter)
    fill_chunks(sa, 1)
    for i in range(3):
        sa.reasoning.answer(Question(f"q{i}", f"question {i}?", 1.0))
    assert [q for q, _ in sa.reasoning.dialogue] == ["question 1?", "question 2?"]


@pytest.mark.parametrize("text,now,expected", [
    ("What was on screen at 03:12?", 400.0, [192.0]),
    ("what happened at 1:02:03", 4000.0, [3723.0]),
    ("What did you see two minutes ago?", 300.0, [180.0]),
    ("and 30 seconds ago?", 100.0, [70.0]),
    ("What colour is the circle?", 100.0, []),
    ("at 09:00", 60.0, []),  # in the future: ignored
])
def test_stream_times(text, now, expected):
    assert stream_times(text, now) == expected


def test_questions_do_not_change_the_chunking_and_answers_end_on_the_latest_frame(adapter):
    """Questions between chunk boundaries leave the window and memory exactly as a run without questions has them
    (the same chunks, the same KV); each answer's context ends with a block of the frames since the last whole
    chunk (the latest frame alone at a boundary), equal to encoding those frames, padded, on top of the window."""
    from streamvid.media.synthetic_source import SyntheticSource

    frames = [random_frames(1, seed=300 + i)[0] for i in range(24)]  # 2 fps: 12 s, 12 chunks

    def run(questions):
        spy = SpyAdapter(adapter)
        sa = StreamingAssistant(EngineConfig.from_settings(model="unused", window_tokens=40, memory_top_k=0,
                                                           max_new_tokens=1),
                                adapter=spy)
        outs = sa.run_simulated(SyntheticSource(lambda i, t: frames[i], fps=2.0, n_frames=len(frames)), questions)
        return sa, spy, outs

    quiet, _, _ = run([])
    asked, spy, outs = run([(3.2, "How many shapes are there?"), (6.0, "What is on screen?")])
    assert [o.kind for o in outs] == ["answer", "answer"]
    for a, b in [(quiet.window.snapshot().sinks, asked.window.snapshot().sinks),
                 *zip(quiet.window.snapshot().blocks, asked.window.snapshot().blocks, strict=True)]:
        assert (a.id, a.t_start_s, a.t_end_s, a.pos_start) == (b.id, b.t_start_s, b.t_end_s, b.pos_start)
        assert all(torch.equal(x, y) for x, y in zip(a.values, b.values))
    assert asked.ingest.blocks_encoded == quiet.ingest.blocks_encoded == 12
    # at 3.2 s the frames up to 3.0 s (index 6) are in and chunk [3.0, 3.5] is unfinished: the tail is frame 6
    # alone; at 6.0 s frame 12 starts a chunk: again that frame alone. Reference: a fresh session fed the same
    # frames, and the adapter's own encoding of the frame (padded) on top of its window.
    from streamvid.kv.positions import concat

    for context, latest in zip(spy.contexts, (6, 12), strict=True):
        ref = StreamingAssistant(EngineConfig.from_settings(model="unused", window_tokens=40, memory_top_k=0),
                                 adapter=adapter)
        ref.feed(Frame(frames[i], i / 2, i) for i in range(latest + 1))
        snap = ref.window.snapshot()
        expected = adapter.encode_chunk([frames[latest], frames[latest]], concat([snap.sinks, *snap.blocks],
                                                                                 snap.next_pos), 1.0)
        n = expected.n_tokens
        assert context.n_tokens == snap.sinks.n_tokens + sum(b.n_tokens for b in snap.blocks) + n
        for layer in range(len(expected.values)):
            torch.testing.assert_close(context.keys[layer][:, :, -n:], expected.keys[layer])
            torch.testing.assert_close(context.values[layer][:, :, -n:], expected.values[layer])


@pytest.mark.parametrize("encoding", ["sinks", "window"])
def test_memory_keeps_each_block_as_encoded_after_the_sinks_alone(adapter, encoding):
    """memory_encoding "sinks": a block in long-term memory holds the chunk's KV as a forward of the sinks and
    that chunk alone gives it (what train-tiny lays retrieved blocks out as), not the KV it had on the window,
    where it also attended to the blocks before it; "window" keeps the window's."""
    from streamvid.kv.positions import concat
    from streamvid.kv.window import Block

    cfg = EngineConfig.from_settings(model="unused", fps=2.0, window_tokens=40, memory_top_k=2, memory_kv="float",
                       memory_encoding=encoding)
    sa = StreamingAssistant(cfg, adapter=adapter)
    fill_chunks(sa, 6)
    stored = sa.memory.load(2)  # the third chunk: encoded on a window that held the first two
    sinks = adapter.encode_text(adapter.sink_text, None)
    sink = Block(-1, 0.0, 0.0, sinks.keys, sinks.values, 0, sinks.pos_span)
    alone = adapter.encode_chunk([sample_frame(4).image, sample_frame(5).image], concat([sink], sinks.pos_span), 1.0)
    gaps = [float((a - s).abs().max()) for a, s in zip(alone.values, stored.values)]
    assert gaps[0] < 1e-5  # layer 0's values are the chunk's own embeddings, projected: the same either way
    if encoding == "sinks":
        assert max(gaps) < 1e-4
    else:
        assert max(gaps[1:]) > 1e-3


class FirstTokenEnds(SpyAdapter):
    """The real forward runs, and the first token it produces is a stop token: the answer is empty."""

    def generate(self, context, prompt, max_new_tokens, stop=None):
        for _ in self._real.generate(context, prompt, 1, stop):
            pass
        yield from ()


def test_an_answer_always_has_a_time_to_first_token(adapter):
    """TTFT is the time to the first token the model produced, printed or not; an acknowledged "tell me when" has
    the time to its acknowledgement."""
    sa = StreamingAssistant(EngineConfig.from_settings(model="unused", max_new_tokens=3),
                            adapter=FirstTokenEnds(adapter))
    fill_chunks(sa, 2)
    empty = sa.reasoning.handle(Question("q0", "How many shapes are there?", 1.0))
    ack = sa.reasoning.handle(Question("q1", "Tell me when a red circle appears", 1.0))
    for out in (empty, ack):
        assert isinstance(out.data["ttft_ms"], float) and out.data["ttft_ms"] >= 0, out.data
    assert empty.text == "" and empty.data["tokens"] == 0
    assert ack.data["trigger_id"] == "q1"
