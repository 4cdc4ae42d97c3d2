"""What a model folder says about how to run it: a checkpoint trained by `streamvid train-tiny` holds
`training.json` next to its weights (the training's settings and checks). The engine settings it changes are
logged where they are applied."""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)

TRAINED_MARKER = "training.json"


def trained_by_streamvid(model: str) -> bool:
    return (Path(model) / TRAINED_MARKER).is_file()


def model_settings(model: str) -> dict:
    """The engine settings whose default the model folder sets (applied where the user gave none)."""
    px = default_frame_px(model, log_it=False)
    return {} if px is None else {"frame_px": px}


def default_frame_px(model: str, log_it: bool = True) -> int | None:
    """The frame size a streamvid-trained checkpoint was trained at (its frames are resized to it), else None
    (frames keep the source's size; the model's processor resizes them)."""
    if not trained_by_streamvid(model):
        return None
    try:
        px = json.loads((Path(model) / TRAINED_MARKER).read_text())["config"]["frame_px"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(px, int) or isinstance(px, bool) or px < 28:
        return None
    if log_it:
        log.info("%s holds %s (trained by streamvid): frames are resized to %d x %d (--frame-px N overrides)", model,
                 TRAINED_MARKER, px, px)
    return px
