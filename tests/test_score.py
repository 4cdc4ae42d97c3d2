"""The batch scorer: scorers, episode validation, re-scoring a trace."""

from __future__ import annotations

import json
from pathlib import Path

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


# ---- the engine settings a score runs with ---------------------------------------------------------------------------
def _shapes_episodes(tmp_path, protocols: dict[str, dict]) -> Path:
    """The first seconds of the bundled ShapesWorld clip shapes_8 (three questions, no trigger), once per episode id
    with that episode's protocol changes."""
    from streamvid import assets

    folder = assets.DEMO_VIDEOS / "shapes_8"
    base = json.loads((folder / "episodes.jsonl").read_text().splitlines()[0])
    keep = {"q0", "a0", "q2", "a2", "q3", "a3"}
    lines = []
    for eid, changes in protocols.items():
        ep = {**base, "episode_id": eid, "events": [e for e in base["events"] if e["id"] in keep],
              "video": {"path": str(folder / "shapes_8.mp4"), "t_start": 0.0, "t_end": 15.0},
              "protocol": {**base["protocol"], **changes}}
        assert ep["source"]["benchmark"] == "shapesworld" and "dialogue_turns" not in base["protocol"]
        lines.append(json.dumps(ep))
    path = tmp_path / "eps.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _stats(trace) -> dict[str, dict]:
    recs = [json.loads(line) for line in trace.read_text().splitlines()]
    return {r["episode_id"]: r for r in recs if r["type"] == "stats"}


def _default(name: str):
    from streamvid.config import DEFAULTS

    return DEFAULTS.settings()[name]


def test_score_runs_shapesworld_with_the_run_dialogue_unless_the_protocol_says_otherwise(tiny_model_dir, tmp_path):
    """`streamvid score` as `streamvid run`: a ShapesWorld episode keeps EngineConfig's dialogue turns (2); an
    episode whose protocol sets 0 runs without, and the report names that override."""
    from streamvid.config import EngineConfig
    from streamvid.eval.batch import score_files

    eps = _shapes_episodes(tmp_path, {"shapes": {}, "alone": {"dialogue_turns": 0}})
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=2)
    report = score_files([eps], cfg, tmp_path / "out", plots=False)
    stats = _stats(tmp_path / "out" / "trace.jsonl")
    assert _default("dialogue_turns") == 2
    assert stats["shapes"]["dialogue_turns"] == 2 and stats["alone"]["dialogue_turns"] == 0
    assert stats["shapes"]["decision_hz"] == 1.0  # ShapesWorld's protocol sets its decision rate
    run = report["run"]
    assert run["dialogue_turns"] == 2
    assert run["protocol_overrides"]["dialogue_turns"] == {"0": 1}
    assert run["changed_from_defaults"] == {"max_new_tokens": 2}
    md = (tmp_path / "out" / "report.md").read_text()
    assert "dialogue_turns 0 in 1 episode" in md and "Changed from the engine defaults: max_new_tokens 2." in md


def test_the_dialogue_flag_reaches_every_episode_the_protocol_leaves_alone(tiny_model_dir, adapter, tmp_path):
    """`--dialogue-turns 0` (a config with 0) scores ShapesWorld without earlier turns, and the report says it
    changed the default; a protocol's own value still wins."""
    from streamvid.config import EngineConfig
    from streamvid.eval.batch import run_episode, score_files

    eps = _shapes_episodes(tmp_path, {"shapes": {}, "chain": {"dialogue_turns": 6}})
    cfg = EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=2, dialogue_turns=0)
    report = score_files([eps], cfg, tmp_path / "out", plots=False)
    stats = _stats(tmp_path / "out" / "trace.jsonl")
    assert stats["shapes"]["dialogue_turns"] == 0 and stats["chain"]["dialogue_turns"] == 6
    assert report["run"]["changed_from_defaults"]["dialogue_turns"] == 0
    assert report["run"]["protocol_overrides"]["dialogue_turns"] == {"6": 1}
    [ep] = [e for e in load_episodes(eps) if e["episode_id"] == "shapes"]
    assert run_episode(ep, cfg.replace(dialogue_turns=5), adapter, "native")[-1]["dialogue_turns"] == 5


def test_single_pass_scorer_keeps_the_run_dialogue(tiny_model_dir, tmp_path):
    """eval/score.score_files (the one-pass scorer) no longer forces 0 turns either."""
    from streamvid.config import EngineConfig
    from streamvid.eval.score import score_files

    eps = _shapes_episodes(tmp_path, {"shapes": {}, "alone": {"dialogue_turns": 0}})
    report = score_files([eps], EngineConfig.from_settings(model=str(tiny_model_dir), max_new_tokens=2),
                         tmp_path / "out")
    stats = _stats(tmp_path / "out" / "trace.jsonl")
    assert stats["shapes"]["dialogue_turns"] == 2 and stats["alone"]["dialogue_turns"] == 0
    assert report["dialogue_turns"] == 2 and report["protocol_overrides"]["dialogue_turns"] == {"0": 1}


@pytest.mark.parametrize("turns", [-1, "two", 1.5, True])
def test_load_episodes_rejects_a_bad_protocol_dialogue_turns(tmp_path, turns):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(_episode(protocol={"dialogue_turns": turns})) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: protocol.dialogue_turns must be a whole number >= 0"):
        load_episodes(bad)
