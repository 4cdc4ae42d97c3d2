"""`streamvid train-tiny` end to end on a tiny budget: trains, saves, and the engine loads the result."""

from __future__ import annotations

import json

from streamvid.adapters.qwen2_5_vl import QwenVLAdapter
from streamvid.adapters.train_tiny import TrainConfig, train
from streamvid.cli import build_parser


def test_train_saves_a_checkpoint_the_engine_loads(tmp_path):
    record = train(TrainConfig(out_dir=tmp_path / "m", steps=3, batch=2, n_timelines=1, minutes=0.5, log_every=1))
    assert record["steps_done"] == 3
    assert [h["step"] for h in record["history"]] == [0, 1, 2]
    assert all(h["lm_loss"] > 0 for h in record["history"])
    adapter = QwenVLAdapter(str(tmp_path / "m"))
    assert adapter.model.config.model_type == "qwen2_5_vl"
    assert json.loads((tmp_path / "m" / "training.json").read_text())["steps_done"] == 3


def test_cli_wires_train_tiny():
    args = build_parser().parse_args(["train-tiny", "--out", "x", "--steps", "5"])
    assert args.func.__name__ == "cmd_train_tiny" and args.steps == 5
