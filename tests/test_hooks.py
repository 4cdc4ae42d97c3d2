"""The public hooks benchmarks and eval use instead of reaching into a stream: `Ingest.on_block` sees every block
as it enters the window, `Reasoning.on_answering` every question laid out for answering with the window snapshot it is
answered on; and the assistant's own `schedule` and `probe`."""

from __future__ import annotations

from conftest import random_frames

from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import EngineConfig
from streamvid.media.synthetic_source import SyntheticSource


def _cfg(**kw) -> EngineConfig:
    return EngineConfig.from_settings(model="unused", window_tokens=60, max_new_tokens=4, **kw)


def test_on_block_sees_every_block_in_order_and_on_answering_every_question(adapter):
    frames = random_frames(12, seed=3)
    blocks, laid_out = [], []
    with StreamingAssistant(_cfg(), adapter=adapter) as sa:
        sa.ingest.on_block = lambda block: blocks.append((block.id, block.t_start_s, sa.window.snapshot().blocks[-1]
                                                          is block))
        sa.reasoning.on_answering = lambda a, snap: laid_out.append((a.question.id, a.question.text,
                                                                      [b.id for b in snap.blocks]))
        out = sa.run_simulated(SyntheticSource(lambda i, t: frames[i], fps=2.0, n_frames=12),
                               [(4.0, "How many shapes are there?")])
        stats = sa.stats()
    # 12 frames at 2 fps, two a chunk: blocks 0..5 at 0, 1, ..., 5 s, each the window's newest when it is seen
    assert blocks == [(i, float(i), True) for i in range(6)]
    assert stats["blocks_encoded"] == 6
    answer = next(o for o in out if o.kind == "answer")
    # the question at 4 s: the window then held the blocks up to 4 s (60 tokens: the newest ones), plus the
    # unfinished chunk a replay answers on (id -1)
    (qid, text, snap_ids), = laid_out
    assert (qid, text) == (answer.id, "How many shapes are there?")
    assert snap_ids[-1] == -1 and snap_ids[:-1] == sorted(snap_ids[:-1]) and snap_ids[-2] == 3


def test_schedule_and_probe_on_the_assistant(adapter):
    frames = random_frames(8, seed=4)
    with StreamingAssistant(_cfg(), adapter=adapter) as sa:
        assert sa.probe("Is there a red circle?").kind == "probe"  # nothing seen yet: the sinks alone
        sa.schedule(2.0, "How many shapes are there?")
        sa.schedule(1.0, "a red circle", watch=True)
        out = sa.run_simulated(SyntheticSource(lambda i, t: frames[i], fps=2.0, n_frames=8), [])
        answers = [o for o in out if o.kind == "answer"]
        assert [a.question for a in answers] == ["How many shapes are there?"]
        assert [w["condition"] for w in sa.triggers()] == ["a red circle"]
        result = sa.probe("Is there a red circle?", t_s=4.0)
        assert result.kind == "probe" and 0.0 <= result.data["p_yes"] <= 1.0
