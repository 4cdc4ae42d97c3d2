"""The bundled model: a real Qwen2.5-VL checkpoint that loads offline and answers on a demo clip."""

from __future__ import annotations

import json

from streamvid.assets import DEMO_VIDEOS
from streamvid.config import BUNDLED_MODEL, EngineConfig
from streamvid.eval.score import load_episodes

DEMO = DEMO_VIDEOS / "shapes_7"


def test_reloads_offline_with_from_pretrained(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(BUNDLED_MODEL)
    processor = AutoProcessor.from_pretrained(BUNDLED_MODEL)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 20e6
    assert processor.tokenizer.convert_tokens_to_ids("<|video_pad|>") == model.config.video_token_id
    record, steps = json.loads((BUNDLED_MODEL / "training.json").read_text()), 0
    while record is not None:  # the record of each fine-tune nests the one it started from
        steps, record = steps + record["steps_done"], record.get("fine_tuned_from")
    assert steps > 0


ANSWER_TYPES = {
    "realtime_colour": {"red", "green", "blue", "yellow", "purple", "orange"},
    "realtime_shape": {"circle", "square", "triangle", "star", "hexagon", "diamond"},
    "realtime_count": {"0", "1", "2", "3"},
    "realtime_exists": {"yes", "no"},
}


def test_answers_a_demo_clip_through_the_engine(tmp_path):
    """The whole demo episode (2 minutes, every question family, seed 7: not a training seed) through the engine
    and the scorer, against the gold answers that the generator derives from the clip's timeline: questions about
    now, yes/no probes and questions about what left the KV window long ago are mostly right, each answer of its
    family's kind (models/streamvid-tiny/README.md has the held-out scores)."""
    from streamvid.eval.score import score_files

    report = score_files([DEMO / "episodes.jsonl"], EngineConfig(), tmp_path)
    tasks = report["tasks"]

    def share(*names):
        return sum(tasks[n]["correct"] for n in names) / sum(tasks[n]["n"] for n in names)

    assert share(*ANSWER_TYPES) >= 0.8, tasks
    assert share("probe") >= 0.75, tasks
    assert share("backward_colour", "backward_shape") >= 0.5, tasks
    trace = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    episode = load_episodes(DEMO / "episodes.jsonl")[0]
    family = {e["id"]: e["task"] for e in episode["events"] if e["kind"] == "user_query"}
    answered = [row for row in trace if row["type"] == "answer" and family.get(row["event_id"]) in ANSWER_TYPES]
    assert len(answered) >= 20
    for row in answered:
        assert row["text"] in ANSWER_TYPES[family[row["event_id"]]], row


def test_american_spellings_read_as_the_british_ones_it_was_trained_on():
    """The bundled tokenizer (and every tiny one make-tiny builds) reads "color"/"gray" as "colour"/"grey": a
    recogniser writes American spelling, and the model was trained on the British one only."""
    from transformers import AutoTokenizer

    from streamvid.checkpoints.tiny import build_tokenizer

    for tok in (AutoTokenizer.from_pretrained(str(BUNDLED_MODEL)), build_tokenizer(600)):
        british = tok("What colour is the star? Colours: grey. Gray! Color").input_ids
        assert tok("What color is the star? Colors: gray. Gray! Color").input_ids == british
        assert tok("What colour is the star? Colours: grey. Grey! Colour").input_ids == british
        assert tok("decolor").input_ids != tok("decolour").input_ids  # whole words only
