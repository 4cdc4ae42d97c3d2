"""The batch scorer: scorers, episode validation, re-scoring a trace."""

from __future__ import annotations

import json

import pytest

from streamvid.eval.metrics import normalise, score
from streamvid.eval.score import load_episodes, score_trace


@pytest.mark.parametrize("answer,gold,scorer,ok", [
    ("Yes.", "Yes", "exact", True),
    ("no", "Yes", "exact", False),
    ("two", "2", "exact", True),
    ("It is red.", "red", "substring", True),
    ("reddish", "red", "substring", False),
    ("Blue circle, red star", "blue circle, red star", "substring", True),
    ("B. a red circle", "B", "mc_first_letter", True),
    ("2", "2.5", "number", False),
    ("about 2.5 s", "2.5", "number", True),
])
def test_scorers(answer, gold, scorer, ok):
    assert score(answer, gold, scorer) is ok


def test_normalise_and_unknown_scorer():
    assert normalise("It is 2.5, OK. Three") == "it is 2.5 , ok 3"
    with pytest.raises(ValueError, match="unknown scorer"):
        score("a", "a", "fuzzy")


def _episode(**over) -> dict:
    ep = {"schema": "stream-episode/1", "episode_id": "e1", "video": {"path": "v.mp4"},
          "events": [{"id": "q0", "t": 1.0, "kind": "user_query", "text": "What colour?", "task": "colour"},
                     {"id": "a0", "kind": "expected_answer", "ref": "q0", "gold": {"text": "red"}, "scorer": "substring"},
                     {"id": "p0", "t": 2.0, "kind": "probe", "text": "Is it red?", "gold": "Yes", "task": "probe"}]}
    ep.update(over)
    return ep


def test_load_episodes_resolves_paths_and_rejects_bad_lines(tmp_path):
    good = tmp_path / "eps.jsonl"
    good.write_text(json.dumps(_episode()) + "\n")
    assert load_episodes(good)[0]["video"]["path"] == str(tmp_path / "v.mp4")
    cases = {"not json": "not JSON", json.dumps(_episode(schema="x")): "expected schema",
             json.dumps(_episode(events=[{"kind": "expected_answer", "ref": "q9", "gold": {}, "scorer": "exact"}])):
                 "lacks",
             json.dumps(_episode(events=[{"kind": "wat"}])): "unknown kind"}
    for line, message in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line + "\n")
        with pytest.raises(ValueError, match=message):
            load_episodes(bad)


def test_score_trace_per_task(tmp_path):
    eps = tmp_path / "eps.jsonl"
    eps.write_text(json.dumps(_episode()) + "\n")
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(r) for r in [
        {"episode_id": "e1", "event_id": "q0", "type": "answer", "text": "It was red.", "ttft_ms": 10.0},
        {"episode_id": "e1", "event_id": "p0", "type": "probe", "text": "no", "p_yes": 0.2}]) + "\n")
    report = score_trace(load_episodes(eps), trace)
    assert report["tasks"] == {"colour": {"correct": 1, "n": 1, "accuracy": 1.0},
                               "probe": {"correct": 0, "n": 1, "accuracy": 0.0}}
    assert report["overall"] == 0.5 and report["ttft_ms_median"] == 10.0
