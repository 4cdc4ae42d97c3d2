"""What a model folder says about how to run it: a checkpoint trained by `streamvid train-tiny` holds
`training.json` next to its weights (the training's settings and checks). The engine settings it changes are
logged where they are applied."""

from __future__ import annotations

import json
from pathlib import Path

TRAINED_MARKER = "training.json"


def trained_by_streamvid(model: str) -> bool:
    return (Path(model) / TRAINED_MARKER).is_file()


def model_settings(model: str) -> dict:
    """The engine settings whose default the model folder sets (applied where the user gave none): a
    streamvid-trained checkpoint's frame size (its frames are resized to what it was trained at)."""
    if not trained_by_streamvid(model):
        return {}
    try:
        px = json.loads((Path(model) / TRAINED_MARKER).read_text())["config"]["frame_px"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(px, int) or isinstance(px, bool) or px < 28:
        return {}
    return {"frame_px": px}
