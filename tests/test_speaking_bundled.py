"""Speaking up with the bundled model on a ShapesWorld demo clip: a "tell me when" question is answered once, near
its event, and a trigger whose event never happens stays silent. What the model sees decides both, so these check
the bundled model's yes/no probes through the whole engine (the machinery alone is tested in test_triggers.py)."""

from __future__ import annotations

import json
import math

import pytest

from streamvid.assets import DEMO_VIDEOS
from streamvid.assistant.assistant import StreamingAssistant
from streamvid.config import BUNDLED_MODEL, EngineConfig
from streamvid.eval.score import load_episodes
from streamvid.media.file_source import FileSource

DEMO = DEMO_VIDEOS / "shapes_7"
pytestmark = pytest.mark.slow


def _held_out_probe_accuracy() -> float:
    """The bundled model's yes/no probe accuracy on held-out streams, as its training record last states it (a
    stage that trained the tower alone checks no answers: the record it started from, nested in it, has them)."""
    record = json.loads((BUNDLED_MODEL / "training.json").read_text())
    while record is not None:
        held = [r["held_out"] for r in record.get("history", []) if "held_out" in r]
        if held:
            return float(held[-1].get("probe", 0.0))
        record = record.get("fine_tuned_from")
    return 0.0


SEES = _held_out_probe_accuracy() >= 0.9  # what these tests need from the model


def _shown_pairs(timeline: dict) -> set[tuple[str, str]]:
    return {(c, tr["shape"]) for tr in timeline["tracks"] for _, c in tr["colours"]}


@pytest.fixture(scope="module")
def episode():
    return load_episodes(DEMO / "episodes.jsonl")[0]


@pytest.fixture(scope="module")
def run(episode):
    """One pass over the clip with every "tell me when" question of the episode asked at its time, and one about a
    colour-shape pair the clip never shows."""
    timeline = json.loads((DEMO / episode["meta"]["timeline"]).read_text())
    shown = _shown_pairs(timeline)
    colours, shapes = sorted({c for c, _ in shown}), sorted({s for _, s in shown})
    never = next((c, s) for c in colours for s in shapes if (c, s) not in shown)
    events = {e["id"]: e for e in episode["events"] if "id" in e}
    forward = [(events[e["ref"]], e) for e in episode["events"] if e["kind"] == "expected_response"]
    article = "an" if never[0][0] in "aeiou" else "a"
    questions = [(q["t"], q["text"]) for q, _ in forward]
    questions.append((0.0, f"Tell me when {article} {never[0]} {never[1]} appears."))
    cfg = EngineConfig()
    with StreamingAssistant(cfg) as sa:
        outputs = sa.run_simulated(FileSource(episode["video"]["path"], fps=cfg.fps), questions)
    acks = [o for o in outputs if o.kind == "answer"]  # in question order (stable by time)
    order = sorted(range(len(questions)), key=lambda i: questions[i][0])
    assert [a.data["question"] for a in acks] == [questions[i][1] for i in order]
    assert all(a.data["trigger_id"] == a.id for a in acks)
    ids = {i: a.id for i, a in zip(order, acks)}  # question index -> trigger id
    alerts = [o for o in outputs if o.kind == "alert"]
    return forward, ids, alerts


@pytest.mark.xfail(not SEES, strict=True, reason="the bundled model's recorded held-out probe accuracy is below 0.9 "
                                                  "(models/streamvid-tiny/README.md): its p(yes) does not "
                                                  "follow the scene, so no alert comes")
def test_tell_me_when_fires_once_near_its_event(run):
    forward, ids, alerts = run
    assert len(forward) >= 3
    on_time = 0
    for i, (q, gold) in enumerate(forward):
        mine = [a for a in alerts if a.id == ids[i]]
        assert len(mine) <= 1, (q["text"], [a.data["t_s"] for a in mine])  # one-shot: never twice
        lo, hi = gold["window"]
        on_time += len(mine) == 1 and lo <= mine[0].data["t_s"] <= hi
    # nearly all alerts inside the gold window (the bundled model: 6 of 6 on this clip; held-out Timeliness-F1 0.96
    # in the model card), and never two for one question
    assert on_time >= math.ceil(0.8 * len(forward)), f"{on_time} of {len(forward)} alerts inside the gold window"


def test_silent_when_the_event_never_happens(run):
    forward, ids, alerts = run
    assert [a.data["t_s"] for a in alerts if a.id == ids[len(forward)]] == []
