"""ShapesWorld: procedural video streams with exact ground truth (world), their optional speech track (speech),
question families (questions) and stream-episode/1 evaluation episodes (episodes).

synth/ knows nothing of models or the engine: it writes videos, sound and episodes with exact ground truth.
"""

from .episodes import make_episode, write_dataset
from .questions import ALL_FAMILIES, FAMILIES, QA, SPEECH_FAMILIES, describe, sample_qa
from .speech import speak, write_speech_mp4
from .world import COLOURS, SHAPES, Event, Obj, Speech, Timeline, generate, render, write_mp4

__all__ = ["ALL_FAMILIES", "COLOURS", "FAMILIES", "QA", "SHAPES", "SPEECH_FAMILIES", "Event", "Obj", "Speech",
           "Timeline", "describe", "generate", "make_episode", "render", "sample_qa", "speak", "write_dataset",
           "write_mp4", "write_speech_mp4"]
