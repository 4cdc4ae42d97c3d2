"""The threaded session: no lost frames, live sources never block, bounded stop, errors reach the caller."""

from __future__ import annotations

import threading
import time

import av
import numpy as np
import pytest
from conftest import wait_until

from streamvid.adapters.row_by_row import RowByRow
from streamvid.assistant.assistant import BusyError, StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.media.file_source import FileSource
from streamvid.media.push_source import PushSource


def _cfg(**kw) -> EngineConfig:
    return EngineConfig.from_settings(model="unused", window_tokens=60, max_new_tokens=4, **kw)


def _streamvid_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("streamvid-") and t.is_alive()]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """A 6 s, 10 fps, 56x56 H.264 clip."""
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    rng = np.random.default_rng(0)
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=10)
        s.width = s.height = 56
        s.pix_fmt = "yuv420p"
        for _ in range(60):
            c.mux(s.encode(av.VideoFrame.from_ndarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8),
                                                      format="rgb24")))
        c.mux(s.encode())
    return path


def test_answering_while_ingesting_loses_no_frames_of_a_file(adapter, clip):
    with StreamingAssistant(_cfg(fps=4.0), adapter=adapter) as sa:
        sa.start(FileSource(clip, fps=4.0))
        ids = {sa.ask("How many shapes are there?"), sa.ask("What colour is the circle?")}
        answers = {}
        deadline = time.monotonic() + 60
        while (len(answers) < 2 or not sa.ingest_done.is_set()) and time.monotonic() < deadline:
            for out in sa.outputs(timeout_s=0.2):
                if out.kind == "answer":
                    answers[out.id] = out
        assert set(answers) == ids
        assert sa.ingest.frames_in == 24 and sa.stats()["frames_dropped"] == 0
        assert sa.ingest.blocks_encoded == 12


def test_live_source_never_blocks_the_producer(adapter):
    """300 pushes return while the engine can run no forward at all (the test holds the adapter's lock): the stream's
    inbox fills, its reader waits, and the pushes the stream could not take are counted as dropped, never waited
    for. A push that waited for the consumer would not return until the lock is let go."""
    source = PushSource(fps=1000.0)
    with StreamingAssistant(_cfg(), adapter=adapter) as sa:
        sa.start(source)
        pushed = threading.Event()

        def produce():
            for i in range(300):
                source.push(np.full((56, 56, 3), i % 256, np.uint8), t_s=i / 1000)
            pushed.set()

        with sa.adapter.lock:  # the engine is stuck before its next forward
            threading.Thread(target=produce, name="test-producer", daemon=True).start()
            returned = pushed.wait(timeout=60)
        assert returned, "the pushes waited for the consumer"
        # ingest catches up with the latest frame: every push was taken or counted as dropped
        assert wait_until(lambda: sa.ingest.frames_in + source.dropped == 300)
        assert source.dropped > 0 and sa.ingest.frames_in + source.dropped <= 300
        assert sa.ingest.frames_in >= 1


def test_stop_is_bounded_idempotent_and_leaves_no_threads(adapter):
    """stop() ends the reader and the scheduler and joins them: when it returns they have ended, not been left
    behind by a join that gave up (join_timeout_s); a second stop() does nothing more."""
    sa = StreamingAssistant(_cfg(), adapter=adapter)
    sa.start(PushSource(fps=2.0))  # a live source that never ends by itself
    started = set(_streamvid_threads())
    assert {"streamvid-ingest", "streamvid-engine"} <= started
    stopped = threading.Event()

    def stop_twice():
        sa.stop()
        sa.stop()
        stopped.set()

    threading.Thread(target=stop_twice, name="test-stop", daemon=True).start()
    assert stopped.wait(timeout=60), "stop() did not return"
    left = {"streamvid-ingest", "streamvid-engine"} & set(_streamvid_threads())
    assert not left, f"stop() returned with {sorted(left)} still running"
    assert wait_until(lambda: _streamvid_threads() == []), _streamvid_threads()


class BrokenAdapter(RowByRow):
    """The real adapter until the first chunk of the stream (the warm-up chunk before it goes through)."""

    def __init__(self, real):
        self._real = real
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._real, name)

    def encode_chunk(self, *a, **kw):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("encoder exploded")
        return self._real.encode_chunk(*a, **kw)


def test_worker_exception_surfaces_from_outputs(adapter):
    source = PushSource(fps=10.0)
    with StreamingAssistant(_cfg(), adapter=BrokenAdapter(adapter)) as sa:
        sa.start(source)
        with pytest.raises(RuntimeError, match="encoder exploded"):
            for i in range(100):  # one frame per 0.1 s until the first chunk is encoded and fails
                source.push(np.zeros((56, 56, 3), np.uint8), t_s=i / 10)
                list(sa.outputs(timeout_s=0.1))
        with pytest.raises(RuntimeError, match="encoder exploded"):
            sa.ask("still there?")


def test_full_question_queue_is_a_clear_busy_error(adapter):
    sa = StreamingAssistant(_cfg(question_queue_size=2), adapter=adapter)  # not started: nobody drains
    sa.ask("one?")
    sa.ask("two?")
    with pytest.raises(BusyError, match="busy: 2 questions are waiting"):
        sa.ask("three?")
    with pytest.raises(ValueError, match="empty question"):
        sa.ask("   ")
    sa.stop()


def test_run_simulated_answers_from_frames_up_to_t(adapter, clip):
    sa = StreamingAssistant(_cfg(fps=4.0), adapter=adapter)
    answers = sa.run_simulated(FileSource(clip, fps=4.0), [(5.0, "b?"), (1.1, "a?")])
    assert [a.data["question"] for a in answers] == ["a?", "b?"]
    assert answers[0].data["evidence_t_s"][-1][1] <= 1.1 + 0.25 + 1e-6  # nothing after T (+ one frame period)
    again = StreamingAssistant(_cfg(fps=4.0), adapter=adapter).run_simulated(FileSource(clip, fps=4.0),
                                                                      [(5.0, "b?"), (1.1, "a?")])
    assert [a.text for a in again] == [a.text for a in answers]


def test_a_question_before_any_frame_says_nothing_was_seen(adapter):
    """Asked before a frame arrived, the answer says so (no model forward: the adapter's lock is held throughout, so
    a forward would never finish), with no evidence; once a frame has been encoded the model answers."""
    source = PushSource(fps=10.0)
    answers: list = []

    def answered() -> bool:
        answers.extend(o for o in sa.outputs(timeout_s=0.1) if o.kind == "answer")
        return bool(answers)

    with StreamingAssistant(_cfg(), adapter=adapter) as sa:
        sa.start(source)
        with adapter.lock:
            qid = sa.ask("What shape is red?")
            assert wait_until(answered, timeout_s=30)
        assert [a.id for a in answers] == [qid]
        assert answers[0].text.startswith("I have not seen or heard anything yet") and answers[0].evidence_t_s == []
        assert answers[0].tokens == 0
        pushed = iter(range(10_000))

        def encoded() -> bool:  # a live push keeps the latest frame: push one a poll until a chunk is encoded
            source.push(np.zeros((56, 56, 3), np.uint8), t_s=next(pushed) / 10)
            return sa.stats()["blocks_encoded"] >= 1

        assert wait_until(encoded, timeout_s=60, interval_s=0.05)
        answers.clear()
        qid = sa.ask("What shape is red?")
        assert wait_until(answered, timeout_s=60)
        assert [a.id for a in answers] == [qid] and answers[0].evidence_t_s and answers[0].tokens > 0
