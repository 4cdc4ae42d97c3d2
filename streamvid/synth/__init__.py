"""ShapesWorld: procedural video streams with exact ground truth (world), question families (questions) and
stream-episode/1 evaluation episodes (episodes)."""

from .episodes import make_episode, write_dataset
from .questions import ALL_FAMILIES, FAMILIES, QA, describe, sample_qa
from .world import COLOURS, SHAPES, Event, Obj, Timeline, generate, render, write_mp4

__all__ = ["ALL_FAMILIES", "COLOURS", "FAMILIES", "QA", "SHAPES", "Event", "Obj", "Timeline", "describe",
           "generate", "make_episode", "render", "sample_qa", "write_dataset", "write_mp4"]
